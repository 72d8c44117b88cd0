//! The reconciliation sweep: on every tick the engine's `Gate::sweep_pass` asks the
//! upstreams about unknown intents (and claims whose lease expired), through the same
//! executors as the front door. It records what the upstreams say; it never executes.

use std::time::Duration;

use crate::door::executor;
use crate::state::AppState;

/// Periodically reconciles unknown intents (and claims whose lease expired) against
/// their upstreams. Runs until the process ends.
pub async fn sweep(state: AppState, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        state
            .gate()
            .sweep_pass(|name| {
                let capability = state.gate().settling_capability(name)?;
                Some(executor(&state, capability))
            })
            .await;
    }
}
