//! A new generation of an intent: the first call of an intent, or the first after its
//! replay window closed. The policy verdict, a cross-run repeat, a dry run and an
//! accepted rollback of the store decide whether it executes, waits for a human, or is
//! treated as unknown from the start.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::event::Event;
use super::model::{Action, CallRequest, Decision};
use super::steps::{claim, new_approval, outcome_of};
use super::unknown::unknown_path;
use crate::codes::Code;
use crate::config::{Capability, CrossRun};
use crate::intent::{
    Alert, Approval, ApprovalReason, IntentRecord, IntentState, Outcome, Reason, Status,
};
use crate::policy::PolicyVerdict;

pub(super) fn new_generation(
    previous: Option<&IntentRecord>,
    req: &CallRequest<'_>,
    cap: &Capability,
    verdict: &PolicyVerdict,
    now: Timestamp,
    generation: u32,
    forced: Option<ApprovalReason>,
) -> Decision {
    let event = Event::call(req, cap, previous, now);
    let respond_without_record =
        |status: Status, reason: Option<Reason>, alerts: Vec<Alert>, detail: Value| {
            let mut outcome = no_record_outcome(req, generation, status, reason);
            outcome.alerts = alerts;
            event.nothing_written(Action::Respond, outcome, detail)
        };

    let mut alerts = Vec::new();
    let mut forced = forced;
    if generation == 1
        && let Some(other) = req.other_run
    {
        alerts.push(Alert::CrossRun {
            first_run: other.run_id.clone(),
            this_run: req.run_id.map(str::to_owned),
        });
        match cap.cross_run {
            CrossRun::Allow => {}
            CrossRun::RequireApproval => forced = forced.or(Some(ApprovalReason::CrossRun)),
            CrossRun::Refuse => {
                let reason = Reason::new(
                    Code::CrossRunRefused,
                    format!(
                        "the same intent was already issued by run {:?}",
                        other.run_id
                    ),
                );
                let detail = json!({"alerts": alerts});
                return respond_without_record(Status::Refused, Some(reason), alerts, detail);
            }
        }
    }

    let (reason, detail) = match admission(verdict, cap, forced) {
        Admission::Run { approval, detail } => (approval, detail),
        Admission::Refuse {
            status,
            reason,
            detail,
        } => return respond_without_record(status, reason, alerts, detail),
    };
    let mut record = fresh_record(req, cap, generation, now);

    // One record of this generation's first decision, whichever path it takes.
    let finish = |action: Action,
                  record: IntentRecord,
                  approval: Option<Approval>,
                  mut outcome: Outcome,
                  alerts: Vec<Alert>| {
        outcome.alerts = alerts;
        let mut detail = json!({"alerts": outcome.alerts, "approval_id": outcome.approval_id, "previous_generation": previous.map(|p| p.generation)});
        if let Some(at) = forgotten_since(req, cap, now) {
            detail["rolled_back_at"] = json!(at);
        }
        event.writing(action, record, approval, outcome, detail)
    };
    let (action, approval, status) = match reason {
        Some(reason) => {
            let ap = new_approval(req.new_approval_id, &record, cap, reason, detail, now);
            record.state = IntentState::PendingApproval;
            record.approval_id = Some(ap.id.clone());
            (Action::Respond, Some(ap), Status::PendingApproval)
        }
        None => match forgotten_since(req, cap, now) {
            // The store was rolled back: this intent may have run before, in what the
            // rollback lost. Unknown from the start, so it is read (or retried with its
            // key, or held) as any unknown intent is, never executed at once.
            Some(at) => {
                record.state = IntentState::Unknown;
                record.attempt_ended_at = Some(at);
                record.error = Some(rolled_back_reason());
                // Nothing is stored yet: a refusal must still write the record.
                let refuse = |outcome: Outcome, alerts: Vec<Alert>| {
                    finish(Action::Respond, record.clone(), None, outcome, alerts)
                };
                return unknown_path(
                    record.clone(),
                    true,
                    req,
                    cap,
                    now,
                    alerts,
                    &finish,
                    &refuse,
                );
            }
            None => {
                claim(&mut record, req.owner, cap, now);
                (Action::Execute, None, Status::InFlight)
            }
        },
    };
    let outcome = outcome_of(&record, status, None);
    finish(action, record, approval, outcome, alerts)
}

