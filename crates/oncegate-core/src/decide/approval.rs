//! Human decisions: approving or denying a held intent, and an admin resetting a tripped
//! breaker.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::model::{Action, ApprovalDecision, Choice, Decision};
use super::steps::{approval_covers, claim, event, outcome_of, settle_refusal, standing_outcome};
use crate::audit::{AuditEvent, AuditKind};
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
    if role == Role::Agent {
        return ApprovalDecision::Rejected(Reason::new(
            Code::Forbidden,
            "agents cannot decide approvals",
        ));
    }
    if actor == approval.principal {
        return ApprovalDecision::Rejected(Reason::new(
            Code::Forbidden,
            "nobody may approve their own call",
        ));
    }
    let decided = |action,
                   rec: Option<IntentRecord>,
                   ap: Option<Approval>,
                   outcome: Outcome,
                   mut detail: Value| {
        if let (Some(n), Some(map)) = (&note, detail.as_object_mut()) {
            map.insert("note".into(), Value::String(n.clone()));
        }
        let event = event(
            AuditKind::Approval,
            now,
            actor,
            Some(record),
            rec.as_ref(),
            &outcome,
            &cap.name,
            record.run_id.as_deref(),
            detail,
        );
        ApprovalDecision::Decided {
            action,
            record: rec,
            approval: ap,
            outcome,
            event,
        }
    };
    match (approval.state, choice) {
        // Single use and idempotent: a second decision (the same click twice, or a deny
        // that arrives after an approve, from a second approver) answers with the first
        // one's outcome and changes nothing.
        (ApprovalState::Approved, _) | (ApprovalState::Denied, Choice::Deny) => {
            let mut outcome = standing_outcome(record);
            if approval.state == ApprovalState::Approved
                && record.state == IntentState::PendingApproval
            {
                // Approved for the caller's next claim, which has not come yet.
                outcome.status = Status::Approved;
            }
            return decided(
                Action::Respond,
                None,
                None,
                outcome,
                json!({"approval_id": approval.id, "repeat": true, "first_decision": approval.state.as_str(), "decided_by": approval.decided_by}),
            );
        }
        (ApprovalState::Denied, Choice::Approve) => {
            return ApprovalDecision::Rejected(Reason::new(
                Code::ApprovalDenied,
                format!(
                    "approval {} was already denied by {}",
                    approval.id,
                    approval.decided_by.as_deref().unwrap_or("someone")
                ),
            ));
        }
        (ApprovalState::Expired, _) => {
            return ApprovalDecision::Rejected(Reason::new(
                Code::ApprovalExpired,
                format!("approval {} expired", approval.id),
            ));
        }
        (ApprovalState::Void, _) => {
            return ApprovalDecision::Rejected(Reason::new(
                Code::ApprovalVoid,
                format!("approval {} is void", approval.id),
            ));
        }
        (ApprovalState::Pending, _) => {}
    }
    let mut ap = approval.clone();
    let mut next = record.clone();
    next.updated_at = now;
    let void_reason = if now >= approval.expires_at {
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
    };
    if let Some((state, reason)) = void_reason {
        ap.state = state;
        let rec = (record.state == IntentState::PendingApproval
            && record.approval_id.as_deref() == Some(&approval.id))
        .then(|| {
            settle_refusal(&mut next, approval.reason, now);
            next.error = Some(reason.clone());
            next
        });
        let mut outcome = outcome_of(
            rec.as_ref().unwrap_or(record),
            Status::Denied,
            Some(reason.clone()),
        );
        outcome.approval_id = Some(approval.id.clone());
        return decided(
            Action::Respond,
            rec,
            Some(ap),
            outcome,
            json!({"approval_id": approval.id, "void": reason.message}),
        );
    }
    ap.decided_by = Some(actor.to_owned());
    ap.decided_at = Some(now);
    match choice {
        Choice::Approve => {
            ap.state = ApprovalState::Approved;
            match executes {
                Executes::Here { owner } => {
                    claim(&mut next, owner, cap, now);
                    let outcome = standing_outcome(&next);
                    decided(
                        Action::Execute,
                        Some(next),
                        Some(ap),
                        outcome,
                        json!({"approval_id": approval.id, "choice": "approve"}),
                    )
                }
                Executes::OnNextClaim => {
                    let mut outcome = standing_outcome(&next);
                    outcome.status = Status::Approved;
                    decided(
                        Action::Respond,
                        Some(next),
                        Some(ap),
                        outcome,
                        json!({"approval_id": approval.id, "choice": "approve", "executes": "on_next_claim"}),
                    )
                }
            }
        }
        Choice::Deny => {
            ap.state = ApprovalState::Denied;
            settle_refusal(&mut next, approval.reason, now);
            next.error = Some(Reason::new(
                Code::ApprovalDenied,
                match &note {
                    Some(n) => format!("denied by {actor}: {n}"),
                    None => format!("denied by {actor}"),
                },
            ));
            let outcome = outcome_of(&next, Status::Denied, None);
            decided(
                Action::Respond,
                Some(next),
                Some(ap),
                outcome,
                json!({"approval_id": approval.id, "choice": "deny"}),
            )
        }
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
    let event = AuditEvent {
        kind: AuditKind::Admin,
        ..event(
            AuditKind::Admin,
            now,
            actor,
            Some(record),
            Some(&next),
            &outcome,
            &cap.name,
            None,
            json!({"breaker": "reset"}),
        )
    };
    Decision {
        action: Action::Respond,
        record: Some(next),
        approval: None,
        outcome,
        event,
    }
}
