//! A call arrives: decide whether it executes, replays, waits, reconciles, needs an
//! approval or is refused, and what the intent record becomes (a new generation when a
//! settled intent may run again).

use jiff::Timestamp;
use serde_json::{Value, json};

use super::event::Event;
use super::generation::{forgotten_since, new_generation, no_record_outcome, rolled_back_reason};
use super::model::{Action, CallRequest, Decision};
use super::reconcile::dedupe_is_proof;
use super::steps::{
    arguments_frozen, claim, drifted_arguments, outcome_of, settle_refusal, standing_outcome,
};
use super::unknown::{Finish, Refuse, over_ceiling, unknown_path};
use crate::codes::Code;
use crate::config::{AfterWindow, Capability, Category};
use crate::intent::{
    Alert, Approval, ApprovalReason, ApprovalState, IntentRecord, IntentState, Outcome, Reason,
    Status,
};
use crate::policy::PolicyVerdict;

/// Decides one call.
pub fn decide(
    existing: Option<&IntentRecord>,
    req: &CallRequest<'_>,
    cap: &Capability,
    verdict: &PolicyVerdict,
    now: Timestamp,
) -> Decision {
    let decision = decide_call(existing, req, cap, verdict, now);
    match existing {
        Some(current) if req.caller_sends => bound_to_approval(current, decision, req, cap, now),
        _ => decision,
    }
}

/// A two-phase claim (its caller sends its own arguments) that would execute a
/// generation a human was asked about, or reconcile it towards an execution, with other
/// arguments than the approval was asked on: refused with `OG-0012`, nothing written
/// but the audit event. The approved content can still be claimed; a call with other
/// content is another approval (after this generation settles, or with other key
/// arguments), never this one.
fn bound_to_approval(
    current: &IntentRecord,
    decision: Decision,
    req: &CallRequest<'_>,
    cap: &Capability,
    now: Timestamp,
) -> Decision {
    let acts = matches!(decision.action, Action::Execute | Action::Reconcile)
        && decision
            .record
            .as_ref()
            .is_some_and(|r| r.generation == current.generation);
    if !acts || !arguments_frozen(current) {
        return decision;
    }
    let drifted = drifted_arguments(current, req.arguments);
    if drifted.is_empty() {
        return decision;
    }
    let reason = Reason::new(
        Code::ApprovalVoid,
        format!(
            "a human was asked about this intent with other arguments ({} differ); only those execute under approval {}: claim it with exactly the held arguments, or make it another intent",
            drifted
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
            current.approval_id.as_deref().unwrap_or("-"),
        ),
    );
    let outcome = outcome_of(current, Status::Refused, Some(reason));
    let detail = json!({"drifted": drifted, "approval_id": current.approval_id});
    Event::call(req, cap, Some(current), now).nothing_written(Action::Respond, outcome, detail)
}

fn decide_call(
    existing: Option<&IntentRecord>,
    req: &CallRequest<'_>,
    cap: &Capability,
    verdict: &PolicyVerdict,
    now: Timestamp,
) -> Decision {
    if let Some(stopped) = stopped(existing, req, cap, verdict, now) {
        return stopped;
    }
    if cap.category == Category::Read {
        let mut outcome = no_record_outcome(req, 0, Status::Applied, None);
        outcome.key = None;
        let detail = json!({"pass_through": true});
        return Event::call(req, cap, None, now).nothing_written(
            Action::PassThrough,
            outcome,
            detail,
        );
    }
    match existing {
        None => new_generation(None, req, cap, verdict, now, 1, None),
        Some(current) => repeat(current, req, cap, verdict, now),
    }
}

