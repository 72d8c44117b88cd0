//! A reconciliation read's answer ("did this intent already take effect?") applied to an
//! unknown intent: for a repeat that waits on it, and for the background sweep that
//! executes nothing. Absence counts only once the settle horizon has passed.

use jiff::Timestamp;
use serde_json::json;

use super::event::Event;
use super::model::{Action, Decision, ReconcileResult};
use super::steps::{
    attempt_approval_id, claim, escalate_unknown, escalates_at_once, new_approval, outcome_of,
    settle_applied, standing_outcome,
};
use crate::audit::AuditKind;
use crate::codes::Code;
use crate::config::{Capability, Category};
use crate::intent::{ApprovalReason, IntentRecord, IntentState, Reason, Status};

/// Why a reconciliation read's "not found" does not yet prove that the attempt never
/// took effect, or `None` once it does.
///
/// The upstream may still carry out a request after its caller stopped waiting (a slow
/// provider commits after the timeout, and after the first reconciliation read): absence
/// is concluded only once the capability's settle horizon has passed since the
/// attempt's own request ended, and never while `attempt_running` (oncegate's own call
/// for the attempt, e.g. an MCP `tools/call`, has not returned yet).
pub fn absence_unproven(
    record: &IntentRecord,
    cap: &Capability,
    attempt_running: bool,
    now: Timestamp,
) -> Option<String> {
    if attempt_running {
        return Some(
            "the upstream has no record of the effect yet, but oncegate's call for the attempt is still running and may still take effect".into(),
        );
    }
    if record.not_sent_reported {
        // Nothing is said to have been sent, so no request can still land: the read
        // checks the worker's word, and "not found" is absence at once.
        return None;
    }
    let until = attempt_end(record, now) + cap.settle_horizon;
    (now < until).then(|| {
        format!(
            "the upstream has no record of the effect yet, but the attempt may still land until {until} (settle horizon {:#})",
            cap.settle_horizon
        )
    })
}

/// When the attempt's own request ended: a live-or-expired lease ends at its expiry;
/// an `unknown` attempt when its execution came back. Records from before
/// `attempt_ended_at` existed count from their last write, which is never earlier.
fn attempt_end(record: &IntentRecord, now: Timestamp) -> Timestamp {
    match (&record.lease, record.state) {
        (Some(lease), IntentState::InFlight) => lease.expires_at.min(now),
        _ => record.attempt_ended_at.unwrap_or(record.updated_at),
    }
}

/// A category whose upstream deduplicates on the key (`keyed`), or whose effect is the
/// same however often it runs (`idempotent_write`): a re-execution with the same key is
/// safe even while the first attempt may still land, so "not found" need not wait.
pub fn dedupe_is_proof(cap: &Capability) -> bool {
    matches!(cap.category, Category::Keyed | Category::IdempotentWrite)
}

/// Applies a reconciliation read to an unknown intent. `attempt_running` says whether
/// oncegate's own call for the attempt is still running (see [`absence_unproven`]).
#[expect(
    clippy::too_many_arguments,
    reason = "a pure function takes every input explicitly"
)]
pub fn after_reconcile(
    record: &IntentRecord,
    result: ReconcileResult,
    cap: &Capability,
    actor: &str,
    owner: &str,
    new_approval_id: &str,
    attempt_running: bool,
    now: Timestamp,
) -> Decision {
    let event = Event::about(AuditKind::Reconcile, record, cap, actor, now);
    let mut next = record.clone();
    next.updated_at = now;
    if record.state != IntentState::Unknown {
        // Someone else resolved it meanwhile.
        let outcome = standing_outcome(record);
        return event.nothing_written(Action::Respond, outcome, json!({"stale": true}));
    }
    let (action, approval, outcome, detail) = match result {
        ReconcileResult::Found { effect_ref, result } => {
            settle_applied(&mut next, effect_ref, result, now);
            let outcome = outcome_of(&next, Status::Replayed, None);
            (
                Action::Respond,
                None,
                outcome,
                json!({"reconciled": "found", "effect_ref": next.effect_ref, "not_sent_disproved": record.not_sent_reported}),
            )
        }
        ReconcileResult::NotFound => {
            let unproven = (!dedupe_is_proof(cap))
                .then(|| absence_unproven(record, cap, attempt_running, now))
                .flatten();
            if let Some(why) = unproven {
                // Undecidable for now: the intent stays unknown (no escalation, no
                // re-execution) and the sweep or the next repeat reads again.
                let outcome = outcome_of(
                    record,
                    Status::Unknown,
                    Some(Reason::new(
                        Code::Settling,
                        format!(
                            "{why}; the outcome is unknown and oncegate is reconciling: do not call again"
                        ),
                    )),
                );
                let detail = json!({"reconciled": "not_found_yet", "why": why});
                return event.nothing_written(Action::Respond, outcome, detail);
            }
            if !dedupe_is_proof(cap) {
                // Past the horizon "not found" proves the earlier attempt absent.
                next.attempt_ended_at = None;
            }
            claim(&mut next, owner, cap, now);
            let outcome = standing_outcome(&next);
            (
                Action::Execute,
                None,
                outcome,
                json!({"reconciled": "not_found"}),
            )
        }
        // While oncegate's own call for the attempt still runs, nobody can know yet, an
        // approver included (approving would execute beside it): stay unknown until the
        // call has ended, then escalate.
        ReconcileResult::Undecidable { message } if attempt_running && !dedupe_is_proof(cap) => {
            let outcome = outcome_of(
                record,
                Status::Unknown,
                Some(Reason::new(
                    Code::Settling,
                    format!(
                        "{message}; oncegate's call for the attempt is still running; the outcome is unknown and oncegate is reconciling: do not call again"
                    ),
                )),
            );
            let detail = json!({"reconciled": "undecidable_while_running", "why": message});
            return event.nothing_written(Action::Respond, outcome, detail);
        }
        ReconcileResult::Undecidable { message } => {
            let ap = new_approval(
                new_approval_id,
                &next,
                cap,
                ApprovalReason::UnknownFirstAttempt,
                format!(
                    "{} ({message})",
                    ApprovalReason::UnknownFirstAttempt.explain()
                ),
                now,
            );
            next.state = IntentState::PendingApproval;
            next.approval_id = Some(ap.id.clone());
            let outcome = outcome_of(&next, Status::PendingApproval, None);
            (
                Action::Respond,
                Some(ap),
                outcome,
                json!({"reconciled": "undecidable", "why": message}),
            )
        }
    };
    event.writing(action, next, approval, outcome, detail)
}

