//! The reconciliation sweep: unknown and lease-expired intents nobody is waiting for,
//! resolved from the upstream's record. The sweep executes nothing.
//!
//! Several gates (replicas) may sweep one store: each intent is reconciled by one of
//! them at a time, under a work claim (`SharedWrite::claim_work`) that a call's own
//! reconciliation (claim/apply.rs) takes as well.

use std::sync::Arc;

use oncegate_core::config::Capability;
use oncegate_core::decide;
use oncegate_core::intent::{IntentRecord, IntentState, Outcome};

use oncegate_store::{Commit, IntentFilter, IntentsRead, IntentsWrite, SharedWrite, StoreError};

use crate::call::IntentHandle;
use crate::executor::Executor;
use crate::gate::Gate;

/// Intents of each state one sweep pass looks at, oldest first.
const SWEEP_BATCH: u32 = 500;

/// How long a reconciliation claim lasts when the capability names no lease.
const RECONCILE_TTL: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);

/// How often a call waiting for another gate's reconciliation read tries its claim.
const CLAIM_POLL: std::time::Duration = std::time::Duration::from_millis(25);

/// How long a reconciliation claim lasts: the capability's lease (or 30 s).
fn reconcile_ttl(cap: &Capability) -> jiff::SignedDuration {
    if cap.lease.is_positive() {
        cap.lease
    } else {
        RECONCILE_TTL
    }
}

/// `oncegate_reconcile_claims_total{result="taken"|"held_elsewhere"}`: a gate's first
/// try at an intent's reconciliation claim.
fn count_claim(taken: bool) {
    let result = if taken { "taken" } else { "held_elsewhere" };
    metrics::counter!("oncegate_reconcile_claims_total", "result" => result).increment(1);
}

/// A reconciliation this gate holds (see [`Gate::claim_reconcile`]); released once what
/// the upstream said is recorded, or left to expire if this process dies first.
pub(crate) struct ReconcileClaim {
    work: String,
    owner: String,
}

impl ReconcileClaim {
    /// Gives the claim back (a failure is logged: the claim expires by itself).
    pub(crate) async fn release(self, gate: &Gate) {
        if let Err(e) = gate.store.release_work(&self.work, &self.owner).await {
            tracing::warn!(work = %self.work, error = %e, "a reconciliation claim could not be released; it expires with its lease");
        }
    }
}

impl Gate {
    /// Resolves an unknown (or lease-expired) intent nobody is waiting for, from the
    /// upstream's record. Executes nothing. Used by the gateway's background sweep.
    pub async fn sweep_one<E: Executor>(
        &self,
        record: &IntentRecord,
        executor: Arc<E>,
    ) -> Result<Option<Outcome>, StoreError> {
        // Copied only where the store's time had a gap to judge it across.
        let across = self
            .store
            .resumption()
            .map(|_| self.across_gap(record.clone()));
        let record = across.as_ref().unwrap_or(record);
        let Some(cap) = self.settling_capability(&record.capability) else {
            // A fronted tool this process has not read (yet): a later pass settles it.
            tracing::debug!(capability = %record.capability, "no capability to settle this intent with yet");
            return Ok(None);
        };
        // One gate at a time asks the upstream about an intent: another replica (or a
        // call on this one) reconciling it already is answer enough for this pass.
        let work = self.claim_reconcile(record, &cap).await?;
        count_claim(work.is_some());
        let Some(work) = work else {
            return Ok(None);
        };
        let swept = self.sweep_claimed(record, &cap, executor).await;
        work.release(self).await;
        swept
    }

    /// The read and its record, under the reconciliation claim.
    async fn sweep_claimed<E: Executor>(
        &self,
        record: &IntentRecord,
        cap: &Capability,
        executor: Arc<E>,
    ) -> Result<Option<Outcome>, StoreError> {
        let handle = IntentHandle::of(record);
        // Sampled before the read: a call that had ended by then committed (if at all)
        // before it answered, so the read sees its effect.
        let running = executor.attempt_running(&handle);
        // The horizon is judged at the moment the read was asked: a read that reached the
        // provider before the horizon ended proves nothing about a commit just after it.
        // The earliest that moment can be by the store's clock: a horizon never ends early.
        let asked_at = self.clock.earliest();
        let answer = executor.reconcile(handle).await;
        // An unproven read's "not found" proves nothing: the intent stays unknown.
        let answer = match self.doubts_on(&cap.name).await {
            Ok(doubts) | Err(doubts) => doubts.weigh(answer),
        };
        let Some(d) = decide::after_sweep(record, answer, cap, running, asked_at) else {
            return Ok(None);
        };
        // An in-flight intent is swept because its lease expired by this gate's clock.
        let takes_over = record.state == IntentState::InFlight;
        let disproved = record.not_sent_reported
            && d.record
                .as_ref()
                .is_some_and(|r| r.state == IntentState::Applied);
        match self
            .store
            .commit(Commit::new(d.record, d.approval, d.event).taking_over(takes_over))
            .await
        {
            Ok(()) => {
                if disproved {
                    crate::complete::not_sent_disproved(record, cap);
                }
                Ok(Some(d.outcome))
            }
            // Live by the store's clock: its holder is still at work.
            Err(StoreError::LeaseLive(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A call's reconciliation claim: taken now, or once the gate that holds it has
    /// recorded its read (the caller then re-decides on what it recorded: a lost race
    /// at commit) or its claim ran out. `None`: still held when this caller's patience,
    /// the claim's lifetime, ran out.
    pub(crate) async fn await_reconcile_claim(
        &self,
        record: &IntentRecord,
        cap: &Capability,
    ) -> Result<Option<ReconcileClaim>, StoreError> {
        let first = self.claim_reconcile(record, cap).await?;
        count_claim(first.is_some());
        if first.is_some() {
            return Ok(first);
        }
        let deadline = tokio::time::Instant::now()
            + reconcile_ttl(cap).unsigned_abs()
            + std::time::Duration::from_secs(1);
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(CLAIM_POLL).await;
            if let Some(work) = self.claim_reconcile(record, cap).await? {
                return Ok(Some(work));
            }
        }
        Ok(None)
    }

    /// Claims the reconciliation of `record`'s generation for this gate
    /// (`reconcile:<key>:<generation>`, for the capability's lease): `None` if another
    /// gate (or another of this gate's calls) holds it.
    pub(crate) async fn claim_reconcile(
        &self,
        record: &IntentRecord,
        cap: &Capability,
    ) -> Result<Option<ReconcileClaim>, StoreError> {
        let work = format!("reconcile:{}:{}", record.key, record.generation);
        // The holder is this claim alone (gate owner and a nonce): a call's read and the
        // sweep of the same process take turns too.
        let owner = self.work_holder();
        let taken = self
            .store
            .claim_work(&work, &owner, self.clock.now(), reconcile_ttl(cap))
            .await?;
        Ok(taken.then_some(ReconcileClaim { work, owner }))
    }

    /// One pass of the background sweep (the gateway ticks it): the oldest unknown
    /// intents, then the oldest in-flight intents whose lease has expired by the gate's
    /// clock, each resolved by [`Gate::sweep_one`] with the executor `executor_for`
    /// gives for its capability (`None`: skipped, e.g. no upstream in this process).
    /// Then, at the bounded rate of each capability's `read_back`, it reads back a few
    /// applied intents ([`Gate::read_back_pass`]). Answers how many intents it changed;
    /// failures are logged and left for the next pass.
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
        // Now and then, prove the reconciliation reads this pass relied on.
        self.read_back_pass(&executor_for).await;
        changed
    }
}
