//! What runs effects and reconciliation reads for a gate: the `Executor` trait, the
//! `Attempt` an execution reports (with its `LateAnswer` when the call outlives its
//! answer), and the two executors the gate builds itself (a closure, and claim-only).

use std::future::Future;

use oncegate_core::decide::{EffectResult, ReconcileResult};

use crate::call::IntentHandle;

/// What one execution said, and, when its call outlived the answer it gave (an MCP
/// `tools/call` left running past its timeout), the call's real end still to come.
pub struct Attempt {
    /// What the gate records now (`unknown` for a call left running).
    pub result: EffectResult,
    /// The late answer, recorded through the same path when it arrives.
    pub late: Option<LateAnswer>,
}

impl Attempt {
    /// An attempt that ended with its answer.
    pub fn ended(result: EffectResult) -> Self {
        Self { result, late: None }
    }
}

/// The late end of a call that is still running.
pub struct LateAnswer {
    /// Resolves with what the call finally said (or `unknown` if it was given up).
    pub answer: std::pin::Pin<Box<dyn Future<Output = EffectResult> + Send>>,
    /// Kept alive until the late answer is recorded (e.g. a shutdown guard, so the
    /// process waits for the record, not only for the answer).
    pub hold: Option<Box<dyn std::any::Any + Send>>,
}

/// Runs effects and reconciliation reads for a gate.
pub trait Executor: Send + Sync + 'static {
    /// Executes the effect, threading `intent.key` upstream.
    fn execute(&self, intent: IntentHandle) -> impl Future<Output = EffectResult> + Send;
    /// Executes the effect like [`Executor::execute`], and hands over the late end of a
    /// call that keeps running after its answer (the gate records it when it comes).
    /// The default: every call ends with its answer.
    fn execute_attempt(&self, intent: IntentHandle) -> impl Future<Output = Attempt> + Send {
        let run = self.execute(intent);
        async move { Attempt::ended(run.await) }
    }
    /// Whether oncegate's own call for this intent's attempt (by `intent.key`) is still
    /// running in this process. While it is, the attempt may still take effect, so a
    /// reconciliation read's "not found" proves nothing (see
    /// `oncegate_core::decide::absence_unproven`). The default: calls end with their
    /// answer, so none is ever left running.
    fn attempt_running(&self, intent: &IntentHandle) -> bool {
        let _ = intent;
        false
    }
    /// Whether this executor executes the capability's effects at all. `false`: the
    /// capability is claim-only here (its callers execute it through the two-phase API),
    /// so approving a held call leaves it for the caller's next claim instead of
    /// executing it (`oncegate_core::decide::Executes::OnNextClaim`). The default: it
    /// does.
    fn executes(&self) -> bool {
        true
    }
    /// Whether the call may proceed at all, checked after the key is derived and before
    /// anything is decided or claimed (`Err`: why not, answered as invalid arguments).
    /// The gateway renders the upstream URLs here and refuses `.`/`..` path segments.
    fn admit(&self, intent: &IntentHandle) -> Result<(), String> {
        let _ = intent;
        Ok(())
    }
    /// Asks the upstream whether the intent already took effect.
    fn reconcile(&self, intent: IntentHandle) -> impl Future<Output = ReconcileResult> + Send {
        let _ = intent;
        async {
            ReconcileResult::Undecidable {
                message: "no reconciliation read is available in this process".into(),
            }
        }
    }
}

/// An effect closure as an executor (`Gate::invoke`).
pub(crate) struct FnExecutor<F>(pub(crate) F);

impl<F, Fut> Executor for FnExecutor<F>
where
    F: Fn(IntentHandle) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = EffectResult> + Send + 'static,
{
    fn execute(&self, intent: IntentHandle) -> impl Future<Output = EffectResult> + Send {
        (self.0)(intent)
    }
}

/// The executor of `Gate::claim`: it admits every call and has no reconciliation read
/// (an unknown intent is escalated to a human, as `invoke` with a closure does). The
/// gate never executes through it: a claim hands the execution to its caller, and a
/// read capability is answered `Claimed::Read` for the caller to perform.
pub(crate) struct ClaimOnly;

impl Executor for ClaimOnly {
    fn executes(&self) -> bool {
        false
    }

    async fn execute(&self, intent: IntentHandle) -> EffectResult {
        EffectResult::NotSent {
            message: format!(
                "{} is claimed for its caller to execute; this process executes nothing",
                intent.key
            ),
        }
    }
}
