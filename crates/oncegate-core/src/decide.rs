//! The decision state machine: pure functions of (stored state, request, capability,
//! policy verdict, now).
//!
//! Why one file: one state machine whose transitions are read together (a lost race
//! re-enters any of them); issue 10's claim/complete split is where it divides.
//!
//! Stores only load and compare-and-set; everything that decides what happens is here,
//! so every backend behaves the same and every transition is testable without I/O. A
//! shell that loses a compare-and-set race re-reads and calls these functions again.

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::audit::{AuditEvent, AuditKind};
use crate::codes::Code;
use crate::config::{AfterWindow, Capability, Category, CrossRun, OnUnknown, Role};
use crate::intent::{
    Alert, Approval, ApprovalReason, ApprovalState, IntentRecord, IntentState, Lease, Outcome,
    Reason, Status,
};
use crate::key::DerivedKey;
use crate::policy::PolicyVerdict;

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
    /// The id to use if this call creates an approval (ids are random; decide is not).
    pub new_approval_id: &'a str,
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
    /// Run the effect with the record's upstream key, then call [`record_effect`].
    Execute,
    /// Run the reconciliation read, then call [`after_reconcile`].
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

/// Builds the outcome a record implies.
pub fn outcome_of(record: &IntentRecord, status: Status, reason: Option<Reason>) -> Outcome {
    Outcome {
        status,
        key: Some(record.key.clone()),
        generation: record.generation,
        attempt: record.attempts,
        state: Some(record.state),
        effect_ref: record.effect_ref.clone(),
        result: record.result.clone(),
        approval_id: record.approval_id.clone(),
        reason: reason.or_else(|| record.error.clone()),
        alerts: Vec::new(),
    }
}

/// The outcome a repeat gets for a record as it stands (used for replays and for
/// answering a second approver).
pub fn standing_outcome(record: &IntentRecord) -> Outcome {
    let status = match record.state {
        IntentState::Applied | IntentState::Failed => Status::Replayed,
        IntentState::InFlight => Status::InFlight,
        IntentState::Unknown => Status::Unknown,
        IntentState::NotApplied => Status::Failed,
        IntentState::PendingApproval => Status::PendingApproval,
        IntentState::Denied => Status::Denied,
    };
    let reason = match record.state {
        IntentState::InFlight => Some(Reason::new(
            Code::InFlight,
            "another attempt holds the claim; poll, do not re-issue",
        )),
        _ => None,
    };
    outcome_of(record, status, reason)
}

#[expect(
    clippy::too_many_arguments,
    reason = "private constructor of one flat audit record"
)]
fn event(
    kind: AuditKind,
    now: Timestamp,
    actor: &str,
    before: Option<&IntentRecord>,
    after: Option<&IntentRecord>,
    outcome: &Outcome,
    capability: &str,
    run_id: Option<&str>,
    detail: Value,
) -> AuditEvent {
    AuditEvent {
        at: now,
        kind,
        key: outcome.key.clone(),
        generation: outcome.generation,
        capability: Some(capability.to_owned()),
        actor: actor.to_owned(),
        run_id: run_id.map(str::to_owned),
        from: before.map(|r| r.state),
        to: after.map(|r| r.state).or(before.map(|r| r.state)),
        status: Some(outcome.status),
        code: outcome.reason.as_ref().map(|r| r.code),
        detail,
    }
}

