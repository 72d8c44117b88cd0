//! Approvals: a human approves or denies a held intent. Approving executes it once,
//! here, through the same claim and recording as `invoke`; for a claim-only capability
//! (an executor that executes nothing) it leaves the intent for the caller's next claim.

use std::sync::Arc;

use oncegate_core::codes::Code;
use oncegate_core::config::Capability;
use oncegate_core::decide::{self, Choice, Decision, Executes, decide_approval_noted};
use oncegate_core::intent::{self, ApprovalState, IntentRecord, Outcome, Reason, Status};

use oncegate_store::{IntentsRead, StoreError};

use crate::claim::Rejudge;
use crate::error::GateError;
use crate::executor::Executor;
use crate::gate::{Gate, MAX_RACES, store_down};
use crate::who::Who;

impl Gate {
    /// A human approves or denies. Approving executes the held intent once, here.
    pub async fn decide_approval<'a, E: Executor>(
        &self,
        actor: impl Into<Who<'a>>,
        approval_id: &str,
        choice: Choice,
        executor: Arc<E>,
    ) -> Result<Outcome, GateError> {
        self.decide_approval_noted(actor, approval_id, choice, None, executor)
            .await
    }

    /// [`Gate::decide_approval`] with the human's note (why), kept in the audit record;
    /// a deny's note is what the agent's next call is told.
    pub async fn decide_approval_noted<'a, E: Executor>(
        &self,
        actor: impl Into<Who<'a>>,
        approval_id: &str,
        choice: Choice,
        note: Option<&str>,
        executor: Arc<E>,
    ) -> Result<Outcome, GateError> {
        let who = actor.into();
        let actor = who.name();
        let role = self.role_of(who)?;
        for _ in 0..MAX_RACES {
            let approval = self
                .approval_across_gap(self.store.approval(approval_id).await?)
                .ok_or_else(|| GateError::UnknownApproval(approval_id.to_owned()))?;
            let cap = self.capability(&approval.capability)?;
            let record = self.maybe_across_gap(
                self.load_generation(&approval.key, approval.generation)
                    .await?,
            );
            let Some(record) = record else {
                return Err(GateError::UnknownApproval(approval_id.to_owned()));
            };
            let killed = match self.kill_switch_for(&cap.name, &record.principal).await {
                Ok(killed) => killed,
                // Approving executes: without the switches, fail closed.
                Err((e, _)) if choice == Choice::Approve => {
                    return Ok(store_down(Some(&record), None, &e));
                }
                Err((_, last_known)) => last_known,
            };
            if choice == Choice::Approve
                && let Some(why) = killed
            {
                // An approval does not outrank a kill switch; the approval stays pending.
                let mut o = decide::standing_outcome(&record);
                o.status = Status::Refused;
                o.reason = Some(Reason::new(Code::KillSwitch, why));
                return Ok(o);
            }
            let holder = self.claim_holder(actor);
            let executes = if executor.executes() {
                Executes::Here { owner: &holder }
            } else {
                Executes::OnNextClaim
            };
            match decide_approval_noted(
                &record,
                &approval,
                actor,
                role,
                choice,
                note,
                &cap,
                executes,
                self.clock.now(),
            ) {
                decide::ApprovalDecision::Rejected(reason) => {
                    if reason.code == Code::Forbidden {
                        return Err(GateError::Forbidden(reason.message));
                    }
                    let mut o = decide::standing_outcome(&record);
                    o.status = Status::Denied;
                    o.reason = Some(reason);
                    return Ok(o);
                }
                decide::ApprovalDecision::Decided {
                    action,
                    record: next,
                    approval,
                    outcome,
                    event,
                } => {
                    // Approving relied on the approval not having expired: the store
                    // judges that again by its own clock.
                    let rejudge = Rejudge {
                        takes_over: false,
                        valid_until: approval
                            .as_ref()
                            .filter(|a| a.state == ApprovalState::Approved)
                            .map(|a| a.expires_at),
                    };
                    let d = Decision {
                        action,
                        record: next,
                        approval,
                        outcome,
                        event,
                    };
                    match self
                        .apply(d, rejudge, &cap, who, executor.clone(), None)
                        .await
                    {
                        Ok(step) => {
                            let o = self.carry_out(step, executor.clone()).await;
                            // A second click while the first one's execution runs: wait
                            // for it, so every click answers with the one result.
                            if o.status == Status::InFlight {
                                return Ok(self.settled(&record, &cap, o).await);
                            }
                            return Ok(o);
                        }
                        Err(StoreError::Conflict) => continue,
                        Err(e) => return Ok(store_down(Some(&record), None, &e)),
                    }
                }
            }
        }
        Err(GateError::Store(StoreError::Conflict))
    }

    /// Polls an in-flight intent until it settles or its lease runs out.
    async fn settled(&self, record: &IntentRecord, cap: &Capability, fallback: Outcome) -> Outcome {
        let deadline = tokio::time::Instant::now() + cap.lease.unsigned_abs();
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            match self
                .store
                .load_generation(&record.key, record.generation)
                .await
            {
                Ok(Some(r)) if r.state != intent::IntentState::InFlight => {
                    return decide::standing_outcome(&r);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        fallback
    }
}
