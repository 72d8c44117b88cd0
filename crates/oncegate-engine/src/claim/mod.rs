//! Claiming: preflight -> load -> decide -> commit, with reconciliation on the way.
//!
//! [`Gate::claim`] and [`Gate::claim_with`] run every check a call goes through
//! (preflight.rs), then decide on the stored intent and commit the decision (apply.rs),
//! deciding again on every lost race. A decision to execute comes back as a [`Claim`]:
//! the intent is in flight under a lease for that execution, and whoever holds the
//! claim executes the effect and completes it (complete.rs). Everything else comes back
//! settled, exactly as `invoke` answers it. step.rs holds what the steps hand each
//! other.

mod apply;
mod preflight;
mod step;

use std::sync::Arc;

use jiff::Timestamp;
use oncegate_core::config::Capability;
use oncegate_core::decide::{self, Action, CallRequest, Decision};
use oncegate_core::intent::{Approval, ApprovalState, IntentRecord, IntentState, Outcome};
use oncegate_core::key::DerivedKey;
use oncegate_core::policy::PolicyVerdict;
use serde_json::Value;

use oncegate_store::{Commit, IntentsRead, IntentsWrite, StoreError};

use crate::call::{Call, IntentHandle};
use crate::error::GateError;
use crate::executor::{ClaimOnly, Executor};
use crate::fence::Claim;
use crate::gate::{Gate, MAX_RACES, contention, log_alerts, random_hex, store_down};
use crate::who::Who;
use preflight::{Checked, Cleared};
pub(crate) use step::{Rejudge, Sender, Step};

/// What a claim answers.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per call; boxing buys nothing"
)]
pub enum Claimed {
    /// This caller holds the execution: run it, then complete it.
    Execute(Claim),
    /// Nothing to execute: a replay, in flight elsewhere, unknown, pending approval,
    /// denied, refused, dry run; exactly what `invoke` would answer.
    Settled(Outcome),
    /// A read capability: nothing is claimed (reads are never deduplicated). The
    /// caller performs the read itself and completes nothing; its audit entry and the
    /// read rate cap are already taken care of.
    Read(IntentHandle),
}

