//! A repeat of an unknown intent (reconcile, retry, escalate or refuse, as the
//! capability's `on_unknown` says), and the attempt ceiling that both it and an
//! approved claim check before anything executes. Below `call` and `generation`, which
//! both reach it.

use jiff::Timestamp;

use super::model::{Action, CallRequest, Decision};
use super::steps::{claim, new_approval, outcome_of, standing_outcome};
use crate::codes::Code;
use crate::config::{Capability, OnUnknown};
use crate::intent::{
    Alert, Approval, ApprovalReason, IntentRecord, IntentState, Outcome, Reason, Status,
};

/// The attempt ceiling, checked before an execution or a reconciliation read starts
/// (replays and polls never reach it). `Some(refusal)` when the breaker is (or just
/// got) tripped; the caller writes the record only when it just tripped.
pub(super) fn over_ceiling(
    record: &mut IntentRecord,
    cap: &Capability,
    alerts: &mut Vec<Alert>,
) -> Option<Outcome> {
    if record.breaker_tripped {
        let reason = Reason::new(
            Code::AttemptCeiling,
            "the attempt ceiling for this intent was reached; an admin must reset its breaker",
        );
        return Some(outcome_of(record, Status::Refused, Some(reason)));
    }
    let ceiling = cap.attempt_ceiling?;
    if record.attempts < ceiling {
        return None;
    }
    record.breaker_tripped = true;
    alerts.push(Alert::BreakerTripped { ceiling });
    let reason = Reason::new(
        Code::AttemptCeiling,
        format!(
            "attempt ceiling of {ceiling} executions and reconciliations reached; the breaker is tripped until an admin resets it"
        ),
    );
    Some(outcome_of(record, Status::Refused, Some(reason)))
}

pub(super) type Finish<'f> =
    dyn Fn(Action, IntentRecord, Option<Approval>, Outcome, Vec<Alert>) -> Decision + 'f;
pub(super) type Refuse<'f> = dyn Fn(Outcome, Vec<Alert>) -> Decision + 'f;

/// A repeat of an unknown intent. `changed`: the record already differs from the stored
/// one (a lease that expired just became unknown), so a refusal still writes it.
#[expect(
    clippy::too_many_arguments,
    reason = "private step of decide(), every input explicit"
)]
pub(super) fn unknown_path(
    mut record: IntentRecord,
    changed: bool,
    req: &CallRequest<'_>,
    cap: &Capability,
    now: Timestamp,
    mut alerts: Vec<Alert>,
    finish: &Finish<'_>,
    refuse_unchanged: &Refuse<'_>,
) -> Decision {
    if matches!(cap.on_unknown, OnUnknown::Reconcile | OnUnknown::Retry) {
        let was_tripped = record.breaker_tripped;
        if let Some(refused) = over_ceiling(&mut record, cap, &mut alerts) {
            if was_tripped && !changed {
                return refuse_unchanged(refused, alerts);
            }
            return finish(Action::Respond, record, None, refused, alerts);
        }
    }
    match cap.on_unknown {
        OnUnknown::Reconcile => {
            // The read counts against the ceiling like an execution: an agent that
            // ignores "do not re-issue" cannot make oncegate hammer the upstream forever.
            record.attempts += 1;
            let outcome = outcome_of(
                &record,
                Status::Unknown,
                Some(Reason::new(
                    Code::UpstreamUnknown,
                    "outcome not yet known; oncegate is reconciling; do not re-issue",
                )),
            );
            finish(Action::Reconcile, record, None, outcome, alerts)
        }
        OnUnknown::Retry => {
            claim(&mut record, req.owner, cap, now);
            let outcome = standing_outcome(&record);
            finish(Action::Execute, record, None, outcome, alerts)
        }
        OnUnknown::Escalate => {
            let ap = new_approval(
                req.new_approval_id,
                &record,
                cap,
                ApprovalReason::UnknownFirstAttempt,
                ApprovalReason::UnknownFirstAttempt.explain().to_owned(),
                now,
            );
            record.state = IntentState::PendingApproval;
            record.approval_id = Some(ap.id.clone());
            let outcome = outcome_of(&record, Status::PendingApproval, None);
            finish(Action::Respond, record, Some(ap), outcome, alerts)
        }
        OnUnknown::Refuse => {
            let reason = Reason::new(
                Code::UnknownRefused,
                "an earlier attempt's outcome is unknown and this capability refuses repeats; an operator must resolve it",
            );
            let outcome = outcome_of(&record, Status::Refused, Some(reason));
            if changed {
                finish(Action::Respond, record, None, outcome, alerts)
            } else {
                refuse_unchanged(outcome, alerts)
            }
        }
    }
}
