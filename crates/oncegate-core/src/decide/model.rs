//! What goes into a decision and what comes out: the call as the shell loaded it, what
//! the upstream or a reconciliation read said, an approver's choice, and the decision
//! (what to write, what to do next). Types only, below every transition.

use jiff::Timestamp;
use serde_json::Value;

use crate::audit::AuditEvent;
use crate::intent::{Approval, IntentRecord, Outcome, Reason};
use crate::key::DerivedKey;

/// One call, with everything the shell loaded for it.
#[derive(Clone, Debug)]
pub struct CallRequest<'a> {
    /// The authenticated principal.
    pub principal: &'a str,
    /// The tenant.
    pub tenant: &'a str,
    /// The derived key.
    pub derived: &'a DerivedKey,
    /// The call's arguments as sent.
    pub arguments: &'a Value,
    /// The orchestrator's run id.
    pub run_id: Option<&'a str>,
    /// The orchestrator's step id.
    pub step_id: Option<&'a str>,
    /// Who will hold the lease if this call claims.
    pub owner: &'a str,
    /// The approval referenced by the existing record, if any.
    pub approval: Option<&'a Approval>,
    /// A live intent with the same cross-run key from another run, if any.
    pub other_run: Option<&'a IntentRecord>,
    /// Set when an admin switched off the capability or the agent.
    pub kill_switch: Option<&'a str>,
    /// Set when a detection finding's hold covers this call (its business reference,
    /// recipient or capability): refused like a kill switch, with `OG-0026`.
    pub held: Option<&'a str>,
    /// The id to use if this call creates an approval (ids are random; decide is not).
    pub new_approval_id: &'a str,
    /// When a rollback of the store to an earlier state was accepted (`serve
    /// --accept-rollback`), if ever. Until a capability's replay window has passed
    /// since then, an intent the store does not know, or knows as `not_applied` from
    /// before then, may have run before the rollback: it is treated as `unknown` (read
    /// from the provider, retried with its key, or held for approval, as the
    /// capability's `on_unknown` says), never executed at once.
    pub rolled_back_at: Option<Timestamp>,
    /// The caller executes the effect itself (a two-phase claim), with the arguments it
    /// holds: a claim that would execute (or reconcile towards executing) a generation
    /// a human was asked about is refused (`OG-0012`) when its arguments differ from
    /// the ones the approval was asked on. When the gate executes, it sends those
    /// recorded arguments whatever the repeat carries.
    pub caller_sends: bool,
}

/// What the shell must do after committing the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Answer with the outcome.
    Respond,
    /// Answer from the stored record (a replay, a poll of an in-flight or held intent):
    /// nothing to write, not even the audit event, so a storm of repeats costs no
    /// durable write and never counts against the attempt ceiling.
    Replay,
    /// Run the effect with the record's upstream key, then call `record_effect`.
    Execute,
    /// Run the reconciliation read, then call `after_reconcile`.
    Reconcile,
    /// A read: call the upstream, claim nothing.
    PassThrough,
}

/// A decision: what to write (atomically, with the audit event) and what to do next.
#[derive(Clone, Debug)]
pub struct Decision {
    /// The next step.
    pub action: Action,
    /// The record to compare-and-set (`None`: no intent state changes).
    pub record: Option<IntentRecord>,
    /// An approval to insert or update.
    pub approval: Option<Approval>,
    /// The answer (provisional `in_flight`/`unknown` for Execute and Reconcile).
    pub outcome: Outcome,
    /// The audit event, appended in the same transaction.
    pub event: AuditEvent,
}

/// What the upstream said about one execution.
#[derive(Clone, Debug, PartialEq)]
pub enum EffectResult {
    /// 2xx: it happened.
    Applied {
        /// The effect reference.
        effect_ref: Option<String>,
        /// The upstream's answer.
        result: Value,
    },
    /// 4xx: definite no, nothing happened.
    Failed {
        /// The upstream's answer.
        result: Value,
        /// Why.
        message: String,
    },
    /// Timeout, reset after send, 5xx: it may have happened.
    Unknown {
        /// Why.
        message: String,
    },
    /// Proof that nothing left (connection refused, DNS, TLS), or 429.
    NotSent {
        /// Why.
        message: String,
    },
}

/// What a reconciliation read said.
#[derive(Clone, Debug, PartialEq)]
pub enum ReconcileResult {
    /// The upstream has the effect.
    Found {
        /// Its reference.
        effect_ref: Option<String>,
        /// The upstream's record of it.
        result: Value,
    },
    /// The upstream confirms there is no such effect.
    NotFound,
    /// No answer either way (no reconciler, read failed).
    Undecidable {
        /// Why.
        message: String,
    },
}

/// An approver's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Execute the held intent.
    Approve,
    /// Do not.
    Deny,
}

/// The result of a human's decision on an approval.
#[derive(Clone, Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "built once per human click; boxing buys nothing"
)]
pub enum ApprovalDecision {
    /// Write these and act.
    Decided {
        /// Execute (approved) or Respond.
        action: Action,
        /// The updated intent.
        record: Option<IntentRecord>,
        /// The updated approval.
        approval: Option<Approval>,
        /// The answer to the approver.
        outcome: Outcome,
        /// The audit event.
        event: AuditEvent,
    },
    /// The request is refused without any write (wrong role, self-approval, conflict).
    Rejected(Reason),
}