/// A call an admin's kill switch or a detection finding's hold stops: refused, unless
/// it repeats an intent that already settled (`None`: not stopped).
fn stopped(
    existing: Option<&IntentRecord>,
    req: &CallRequest<'_>,
    cap: &Capability,
    verdict: &PolicyVerdict,
    now: Timestamp,
) -> Option<Decision> {
    let (code, name, why) = req
        .kill_switch
        .map(|why| (Code::KillSwitch, "kill_switch", why))
        .or(req.held.map(|why| (Code::Held, "held", why)))?;
    // A kill switch stops executions, not the truth: a repeat of an intent that already
    // settled still replays what happened (an agent that lost the result must not read
    // "refused" for a charge that went through).
    if existing.is_some_and(|r| matches!(r.state, IntentState::Applied | IntentState::Failed)) {
        let unkilled = CallRequest {
            kill_switch: None,
            held: None,
            ..req.clone()
        };
        let mut d = decide(existing, &unkilled, cap, verdict, now);
        if d.action == Action::Replay && d.outcome.status == Status::Replayed {
            if let Value::Object(detail) = &mut d.event.detail {
                detail.insert(name.into(), Value::String(why.to_owned()));
            }
            return Some(d);
        }
    }
    let generation = existing.map_or(1, |r| r.generation);
    let outcome = no_record_outcome(
        req,
        generation,
        Status::Refused,
        Some(Reason::new(code, why)),
    );
    let event = Event::call(req, cap, existing, now);
    Some(event.nothing_written(Action::Respond, outcome, json!({})))
}

/// A repeat of a stored intent: replayed, polled, executed again, reconciled, or a new
/// generation once the replay window has passed.
fn repeat(
    current: &IntentRecord,
    req: &CallRequest<'_>,
    cap: &Capability,
    verdict: &PolicyVerdict,
    now: Timestamp,
) -> Decision {
    let event = Event::call(req, cap, Some(current), now);
    let mut record = current.clone();
    record.updated_at = now;
    let mut alerts = cross_run_alerts(current, req);
    let finish = |action: Action,
                  record: IntentRecord,
                  approval: Option<Approval>,
                  mut outcome: Outcome,
                  alerts: Vec<Alert>| {
        outcome.alerts = alerts;
        let detail = json!({"alerts": outcome.alerts, "approval_id": outcome.approval_id});
        event.writing(action, record, approval, outcome, detail)
    };
    // Answers straight from the stored record: a replay, or a poll of an intent that is
    // in flight, held or decided. Nothing is written and no attempt is counted.
    let replay = |status: Status, reason: Option<Reason>, alerts: Vec<Alert>| {
        let mut outcome = outcome_of(current, status, reason);
        outcome.alerts = alerts;
        let detail = json!({"alerts": outcome.alerts, "replay": true});
        event.nothing_written(Action::Replay, outcome, detail)
    };
    // A refusal that changes nothing stored: audited, but the intent is not rewritten.
    let refuse = |mut outcome: Outcome, alerts: Vec<Alert>| {
        outcome.alerts = alerts;
        let detail = json!({"alerts": outcome.alerts});
        event.nothing_written(Action::Respond, outcome, detail)
    };

    let window_open = now < current.settled_at.unwrap_or(current.created_at) + cap.replay_window;
    match current.state {
        IntentState::InFlight => {
            let live = current.lease.as_ref().is_some_and(|l| now < l.expires_at);
            if live {
                let standing = standing_outcome(current);
                return replay(standing.status, standing.reason, alerts);
            }
            expire_lease(&mut record);
            unknown_path(record, true, req, cap, now, alerts, &finish, &refuse)
        }
        IntentState::Unknown => {
            unknown_path(record, false, req, cap, now, alerts, &finish, &refuse)
        }
        IntentState::Applied | IntentState::Failed if window_open => {
            // Always the truth, whatever the breaker or the attempt count say: an agent
            // that lost the result must read the effect reference, not "refused".
            replay(Status::Replayed, None, alerts)
        }
        IntentState::NotApplied
            if window_open
                && forgotten_since(req, cap, now).is_some_and(|at| current.updated_at < at) =>
        {
            // Confirmed absent before the store was rolled back: the rollback may have
            // lost the execution that came after, so the provider is asked first.
            record.state = IntentState::Unknown;
            record.attempt_ended_at = forgotten_since(req, cap, now);
            record.error = Some(rolled_back_reason());
            unknown_path(record, true, req, cap, now, alerts, &finish, &refuse)
        }
        IntentState::NotApplied if window_open => {
            // Confirmed absent: execute again with the same key, and with the arguments
            // of the call that asks now (its significant arguments are the same; a
            // corrected free-text argument is what the caller means today), unless the
            // provider dedupes on the key or a human was asked about these arguments.
            if let Some(refused) = over_ceiling(&mut record, cap, &mut alerts) {
                return finish(Action::Respond, record, None, refused, alerts);
            }
            claim_again(&mut record, req, cap, now);
            let outcome = standing_outcome(&record);
            finish(Action::Execute, record, None, outcome, alerts)
        }
        IntentState::Denied if window_open => replay(Status::Denied, None, alerts),
        IntentState::PendingApproval => match req.approval {
            Some(ap) if ap.state == ApprovalState::Pending && now >= ap.expires_at => {
                let ap = expire_held(&mut record, ap, now);
                let outcome = standing_outcome(&record);
                finish(Action::Respond, record, Some(ap), outcome, alerts)
            }
            // A claim-only capability's held call, approved: nobody in the gateway
            // executes it, so this call (the caller's next claim of the same intent)
            // does, once.
            Some(ap)
                if ap.state == ApprovalState::Approved
                    && current.approval_id.as_deref() == Some(ap.id.as_str()) =>
            {
                approved_claim(record, ap, req, cap, verdict, now, alerts, &finish, &refuse)
            }
            _ => replay(Status::PendingApproval, None, alerts),
        },
        IntentState::Applied
        | IntentState::Failed
        | IntentState::NotApplied
        | IntentState::Denied => after_window(current, req, cap, verdict, now, alerts),
    }
}

