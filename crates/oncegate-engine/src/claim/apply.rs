//! Carrying out a decision: re-check what may have changed since the call began (a
//! kill switch set, a hold placed, a limit's budget), commit it, then do what it says
//! (answer, hand out the claim, or run the reconciliation read and apply its answer).

use std::sync::Arc;

use oncegate_core::codes::Code;
use oncegate_core::config::{Capability, OverLimit};
use oncegate_core::decide::{self, Action, Decision};
use oncegate_core::intent::{
    self, Approval, ApprovalState, IntentRecord, IntentState, Outcome, Reason,
};
use serde_json::Value;

use oncegate_store::{Commit, IntentsRead, IntentsWrite, Reservation, StoreError};

use super::step::{Rejudge, Step};
use crate::call::IntentHandle;
use crate::complete::not_sent_disproved;
use crate::executor::Executor;
use crate::fence::Claim;
use crate::gate::{Gate, MAX_RACES, bump, log_alerts, random_hex};
use crate::limits::{limit_named, over_limit_reason};
use crate::sweep::ReconcileClaim;
use crate::who::Who;

impl Gate {
    /// Commits a decision and carries out its action. `Conflict` means re-decide.
    /// `arguments`: the call that asked, when there is one; an intent reconciled absent
    /// re-executes with them (its significant arguments are the same by key; a
    /// corrected free-text argument is what the caller means now), unless a human was
    /// asked about the generation (`decide::arguments_frozen`): then with the
    /// arguments the approval was asked on.
    pub(crate) async fn apply<E: Executor>(
        &self,
        decision: Decision,
        rejudge: Rejudge,
        cap: &Arc<Capability>,
        actor: Who<'_>,
        executor: Arc<E>,
        arguments: Option<&Value>,
    ) -> Result<Step, StoreError> {
        let Decision {
            action,
            record,
            approval,
            outcome,
            mut event,
        } = decision;
        actor.stamp(&mut event);
        // A reconciliation read is asked by one gate at a time: take the intent's claim
        // before the decision (which counts the read as an attempt) is committed.
        let work = match (action, record.as_ref()) {
            (Action::Reconcile, Some(current)) => {
                match self.await_reconcile_claim(current, cap).await? {
                    Some(work) => Some(work),
                    None => {
                        // Another gate's read is still out past its claim's time: this
                        // caller hears where the intent stands (unknown, being
                        // reconciled); the read this decision counted did not run.
                        let mut outcome = outcome;
                        outcome.attempt = outcome.attempt.saturating_sub(1);
                        return Ok(Step::Settled(outcome));
                    }
                }
            }
            _ => None,
        };
        let committed = async {
            let reservations = match (action, record.as_ref()) {
                (Action::Execute, Some(r)) => {
                    self.recheck_execution(r, approval.as_ref(), cap, outcome.attempt)
                        .await?
                }
                _ => Vec::new(),
            };
            if action != Action::Replay {
                let mut commit = Commit::new(record.clone(), approval, event)
                    .taking_over(rejudge.takes_over)
                    .valid_until(rejudge.valid_until);
                commit.reservations = reservations;
                self.commit_decision(commit, record.as_ref(), cap, outcome.attempt)
                    .await?;
            }
            Ok::<_, Halt>(())
        }
        .await;
        if let Err(halt) = committed {
            release(work, self).await;
            return halt.into_step();
        }
        log_alerts(&outcome, cap);
        match action {
            Action::Respond | Action::PassThrough | Action::Replay => Ok(Step::Settled(outcome)),
            Action::Execute => {
                let claimed = bump(record.expect("an Execute decision writes the claim"));
                Ok(Step::Execute {
                    claim: Claim::of(claimed, actor),
                    cap: cap.clone(),
                    attempt: None,
                })
            }
            Action::Reconcile => {
                let current = bump(record.expect("a Reconcile decision writes the record"));
                let work = work.expect("a Reconcile decision holds its claim");
                let step = self
                    .reconcile_claimed(current, cap, actor, executor, arguments)
                    .await;
                work.release(self).await;
                step
            }
        }
    }

    /// What may have changed for an execution of `record` since its call began: the
    /// reservations its commit takes against the capability's limits, or why it stops.
    async fn recheck_execution(
        &self,
        record: &IntentRecord,
        approval: Option<&Approval>,
        cap: &Capability,
        attempt: u32,
    ) -> Result<Vec<Reservation>, Halt> {
        // The kill switches were read when the call began; a reconciliation wait since
        // may have lasted a lease. Nothing executes past a switch set meanwhile (on any
        // replica), and nothing executes when the switches cannot be read.
        match self.kill_switch_for(&cap.name, &record.principal).await {
            Ok(None) => {}
            Ok(Some(why)) => {
                return Err(Halt::refused(
                    record,
                    Reason::new(Code::KillSwitch, why),
                    attempt,
                ));
            }
            Err((e, _)) => return Err(Halt::Store(StoreError::Unavailable(e.to_string()))),
        }
        // A hold placed since the call began (a finding on another replica) stops the
        // execution too; and an execution reserves against the capability's limits in
        // its own commit.
        let normalised = record.normalised.as_object().cloned().unwrap_or_default();
        match self
            .held_for(&cap.name, record.business_ref.as_deref(), &normalised)
            .await
        {
            Ok(None) => {}
            Ok(Some(why)) => {
                return Err(Halt::refused(record, Reason::new(Code::Held, why), attempt));
            }
            Err(e) => return Err(Halt::Store(StoreError::Unavailable(e.to_string()))),
        }
        let approved = approval.is_some_and(|a| a.state == ApprovalState::Approved);
        self.reservations(cap, record, approved, self.clock.now())
            .map_err(|why| Halt::refused(record, Reason::new(Code::LimitReached, why), attempt))
    }