/// The background sweep's use of a reconciliation read on an intent nobody is waiting
/// for: record what the upstream says, but execute nothing (a confirmed-absent intent
/// becomes `not_applied`, and the agent's next repeat executes it with the same key).
/// `None` when there is nothing to write (undecidable, or no longer unknown).
///
/// A "not found" before the settle horizon (or while `attempt_running`) is not absence,
/// for every category: the sweep never executes, so waiting costs nothing, and the
/// provider's record of a late commit then settles the intent `applied`.
pub fn after_sweep(
    record: &IntentRecord,
    result: ReconcileResult,
    cap: &Capability,
    attempt_running: bool,
    now: Timestamp,
) -> Option<Decision> {
    let lease_expired = record.state == IntentState::InFlight
        && record.lease.as_ref().is_some_and(|l| now >= l.expires_at);
    if record.state != IntentState::Unknown && !lease_expired {
        return None;
    }
    let mut next = record.clone();
    next.lease = None;
    next.updated_at = now;
    if lease_expired {
        next.attempt_ended_at = record.lease.as_ref().map(|l| l.expires_at);
    }
    let result = match result {
        ReconcileResult::NotFound
            if absence_unproven(record, cap, attempt_running, now).is_some() =>
        {
            ReconcileResult::Undecidable {
                message: "not found yet, within the settle horizon".into(),
            }
        }
        other => other,
    };
    let (status, detail) = match result {
        ReconcileResult::Found { effect_ref, result } => {
            settle_applied(&mut next, effect_ref, result, now);
            (
                Status::Replayed,
                json!({"sweep": "found", "effect_ref": next.effect_ref, "not_sent_disproved": record.not_sent_reported}),
            )
        }
        ReconcileResult::NotFound => {
            next.state = IntentState::NotApplied;
            // Proven absent: no earlier attempt is pending any more.
            next.attempt_ended_at = None;
            next.not_sent_reported = false;
            next.error = Some(Reason::new(
                Code::UpstreamRejected,
                "reconciled: the upstream has no such effect; a repeat executes it with the same key",
            ));
            (Status::Failed, json!({"sweep": "not_found"}))
        }
        // An expired lease is still news: the attempt is unknown from now on.
        ReconcileResult::Undecidable { message } if lease_expired => {
            next.state = IntentState::Unknown;
            next.error = Some(Reason::new(
                Code::UpstreamUnknown,
                "the attempt's lease expired before its outcome was recorded",
            ));
            (
                Status::Unknown,
                json!({"sweep": "lease_expired", "why": message}),
            )
        }
        // Nothing will ever read it: once its attempt can no longer land (no call of it
        // runs here, and the settle horizon has passed: another replica's call, or a
        // stalled worker, may still be at work until then), a human decides. Once per
        // attempt: a denied or expired escalation stays unknown until a repeat.
        ReconcileResult::Undecidable { message }
            if escalates_at_once(cap)
                && absence_unproven(&next, cap, attempt_running, now).is_none()
                && !escalated(record) =>
        {
            (
                Status::Unknown,
                json!({"sweep": "undecidable", "why": message}),
            )
        }
        ReconcileResult::Undecidable { .. } => return None,
    };
    let approval = (next.state == IntentState::Unknown
        && escalates_at_once(cap)
        && absence_unproven(&next, cap, attempt_running, now).is_none()
        && !escalated(record))
    .then(|| escalate_unknown(&mut next, cap, now));
    let (mut status, mut detail) = (status, detail);
    if let Some(a) = &approval {
        status = Status::PendingApproval;
        detail["escalated"] = json!(a.id);
    }
    let outcome = outcome_of(&next, status, None);
    let event = Event::about(AuditKind::Reconcile, record, cap, "oncegate-sweep", now);
    Some(event.writing(Action::Respond, next, approval, outcome, detail))
}

/// Whether this attempt was already put to a human at once (and that was denied or
/// expired: the intent is back to `unknown`).
fn escalated(record: &IntentRecord) -> bool {
    record.approval_id.as_deref() == Some(attempt_approval_id(record).as_str())
}
