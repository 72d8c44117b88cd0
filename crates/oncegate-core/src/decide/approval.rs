//! Human decisions: approving or denying a held intent, and an admin resetting a tripped
//! breaker.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::event::Event;
use super::model::{Action, ApprovalDecision, Choice, Decision};
use super::steps::{approval_covers, claim, outcome_of, settle_refusal, standing_outcome};
use crate::audit::AuditKind;
use crate::codes::Code;
use crate::config::{Capability, Role};
use crate::intent::{Approval, ApprovalState, IntentRecord, IntentState, Outcome, Reason, Status};

/// Who executes an approved call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Executes<'a> {
    /// The gate that decides the approval, right away, under a lease owned by `owner`.
    Here {
        /// The lease owner of the execution.
        owner: &'a str,
    },
    /// Nobody here: the capability is claim-only, so approving leaves the intent held
    /// and the caller's next claim of it executes it (see `decide`).
    OnNextClaim,
}

/// Decides a human's approve or deny.
#[expect(
    clippy::too_many_arguments,
    reason = "a pure function takes every input explicitly"
)]
pub fn decide_approval(
    record: &IntentRecord,
    approval: &Approval,
    actor: &str,
    role: Role,
    choice: Choice,
    cap: &Capability,
    executes: Executes<'_>,
    now: Timestamp,
) -> ApprovalDecision {
    decide_approval_noted(
        record, approval, actor, role, choice, None, cap, executes, now,
    )
}

/// The longest note a human may give with a decision (characters); longer is cut.
pub const MAX_NOTE_CHARS: usize = 500;

/// A human's note as it is kept: control characters become spaces, surrounding space is
/// trimmed, at most [`MAX_NOTE_CHARS`]; `None` when nothing is left.
pub fn clean_note(note: &str) -> Option<String> {
    let cleaned: String = note
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .chars()
        .take(MAX_NOTE_CHARS)
        .collect();
    (!cleaned.is_empty()).then_some(cleaned)
}

/// Decides a human's approve or deny with the human's note (why), kept in the audit
/// record; a deny's note is also what the agent's next call is told.
#[expect(
    clippy::too_many_arguments,
    reason = "a pure function takes every input explicitly"
)]
pub fn decide_approval_noted(
    record: &IntentRecord,
    approval: &Approval,
    actor: &str,
    role: Role,
    choice: Choice,
    note: Option<&str>,
    cap: &Capability,
    executes: Executes<'_>,
    now: Timestamp,
) -> ApprovalDecision {
    let note = note.and_then(clean_note);
    if let Some(reason) = not_theirs_to_decide(approval, actor, role) {
        return ApprovalDecision::Rejected(reason);
    }
    let event = Event::about(AuditKind::Approval, record, cap, actor, now);
    // Every decision's audit record keeps the human's note.
    let decided = |action,
                   rec: Option<IntentRecord>,
                   ap: Option<Approval>,
                   outcome: Outcome,
                   mut detail: Value| {
        if let (Some(n), Some(map)) = (&note, detail.as_object_mut()) {
            map.insert("note".into(), Value::String(n.clone()));
        }
        let event = event.audit(rec.as_ref(), &outcome, detail);
        ApprovalDecision::Decided {
            action,
            record: rec,
            approval: ap,
            outcome,
            event,
        }
    };
    // Single use and idempotent: a second decision (the same click twice, or a deny that
    // arrives after an approve, from a second approver) answers with the first one's
    // outcome and changes nothing.
    if let Some(first) = first_decision(record, approval, choice) {
        return match first {
            Ok(outcome) => decided(
                Action::Respond,
                None,
                None,
                outcome,
                json!({"approval_id": approval.id, "repeat": true, "first_decision": approval.state.as_str(), "decided_by": approval.decided_by}),
            ),
            Err(reason) => ApprovalDecision::Rejected(reason),
        };
    }
    if let Some((state, reason)) = no_longer_valid(record, approval, cap, now) {
        let detail = json!({"approval_id": approval.id, "void": reason.message});
        let (rec, ap, outcome) = void(record, approval, state, reason, now);
        return decided(Action::Respond, rec, Some(ap), outcome, detail);
    }
    let mut ap = approval.clone();
    let mut next = record.clone();
    next.updated_at = now;
    ap.decided_by = Some(actor.to_owned());
    ap.decided_at = Some(now);
    let (action, outcome, detail) = match (choice, executes) {
        (Choice::Approve, Executes::Here { owner }) => {
            ap.state = ApprovalState::Approved;
            claim(&mut next, owner, cap, now);
            let detail = json!({"approval_id": approval.id, "choice": "approve"});
            (Action::Execute, standing_outcome(&next), detail)
        }
        (Choice::Approve, Executes::OnNextClaim) => {
            ap.state = ApprovalState::Approved;
            let mut outcome = standing_outcome(&next);
            outcome.status = Status::Approved;
            let detail = json!({"approval_id": approval.id, "choice": "approve", "executes": "on_next_claim"});
            (Action::Respond, outcome, detail)
        }
        (Choice::Deny, _) => {
            ap.state = ApprovalState::Denied;
            settle_refusal(&mut next, approval.reason, now);
            next.error = Some(denied_by(actor, note.as_deref()));
            let detail = json!({"approval_id": approval.id, "choice": "deny"});
            (
                Action::Respond,
                outcome_of(&next, Status::Denied, None),
                detail,
            )
        }
    };
    decided(action, Some(next), Some(ap), outcome, detail)
}

