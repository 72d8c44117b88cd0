//! Completing a claim: recording what an execution did, and keeping its lease alive.
//!
//! Two recorders with one storage rule (`decide::record_claim_effect`) and two fences:
//! - [`Gate::complete`] / [`Gate::complete_fenced`], for a claim executed outside the
//!   gate (a worker using the two-phase API). Strict: a claim that was superseded,
//!   whose lease has expired by the gate's clock, or whose intent is no longer in
//!   flight for it records nothing and answers [`GateError::StaleClaim`] (`OG-0024`),
//!   so a worker that stalled past its lease never overwrites what the sweep or another
//!   attempt recorded. A repeat of a recorded completion answers what was recorded.
//! - `record`, for the gate's own executions (invoke.rs): lenient, fenced by the
//!   execution number only, so a late answer is still recorded (issue 9).
//!
//! [`Gate::heartbeat`] extends a live claim's lease with a durable commit and an audit
//! event.

use oncegate_core::codes::Code;
use oncegate_core::config::Capability;
use oncegate_core::decide::{self, Completion, EffectResult};
use oncegate_core::intent::{IntentRecord, Outcome, Reason, Status};

use oncegate_store::{Commit, IntentsRead, IntentsWrite, StoreError};

use crate::error::GateError;
use crate::fence::{Claim, Fence};
use crate::gate::{Gate, MAX_RACES, bump};
use crate::who::Who;

impl Gate {
    /// Records what the claimed execution did. Fenced and strict (see the module docs):
    /// a stale claim records nothing and answers [`GateError::StaleClaim`]; a repeat of
    /// the same completion answers the outcome that was recorded.
    pub async fn complete(
        &self,
        claim: &Claim,
        result: EffectResult,
    ) -> Result<Outcome, GateError> {
        self.complete_fenced(claim.who(), &claim.fence(), result)
            .await
    }

