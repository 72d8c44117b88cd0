//! The reconciliation sweep: unknown and lease-expired intents nobody is waiting for,
//! resolved from the upstream's record. The sweep executes nothing.

use std::sync::Arc;

use oncegate_core::decide;
use oncegate_core::intent::{IntentRecord, IntentState, Outcome};

use oncegate_store::{Commit, IntentFilter, StoreError, StoreRead, StoreWrite};

use crate::call::IntentHandle;
use crate::executor::Executor;
use crate::gate::Gate;

/// Intents of each state one sweep pass looks at, oldest first.
const SWEEP_BATCH: u32 = 500;

impl Gate {
    /// Resolves an unknown (or lease-expired) intent nobody is waiting for, from the
    /// upstream's record. Executes nothing. Used by the gateway's background sweep.
    pub async fn sweep_one<E: Executor>(
        &self,
        record: &IntentRecord,
        executor: Arc<E>,
    ) -> Result<Option<Outcome>, StoreError> {
        let Some(cap) = self.registry.capability(&record.capability).cloned() else {
            return Ok(None);
        };
        let handle = IntentHandle::of(record);
        // Sampled before the read: a call that had ended by then committed (if at all)
        // before it answered, so the read sees its effect.
        let running = executor.attempt_running(&handle);
        // The horizon is judged at the moment the read was asked: a read that reached the
        // provider before the horizon ended proves nothing about a commit just after it.
        let asked_at = self.clock.now();
        let answer = executor.reconcile(handle).await;
        let Some(d) = decide::after_sweep(record, answer, &cap, running, asked_at) else {
            return Ok(None);
        };
        // An in-flight intent is swept because its lease expired by this gate's clock.
        let takes_over = record.state == IntentState::InFlight;
        match self
            .store
            .commit(Commit::new(d.record, None, d.event).taking_over(takes_over))
            .await
        {
            Ok(()) => Ok(Some(d.outcome)),
            // Live by the store's clock: its holder is still at work.
            Err(StoreError::LeaseLive(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One pass of the background sweep (the gateway ticks it): the oldest unknown
    /// intents, then the oldest in-flight intents whose lease has expired by the gate's
    /// clock, each resolved by [`Gate::sweep_one`] with the executor `executor_for`
    /// gives for its capability (`None`: skipped, e.g. no upstream in this process).
    /// Answers how many intents it changed; failures are logged and left for the next
    /// pass.
    pub async fn sweep_pass<E: Executor>(
        &self,
        executor_for: impl Fn(&str) -> Option<Arc<E>>,
    ) -> usize {
        let mut changed = 0;
        for state in [IntentState::Unknown, IntentState::InFlight] {
            let filter = IntentFilter {
                state: Some(state),
                limit: SWEEP_BATCH,
                oldest_first: true,
                ..Default::default()
            };
            let list = match self.store.list_intents(&filter).await {
                Ok(list) => list,
                Err(e) => {
                    tracing::warn!(state = state.as_str(), error = %e, "sweep could not list intents");
                    continue;
                }
            };
            let now = self.clock.now();
            for record in list.items {
                // A live lease: its holder is still at work, nothing to reconcile.
                if record.state == IntentState::InFlight
                    && record.lease.as_ref().is_some_and(|l| now < l.expires_at)
                {
                    continue;
                }
                let Some(executor) = executor_for(&record.capability) else {
                    continue;
                };
                match self.sweep_one(&record, executor).await {
                    Ok(Some(o)) => {
                        changed += 1;
                        tracing::info!(key = %record.key, status = o.status.as_str(), "sweep reconciled an intent");
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(key = %record.key, error = %e, "sweep could not record");
                    }
                }
            }
        }
        changed
    }
}
