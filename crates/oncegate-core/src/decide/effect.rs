//! An execution's answer is recorded (applied, failed, unknown or never sent), fenced by
//! the execution number the claim carried: a superseded execution's failure or timeout
//! changes nothing, while an effect that did happen is recorded whatever came meanwhile.

use jiff::Timestamp;
use serde_json::json;

use super::event::Event;
use super::model::{Action, Decision, EffectResult};
use super::steps::{
    escalate_unknown, escalates_at_once, outcome_of, settle_applied, standing_outcome,
};
use crate::audit::AuditKind;
use crate::codes::Code;
use crate::config::{Capability, UpstreamKind};
use crate::intent::{IntentRecord, IntentState, Reason, Status};

/// Records what the upstream said. `record` is the intent as currently stored.
pub fn record_effect(
    record: &IntentRecord,
    result: EffectResult,
    cap: &Capability,
    actor: &str,
    now: Timestamp,
) -> Decision {
    record_claim_effect(record, record.executions, result, cap, actor, now)
}

/// Records what the upstream said about execution number `execution` of this intent
/// (the claim's `executions` when it was made).
pub fn record_claim_effect(
    record: &IntentRecord,
    execution: u32,
    result: EffectResult,
    cap: &Capability,
    actor: &str,
    now: Timestamp,
) -> Decision {
    record_reported(record, execution, result, cap, actor, now, Reporter::Gate)
}

/// Who says what an execution did.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Reporter {
    /// The gate's own executor, whose `not_sent` means a connection that was refused
    /// before any byte of the request left.
    Gate,
    /// A worker through the two-phase API, whose `not_sent` is its word only.
    Worker,
}

/// [`record_claim_effect`], with the reporter's `not_sent` checked when it is a worker's.
pub(super) fn record_reported(
    record: &IntentRecord,
    execution: u32,
    result: EffectResult,
    cap: &Capability,
    actor: &str,
    now: Timestamp,
    reporter: Reporter,
) -> Decision {
    let mut next = record.clone();
    next.lease = None;
    next.updated_at = now;
    let mut status = settle_reported(&mut next, &result, cap, reporter, now);
    // An effect that did happen is the truth whatever happened meanwhile. Anything else
    // may only settle the claim it belongs to: `executions` is the fencing token, so a
    // late timeout from an attempt whose lease expired cannot overwrite a newer claim.
    let current_claim = execution == record.executions
        && matches!(record.state, IntentState::InFlight | IntentState::Unknown);
    let overwrite = current_claim
        || matches!(result, EffectResult::Applied { .. }) && record.state != IntentState::Applied;
    let event = Event::about(AuditKind::Effect, record, cap, actor, now);
    if !overwrite {
        let outcome = standing_outcome(record);
        let detail = json!({"late_result": format!("{result:?}")});
        return event.nothing_written(Action::Respond, outcome, detail);
    }
    // An MCP tool call that timed out may still be running (a timeout stops the waiting,
    // never the call): approving would execute beside it, so the sweep escalates it once
    // that call has ended.
    let may_run_on = cap
        .upstream
        .as_ref()
        .is_some_and(|u| u.kind == UpstreamKind::Mcp);
    let escalate = next.state == IntentState::Unknown && escalates_at_once(cap) && !may_run_on;
    let approval = escalate.then(|| {
        status = Status::PendingApproval;
        escalate_unknown(&mut next, cap, now)
    });
    let outcome = outcome_of(&next, status, None);
    let detail = match &approval {
        None => json!({"effect_ref": next.effect_ref}),
        Some(a) => json!({"effect_ref": next.effect_ref, "escalated": a.id}),
    };
    event.writing(Action::Respond, next, approval, outcome, detail)
}

/// [`settle_result`], except that a worker's `not_sent` on a capability with a
/// reconciliation read is not taken at its word: the intent is `unknown` until a read
/// checks it (a worker that mislabels a timeout as not sent, or an SDK that wraps a
/// read timeout in a connect error, would otherwise make a second effect). Found: the
/// effect is recorded and the report is evidence; not found: the next claim executes
/// at once (see [`super::absence_unproven`]).
pub(super) fn settle_reported(
    next: &mut IntentRecord,
    result: &EffectResult,
    cap: &Capability,
    reporter: Reporter,
    now: Timestamp,
) -> Status {
    let status = settle_result(next, result, now);
    match result {
        EffectResult::NotSent { message }
            if reporter == Reporter::Worker
                && cap.reconcile.is_some()
                && next.state == IntentState::NotApplied =>
        {
            next.state = IntentState::Unknown;
            next.not_sent_reported = true;
            next.error = Some(Reason::new(
                Code::UpstreamUnknown,
                format!(
                    "{message}; the worker reports that nothing was sent, and oncegate reads the upstream before anything executes again: do not re-issue"
                ),
            ));
            Status::Unknown
        }
        _ => status,
    }
}

/// Writes what one execution said into `next` (state, reference, answer, error) and
/// returns the status its caller hears. Shared by the gate's own recording
/// ([`record_claim_effect`]) and an outside completion ([`complete_claim`]), so both
/// store the same thing for the same answer.
pub(super) fn settle_result(
    next: &mut IntentRecord,
    result: &EffectResult,
    now: Timestamp,
) -> Status {
    match result {
        EffectResult::Applied { effect_ref, result } => {
            settle_applied(next, effect_ref.clone(), result.clone(), now);
            Status::Applied
        }
        EffectResult::Failed { result, message } => {
            next.state = IntentState::Failed;
            next.settled_at = Some(now);
            next.result = Some(result.clone());
            next.error = Some(Reason::new(Code::UpstreamRejected, message.clone()));
            Status::Failed
        }
        EffectResult::Unknown { message } => {
            next.state = IntentState::Unknown;
            // The settle horizon runs from here: the upstream may still carry out the
            // request it got (a late answer of the same attempt moves it later).
            next.attempt_ended_at = Some(now);
            next.error = Some(Reason::new(
                Code::UpstreamUnknown,
                format!(
                    "{message}; the effect may have happened: do not re-issue, oncegate reconciles"
                ),
            ));
            Status::Unknown
        }
        // This attempt sent nothing, but an earlier one's outcome is still unknown (its
        // end is kept, see `claim`): the intent stays unknown, keeps its budget, and is
        // reconciled; the settle horizon still runs from the earlier attempt's end.
        EffectResult::NotSent { message } if next.attempt_ended_at.is_some() => {
            next.state = IntentState::Unknown;
            next.error = Some(Reason::new(
                Code::UpstreamUnknown,
                format!(
                    "{message}; nothing was sent this time, but an earlier attempt's outcome is unknown: do not re-issue, oncegate reconciles"
                ),
            ));
            Status::Unknown
        }
        EffectResult::NotSent { message } => {
            next.state = IntentState::NotApplied;
            next.error = Some(Reason::new(
                Code::UpstreamRejected,
                format!("{message}; nothing was sent, a repeat executes it with the same key"),
            ));
            Status::Failed
        }
    }
}
