//! This host's clock against the store's: measured and reported, never used to decide.
//!
//! Every instant that decides an effect is taken from and judged by the store's clock
//! (`oncegate_store::clock`), so a gateway whose wall clock is wrong or stepped decides
//! nothing differently. It says so, though: at start and every [`EVERY`] it compares
//! its wall clock with the store's, sets `oncegate_clock_skew_seconds`, and logs a
//! warning when the two are more than [`WARN_OVER`] apart (again whenever the skew moves
//! by as much). `/readyz` shows the skew beside "ready".

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use oncegate_engine::Gate;

use crate::state::AppState;

/// How often the skew is measured.
pub const EVERY: Duration = Duration::from_secs(10);

/// A skew past this is a warning (it is never needed for safety).
pub const WARN_OVER: SignedDuration = SignedDuration::from_secs(1);

/// How far this host's wall clock is ahead of the store's clock now (negative: behind),
/// and the gauge set to it.
pub fn skew(gate: &Gate) -> SignedDuration {
    let skew = oncegate_store::clock::skew(Timestamp::now(), gate.clock().now());
    metrics::gauge!("oncegate_clock_skew_seconds").set(skew.as_secs_f64());
    skew
}

/// The skew for people: `+130.002 s (this host's clock is ahead of the store's)`.
pub fn describe(skew: SignedDuration) -> String {
    let secs = skew.as_secs_f64();
    let side = if secs >= 0.0 { "ahead of" } else { "behind" };
    format!("{secs:+.3} s (this host's clock is {side} the store's)")
}

/// Measures the skew at start and every [`EVERY`] until the process ends.
pub async fn watch(state: AppState) {
    let authority = state.gate().store().clock_authority();
    let mut warned: Option<SignedDuration> = None;
    let mut tick = tokio::time::interval(EVERY);
    loop {
        tick.tick().await;
        let now = skew(state.gate());
        if now.abs() <= WARN_OVER {
            if warned.take().is_some() {
                tracing::info!(skew = %describe(now), clock = authority, "this host's clock agrees with the store's again");
            }
            continue;
        }
        if warned.is_none_or(|w| (now - w).abs() > WARN_OVER) {
            tracing::warn!(
                skew = %describe(now),
                clock = authority,
                "this host's clock is off from the store's; decisions use the store's clock and are unaffected, but fix the host's clock (NTP)"
            );
            warned = Some(now);
        }
    }
}
