//! Building `[telemetry]`: the collector endpoint (an http(s) base URL) and the service
//! name traces carry.

use super::super::raw::RawTelemetry;
use super::builder::{Builder, k};
use crate::config::TelemetrySettings;

impl Builder<'_> {
    pub(super) fn telemetry(&mut self, raw: Option<RawTelemetry>) -> TelemetrySettings {
        let Some(raw) = raw else {
            return TelemetrySettings::default();
        };
        let mut settings = TelemetrySettings::default();
        if let Some(endpoint) = raw.otlp_endpoint {
            match TelemetrySettings::check_endpoint(&endpoint) {
                Ok(()) => settings.otlp_endpoint = Some(endpoint),
                Err(msg) => self.err(
                    &[k("telemetry"), k("otlp_endpoint")],
                    msg,
                    Some("the OTLP/HTTP base URL of a collector, e.g. \"http://127.0.0.1:4318\" (traces go to /v1/traces under it)"),
                ),
            }
        }
        if let Some(name) = raw.service_name {
            if name.trim().is_empty() {
                self.err(
                    &[k("telemetry"), k("service_name")],
                    "the service name is empty",
                    Some("leave it out for \"oncegate\", or name this deployment"),
                );
            } else {
                settings.service_name = name;
            }
        }
        settings
    }
}