fn no_record_outcome(
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

/// Starts an execution. Executions (and reconciliation reads, see [`decide`]) are what
/// the attempt ceiling counts.
fn claim(record: &mut IntentRecord, owner: &str, cap: &Capability, now: Timestamp) {
    record.attempts += 1;
    record.state = IntentState::InFlight;
    record.lease = Some(Lease {
        owner: owner.to_owned(),
        expires_at: now + cap.lease,
    });
    record.executions += 1;
    record.error = None;
    // A new attempt: its request has not ended yet.
    record.attempt_ended_at = None;
    record.updated_at = now;
}

fn new_approval(
    id: &str,
    record: &IntentRecord,
    cap: &Capability,
    reason: ApprovalReason,
    detail: String,
    now: Timestamp,
) -> Approval {
    Approval {
        id: id.to_owned(),
        key: record.key.clone(),
        generation: record.generation,
        capability: cap.name.clone(),
        principal: record.principal.clone(),
        args_digest: record.args_digest.clone(),
        policy_hash: cap.policy_hash().to_owned(),
        reason,
        detail,
        state: ApprovalState::Pending,
        decided_by: None,
        decided_at: None,
        created_at: now,
        expires_at: now + cap.approval_ttl,
        version: 0,
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
        created_at: now,
        updated_at: now,
        version: 0,
    }
}

/// A held intent whose approval was denied, expired or voided. An intent held because
/// its first attempt's status is unknown stays `unknown`: the effect may have happened,
/// so it keeps being reconciled (and never silently becomes a new intent after the
/// window). Anything else is denied for this generation.
fn settle_refusal(record: &mut IntentRecord, reason: ApprovalReason, now: Timestamp) {
    if reason == ApprovalReason::UnknownFirstAttempt {
        record.state = IntentState::Unknown;
    } else {
        record.state = IntentState::Denied;
        record.settled_at = Some(now);
    }
}

/// The effect happened: record it, with its reference and the provider's answer.
fn settle_applied(
    record: &mut IntentRecord,
    effect_ref: Option<String>,
    result: Value,
    now: Timestamp,
) {
    record.state = IntentState::Applied;
    record.settled_at = Some(now);
    record.effect_ref = effect_ref;
    record.result = Some(result);
    record.error = None;
}

/// Decides one call.
pub fn decide(
    existing: Option<&IntentRecord>,
    req: &CallRequest<'_>,
    cap: &Capability,
    verdict: &PolicyVerdict,
    now: Timestamp,
) -> Decision {
    // A decision that writes no intent: the answer, and the audit event that explains it
    // (committed for `Respond`, dropped for `Replay`).
    let unwritten = |action: Action, outcome: Outcome, detail: Value| {
        let event = event(
            AuditKind::Call,
            now,
            req.principal,
            existing,
            None,
            &outcome,
            &cap.name,
            req.run_id,
            detail,
        );
        Decision {
            action,
            record: None,
            approval: None,
            outcome,
            event,
        }
    };
    let respond_only = |status: Status, reason: Reason, generation: u32, detail: Value| {
        let outcome = no_record_outcome(req, generation, status, Some(reason));
        unwritten(Action::Respond, outcome, detail)
    };

    if let Some(why) = req.kill_switch {
        // A kill switch stops executions, not the truth: a repeat of an intent that
        // already settled still replays what happened (an agent that lost the result
        // must not read "refused" for a charge that went through).
        if existing.is_some_and(|r| matches!(r.state, IntentState::Applied | IntentState::Failed)) {
            let unkilled = CallRequest {
                kill_switch: None,
                ..req.clone()
            };
            let mut d = decide(existing, &unkilled, cap, verdict, now);
            if d.action == Action::Replay && d.outcome.status == Status::Replayed {
                if let Value::Object(detail) = &mut d.event.detail {
                    detail.insert("kill_switch".into(), Value::String(why.to_owned()));
                }
                return d;
            }
        }
        return respond_only(
            Status::Refused,
            Reason::new(Code::KillSwitch, why),
            existing.map_or(1, |r| r.generation),
            json!({}),
        );
    }
    if cap.category == Category::Read {
        let mut outcome = no_record_outcome(req, 0, Status::Applied, None);
        outcome.key = None;
        let event = event(
            AuditKind::Call,
            now,
            req.principal,
            None,
            None,
            &outcome,
            &cap.name,
            req.run_id,
            json!({"pass_through": true}),
        );
        return Decision {
            action: Action::PassThrough,
            record: None,
            approval: None,
            outcome,
            event,
        };
    }

    let Some(current) = existing else {
        return new_generation(None, req, cap, verdict, now, 1, None);
    };

    let mut record = current.clone();
    record.updated_at = now;
    let mut alerts = Vec::new();
    if let (Some(first), Some(this)) = (current.run_id.as_deref(), req.run_id)
        && first != this
    {
        alerts.push(Alert::CrossRun {
            first_run: Some(first.to_owned()),
            this_run: Some(this.to_owned()),
        });
    }

    let finish = |action: Action,
                  record: IntentRecord,
                  approval: Option<Approval>,
                  mut outcome: Outcome,
                  alerts: Vec<Alert>| {
        outcome.alerts = alerts;
        let detail = json!({"alerts": outcome.alerts, "approval_id": outcome.approval_id});
        let event = event(
            AuditKind::Call,
            now,
            req.principal,
            existing,
            Some(&record),
            &outcome,
            &cap.name,
            req.run_id,
            detail,
        );
        Decision {
            action,
            record: Some(record),
            approval,
            outcome,
            event,
        }
    };
    // Answers straight from the stored record: a replay, or a poll of an intent that is
    // in flight, held or decided. Nothing is written and no attempt is counted.
    let replay = |status: Status, reason: Option<Reason>, alerts: Vec<Alert>| {
        let mut outcome = outcome_of(current, status, reason);
        outcome.alerts = alerts;
        let detail = json!({"alerts": outcome.alerts, "replay": true});
        unwritten(Action::Replay, outcome, detail)
    };
    // A refusal that changes nothing stored: audited, but the intent is not rewritten.
    let refuse = |mut outcome: Outcome, alerts: Vec<Alert>| {
        outcome.alerts = alerts;
        let detail = json!({"alerts": outcome.alerts});
        unwritten(Action::Respond, outcome, detail)
    };

    let window_open = now < current.settled_at.unwrap_or(current.created_at) + cap.replay_window;
    match current.state {
        IntentState::InFlight => {
            let live = current.lease.as_ref().is_some_and(|l| now < l.expires_at);
            if live {
                let standing = standing_outcome(current);
                return replay(standing.status, standing.reason, alerts);
            }
            // The holder died or stalled past its lease: the effect may have happened,
            // and its request counts as ended when the lease did.
            record.attempt_ended_at = record.lease.take().map(|l| l.expires_at);
            record.state = IntentState::Unknown;
            record.error = Some(Reason::new(
                Code::UpstreamUnknown,
                "the attempt's lease expired before its outcome was recorded",
            ));
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
        IntentState::NotApplied if window_open => {
            // Confirmed absent: execute again with the same key, and with the arguments
            // of the call that asks now (its significant arguments are the same; a
            // corrected free-text argument is what the caller means today), unless the
            // provider dedupes on the key.
            if let Some(refused) = over_ceiling(&mut record, cap, &mut alerts) {
                return finish(Action::Respond, record, None, refused, alerts);
            }
            // Not for a provider that dedupes on the key: it compares a repeated key's
            // body with the first one and would refuse a changed one.
            if !dedupe_is_proof(cap) {
                record.arguments = req.arguments.clone();
            }
            claim(&mut record, req.owner, cap, now);
            let outcome = standing_outcome(&record);
            finish(Action::Execute, record, None, outcome, alerts)
        }
        IntentState::Denied if window_open => replay(Status::Denied, None, alerts),
        IntentState::PendingApproval => match req.approval {
            Some(ap) if ap.state == ApprovalState::Pending && now >= ap.expires_at => {
                let mut ap = ap.clone();
                ap.state = ApprovalState::Expired;
                settle_refusal(&mut record, ap.reason, now);
                record.error = Some(Reason::new(
                    Code::ApprovalExpired,
                    "nobody decided the approval in time",
                ));
                let outcome = standing_outcome(&record);
                finish(Action::Respond, record, Some(ap), outcome, alerts)
            }
            _ => replay(Status::PendingApproval, None, alerts),
        },
        IntentState::Applied
        | IntentState::Failed
        | IntentState::NotApplied
        | IntentState::Denied => {
            // Outside the replay window: a new intent, through the full policy path.
            let reason = (cap.after_window == AfterWindow::RequireApproval)
                .then_some(ApprovalReason::OutsideWindow);
            let mut d = new_generation(
                existing,
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
    }
}

/// The attempt ceiling, checked before an execution or a reconciliation read starts
/// (replays and polls never reach it). `Some(refusal)` when the breaker is (or just
/// got) tripped; the caller writes the record only when it just tripped.
fn over_ceiling(
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

type Finish<'f> =
    dyn Fn(Action, IntentRecord, Option<Approval>, Outcome, Vec<Alert>) -> Decision + 'f;
type Refuse<'f> = dyn Fn(Outcome, Vec<Alert>) -> Decision + 'f;

/// A repeat of an unknown intent. `changed`: the record already differs from the stored
/// one (a lease that expired just became unknown), so a refusal still writes it.
#[expect(
    clippy::too_many_arguments,
    reason = "private step of decide(), every input explicit"
)]
fn unknown_path(
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

fn new_generation(
    previous: Option<&IntentRecord>,
    req: &CallRequest<'_>,
    cap: &Capability,
    verdict: &PolicyVerdict,
    now: Timestamp,
    generation: u32,
    forced: Option<ApprovalReason>,
) -> Decision {
    let respond_without_record =
        |status: Status, reason: Option<Reason>, alerts: Vec<Alert>, detail: Value| {
            let mut outcome = no_record_outcome(req, generation, status, reason);
            outcome.alerts = alerts;
            let event = event(
                AuditKind::Call,
                now,
                req.principal,
                previous,
                None,
                &outcome,
                &cap.name,
                req.run_id,
                detail,
            );
            Decision {
                action: Action::Respond,
                record: None,
                approval: None,
                outcome,
                event,
            }
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

    let mut record = fresh_record(req, cap, generation, now);
    let (reason, detail) = match verdict {
        PolicyVerdict::Deny { reason } => {
            return respond_without_record(
                Status::Denied,
                Some(Reason::new(Code::PolicyDenied, reason.clone())),
                alerts,
                json!({"policy": reason}),
            );
        }
        PolicyVerdict::DryRun => {
            return respond_without_record(
                Status::DryRun,
                None,
                alerts,
                json!({"dry_run": "policy"}),
            );
        }
        _ if cap.dry_run => {
            return respond_without_record(
                Status::DryRun,
                None,
                alerts,
                json!({"dry_run": "capability"}),
            );
        }
        PolicyVerdict::RequireApproval { policies } => (
            Some(ApprovalReason::Policy),
            format!(
                "{} (policies: {})",
                ApprovalReason::Policy.explain(),
                policies.join(", ")
            ),
        ),
        PolicyVerdict::Allow => (
            forced,
            forced.map(|r| r.explain().to_owned()).unwrap_or_default(),
        ),
    };

    let (action, approval, status) = match reason {
        Some(reason) => {
            let ap = new_approval(req.new_approval_id, &record, cap, reason, detail, now);
            record.state = IntentState::PendingApproval;
            record.approval_id = Some(ap.id.clone());
            (Action::Respond, Some(ap), Status::PendingApproval)
        }
        None => {
            claim(&mut record, req.owner, cap, now);
            (Action::Execute, None, Status::InFlight)
        }
    };
    let mut outcome = outcome_of(&record, status, None);
    outcome.alerts = alerts;
    let detail = json!({"alerts": outcome.alerts, "approval_id": outcome.approval_id, "previous_generation": previous.map(|p| p.generation)});
    let event = event(
        AuditKind::Call,
        now,
        req.principal,
        previous,
        Some(&record),
        &outcome,
        &cap.name,
        req.run_id,
        detail,
    );
    Decision {
        action,
        record: Some(record),
        approval,
        outcome,
        event,
    }
}

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
    let mut next = record.clone();
    next.lease = None;
    next.updated_at = now;
    let status = settle_result(&mut next, &result, now);
    // An effect that did happen is the truth whatever happened meanwhile. Anything else
    // may only settle the claim it belongs to: `executions` is the fencing token, so a
    // late timeout from an attempt whose lease expired cannot overwrite a newer claim.
    let current_claim = execution == record.executions
        && matches!(record.state, IntentState::InFlight | IntentState::Unknown);
    let overwrite = current_claim
        || matches!(result, EffectResult::Applied { .. }) && record.state != IntentState::Applied;
    if !overwrite {
        let outcome = standing_outcome(record);
        let event = event(
            AuditKind::Effect,
            now,
            actor,
            Some(record),
            None,
            &outcome,
            &cap.name,
            record.run_id.as_deref(),
            json!({"late_result": format!("{result:?}")}),
        );
        return Decision {
            action: Action::Respond,
            record: None,
            approval: None,
            outcome,
            event,
        };
    }
    let outcome = outcome_of(&next, status, None);
    let event = event(
        AuditKind::Effect,
        now,
        actor,
        Some(record),
        Some(&next),
        &outcome,
        &cap.name,
        record.run_id.as_deref(),
        json!({"effect_ref": next.effect_ref}),
    );
    Decision {
        action: Action::Respond,
        record: Some(next),
        approval: None,
        outcome,
        event,
    }
}

/// What a completion of a claim from outside the gate's own execution does (see
/// [`complete_claim`]).
#[derive(Clone, Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "built once per completion; boxing buys nothing"
)]
pub enum Completion {
    /// The claim still holds the intent: commit this (its outcome is the answer).
    Record(Decision),
    /// This claim's completion with the same result was recorded already (a client
    /// retrying its own complete): answer what was recorded, write nothing.
    Recorded(Outcome),
    /// The claim no longer holds the intent: record nothing (`OG-0024`).
    Stale(Reason),
}

/// Why the claim `(generation, execution)` no longer holds `record` at `now`, or `None`
/// while it does: the intent is in flight for exactly that execution and its lease has
/// not expired.
pub fn stale_claim(
    record: &IntentRecord,
    generation: u32,
    execution: u32,
    now: Timestamp,
) -> Option<Reason> {
    let why = if record.generation != generation {
        format!(
            "the claim is for generation {generation}; the intent is at generation {} now",
            record.generation
        )
    } else if record.executions != execution {
        format!(
            "execution {execution} was superseded by execution {} of this intent",
            record.executions
        )
    } else if record.state != IntentState::InFlight {
        format!(
            "the intent is {} now; this claim no longer holds it",
            record.state.as_str()
        )
    } else {
        match &record.lease {
            Some(lease) if now < lease.expires_at => return None,
            Some(lease) => format!("the claim's lease expired at {}", lease.expires_at),
            None => "the claim holds no lease".to_owned(),
        }
    };
    Some(Reason::new(
        Code::StaleClaim,
        format!("{why}; nothing was recorded (the intent is reconciled like any other)"),
    ))
}

/// A completion from outside: what the holder of the claim `(generation, execution)`
/// says its execution did. Strict, unlike [`record_claim_effect`] (the gate's own
/// executions, whose late answers are still the truth): a claim that was superseded,
/// whose lease expired by `now`, or whose intent is no longer in flight for it records
/// nothing, whatever it says, so a worker that stalled past its lease can never
/// overwrite what the sweep or another attempt recorded. A repeat of the completion
/// that was recorded (the same execution, the intent settled exactly as this result
/// settles it) answers what was recorded.
pub fn complete_claim(
    record: &IntentRecord,
    generation: u32,
    execution: u32,
    result: EffectResult,
    cap: &Capability,
    actor: &str,
    now: Timestamp,
) -> Completion {
    let Some(stale) = stale_claim(record, generation, execution, now) else {
        return Completion::Record(record_claim_effect(
            record, execution, result, cap, actor, now,
        ));
    };
    if record.generation == generation
        && record.executions == execution
        && record.state != IntentState::InFlight
    {
        // Would this result have written the record as it stands? Then it did.
        let mut probe = record.clone();
        let status = settle_result(&mut probe, &result, now);
        let same = probe.state == record.state
            && probe.effect_ref == record.effect_ref
            && probe.result == record.result
            && probe.error == record.error;
        if same {
            return Completion::Recorded(outcome_of(record, status, None));
        }
    }
    Completion::Stale(stale)
}

/// A heartbeat of the claim `(generation, execution)`: a live lease runs on to `now`
/// plus the capability's lease (never shorter than it was). `Err`: the claim is stale
/// (see [`stale_claim`]) and nothing is written.
pub fn heartbeat_claim(
    record: &IntentRecord,
    generation: u32,
    execution: u32,
    cap: &Capability,
    actor: &str,
    now: Timestamp,
) -> Result<Decision, Reason> {
    if let Some(stale) = stale_claim(record, generation, execution, now) {
        return Err(stale);
    }
    let mut next = record.clone();
    next.updated_at = now;
    if let Some(lease) = next.lease.as_mut() {
        lease.expires_at = lease.expires_at.max(now + cap.lease);
    }
    let outcome = outcome_of(&next, Status::InFlight, None);
    let expires_at = next.lease.as_ref().map(|l| l.expires_at);
    let event = event(
        AuditKind::Effect,
        now,
        actor,
        Some(record),
        Some(&next),
        &outcome,
        &cap.name,
        record.run_id.as_deref(),
        json!({"heartbeat": {"execution": execution, "lease_expires_at": expires_at}}),
    );
    Ok(Decision {
        action: Action::Respond,
        record: Some(next),
        approval: None,
        outcome,
        event,
    })
}

/// Writes what one execution said into `next` (state, reference, answer, error) and
/// returns the status its caller hears. Shared by the gate's own recording
/// ([`record_claim_effect`]) and an outside completion ([`complete_claim`]), so both
/// store the same thing for the same answer.
fn settle_result(next: &mut IntentRecord, result: &EffectResult, now: Timestamp) -> Status {
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

/// A reconciliation read that changes no stored state (someone else resolved the
/// intent, or absence is not proven yet): the answer and its audit event only.
fn reconcile_unwritten(
    record: &IntentRecord,
    outcome: Outcome,
    cap: &Capability,
    actor: &str,
    now: Timestamp,
    detail: Value,
) -> Decision {
    let event = event(
        AuditKind::Reconcile,
        now,
        actor,
        Some(record),
        None,
        &outcome,
        &cap.name,
        record.run_id.as_deref(),
        detail,
    );
    Decision {
        action: Action::Respond,
        record: None,
        approval: None,
        outcome,
        event,
    }
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
    let mut next = record.clone();
    next.updated_at = now;
    if record.state != IntentState::Unknown {
        // Someone else resolved it meanwhile.
        let outcome = standing_outcome(record);
        return reconcile_unwritten(record, outcome, cap, actor, now, json!({"stale": true}));
    }
    let (action, approval, outcome, detail) = match result {
        ReconcileResult::Found { effect_ref, result } => {
            settle_applied(&mut next, effect_ref, result, now);
            let outcome = outcome_of(&next, Status::Replayed, None);
            (
                Action::Respond,
                None,
                outcome,
                json!({"reconciled": "found", "effect_ref": next.effect_ref}),
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
                return reconcile_unwritten(record, outcome, cap, actor, now, detail);
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
            return reconcile_unwritten(record, outcome, cap, actor, now, detail);
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
    let event = event(
        AuditKind::Reconcile,
        now,
        actor,
        Some(record),
        Some(&next),
        &outcome,
        &cap.name,
        record.run_id.as_deref(),
        detail,
    );
    Decision {
        action,
        record: Some(next),
        approval,
        outcome,
        event,
    }
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
    owner: &str,
    now: Timestamp,
) -> ApprovalDecision {
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
                   detail: Value| {
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
            return decided(
                Action::Respond,
                None,
                None,
                standing_outcome(record),
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
    } else if approval.args_digest != record.args_digest
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
        Choice::Deny => {
            ap.state = ApprovalState::Denied;
            settle_refusal(&mut next, approval.reason, now);
            next.error = Some(Reason::new(
                Code::ApprovalDenied,
                format!("denied by {actor}"),
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
                json!({"sweep": "found", "effect_ref": next.effect_ref}),
            )
        }
        ReconcileResult::NotFound => {
            next.state = IntentState::NotApplied;
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
        ReconcileResult::Undecidable { .. } => return None,
    };
    let outcome = outcome_of(&next, status, None);
    let event = event(
        AuditKind::Reconcile,
        now,
        "oncegate-sweep",
        Some(record),
        Some(&next),
        &outcome,
        &cap.name,
        record.run_id.as_deref(),
        detail,
    );
    Some(Decision {
        action: Action::Respond,
        record: Some(next),
        approval: None,
        outcome,
        event,
    })
}