    /// [`Gate::complete`] for a caller that holds only the fence (the two-phase wire
    /// API: the intent key and the fencing token come back over HTTP). `principal`
    /// must be an agent or an admin; the fence is what proves the claim.
    pub async fn complete_fenced<'a>(
        &self,
        principal: impl Into<Who<'a>>,
        fence: &Fence,
        result: EffectResult,
    ) -> Result<Outcome, GateError> {
        let who = principal.into();
        self.caller(who)?;
        let principal = who.name();
        for _ in 0..MAX_RACES {
            let record = self.fenced_record(fence, principal).await?;
            let cap = self.capability(&record.capability)?;
            let completion = decide::complete_claim(
                &record,
                fence.generation,
                fence.execution,
                &fence.nonce,
                result.clone(),
                &cap,
                principal,
                self.clock.now(),
            );
            let decision = match completion {
                Completion::Record(decision) => decision,
                Completion::Recorded(outcome) => return Ok(outcome),
                Completion::Stale(reason, evidence) => {
                    if let Some(evidence) = evidence {
                        // Refused all the same (the claim is not this worker's any more),
                        // but it is evidence: the provider may hold an effect the store
                        // does not know about, or a second one. Into the audit chain (the
                        // intent unchanged), a metric and an error a human must act on.
                        metrics::counter!("oncegate_stale_effects_total", "capability" => cap.name.clone()).increment(1);
                        self.notice_second_effect(&record, &result, fence.execution, principal)
                            .await;
                        tracing::error!(alert = "stale_effect", key = %fence.intent_key, generation = fence.generation, execution = fence.execution, result = ?result, state = record.state.as_str(), recorded_ref = ?record.effect_ref, "a worker whose claim was lost reports an effect the intent does not record; nothing recorded, check the provider");
                        if let Err(e) = self
                            .store
                            .commit(Commit::new(None, None, evidence.event))
                            .await
                        {
                            tracing::error!(key = %fence.intent_key, error = %e, "the stale completion's evidence could not be audited");
                        }
                    } else {
                        tracing::warn!(key = %fence.intent_key, generation = fence.generation, execution = fence.execution, result = ?result, why = %reason.message, "a stale claim's completion was refused; nothing recorded");
                    }
                    return Err(GateError::StaleClaim(reason.message));
                }
            };
            let mut outcome = decision.outcome;
            let mut event = decision.event;
            who.stamp(&mut event);
            match self
                .store
                .commit(Commit::new(decision.record, decision.approval, event))
                .await
            {
                Ok(()) => {
                    outcome.attempt = record.attempts;
                    return Ok(outcome);
                }
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(GateError::Store(StoreError::Conflict))
    }

    /// Extends a live claim's lease to now plus the capability's lease (a durable
    /// commit with its audit event) and answers the claim as it now stands. A stale
    /// claim is refused with [`GateError::StaleClaim`] and nothing is written.
    pub async fn heartbeat(&self, claim: &Claim) -> Result<Claim, GateError> {
        self.heartbeat_fenced(claim.who(), &claim.fence()).await
    }

    /// [`Gate::heartbeat`] for a caller that holds only the fence (the wire API).
    pub async fn heartbeat_fenced<'a>(
        &self,
        principal: impl Into<Who<'a>>,
        fence: &Fence,
    ) -> Result<Claim, GateError> {
        let who = principal.into();
        self.caller(who)?;
        let principal = who.name();
        for _ in 0..MAX_RACES {
            let record = self.fenced_record(fence, principal).await?;
            let cap = self.capability(&record.capability)?;
            let decision = decide::heartbeat_claim(
                &record,
                fence.generation,
                fence.execution,
                &fence.nonce,
                &cap,
                principal,
                self.clock.now(),
            )
            .map_err(|reason| GateError::StaleClaim(reason.message))?;
            let next = decision
                .record
                .clone()
                .expect("a heartbeat writes the lease");
            match self
                .store
                .commit(Commit::new(decision.record, None, decision.event))
                .await
            {
                Ok(()) => {
                    let mut claim = Claim::of(bump(next), who);
                    // The lease read back holds the claim's seal; the claimer's nonce
                    // is the one it proved.
                    if let Some(lease) = claim.record.lease.as_mut() {
                        lease.nonce = Some(fence.nonce.clone());
                    }
                    return Ok(claim);
                }
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(GateError::Store(StoreError::Conflict))
    }

    /// The stored intent a fence names (its current generation: an older fence is then
    /// judged stale by `decide`), for `principal` to complete or heartbeat: a claim
    /// taken by another principal is theirs alone (403), even to someone who learnt its
    /// token.
    async fn fenced_record(
        &self,
        fence: &Fence,
        principal: &str,
    ) -> Result<IntentRecord, GateError> {
        let record = self
            .store
            .load(&fence.intent_key)
            .await?
            .ok_or_else(|| GateError::UnknownIntent(fence.intent_key.to_string()))?;
        let this_claim = record.generation == fence.generation
            && record.executions == fence.execution
            && record.state == oncegate_core::intent::IntentState::InFlight;
        if let (true, Some(lease)) = (this_claim, &record.lease)
            && decide::claimed_by(&lease.owner, principal) == Some(false)
        {
            return Err(GateError::Forbidden(
                "this claim was taken by another principal: only its claimer may complete or heartbeat it".into(),
            ));
        }
        Ok(record)
    }

    /// Records the result of one of the gate's own executions, re-reading on lost races
    /// and retrying a store that is briefly unavailable: a result that happened must not
    /// be dropped. Lenient, unlike [`Gate::complete`]: fenced by the execution number
    /// only (`record_claim_effect`), so an answer that arrives after the lease expired
    /// (a slow provider, an MCP call's late answer) is still recorded, and an `applied`
    /// is recorded whatever happened meanwhile.
    pub(crate) async fn record(
        &self,
        claimed: &IntentRecord,
        result: EffectResult,
        cap: &Capability,
        actor: &str,
    ) -> Outcome {
        let mut current = claimed.clone();
        let mut outage = 0u32;
        for _ in 0..MAX_RACES {
            let decision = decide::record_claim_effect(
                &current,
                claimed.executions,
                result.clone(),
                cap,
                actor,
                self.clock.now(),
            );
            let outcome = decision.outcome.clone();
            let error = match self
                .store
                .commit(Commit::new(
                    decision.record,
                    decision.approval,
                    decision.event,
                ))
                .await
            {
                Ok(()) => {
                    // The intent already recorded another effect for this key: the
                    // provider made a second one.
                    self.notice_second_effect(&current, &result, claimed.executions, actor)
                        .await;
                    let mut outcome = outcome;
                    outcome.attempt = current.attempts;
                    return outcome;
                }
                Err(StoreError::Conflict) => None,
                Err(e) => Some(e),
            };
            if let Some(e) = error {
                outage += 1;
                if outage > 5 {
                    tracing::error!(key = %claimed.key, error = %e, "could not record an effect's result; the intent reads unknown after its lease and is reconciled");
                    return decide::outcome_of(
                        claimed,
                        Status::Unknown,
                        Some(Reason::new(
                            Code::StoreUnavailable,
                            format!(
                                "the effect ran but its result could not be recorded ({e}); do not re-issue"
                            ),
                        )),
                    );
                }
                tokio::time::sleep(std::time::Duration::from_millis(50 << outage)).await;
            }
            match self
                .store
                .load_generation(&claimed.key, claimed.generation)
                .await
            {
                Ok(Some(fresh)) => current = fresh,
                Ok(None) => break,
                Err(_) => {
                    outage += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50 << outage.min(6))).await;
                }
            }
        }
        decide::outcome_of(
            claimed,
            Status::Unknown,
            Some(Reason::new(
                Code::Contention,
                "the result could not be recorded after repeated races; do not re-issue",
            )),
        )
    }
}

/// A worker completed its claim as `not_sent`, and the reconciliation read found the
/// effect (recorded `applied` with the read's `not_sent_disproved` in the audit chain):
/// the worker, or the SDK under it, labels sent requests as not sent. Nothing ran
/// twice here, but the same worker on a capability without a read would make a second
/// effect: a metric and an error a human must act on.
pub(crate) fn not_sent_disproved(record: &IntentRecord, cap: &Capability) {
    metrics::counter!("oncegate_not_sent_disproved_total", "capability" => cap.name.clone())
        .increment(1);
    tracing::error!(
        alert = "not_sent_disproved",
        key = %record.key,
        capability = %cap.name,
        execution = record.executions,
        "a worker reported `not_sent`, but the reconciliation read found the effect: recorded applied; the worker (or its SDK) reports sent requests as not sent, fix its classification"
    );
}