/// The alert a repeat from another run than the intent's first raises.
fn cross_run_alerts(current: &IntentRecord, req: &CallRequest<'_>) -> Vec<Alert> {
    let mut alerts = Vec::new();
    if let (Some(first), Some(this)) = (current.run_id.as_deref(), req.run_id)
        && first != this
    {
        alerts.push(Alert::CrossRun {
            first_run: Some(first.to_owned()),
            this_run: Some(this.to_owned()),
        });
    }
    alerts
}

/// The holder died or stalled past its lease: the effect may have happened, and its
/// request counts as ended when the lease did.
fn expire_lease(record: &mut IntentRecord) {
    record.attempt_ended_at = record.lease.take().map(|l| l.expires_at);
    record.state = IntentState::Unknown;
    record.error = Some(Reason::new(
        Code::UpstreamUnknown,
        "the attempt's lease expired before its outcome was recorded",
    ));
}

/// Claims a confirmed-absent intent again, with the arguments of the call that asks
/// now, except for a provider that dedupes on the key (it compares a repeated key's
/// body with the first one and would refuse a changed one) and for a generation a human
/// was asked about (what executes is what was approved).
fn claim_again(record: &mut IntentRecord, req: &CallRequest<'_>, cap: &Capability, now: Timestamp) {
    if !dedupe_is_proof(cap) && !arguments_frozen(record) {
        record.arguments = req.arguments.clone();
    }
    claim(record, req.owner, cap, now);
}

/// Nobody decided the held call's approval in time: the approval expires and the
/// intent is refused as the approval's reason says.
fn expire_held(record: &mut IntentRecord, ap: &Approval, now: Timestamp) -> Approval {
    let mut ap = ap.clone();
    ap.state = ApprovalState::Expired;
    settle_refusal(record, ap.reason, now);
    record.error = Some(Reason::new(
        Code::ApprovalExpired,
        "nobody decided the approval in time",
    ));
    ap
}

/// A repeat of a settled intent outside the replay window: a new intent, through the
/// full policy path.
fn after_window(
    current: &IntentRecord,
    req: &CallRequest<'_>,
    cap: &Capability,
    verdict: &PolicyVerdict,
    now: Timestamp,
    alerts: Vec<Alert>,
) -> Decision {
    let reason =
        (cap.after_window == AfterWindow::RequireApproval).then_some(ApprovalReason::OutsideWindow);
    let mut d = new_generation(
        Some(current),
        req,
        cap,
        verdict,
        now,
        current.generation + 1,
        reason,
    );
    d.outcome.alerts.extend(alerts);
    d
}

