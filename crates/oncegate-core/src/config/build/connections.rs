//! `[gateway.connections]`: caps are counts of at least one, timeouts at least a second
//! (a zero timeout would close every connection before it could speak).

use std::time::Duration;

use jiff::SignedDuration;

use super::super::raw::RawConnections;
use super::builder::{Builder, k};
use crate::config::ConnectionSettings;

/// The most a cap may be: beyond it the file limit decides anyway.
const MAX_CAP: usize = 1 << 20;

impl Builder<'_> {
    pub(super) fn connections(&mut self, raw: Option<RawConnections>) -> ConnectionSettings {
        let defaults = ConnectionSettings::default();
        let Some(raw) = raw else {
            return defaults;
        };
        let mut cap = |name: &str, value: Option<usize>, default: usize| {
            let v = value.unwrap_or(default);
            if v == 0 || v > MAX_CAP {
                self.err(
                    &[k("gateway"), k("connections"), k(name)],
                    format!("{name} = {v} is out of range"),
                    Some(&format!("use 1 to {MAX_CAP} (default {default})")),
                );
                return default;
            }
            v
        };
        let max = cap("max", raw.max, defaults.max);
        let per_address = cap("per_address", raw.per_address, defaults.per_address);
        if per_address > max {
            self.warn(
                &[k("gateway"), k("connections"), k("per_address")],
                "per_address is above max: one address can take every connection",
            );
        }
        let mut timeout = |name: &str, text: Option<&str>, default: Duration| {
            let path = [k("gateway"), k("connections"), k(name)];
            let fallback = SignedDuration::try_from(default).expect("defaults fit");
            let d = self.duration(&path, text, fallback);
            if d < SignedDuration::from_secs(1) {
                self.err(
                    &path,
                    format!("{name} must be at least 1s"),
                    Some("a shorter timeout closes connections before they can speak"),
                );
                return default;
            }
            Duration::try_from(d).unwrap_or(default)
        };
        ConnectionSettings {
            max,
            per_address,
            first_byte_timeout: timeout(
                "first_byte_timeout",
                raw.first_byte_timeout.as_deref(),
                defaults.first_byte_timeout,
            ),
            idle_timeout: timeout(
                "idle_timeout",
                raw.idle_timeout.as_deref(),
                defaults.idle_timeout,
            ),
            http2_keep_alive: timeout(
                "http2_keep_alive",
                raw.http2_keep_alive.as_deref(),
                defaults.http2_keep_alive,
            ),
        }
    }
}