/// What policy (and the capability's own dry run) lets a new generation do.
enum Admission {
    /// Run, once a human approves when `approval` says why one must (`detail`: what the
    /// approval tells them).
    Run {
        approval: Option<ApprovalReason>,
        detail: String,
    },
    /// Do not run: answer `status` (with `reason`), audited with `detail`.
    Refuse {
        status: Status,
        reason: Option<Reason>,
        detail: Value,
    },
}

/// Reads the policy verdict for a new generation; `forced` is the reason a human must
/// approve it whatever policy says (another run, or outside the replay window).
fn admission(
    verdict: &PolicyVerdict,
    cap: &Capability,
    forced: Option<ApprovalReason>,
) -> Admission {
    match verdict {
        PolicyVerdict::Deny { reason } => Admission::Refuse {
            status: Status::Denied,
            reason: Some(Reason::new(Code::PolicyDenied, reason.clone())),
            detail: json!({"policy": reason}),
        },
        PolicyVerdict::DryRun => Admission::Refuse {
            status: Status::DryRun,
            reason: None,
            detail: json!({"dry_run": "policy"}),
        },
        _ if cap.dry_run => Admission::Refuse {
            status: Status::DryRun,
            reason: None,
            detail: json!({"dry_run": "capability"}),
        },
        PolicyVerdict::RequireApproval { policies } => Admission::Run {
            approval: Some(ApprovalReason::Policy),
            detail: format!(
                "{} (policies: {})",
                ApprovalReason::Policy.explain(),
                policies.join(", ")
            ),
        },
        PolicyVerdict::Allow => Admission::Run {
            approval: forced,
            detail: forced.map(|r| r.explain().to_owned()).unwrap_or_default(),
        },
    }
}

pub(super) fn no_record_outcome(
    req: &CallRequest<'_>,
    generation: u32,
    status: Status,
    reason: Option<Reason>,
) -> Outcome {
    Outcome {
        status,
        key: Some(req.derived.key.clone()),
        generation,
        attempt: 1,
        state: None,
        effect_ref: None,
        result: None,
        approval_id: None,
        reason,
        alerts: Vec::new(),
    }
}

fn fresh_record(
    req: &CallRequest<'_>,
    cap: &Capability,
    generation: u32,
    now: Timestamp,
) -> IntentRecord {
    IntentRecord {
        key: req.derived.key.clone(),
        generation,
        capability: cap.name.clone(),
        tenant: req.tenant.to_owned(),
        principal: req.principal.to_owned(),
        run_id: req.run_id.map(str::to_owned),
        step_id: req.step_id.map(str::to_owned),
        business_ref: req.derived.business_ref.clone(),
        cross_key: req.derived.cross_key.clone(),
        args_digest: req.derived.args_digest.clone(),
        normalised: Value::Object(req.derived.normalised.clone()),
        arguments: req.arguments.clone(),
        state: IntentState::InFlight,
        attempts: 0,
        executions: 0,
        lease: None,
        effect_ref: None,
        result: None,
        error: None,
        approval_id: None,
        breaker_tripped: false,
        settled_at: None,
        attempt_ended_at: None,
        not_sent_reported: false,
        created_at: now,
        updated_at: now,
        version: 0,
    }
}

/// When the store was rolled back, if that was recent enough (within `cap`'s replay
/// window) for an intent of `cap` to have run in what the rollback lost.
pub(super) fn forgotten_since(
    req: &CallRequest<'_>,
    cap: &Capability,
    now: Timestamp,
) -> Option<Timestamp> {
    req.rolled_back_at
        .filter(|at| now < *at + cap.replay_window)
}

pub(super) fn rolled_back_reason() -> Reason {
    Reason::new(
        Code::UpstreamUnknown,
        "the store was rolled back to an earlier state, and this intent may have run in what it lost: oncegate checks with the provider before anything executes; do not re-issue",
    )
}