/// Until when an approved claim-only call may be claimed: the capability's approval TTL
/// from the decision. The claim that executes it is written only before this instant by
/// the store's clock (the engine's `Commit::valid_until`).
pub fn approved_claim_deadline(ap: &Approval, cap: &Capability) -> Timestamp {
    ap.decided_at.unwrap_or(ap.created_at) + cap.approval_ttl
}

/// The first claim after a human approved a claim-only capability's held call: it
/// executes, with the arguments the approval was asked on (a claim with other
/// arguments is refused by `decide`), unless the approval no longer covers it. An approval decided under another
/// policy is void; one left unclaimed for longer than the capability's approval TTL
/// since the decision has expired (an approval is not a standing permission).
#[expect(
    clippy::too_many_arguments,
    reason = "private step of decide(), every input explicit"
)]
fn approved_claim(
    mut record: IntentRecord,
    ap: &Approval,
    req: &CallRequest<'_>,
    cap: &Capability,
    verdict: &PolicyVerdict,
    now: Timestamp,
    mut alerts: Vec<Alert>,
    finish: &Finish<'_>,
    refuse: &Refuse<'_>,
) -> Decision {
    // An approval is bound to the principal whose call was held: a parallel sub-agent
    // that re-plans the same intent does not execute what a human approved for another.
    if req.principal != ap.principal {
        let reason = Reason::new(
            Code::Forbidden,
            format!(
                "a human approved `{}`'s call of this intent; only its next claim executes it",
                ap.principal
            ),
        );
        return refuse(outcome_of(&record, Status::Refused, Some(reason)), alerts);
    }
    // The policy still has its say over this claim (the approval answered a
    // require-approval; it does not outrank a deny or a dry run).
    match verdict {
        PolicyVerdict::Deny { reason } => {
            let reason = Reason::new(Code::PolicyDenied, reason.clone());
            return refuse(outcome_of(&record, Status::Denied, Some(reason)), alerts);
        }
        PolicyVerdict::DryRun => {
            return refuse(outcome_of(&record, Status::DryRun, None), alerts);
        }
        PolicyVerdict::Allow | PolicyVerdict::RequireApproval { .. } => {}
    }
    let void = if ap.policy_hash != cap.policy_hash() {
        Some((
            ApprovalState::Void,
            Reason::new(
                Code::ApprovalVoid,
                "the policy changed since the call was approved; the call must be asked again",
            ),
        ))
    } else if now >= approved_claim_deadline(ap, cap) {
        Some((
            ApprovalState::Expired,
            Reason::new(
                Code::ApprovalExpired,
                "the approved call was not claimed within the approval's time to live",
            ),
        ))
    } else {
        None
    };
    if let Some((state, reason)) = void {
        let mut ap = ap.clone();
        ap.state = state;
        settle_refusal(&mut record, ap.reason, now);
        record.error = Some(reason.clone());
        // An approval asked about an unknown first attempt leaves the intent unknown
        // (it may have happened): the caller hears that, not a denial.
        let status = match record.state {
            IntentState::Unknown => Status::Unknown,
            _ => Status::Denied,
        };
        let mut outcome = outcome_of(&record, status, Some(reason));
        outcome.approval_id = Some(ap.id.clone());
        return finish(Action::Respond, record, Some(ap), outcome, alerts);
    }
    if let Some(refused) = over_ceiling(&mut record, cap, &mut alerts) {
        return finish(Action::Respond, record, None, refused, alerts);
    }
    // The record keeps the arguments the approval was asked on: they are what the
    // claim hands over (a claim with other arguments is refused, see `decide`).
    claim(&mut record, req.owner, cap, now);
    let outcome = standing_outcome(&record);
    finish(Action::Execute, record, None, outcome, alerts)
}
