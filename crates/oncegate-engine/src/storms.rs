//! The replay-storm alert: an intent that settled and keeps being repeated.
//!
//! Replays are answered from the stored record without any write, so their count lives
//! in memory: it raises an alert, it controls nothing.

use std::collections::HashMap;

use oncegate_core::config::Capability;
use oncegate_core::intent::{self, Outcome};
use oncegate_core::key::IntentKey;

/// How long the replay-storm count runs.
const STORM_WINDOW: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);
/// Replays of one intent inside the window that raise the alert, for capabilities
/// without an attempt ceiling (otherwise the ceiling is the threshold).
const STORM_REPLAYS: u32 = 10;
/// Intents tracked at most; older windows are dropped first.
const STORM_TRACKED: usize = 10_000;

/// Recent replays per intent: when each one's window started, and its count.
#[derive(Default)]
pub(crate) struct ReplayStorms {
    seen: HashMap<IntentKey, (jiff::Timestamp, u32)>,
}

impl ReplayStorms {
    /// Counts one replay; `Some(n)` exactly when the count reaches `threshold` (once per
    /// window, so a storm alerts once a minute, not on every call).
    fn note(&mut self, key: &IntentKey, now: jiff::Timestamp, threshold: u32) -> Option<u32> {
        if self.seen.len() >= STORM_TRACKED && !self.seen.contains_key(key) {
            self.seen
                .retain(|_, (start, _)| now < *start + STORM_WINDOW);
            if self.seen.len() >= STORM_TRACKED {
                return None;
            }
        }
        let entry = self.seen.entry(key.clone()).or_insert((now, 0));
        if now >= entry.0 + STORM_WINDOW {
            *entry = (now, 0);
        }
        entry.1 += 1;
        (entry.1 == threshold).then_some(entry.1)
    }
}

impl ReplayStorms {
    /// Counts a replay of `outcome`'s intent at `now` and raises the replay-storm alert
    /// on it when an intent that settled keeps being repeated.
    pub(crate) fn note_replay(
        &mut self,
        outcome: &mut Outcome,
        cap: &Capability,
        now: jiff::Timestamp,
    ) {
        let Some(key) = outcome.key.as_ref() else {
            return;
        };
        let threshold = cap.attempt_ceiling.unwrap_or(STORM_REPLAYS).max(2);
        if let Some(replays) = self.note(key, now, threshold) {
            outcome.alerts.push(intent::Alert::ReplayStorm {
                replays,
                window_seconds: STORM_WINDOW.as_secs() as u32,
            });
        }
    }
}
