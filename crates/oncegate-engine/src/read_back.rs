//! Proving reconciliation reads: now and then the sweep reads back a few intents
//! oncegate knows were applied, through the capability's own reconciliation read. A
//! read that finds them is a read whose "not found" means something; one that does not
//! (a wrong path, a lookup by a key the provider does not keep) can prove no absence,
//! so the capability is doubted (doubts.rs) until an admin clears it.
//!
//! Reads only, never an effect, at a bounded rate: at most `read_back` intents per
//! capability per `read_back_every` interval, in one replica per interval (a
//! `read-back:<cap>:<slot>` work claim). The intents are those whose settle horizon
//! ended during the interval before: a provider whose reads lag its writes has had the
//! horizon to show them.

use std::sync::Arc;

use jiff::Timestamp;
use oncegate_core::config::Capability;
use oncegate_core::decide::ReconcileResult;
use oncegate_core::intent::{IntentRecord, IntentState};
use serde_json::json;

use oncegate_store::{IntentFilter, IntentsRead, SharedWrite, StoreError};

use crate::call::IntentHandle;
use crate::doubts::Doubt;
use crate::executor::Executor;
use crate::gate::Gate;

/// The most applied intents listed (newest first) to pick one interval's read-backs from.
const CANDIDATES: u32 = 200;

/// `oncegate_read_backs_total{capability, result}`: one read-back's answer.
fn count(capability: &str, result: &'static str) {
    metrics::counter!("oncegate_read_backs_total", "capability" => capability.to_owned(), "result" => result).increment(1);
}

impl Gate {
    /// Reads back, for every capability with a reconciliation read whose interval slot
    /// this gate has not seen yet and wins, a few applied intents of the interval
    /// before (see the module docs), with the executor `executor_for` gives for it.
    /// Answers how many reads were made. Failures are logged; the next slot tries again.
    pub async fn read_back_pass<E: Executor>(
        &self,
        executor_for: impl Fn(&str) -> Option<Arc<E>>,
    ) -> usize {
        let mut read = 0;
        for cap in self.registry.capabilities() {
            let Some(reconcile) = &cap.reconcile else {
                continue;
            };
            let every = reconcile.read_back.every;
            if reconcile.read_back.count == 0 || !every.is_positive() || cap.dry_run {
                continue;
            }
            let now = self.clock.now();
            let slot = now.as_millisecond() / every.as_millis().max(1) as i64;
            if !self.new_read_back_slot(&cap.name, slot) {
                continue;
            }
            let Some(executor) = executor_for(&cap.name) else {
                continue;
            };
            match self.read_back_slot(cap, slot, executor).await {
                Ok(n) => read += n,
                Err(e) => {
                    tracing::warn!(capability = %cap.name, error = %e, "read-back skipped: the store is unavailable");
                }
            }
        }
        read
    }

    /// Whether `slot` is new for `capability` on this gate (and remembers it).
    fn new_read_back_slot(&self, capability: &str, slot: i64) -> bool {
        let mut seen = self.read_backs.lock().unwrap_or_else(|e| e.into_inner());
        let last = seen.insert(capability.to_owned(), slot);
        last != Some(slot)
    }

    /// One capability's read-backs for one slot, if this gate wins the slot.
    async fn read_back_slot<E: Executor>(
        &self,
        cap: &Capability,
        slot: i64,
        executor: Arc<E>,
    ) -> Result<usize, StoreError> {
        let Some(reconcile) = &cap.reconcile else {
            return Ok(0);
        };
        let every = reconcile.read_back.every;
        // A read already unproven has nothing more to prove until an admin clears it.
        if !matches!(self.doubts_on(&cap.name).await, Ok(d) if d.read_unproven.is_none()) {
            return Ok(0);
        }
        let now = self.clock.now();
        let work = format!("read-back:{}:{slot}", cap.name);
        if !self
            .store
            .claim_work(&work, &self.work_holder(), now, every)
            .await?
        {
            return Ok(0); // another replica reads this slot back
        }
        let slot_start = Timestamp::from_millisecond(slot * every.as_millis() as i64)
            .unwrap_or(Timestamp::UNIX_EPOCH);
        let window = (
            slot_start - every - cap.settle_horizon,
            slot_start - cap.settle_horizon,
        );
        let chosen = self
            .applied_between(cap, window, reconcile.read_back.count)
            .await?;
        let mut read = 0;
        for record in chosen {
            read += 1;
            match executor.reconcile(IntentHandle::of(&record)).await {
                ReconcileResult::Found { .. } => count(&cap.name, "found"),
                ReconcileResult::Undecidable { message } => {
                    count(&cap.name, "undecidable");
                    tracing::debug!(capability = %cap.name, key = %record.key, why = %message, "a read-back got no answer");
                }
                ReconcileResult::NotFound => {
                    count(&cap.name, "not_found");
                    let evidence = json!({
                        "seen": "read_back",
                        "intent_key": record.key.to_string(),
                        "generation": record.generation,
                        "effect_ref": record.effect_ref,
                        "settled_at": record.settled_at,
                    });
                    self.raise_doubt(
                        &cap.name,
                        Doubt::ReconciliationUnproven,
                        "oncegate-sweep",
                        evidence,
                    )
                    .await?;
                    break;
                }
            }
        }
        Ok(read)
    }

    /// Up to `count` applied intents of `cap` that settled within `window`, newest first.
    async fn applied_between(
        &self,
        cap: &Capability,
        (from, until): (Timestamp, Timestamp),
        count: u32,
    ) -> Result<Vec<IntentRecord>, StoreError> {
        let listed = self
            .store
            .list_intents(&IntentFilter {
                state: Some(IntentState::Applied),
                capability: Some(cap.name.clone()),
                limit: CANDIDATES,
                oldest_first: false,
                updated_since: Some(from),
                ..IntentFilter::default()
            })
            .await?;
        Ok(listed
            .items
            .into_iter()
            .filter(|r| r.settled_at.is_some_and(|at| from <= at && at < until))
            .take(count as usize)
            .collect())
    }
}