impl Gate {
    /// Claims a call for its caller to execute (the two-phase API: claim, execute
    /// elsewhere, [`Gate::complete`]). No reconciliation read is available here: an
    /// unknown intent is escalated to a human, as [`Gate::invoke`] with a closure does.
    pub async fn claim<'a>(
        &self,
        principal: impl Into<Who<'a>>,
        call: Call,
    ) -> Result<Claimed, GateError> {
        self.claim_with(principal, call, Arc::new(ClaimOnly)).await
    }

    /// Claims a call, with an executor whose `admit` vets the call and whose
    /// `reconcile` answers for an unknown intent on the way (its `execute` is never
    /// called: the caller executes what is claimed).
    pub async fn claim_with<'a, E: Executor>(
        &self,
        principal: impl Into<Who<'a>>,
        call: Call,
        executor: Arc<E>,
    ) -> Result<Claimed, GateError> {
        Ok(
            match self
                .claim_step(principal.into(), &call, executor, Sender::Caller)
                .await?
            {
                Step::Settled(outcome) => Claimed::Settled(outcome),
                Step::Execute { claim, .. } => Claimed::Execute(claim),
                Step::Read { intent, .. } => Claimed::Read(intent),
            },
        )
    }

    /// Checks, decides and commits one call; executes nothing (but a reconciliation
    /// read). `sender`: who sends the effect a claim leads to. The preflight runs once;
    /// the loop decides again on every lost race.
    pub(crate) async fn claim_step<E: Executor>(
        &self,
        who: Who<'_>,
        call: &Call,
        executor: Arc<E>,
        sender: Sender,
    ) -> Result<Step, GateError> {
        let Cleared {
            cap,
            derived,
            killed,
            held,
            mut verdict,
        } = match self.preflight(who, call, executor.as_ref()).await? {
            Checked::Cleared(cleared) => cleared,
            Checked::Settled(outcome) => return Ok(Step::Settled(outcome)),
        };
        let principal = who.name();
        for _ in 0..MAX_RACES {
            let now = self.clock.now();
            let (existing, approval, other_run) = match self.load_standing(&derived, call).await {
                Ok(l) => l,
                Err(e) if cap.category.is_consequential() => {
                    return Ok(Step::Settled(store_down(None, Some(&derived.key), &e)));
                }
                Err(_) => (None, None, None),
            };
            let approval_id = format!("ap_{}", random_hex(8));
            let holder = self.claim_holder(principal);
            let req = CallRequest {
                principal,
                tenant: &self.registry.gateway.tenant,
                derived: &derived,
                arguments: &call.arguments,
                run_id: call.run_id.as_deref(),
                step_id: call.step_id.as_deref(),
                owner: &holder,
                approval: approval.as_ref(),
                other_run: other_run.as_ref(),
                kill_switch: killed.as_deref(),
                held: held.as_deref(),
                new_approval_id: &approval_id,
                rolled_back_at: self.store.rollback_accepted_at(),
                caller_sends: sender == Sender::Caller,
            };
            let mut decision = decide::decide(existing.as_ref(), &req, &cap, &verdict, now);
            // A new approval beyond the agent's budget is refused, not queued. The agent's
            // turn is held through this iteration's commit: parallel calls count in turn.
            let _turn = self.queue_turn(&decision, principal).await;
            if let Some(refused) = self.approval_queue_full(&decision, principal, now).await {
                log_alerts(&refused, &cap);
                return Ok(Step::Settled(refused));
            }
            let rejudge = rejudge_of(&decision, existing.as_ref(), approval.as_ref(), &cap, now);
            if decision.action == Action::PassThrough {
                return Ok(self.pass_through(decision, who, &derived, call, &cap).await);
            }
            if decision.action == Action::Replay {
                let now = self.clock.now();
                self.replays
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .note_replay(&mut decision.outcome, &cap, now);
            }
            let applied = self
                .apply(
                    decision,
                    rejudge,
                    &cap,
                    who,
                    executor.clone(),
                    Some(&call.arguments),
                )
                .await;
            match applied {
                Ok(step) => return Ok(step),
                Err(StoreError::Conflict) => {
                    tokio::task::yield_now().await;
                    continue;
                }
                Err(StoreError::LimitReached { scope, .. })
                    if !matches!(verdict, PolicyVerdict::RequireApproval { .. }) =>
                {
                    // Over a limit that asks a human instead of refusing: decide again
                    // as if policy had asked for approval (the approval names the limit).
                    verdict = PolicyVerdict::RequireApproval {
                        policies: vec![format!("limit:{scope}")],
                    };
                    continue;
                }
                Err(StoreError::LeaseLive(why)) => {
                    // This gate's clock runs ahead of the store's: the holder is still
                    // within its lease, so the intent is in flight.
                    tracing::warn!(key = %derived.key, why = %why, "a lease this gate judged expired is live by the store's clock (is this host's clock fast?)");
                    let standing = existing.as_ref().map(decide::standing_outcome);
                    return Ok(Step::Settled(
                        standing.unwrap_or_else(|| contention(&derived.key)),
                    ));
                }
                Err(e) => {
                    return Ok(Step::Settled(store_down(
                        existing.as_ref(),
                        Some(&derived.key),
                        &e,
                    )));
                }
            }
        }
        Ok(Step::Settled(contention(&derived.key)))
    }

    /// The stored intent `derived` names, its approval, and (for a new intent with a
    /// cross-run key) the same intent of another run.
    async fn load_standing(
        &self,
        derived: &DerivedKey,
        call: &Call,
    ) -> Result<(Option<IntentRecord>, Option<Approval>, Option<IntentRecord>), StoreError> {
        // The first load may be answered "absent" from the store's key set: only a
        // claim follows from it, and the claim's insert is checked against the disk.
        let mut existing = self.maybe_across_gap(self.store.load_to_claim(&derived.key).await?);
        let approval = match existing.as_ref().and_then(|r| r.approval_id.as_deref()) {
            Some(id) => self.approval_across_gap(self.store.approval(id).await?),
            None => None,
        };
        // The intent and its approval are two reads: a decision another gate
        // committed between them shows a decided approval beside the intent
        // still pending. They were committed together, so the intent read again
        // is the one that goes with this approval.
        if existing
            .as_ref()
            .is_some_and(|r| r.state == IntentState::PendingApproval)
            && approval
                .as_ref()
                .is_some_and(|a| a.state != ApprovalState::Pending)
        {
            existing = self.maybe_across_gap(self.store.load(&derived.key).await?);
        }
        let other_run = match (&existing, &derived.cross_key) {
            (None, Some(cross)) => {
                self.store
                    .find_other_run(cross, call.run_id.as_deref())
                    .await?
            }
            _ => None,
        };
        Ok((existing, approval, other_run))
    }

    /// A read's decision: it claims nothing, and its audit entry is best effort.
    async fn pass_through(
        &self,
        decision: Decision,
        who: Who<'_>,
        derived: &DerivedKey,
        call: &Call,
        cap: &Capability,
    ) -> Step {
        let mut event = decision.event;
        who.stamp(&mut event);
        let _ = self.store.commit(Commit::new(None, None, event)).await;
        let intent = IntentHandle {
            key: String::new(),
            intent_key: derived.key.clone(),
            generation: 0,
            capability: cap.name.clone(),
            arguments: call.arguments.clone(),
            normalised: Value::Object(derived.normalised.clone()),
            business_ref: derived.business_ref.clone(),
            run_id: call.run_id.clone(),
            step_id: call.step_id.clone(),
        };
        Step::Read {
            outcome: decision.outcome,
            intent,
        }
    }
}

/// What `decision` relied on about time, which the store judges again by its own
/// clock: an attempt's lease expired (a takeover), an approved claim-only call still
/// within its time to live.
fn rejudge_of(
    decision: &Decision,
    existing: Option<&IntentRecord>,
    approval: Option<&Approval>,
    cap: &Capability,
    now: Timestamp,
) -> Rejudge {
    Rejudge {
        takes_over: decision.record.is_some()
            && existing.is_some_and(|r| {
                r.state == IntentState::InFlight
                    && r.lease.as_ref().is_some_and(|l| now >= l.expires_at)
            }),
        valid_until: approval
            .filter(|a| {
                decision.action == Action::Execute
                    && a.state == ApprovalState::Approved
                    && existing.is_some_and(|r| r.state == IntentState::PendingApproval)
            })
            .map(|a| decide::approved_claim_deadline(a, cap)),
    }
}