/// What the agent's next call is told of a human's deny.
fn denied_by(actor: &str, note: Option<&str>) -> Reason {
    Reason::new(
        Code::ApprovalDenied,
        match note {
            Some(n) => format!("denied by {actor}: {n}"),
            None => format!("denied by {actor}"),
        },
    )
}

/// Why `actor` may not decide `approval` at all, whatever its state: agents decide no
/// approvals, and nobody approves their own call.
fn not_theirs_to_decide(approval: &Approval, actor: &str, role: Role) -> Option<Reason> {
    if role == Role::Agent {
        return Some(Reason::new(
            Code::Forbidden,
            "agents cannot decide approvals",
        ));
    }
    if actor == approval.principal {
        return Some(Reason::new(
            Code::Forbidden,
            "nobody may approve their own call",
        ));
    }
    None
}

/// A decision on an approval that is no longer pending (`None` while it is): `Ok` with
/// the first decision's outcome when this one agrees with it (an approve after an
/// approve, a deny after any decision), `Err` with why it cannot be taken otherwise.
fn first_decision(
    record: &IntentRecord,
    approval: &Approval,
    choice: Choice,
) -> Option<Result<Outcome, Reason>> {
    Some(match (approval.state, choice) {
        (ApprovalState::Approved, _) | (ApprovalState::Denied, Choice::Deny) => {
            let mut outcome = standing_outcome(record);
            if approval.state == ApprovalState::Approved
                && record.state == IntentState::PendingApproval
            {
                // Approved for the caller's next claim, which has not come yet.
                outcome.status = Status::Approved;
            }
            Ok(outcome)
        }
        (ApprovalState::Denied, Choice::Approve) => Err(Reason::new(
            Code::ApprovalDenied,
            format!(
                "approval {} was already denied by {}",
                approval.id,
                approval.decided_by.as_deref().unwrap_or("someone")
            ),
        )),
        (ApprovalState::Expired, _) => Err(Reason::new(
            Code::ApprovalExpired,
            format!("approval {} expired", approval.id),
        )),
        (ApprovalState::Void, _) => Err(Reason::new(
            Code::ApprovalVoid,
            format!("approval {} is void", approval.id),
        )),
        (ApprovalState::Pending, _) => return None,
    })
}

/// Ends an approval that can no longer be decided in `state`: the held intent (when it
/// is still held by this approval) is refused as the approval's reason says, and the
/// caller hears `reason`.
fn void(
    record: &IntentRecord,
    approval: &Approval,
    state: ApprovalState,
    reason: Reason,
    now: Timestamp,
) -> (Option<IntentRecord>, Approval, Outcome) {
    let mut ap = approval.clone();
    ap.state = state;
    let rec = (record.state == IntentState::PendingApproval
        && record.approval_id.as_deref() == Some(&approval.id))
    .then(|| {
        let mut next = record.clone();
        next.updated_at = now;
        settle_refusal(&mut next, approval.reason, now);
        next.error = Some(reason.clone());
        next
    });
    let mut outcome = outcome_of(rec.as_ref().unwrap_or(record), Status::Denied, Some(reason));
    outcome.approval_id = Some(approval.id.clone());
    (rec, ap, outcome)
}

/// Why a pending approval can no longer be decided (it expired, the policy changed, or
/// the held call is no longer the one it was asked about), with the state it ends in.
fn no_longer_valid(
    record: &IntentRecord,
    approval: &Approval,
    cap: &Capability,
    now: Timestamp,
) -> Option<(ApprovalState, Reason)> {
    if now >= approval.expires_at {
        Some((
            ApprovalState::Expired,
            Reason::new(Code::ApprovalExpired, "nobody decided the approval in time"),
        ))
    } else if approval.policy_hash != cap.policy_hash() {
        Some((
            ApprovalState::Void,
            Reason::new(
                Code::ApprovalVoid,
                "the policy changed since the approval was asked; the call must be asked again",
            ),
        ))
    } else if !approval_covers(approval, record)
        || approval.generation != record.generation
        || record.state != IntentState::PendingApproval
        || record.approval_id.as_deref() != Some(&approval.id)
    {
        Some((
            ApprovalState::Void,
            Reason::new(
                Code::ApprovalVoid,
                "the held call changed since the approval was asked",
            ),
        ))
    } else {
        None
    }
}

/// An admin resets a tripped breaker: the attempt count starts again.
pub fn reset_breaker(
    record: &IntentRecord,
    actor: &str,
    cap: &Capability,
    now: Timestamp,
) -> Decision {
    let mut next = record.clone();
    next.breaker_tripped = false;
    next.attempts = 0;
    next.updated_at = now;
    let outcome = standing_outcome(&next);
    // An admin's act belongs to no run.
    let event = Event {
        run_id: None,
        ..Event::about(AuditKind::Admin, record, cap, actor, now)
    };
    event.writing(
        Action::Respond,
        next,
        None,
        outcome,
        json!({"breaker": "reset"}),
    )
}
