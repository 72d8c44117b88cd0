//! `invoke`: claim, execute in a task of the gate's own, record. What a surface that
//! lets the gate make the call uses (the gateway's `/v1/calls`, MCP `tools/call`,
//! approvals, `oncegate verify`, a Rust runtime passing a closure).
//!
//! The effect runs in its own task: a caller that drops the `invoke` future never
//! aborts a side effect half-way, and the result is recorded regardless. The gate's
//! own executions are recorded leniently (complete.rs, `record`): fenced by the
//! execution number only, so a result or an MCP late answer that arrives after the
//! lease expired is still recorded (an effect that happened is the truth). The strict
//! lease rule is for [`Gate::complete`] from outside.

use std::future::Future;
use std::sync::Arc;

use oncegate_core::codes::Code;
use oncegate_core::config::Capability;
use oncegate_core::decide::{self, EffectResult};
use oncegate_core::intent::{Outcome, Reason, Status};
use tracing::Instrument;

use crate::call::{Call, IntentHandle};
use crate::claim::{Sender, Step};
use crate::error::GateError;
use crate::executor::{Executor, FnExecutor, LateAnswer};
use crate::fence::Claim;
use crate::gate::Gate;
use crate::who::Who;

impl Gate {
    /// Invokes a capability with an effect closure that receives the intent.
    pub async fn invoke<'a, F, Fut>(
        &self,
        principal: impl Into<Who<'a>>,
        call: Call,
        effect: F,
    ) -> Result<Outcome, GateError>
    where
        F: Fn(IntentHandle) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = EffectResult> + Send + 'static,
    {
        self.invoke_with(principal, call, Arc::new(FnExecutor(effect)))
            .await
    }

    /// Invokes a capability with an executor that can also reconcile: claims it
    /// ([`Gate::claim_with`]), executes what was claimed in its own task and records
    /// the result before answering. The recording is lenient, unlike
    /// [`Gate::complete`]'s: fenced by the execution number only, so a result (or an
    /// MCP late answer) that arrives after the lease expired is still recorded.
    pub async fn invoke_with<'a, E: Executor>(
        &self,
        principal: impl Into<Who<'a>>,
        call: Call,
        executor: Arc<E>,
    ) -> Result<Outcome, GateError> {
        let step = self
            .claim_step(principal.into(), &call, executor.clone(), Sender::Gate)
            .await?;
        Ok(self.carry_out(step, executor).await)
    }

    /// Carries out a committed step: executes a claim (and records it), passes a read
    /// through, or answers.
    pub(crate) async fn carry_out<E: Executor>(&self, step: Step, executor: Arc<E>) -> Outcome {
        match step {
            Step::Settled(outcome) => outcome,
            Step::Execute {
                claim,
                cap,
                attempt,
            } => {
                let mut outcome = self.execute(claim, cap, executor).await;
                if let Some(attempt) = attempt {
                    outcome.attempt = attempt;
                }
                outcome
            }
            Step::Read {
                mut outcome,
                intent,
            } => {
                match executor.execute(intent).await {
                    EffectResult::Applied { effect_ref, result } => {
                        outcome.effect_ref = effect_ref;
                        outcome.result = Some(result);
                    }
                    EffectResult::Failed { message, result } => {
                        outcome.status = Status::Failed;
                        outcome.result = Some(result);
                        outcome.reason = Some(Reason::new(Code::UpstreamRejected, message));
                    }
                    EffectResult::Unknown { message } | EffectResult::NotSent { message } => {
                        // A read changes nothing: the agent may simply read again.
                        outcome.status = Status::Failed;
                        outcome.reason = Some(Reason::new(
                            Code::UpstreamRejected,
                            format!("the read did not complete: {message}"),
                        ));
                    }
                }
                outcome
            }
        }
    }

    /// Runs the effect in its own task and records its result there, so nothing the
    /// caller does (dropping this future included) can lose it.
    async fn execute<E: Executor>(
        &self,
        claim: Claim,
        cap: Arc<Capability>,
        executor: Arc<E>,
    ) -> Outcome {
        let gate = self.clone();
        let actor = claim.principal;
        let claimed = claim.record;
        let held = claimed.clone();
        let spawner = self.process.clone();
        let effect = async move {
            let attempt = executor.execute_attempt(IntentHandle::of(&held)).await;
            let outcome = gate.record(&held, attempt.result, &cap, &actor).await;
            if let Some(LateAnswer { answer, hold }) = attempt.late {
                // The call outlived its answer: its real end is recorded the same way
                // (a late `applied` settles the intent with its effect reference; a
                // late `unknown` moves the attempt's end, and the settle horizon, later).
                let late = async move {
                    let result = answer.await;
                    tracing::info!(key = %held.key, result = ?result, "an attempt's late answer arrived; recording it");
                    gate.record(&held, result, &cap, &actor).await;
                    drop(hold);
                }
                .in_current_span();
                match &spawner {
                    Some(process) => drop(process.spawn(late)),
                    None => drop(tokio::spawn(late)),
                }
            }
            outcome
        }
        // The caller's span (the gateway's decision) goes with the effect: the upstream
        // call and the commits that record it are its children in a trace.
        .in_current_span();
        let task = match &self.process {
            Some(process) => process.spawn(effect),
            None => tokio::spawn(effect),
        };
        match task.await {
            Ok(outcome) => outcome,
            Err(e) => {
                // Panicked, or aborted with its process (a simulated crash).
                tracing::error!(key = %claimed.key, error = %e, "effect task ended without recording; the intent reads unknown once its lease expires");
                decide::outcome_of(
                    &claimed,
                    Status::Unknown,
                    Some(Reason::new(
                        Code::UpstreamUnknown,
                        "the effect task failed; the outcome is unknown; do not re-issue",
                    )),
                )
            }
        }
    }
}
