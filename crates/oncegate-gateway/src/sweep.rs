//! The reconciliation sweep: periodically asks the upstreams about unknown intents (and
//! claims whose lease expired), through the same executors as the front door.

use std::time::Duration;

use oncegate_core::intent::IntentState;
use oncegate_store::{IntentFilter, StoreRead};

use crate::front::executor;
use crate::state::AppState;

/// Periodically reconciles unknown intents (and claims whose lease expired) against
/// their upstreams. Runs until the process ends.
pub async fn sweep(state: AppState, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        for st in [IntentState::Unknown, IntentState::InFlight] {
            let Ok(list) = state
                .gate()
                .store()
                .list_intents(&IntentFilter {
                    state: Some(st),
                    limit: 500,
                    oldest_first: true,
                    ..Default::default()
                })
                .await
            else {
                continue;
            };
            for record in list.items {
                let Some(capability) = state.gate().registry().capability(&record.capability)
                else {
                    continue;
                };
                let executor = executor(&state, capability.clone());
                match state.gate().sweep_one(&record, executor).await {
                    Ok(Some(o)) => {
                        tracing::info!(key = %record.key, status = o.status.as_str(), "sweep reconciled an intent")
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(key = %record.key, error = %e, "sweep could not record")
                    }
                }
            }
        }
    }
}