    /// Writes a decision. A limit its reservations reach refuses the call, unless the
    /// limit asks a human instead (then the error goes back, and the caller decides
    /// again as if policy had asked for approval).
    async fn commit_decision(
        &self,
        commit: Commit,
        record: Option<&IntentRecord>,
        cap: &Capability,
        attempt: u32,
    ) -> Result<(), Halt> {
        let Err(e) = self.store.commit(commit).await else {
            return Ok(());
        };
        if let (
            StoreError::LimitReached {
                scope,
                used,
                amount,
                ..
            },
            Some(r),
        ) = (&e, record)
            && limit_named(cap, scope)
                .is_none_or(|l| l.over == OverLimit::Refuse || r.approval_id.is_some())
        {
            let reason = Reason::new(
                Code::LimitReached,
                over_limit_reason(cap, scope, *used, *amount),
            );
            tracing::warn!(capability = %cap.name, limit = %scope, used, amount, "limit reached: call refused");
            metrics::counter!("oncegate_limit_refusals_total", "limit" => scope.clone())
                .increment(1);
            return Err(Halt::refused(r, reason, attempt));
        }
        Err(Halt::Store(e))
    }

    /// A reconciliation read for `current` (committed, under this gate's reconciliation
    /// claim), and what its answer leads to.
    async fn reconcile_claimed<E: Executor>(
        &self,
        current: IntentRecord,
        cap: &Arc<Capability>,
        actor: Who<'_>,
        executor: Arc<E>,
        arguments: Option<&Value>,
    ) -> Result<Step, StoreError> {
        let handle = IntentHandle::of(&current);
        // Sampled before the read (see `sweep_one`).
        let running = executor.attempt_running(&handle);
        // Judged at the moment the read was asked (see `sweep_one`).
        let asked_at = self.clock.earliest();
        let answer = executor.reconcile(handle).await;
        // An unproven read's "not found" proves nothing.
        let answer = match self.doubts_on(&cap.name).await {
            Ok(doubts) | Err(doubts) => doubts.weigh(answer),
        };
        // Apply the one answer; a lost race re-reads this generation and applies
        // it again (after_reconcile answers with the standing outcome once someone
        // else has resolved the intent) instead of re-deciding the whole call,
        // which would commit another reconcile and burn an attempt.
        let mut latest = current.clone();
        let mut step = None;
        for _ in 0..MAX_RACES {
            let approval_id = format!("ap_{}", random_hex(8));
            let holder = self.claim_holder(actor.name());
            let mut next = decide::after_reconcile(
                &latest,
                answer.clone(),
                cap,
                actor.name(),
                &holder,
                &approval_id,
                running,
                asked_at,
            );
            // A provider that dedupes on the key compares a repeated key's body
            // with the first one: it gets the first arguments again. So does a
            // generation a human was asked about: what executes is what was approved.
            if let (Action::Execute, Some(record), Some(args)) =
                (next.action, next.record.as_mut(), arguments)
                && !decide::dedupe_is_proof(cap)
                && !decide::arguments_frozen(record)
            {
                record.arguments = args.clone();
            }
            let disproved = latest.not_sent_reported
                && next
                    .record
                    .as_ref()
                    .is_some_and(|r| r.state == IntentState::Applied);
            let rejudge = Rejudge::default();
            match Box::pin(self.apply(next, rejudge, cap, actor, executor.clone(), arguments)).await
            {
                Err(StoreError::Conflict) => match self
                    .store
                    .load_generation(&current.key, current.generation)
                    .await?
                {
                    // A newer execution started since the read was asked: the
                    // answer speaks of the older attempt only, so it settles
                    // nothing; the caller hears where the intent stands now.
                    Some(fresh) if fresh.executions != current.executions => {
                        step = Some(Step::Settled(decide::standing_outcome(&fresh)));
                        break;
                    }
                    Some(fresh) => latest = self.across_gap(fresh),
                    None => return Err(StoreError::Conflict),
                },
                other => {
                    step = Some(other?);
                    if disproved {
                        not_sent_disproved(&latest, cap);
                    }
                    break;
                }
            }
        }
        // The caller hears the attempt count of the reconciliation (an execution
        // it led to included).
        Ok(match step.ok_or(StoreError::Conflict)? {
            Step::Settled(mut outcome) => {
                outcome.attempt = current.attempts;
                Step::Settled(outcome)
            }
            Step::Execute { claim, cap, .. } => Step::Execute {
                claim,
                cap,
                attempt: Some(current.attempts),
            },
            read @ Step::Read { .. } => read,
        })
    }
}

/// Why a decision stopped before its action: refused by what changed since its call
/// began, or the store failed.
enum Halt {
    Refused(Outcome),
    Store(StoreError),
}

impl Halt {
    /// `record` refused for `reason`, answered with the attempt count the caller hears.
    fn refused(record: &IntentRecord, reason: Reason, attempt: u32) -> Self {
        let mut refused = decide::outcome_of(record, intent::Status::Refused, Some(reason));
        refused.attempt = attempt;
        Self::Refused(refused)
    }

    fn into_step(self) -> Result<Step, StoreError> {
        match self {
            Self::Refused(outcome) => Ok(Step::Settled(outcome)),
            Self::Store(e) => Err(e),
        }
    }
}

/// Lets go of a reconciliation claim taken for a decision that stopped.
async fn release(work: Option<ReconcileClaim>, gate: &Gate) {
    if let Some(work) = work {
        work.release(gate).await;
    }
}
