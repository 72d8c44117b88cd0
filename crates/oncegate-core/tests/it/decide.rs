//! The decision state machine, table-driven over (state x request x time).
//!
//! Why one file: one table of transitions, read top to bottom against docs/design.md.

use jiff::{SignedDuration, Timestamp};
use oncegate_core::codes::Code;
use oncegate_core::config::{Capability, OnUnknown, Role, UpstreamKind};
use oncegate_core::decide::{
    Action, ApprovalDecision, CallRequest, Choice, EffectResult, Executes, ReconcileResult,
    after_reconcile, after_sweep, decide, decide_approval, record_effect,
};
use oncegate_core::intent::{
    Alert, Approval, ApprovalReason, ApprovalState, IntentRecord, IntentState, Lease, Status,
};
use oncegate_core::key::{CallScope, DerivedKey, derive};
use oncegate_core::policy::PolicyVerdict;
use serde_json::json;

use crate::payments;

fn t0() -> Timestamp {
    "2026-11-30T10:00:00Z".parse().unwrap()
}

fn mins(m: i64) -> SignedDuration {
    SignedDuration::from_mins(m)
}

struct Fixture {
    cap: Capability,
    derived: DerivedKey,
    args: serde_json::Value,
}

fn fixture(capability: &str) -> Fixture {
    fixture_with(capability, |c| c)
}

fn fixture_with(capability: &str, tweak: impl FnOnce(Capability) -> Capability) -> Fixture {
    let registry = payments();
    let cap = tweak((**registry.capability(capability).unwrap()).clone());
    let args = match capability {
        "send_email" => json!({"order_id": "A-1", "to": "a@b.co", "template": "receipt"}),
        "append_ledger" => json!({"entry_ref": "E-1", "account": "4000", "amount": "1.00"}),
        _ => json!({"order_id": "A-1", "amount": "12.50"}),
    };
    let derived = derive(
        "acme",
        "planner",
        &cap,
        &args,
        &CallScope {
            run_id: Some("run-1"),
            step_id: Some("s1"),
        },
        t0(),
        &registry.gateway.time_zone,
    )
    .unwrap();
    Fixture { cap, derived, args }
}

impl Fixture {
    fn req<'a>(
        &'a self,
        approval: Option<&'a Approval>,
        other: Option<&'a IntentRecord>,
    ) -> CallRequest<'a> {
        CallRequest {
            principal: "planner",
            tenant: "acme",
            derived: &self.derived,
            arguments: &self.args,
            run_id: Some("run-1"),
            step_id: Some("s1"),
            owner: "gw-1",
            approval,
            other_run: other,
            kill_switch: None,
            held: None,
            new_approval_id: "ap_new",
            rolled_back_at: None,
            caller_sends: false,
        }
    }

    /// A stored record in `state`, created at t0.
    fn record(&self, state: IntentState) -> IntentRecord {
        let first = decide(
            None,
            &self.req(None, None),
            &self.cap,
            &PolicyVerdict::Allow,
            t0(),
        );
        let mut r = first.record.unwrap();
        r.version = 1;
        r.state = state;
        match state {
            IntentState::InFlight => {
                r.lease = Some(Lease {
                    owner: "gw-0".into(),
                    expires_at: t0() + self.cap.lease,
                    nonce: None,
                })
            }
            IntentState::Applied => {
                r.lease = None;
                r.effect_ref = Some("ch_1".into());
                r.result = Some(json!({"id": "ch_1"}));
            }
            _ => r.lease = None,
        }
        r
    }
}

struct Row {
    name: &'static str,
    capability: &'static str,
    state: Option<IntentState>,
    at: SignedDuration,
    verdict: PolicyVerdict,
    action: Action,
    status: Status,
    next_state: Option<IntentState>,
    generation: u32,
}

fn row(
    name: &'static str,
    capability: &'static str,
    state: Option<IntentState>,
    at: SignedDuration,
    action: Action,
    status: Status,
    next_state: Option<IntentState>,
) -> Row {
    Row {
        name,
        capability,
        state,
        at,
        verdict: PolicyVerdict::Allow,
        action,
        status,
        next_state,
        generation: 1,
    }
}

#[test]
fn transitions() {
    use IntentState as S;
    let require = PolicyVerdict::RequireApproval {
        policies: vec!["p".into()],
    };
    let deny = PolicyVerdict::Deny {
        reason: "no".into(),
    };
    let day = SignedDuration::from_hours(24);
    let rows = vec![
        row(
            "first call claims",
            "charge_card",
            None,
            mins(0),
            Action::Execute,
            Status::InFlight,
            Some(S::InFlight),
        ),
        Row {
            verdict: deny.clone(),
            ..row(
                "first call denied by policy writes no intent",
                "charge_card",
                None,
                mins(0),
                Action::Respond,
                Status::Denied,
                None,
            )
        },
        Row {
            verdict: require.clone(),
            ..row(
                "first call held by policy",
                "refund",
                None,
                mins(0),
                Action::Respond,
                Status::PendingApproval,
                Some(S::PendingApproval),
            )
        },
        Row {
            verdict: PolicyVerdict::DryRun,
            ..row(
                "dry run executes nothing",
                "charge_card",
                None,
                mins(0),
                Action::Respond,
                Status::DryRun,
                None,
            )
        },
        row(
            "repeat while lease live is in flight",
            "charge_card",
            Some(S::InFlight),
            mins(0),
            Action::Replay,
            Status::InFlight,
            None,
        ),
        row(
            "expired lease is unknown, reconciled, never re-executed",
            "charge_card",
            Some(S::InFlight),
            mins(5),
            Action::Reconcile,
            Status::Unknown,
            Some(S::Unknown),
        ),
        row(
            "expired lease escalates where there is no reconciler",
            "append_ledger",
            Some(S::InFlight),
            mins(5),
            Action::Respond,
            Status::PendingApproval,
            Some(S::PendingApproval),
        ),
        row(
            "applied repeat inside window replays",
            "charge_card",
            Some(S::Applied),
            mins(60),
            Action::Replay,
            Status::Replayed,
            None,
        ),
        row(
            "definite failure inside window replays",
            "charge_card",
            Some(S::Failed),
            mins(60),
            Action::Replay,
            Status::Replayed,
            None,
        ),
        row(
            "unknown + reconcile reconciles",
            "charge_card",
            Some(S::Unknown),
            mins(1),
            Action::Reconcile,
            Status::Unknown,
            Some(S::Unknown),
        ),
        row(
            "unknown + escalate asks a human",
            "append_ledger",
            Some(S::Unknown),
            mins(1),
            Action::Respond,
            Status::PendingApproval,
            Some(S::PendingApproval),
        ),
        row(
            "not_applied re-executes with the same key",
            "charge_card",
            Some(S::NotApplied),
            mins(1),
            Action::Execute,
            Status::InFlight,
            Some(S::InFlight),
        ),
        row(
            "denied inside window stays denied",
            "charge_card",
            Some(S::Denied),
            mins(1),
            Action::Replay,
            Status::Denied,
            None,
        ),
        row(
            "pending repeat gets the same approval",
            "refund",
            Some(S::PendingApproval),
            mins(1),
            Action::Replay,
            Status::PendingApproval,
            None,
        ),
        Row {
            generation: 2,
            ..row(
                "applied outside window: next generation held for a human",
                "refund",
                Some(S::Applied),
                day + mins(1),
                Action::Respond,
                Status::PendingApproval,
                Some(S::PendingApproval),
            )
        },
        Row {
            generation: 2,
            verdict: deny,
            ..row(
                "outside window faces policy: denied",
                "refund",
                Some(S::Applied),
                day + mins(1),
                Action::Respond,
                Status::Denied,
                None,
            )
        },
    ];
    for r in rows {
        let f = fixture(r.capability);
        let existing = r.state.map(|s| f.record(s));
        let approval = existing
            .as_ref()
            .filter(|e| e.state == S::PendingApproval)
            .map(|e| pending_approval(&f, e));
        let d = decide(
            existing.as_ref(),
            &f.req(approval.as_ref(), None),
            &f.cap,
            &r.verdict,
            t0() + r.at,
        );
        assert_eq!(d.action, r.action, "{}: action", r.name);
        assert_eq!(d.outcome.status, r.status, "{}: status", r.name);
        assert_eq!(
            d.record.as_ref().map(|x| x.state),
            r.next_state,
            "{}: next state",
            r.name
        );
        assert_eq!(d.outcome.generation, r.generation, "{}: generation", r.name);
        assert_eq!(
            d.outcome.key.as_ref(),
            Some(&f.derived.key),
            "{}: key",
            r.name
        );
        if let Some(rec) = &d.record {
            if let Some(e) = &existing
                && rec.generation == e.generation
            {
                let counted = u32::from(matches!(r.action, Action::Execute | Action::Reconcile));
                assert_eq!(
                    rec.attempts,
                    e.attempts + counted,
                    "{}: attempts count executions and reconciliations, never replays",
                    r.name
                );
                assert_eq!(
                    rec.version, e.version,
                    "{}: CAS against the read version",
                    r.name
                );
            }
            if rec.state == S::InFlight && r.action == Action::Execute {
                assert_eq!(rec.lease.as_ref().unwrap().owner, "gw-1", "{}", r.name);
            }
        }
        assert_eq!(d.event.status, Some(r.status), "{}: audited", r.name);
    }
}

fn pending_approval(f: &Fixture, record: &IntentRecord) -> Approval {
    let mut r = record.clone();
    r.approval_id = Some("ap_1".into());
    Approval {
        id: "ap_1".into(),
        key: r.key.clone(),
        generation: r.generation,
        capability: f.cap.name.clone(),
        principal: "planner".into(),
        args_digest: r.args_digest.clone(),
        policy_hash: f.cap.policy_hash().into(),
        reason: ApprovalReason::Policy,
        detail: String::new(),
        state: ApprovalState::Pending,
        decided_by: None,
        decided_at: None,
        created_at: t0(),
        expires_at: t0() + f.cap.approval_ttl,
        version: 1,
    }
}

#[test]
fn unknown_with_refuse_is_refused() {
    let f = fixture_with("append_ledger", |mut c| {
        c.on_unknown = oncegate_core::config::OnUnknown::Refuse;
        c
    });
    let d = decide(
        Some(&f.record(IntentState::Unknown)),
        &f.req(None, None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0(),
    );
    assert_eq!(
        (d.action, d.outcome.status),
        (Action::Respond, Status::Refused)
    );
    assert_eq!(d.outcome.reason.unwrap().code, Code::UnknownRefused);
}

#[test]
fn attempt_ceiling_counts_executions_and_reconciliations_then_refuses() {
    let f = fixture("charge_card");
    // Ten reconciliation reads or executions so far: the eleventh is refused and trips.
    let mut rec = f.record(IntentState::Unknown);
    rec.attempts = 10;
    let d = decide(
        Some(&rec),
        &f.req(None, None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + mins(1),
    );
    assert_eq!(d.outcome.status, Status::Refused);
    assert_eq!(
        d.outcome.reason.as_ref().unwrap().code,
        Code::AttemptCeiling
    );
    assert!(
        d.outcome
            .alerts
            .contains(&Alert::BreakerTripped { ceiling: 10 })
    );
    let tripped = d.record.unwrap();
    assert!(tripped.breaker_tripped);
    assert_eq!(tripped.attempts, 10, "a refusal is not an attempt");
    let again = decide(
        Some(&tripped),
        &f.req(None, None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + mins(2),
    );
    assert_eq!(again.outcome.status, Status::Refused);
    assert!(
        again.record.is_none(),
        "a tripped breaker refuses without writing the intent"
    );
    // Nine so far: the tenth reconciliation still runs, and counts.
    rec.attempts = 9;
    let d = decide(
        Some(&rec),
        &f.req(None, None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + mins(1),
    );
    assert_eq!(d.action, Action::Reconcile);
    assert_eq!(d.record.unwrap().attempts, 10);
}

#[test]
fn a_repeat_of_an_applied_intent_always_replays_and_writes_nothing() {
    let f = fixture("charge_card");
    let mut rec = f.record(IntentState::Applied);
    rec.effect_ref = Some("ch_1".into());
    for (attempts, tripped) in [(1, false), (10, false), (10, true), (500, true)] {
        rec.attempts = attempts;
        rec.breaker_tripped = tripped;
        let d = decide(
            Some(&rec),
            &f.req(None, None),
            &f.cap,
            &PolicyVerdict::Allow,
            t0() + mins(1),
        );
        assert_eq!(
            (d.action, d.outcome.status),
            (Action::Replay, Status::Replayed),
            "attempts {attempts}, breaker {tripped}"
        );
        assert_eq!(d.outcome.effect_ref.as_deref(), Some("ch_1"));
        assert!(d.record.is_none() && d.approval.is_none());
    }
}

#[test]
fn a_not_applied_intent_executes_with_the_arguments_of_the_call_that_asks() {
    let f = fixture("send_email");
    let mut rec = f.record(IntentState::NotApplied);
    let first = json!({"order_id": "A-1", "to": "a@b.co", "template": "receipt", "body": "first, rejected"});
    rec.arguments = first.clone();
    let d = decide(
        Some(&rec),
        &f.req(None, None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + mins(1),
    );
    assert_eq!(d.action, Action::Execute);
    assert_eq!(
        d.record.unwrap().arguments,
        f.args,
        "the re-execution carries today's call"
    );
    // A provider that dedupes on the key compares bodies: it gets the first one again.
    let f = fixture("charge_card");
    let mut rec = f.record(IntentState::NotApplied);
    rec.arguments = json!({"order_id": "A-1", "amount": "12.50", "memo": "first"});
    let d = decide(
        Some(&rec),
        &f.req(None, None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + mins(1),
    );
    assert_eq!(d.record.unwrap().arguments, rec.arguments);
}

#[test]
fn cross_run_follows_policy() {
    // charge_card: global scope, so a second run hits the same key: replay + alert.
    let f = fixture("charge_card");
    let mut rec = f.record(IntentState::Applied);
    rec.run_id = Some("run-0".into());
    let d = decide(
        Some(&rec),
        &f.req(None, None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + mins(1),
    );
    assert_eq!(d.outcome.status, Status::Replayed);
    assert!(matches!(
        d.outcome.alerts.as_slice(),
        [Alert::CrossRun { .. }]
    ));

    // append_ledger: step scope; the same intent from another run is found by cross key.
    let f = fixture("append_ledger");
    let mut other = f.record(IntentState::Applied);
    other.run_id = Some("run-0".into());
    let held = decide(
        None,
        &f.req(None, Some(&other)),
        &f.cap,
        &PolicyVerdict::Allow,
        t0(),
    );
    assert_eq!(
        held.outcome.status,
        Status::PendingApproval,
        "cross_run = require_approval by default"
    );
    assert_eq!(held.approval.unwrap().reason, ApprovalReason::CrossRun);

    let refuse = fixture_with("append_ledger", |mut c| {
        c.cross_run = oncegate_core::config::CrossRun::Refuse;
        c
    });
    let d = decide(
        None,
        &refuse.req(None, Some(&other)),
        &refuse.cap,
        &PolicyVerdict::Allow,
        t0(),
    );
    assert_eq!(d.outcome.reason.unwrap().code, Code::CrossRunRefused);
    assert!(d.record.is_none());

    let allow = fixture_with("append_ledger", |mut c| {
        c.cross_run = oncegate_core::config::CrossRun::Allow;
        c
    });
    let d = decide(
        None,
        &allow.req(None, Some(&other)),
        &allow.cap,
        &PolicyVerdict::Allow,
        t0(),
    );
    assert_eq!(d.action, Action::Execute);
    assert!(
        !d.outcome.alerts.is_empty(),
        "allowed cross-run repeats still alert"
    );
}

#[test]
fn effects_are_recorded_and_late_failures_do_not_overwrite() {
    let f = fixture("charge_card");
    let claimed = f.record(IntentState::InFlight);
    let applied = record_effect(
        &claimed,
        EffectResult::Applied {
            effect_ref: Some("ch_9".into()),
            result: json!({"id": "ch_9"}),
        },
        &f.cap,
        "planner",
        t0(),
    );
    assert_eq!(applied.outcome.status, Status::Applied);
    let rec = applied.record.unwrap();
    assert_eq!(
        (rec.state, rec.effect_ref.as_deref(), rec.lease.is_none()),
        (IntentState::Applied, Some("ch_9"), true)
    );

    for (result, state, status) in [
        (
            EffectResult::Failed {
                result: json!({"error": "card_declined"}),
                message: "402".into(),
            },
            IntentState::Failed,
            Status::Failed,
        ),
        (
            EffectResult::Unknown {
                message: "timeout".into(),
            },
            IntentState::Unknown,
            Status::Unknown,
        ),
        (
            EffectResult::NotSent {
                message: "connection refused".into(),
            },
            IntentState::NotApplied,
            Status::Failed,
        ),
    ] {
        let d = record_effect(&claimed, result, &f.cap, "planner", t0());
        assert_eq!((d.record.unwrap().state, d.outcome.status), (state, status));
    }
    // An applied intent is never downgraded by a late timeout.
    let late = record_effect(
        &rec,
        EffectResult::Unknown {
            message: "late".into(),
        },
        &f.cap,
        "planner",
        t0(),
    );
    assert!(late.record.is_none());
    assert_eq!(late.outcome.status, Status::Replayed);
}

#[test]
fn reconciliation_outcomes() {
    let f = fixture("charge_card");
    let unknown = f.record(IntentState::Unknown);
    let found = after_reconcile(
        &unknown,
        ReconcileResult::Found {
            effect_ref: Some("ch_1".into()),
            result: json!({}),
        },
        &f.cap,
        "planner",
        "gw-1",
        "ap_x",
        false,
        t0(),
    );
    assert_eq!(
        (found.action, found.outcome.status),
        (Action::Respond, Status::Replayed)
    );
    assert_eq!(found.record.unwrap().effect_ref.as_deref(), Some("ch_1"));

    let absent = after_reconcile(
        &unknown,
        ReconcileResult::NotFound,
        &f.cap,
        "planner",
        "gw-1",
        "ap_x",
        false,
        t0(),
    );
    assert_eq!(absent.action, Action::Execute);
    let rec = absent.record.unwrap();
    assert_eq!(
        (rec.key.clone(), rec.generation),
        (unknown.key.clone(), unknown.generation),
        "same key, same generation"
    );

    let undecidable = after_reconcile(
        &unknown,
        ReconcileResult::Undecidable {
            message: "502".into(),
        },
        &f.cap,
        "planner",
        "gw-1",
        "ap_x",
        false,
        t0(),
    );
    assert_eq!(undecidable.outcome.status, Status::PendingApproval);
    let ap = undecidable.approval.unwrap();
    assert_eq!(ap.reason, ApprovalReason::UnknownFirstAttempt);
    assert!(
        ap.detail.contains("UNKNOWN"),
        "the approver is told the first attempt's status is unknown"
    );
}

#[test]
fn approvals_are_single_use_idempotent_and_bound() {
    let f = fixture("refund");
    let mut held = f.record(IntentState::PendingApproval);
    held.approval_id = Some("ap_1".into());
    let ap = pending_approval(&f, &held);

    let agent = decide_approval(
        &held,
        &ap,
        "subagent",
        Role::Agent,
        Choice::Approve,
        &f.cap,
        Executes::Here { owner: "gw" },
        t0(),
    );
    assert!(matches!(agent, ApprovalDecision::Rejected(r) if r.code == Code::Forbidden));
    let own = decide_approval(
        &held,
        &ap,
        "planner",
        Role::Approver,
        Choice::Approve,
        &f.cap,
        Executes::Here { owner: "gw" },
        t0(),
    );
    assert!(
        matches!(own, ApprovalDecision::Rejected(r) if r.code == Code::Forbidden),
        "nobody approves their own call"
    );

    let ApprovalDecision::Decided {
        action,
        record,
        approval,
        ..
    } = decide_approval(
        &held,
        &ap,
        "alice",
        Role::Approver,
        Choice::Approve,
        &f.cap,
        Executes::Here { owner: "gw" },
        t0(),
    )
    else {
        panic!("approve must decide");
    };
    assert_eq!(action, Action::Execute);
    let approved = approval.unwrap();
    assert_eq!(approved.state, ApprovalState::Approved);
    let mut executing = record.unwrap();
    assert_eq!(executing.state, IntentState::InFlight);

    // A second click (or a second approver) executes nothing and returns the first result.
    executing.state = IntentState::Applied;
    executing.effect_ref = Some("re_1".into());
    let ApprovalDecision::Decided {
        action,
        record,
        outcome,
        ..
    } = decide_approval(
        &executing,
        &approved,
        "bob",
        Role::Approver,
        Choice::Approve,
        &f.cap,
        Executes::Here { owner: "gw" },
        t0(),
    )
    else {
        panic!("a second approve answers");
    };
    assert_eq!((action, record.is_none()), (Action::Respond, true));
    assert_eq!(
        (outcome.status, outcome.effect_ref.as_deref()),
        (Status::Replayed, Some("re_1"))
    );

    // Bound to the policy hash and expiry.
    let mut changed = ap.clone();
    changed.policy_hash = "old".into();
    let ApprovalDecision::Decided {
        approval, outcome, ..
    } = decide_approval(
        &held,
        &changed,
        "alice",
        Role::Approver,
        Choice::Approve,
        &f.cap,
        Executes::Here { owner: "gw" },
        t0(),
    )
    else {
        panic!()
    };
    assert_eq!(
        (approval.unwrap().state, outcome.reason.unwrap().code),
        (ApprovalState::Void, Code::ApprovalVoid)
    );
    let ApprovalDecision::Decided { approval, .. } = decide_approval(
        &held,
        &ap,
        "alice",
        Role::Approver,
        Choice::Approve,
        &f.cap,
        Executes::Here { owner: "gw" },
        t0() + SignedDuration::from_hours(25),
    ) else {
        panic!()
    };
    assert_eq!(approval.unwrap().state, ApprovalState::Expired);
    let mut other_args = ap.clone();
    other_args.args_digest = "different".into();
    let ApprovalDecision::Decided { approval, .. } = decide_approval(
        &held,
        &other_args,
        "alice",
        Role::Approver,
        Choice::Approve,
        &f.cap,
        Executes::Here { owner: "gw" },
        t0(),
    ) else {
        panic!()
    };
    assert_eq!(approval.unwrap().state, ApprovalState::Void);

    // Deny is final.
    let ApprovalDecision::Decided { record, .. } = decide_approval(
        &held,
        &ap,
        "alice",
        Role::Approver,
        Choice::Deny,
        &f.cap,
        Executes::Here { owner: "gw" },
        t0(),
    ) else {
        panic!()
    };
    assert_eq!(record.unwrap().state, IntentState::Denied);
}

#[test]
fn expired_approval_denies_the_repeat() {
    let f = fixture("refund");
    let mut held = f.record(IntentState::PendingApproval);
    held.approval_id = Some("ap_1".into());
    let ap = pending_approval(&f, &held);
    let d = decide(
        Some(&held),
        &f.req(Some(&ap), None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + SignedDuration::from_hours(25),
    );
    assert_eq!(d.outcome.status, Status::Denied);
    assert_eq!(d.approval.unwrap().state, ApprovalState::Expired);
}

#[test]
fn kill_switch_refuses() {
    let f = fixture("charge_card");
    let mut req = f.req(None, None);
    req.kill_switch = Some("charge_card switched off by ops");
    let d = decide(None, &req, &f.cap, &PolicyVerdict::Allow, t0());
    assert_eq!(
        (d.outcome.status, d.outcome.reason.unwrap().code),
        (Status::Refused, Code::KillSwitch)
    );
}

#[test]
fn kill_switch_still_replays_what_already_happened() {
    let f = fixture("charge_card");
    let mut req = f.req(None, None);
    req.kill_switch = Some("charge_card switched off by ops");
    let applied = f.record(IntentState::Applied);
    let d = decide(Some(&applied), &req, &f.cap, &PolicyVerdict::Allow, t0());
    assert_eq!(d.outcome.status, Status::Replayed, "{:?}", d.outcome);
    assert_eq!(d.action, Action::Replay);
    assert_eq!(
        d.event.detail["kill_switch"], "charge_card switched off by ops",
        "the audit says the switch was on"
    );
    // Anything that would run something is refused.
    for state in [IntentState::Unknown, IntentState::NotApplied] {
        let d = decide(
            Some(&f.record(state)),
            &req,
            &f.cap,
            &PolicyVerdict::Allow,
            t0(),
        );
        assert_eq!(
            (d.outcome.status, d.outcome.reason.map(|r| r.code)),
            (Status::Refused, Some(Code::KillSwitch)),
            "{state:?}"
        );
    }
}

#[test]
fn idempotent_writes_retry_unknowns_and_reads_pass_through() {
    let f = fixture_with("charge_card", |mut c| {
        c.category = oncegate_core::config::Category::IdempotentWrite;
        c.on_unknown = oncegate_core::config::OnUnknown::Retry;
        c
    });
    let d = decide(
        Some(&f.record(IntentState::Unknown)),
        &f.req(None, None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + mins(1),
    );
    assert_eq!(
        d.action,
        Action::Execute,
        "an idempotent write may re-execute an unknown with the same key"
    );
    assert_eq!(d.record.unwrap().executions, 2);

    let read = fixture_with("charge_card", |mut c| {
        c.category = oncegate_core::config::Category::Read;
        c
    });
    let d = decide(
        None,
        &read.req(None, None),
        &read.cap,
        &PolicyVerdict::Allow,
        t0(),
    );
    assert_eq!(d.action, Action::PassThrough);
    assert!(d.record.is_none(), "reads claim nothing");
}

#[test]
fn a_late_result_cannot_overwrite_a_newer_claim() {
    use oncegate_core::decide::record_claim_effect;
    let f = fixture("charge_card");
    // Claim #1 stalled past its lease; a repeat reconciled (not found) and claimed #2.
    let mut newer = f.record(IntentState::InFlight);
    newer.executions = 2;
    for late in [
        EffectResult::Unknown {
            message: "timeout".into(),
        },
        EffectResult::NotSent {
            message: "refused".into(),
        },
    ] {
        let d = record_claim_effect(&newer, 1, late, &f.cap, "planner", t0());
        assert!(
            d.record.is_none(),
            "a stale attempt's non-result must not settle claim #2"
        );
        assert_eq!(d.outcome.status, Status::InFlight);
    }
    // But a late *applied* is the truth: it happened.
    let d = record_claim_effect(
        &newer,
        1,
        EffectResult::Applied {
            effect_ref: Some("ch_1".into()),
            result: json!({}),
        },
        &f.cap,
        "planner",
        t0(),
    );
    assert_eq!(d.record.unwrap().state, IntentState::Applied);
}

#[test]
fn the_replay_window_runs_from_when_the_intent_settled() {
    let f = fixture("charge_card");
    let held = f.record(IntentState::InFlight);
    // Applied 23 hours after the claim (e.g. after a long approval).
    let applied = record_effect(
        &held,
        EffectResult::Applied {
            effect_ref: Some("ch_1".into()),
            result: json!({}),
        },
        &f.cap,
        "planner",
        t0() + SignedDuration::from_hours(23),
    )
    .record
    .unwrap();
    let d = decide(
        Some(&applied),
        &f.req(None, None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + SignedDuration::from_hours(25),
    );
    assert_eq!(
        (d.outcome.status, d.outcome.generation),
        (Status::Replayed, 1),
        "still inside the window counted from the effect"
    );
}

#[test]
fn denying_the_re_execution_of_an_unknown_keeps_it_unknown() {
    let f = fixture("append_ledger");
    let mut held = f.record(IntentState::PendingApproval);
    held.approval_id = Some("ap_1".into());
    let mut ap = pending_approval(&f, &held);
    ap.reason = ApprovalReason::UnknownFirstAttempt;
    let ApprovalDecision::Decided { record, .. } = decide_approval(
        &held,
        &ap,
        "alice",
        Role::Approver,
        Choice::Deny,
        &f.cap,
        Executes::Here { owner: "gw" },
        t0(),
    ) else {
        panic!()
    };
    assert_eq!(
        record.unwrap().state,
        IntentState::Unknown,
        "the effect may have happened: never denied, never a fresh intent"
    );
}

#[test]
fn a_deny_after_an_approve_answers_the_first_outcome_and_changes_nothing() {
    let f = fixture("refund");
    let mut applied = f.record(IntentState::Applied);
    applied.effect_ref = Some("re_1".into());
    applied.approval_id = Some("ap_1".into());
    let mut ap = pending_approval(&f, &applied);
    ap.state = ApprovalState::Approved;
    ap.decided_by = Some("alice".into());
    let ApprovalDecision::Decided {
        action,
        record,
        approval,
        outcome,
        ..
    } = decide_approval(
        &applied,
        &ap,
        "bob",
        Role::Approver,
        Choice::Deny,
        &f.cap,
        Executes::Here { owner: "gw" },
        t0(),
    )
    else {
        panic!("a late deny is answered, not rejected")
    };
    assert_eq!(action, Action::Respond);
    assert!(record.is_none() && approval.is_none(), "nothing is written");
    assert_eq!(
        (outcome.status, outcome.effect_ref.as_deref()),
        (Status::Replayed, Some("re_1"))
    );
}

fn secs(s: i64) -> SignedDuration {
    SignedDuration::from_secs(s)
}

/// An intent whose execution came back unknown at `ended` (timeout, reset after send).
fn unknown_since(f: &Fixture, ended: Timestamp) -> IntentRecord {
    let mut r = f.record(IntentState::Unknown);
    r.attempt_ended_at = Some(ended);
    r.updated_at = ended;
    r
}

fn reconcile_at(
    f: &Fixture,
    record: &IntentRecord,
    result: ReconcileResult,
    running: bool,
    at: Timestamp,
) -> oncegate_core::decide::Decision {
    after_reconcile(
        record, result, &f.cap, "planner", "gw-1", "ap_x", running, at,
    )
}

#[test]
fn the_default_settle_horizon_is_the_timeout_plus_late_processing() {
    let registry = payments();
    for name in ["send_email", "refund"] {
        let cap = registry.capability(name).unwrap();
        let timeout = cap.upstream.as_ref().unwrap().timeout;
        assert_eq!(
            cap.settle_horizon,
            timeout + secs(120),
            "{name}: the upstream timeout plus 120 s"
        );
    }
    // charge_card is an MCP upstream: its call may keep running after the timeout, in a
    // process another replica cannot ask, for up to the late-answer limit.
    let cap = registry.capability("charge_card").unwrap();
    let timeout = cap.upstream.as_ref().unwrap().timeout;
    assert_eq!(
        cap.settle_horizon,
        timeout + secs(600) + secs(120),
        "charge_card: the timeout, the late-answer limit and 120 s"
    );
}

#[test]
fn not_found_before_the_settle_horizon_is_not_absence() {
    let f = fixture("send_email");
    let ended = t0() + secs(5);
    let unknown = unknown_since(&f, ended);
    // The provider commits after the timeout and after this read: a re-execution now
    // would be a second email. The intent stays unknown; nothing is written but the
    // audit event; nobody is asked to approve a re-execution.
    let early = reconcile_at(
        &f,
        &unknown,
        ReconcileResult::NotFound,
        false,
        ended + secs(3),
    );
    assert_eq!(early.action, Action::Respond);
    assert!(early.record.is_none(), "the intent stays as it is");
    assert!(early.approval.is_none(), "no escalation within the horizon");
    assert_eq!(early.outcome.status, Status::Unknown);
    assert_eq!(early.outcome.state, Some(IntentState::Unknown));
    let reason = early.outcome.reason.unwrap();
    assert_eq!(reason.code, Code::Settling);
    assert!(
        reason.message.contains("do not call again"),
        "{}",
        reason.message
    );
    assert_eq!(early.event.detail["reconciled"], "not_found_yet");

    // Just before the horizon: still undecidable. From the horizon on: absence.
    let horizon = ended + f.cap.settle_horizon;
    let before = reconcile_at(
        &f,
        &unknown,
        ReconcileResult::NotFound,
        false,
        horizon - SignedDuration::from_millis(1),
    );
    assert_eq!(before.action, Action::Respond);
    let after = reconcile_at(&f, &unknown, ReconcileResult::NotFound, false, horizon);
    assert_eq!(
        after.action,
        Action::Execute,
        "after the horizon, not found is absence"
    );
    let claimed = after.record.unwrap();
    assert_eq!(claimed.state, IntentState::InFlight);
    assert_eq!(
        claimed.attempt_ended_at, None,
        "a new attempt has not ended"
    );

    // Found is the truth at any time.
    let found = reconcile_at(
        &f,
        &unknown,
        ReconcileResult::Found {
            effect_ref: Some("em_1".into()),
            result: json!({"id": "em_1"}),
        },
        true,
        ended + secs(1),
    );
    assert_eq!(found.record.unwrap().state, IntentState::Applied);
}

#[test]
fn a_running_call_keeps_not_found_undecidable_past_the_horizon() {
    let f = fixture("send_email");
    let unknown = unknown_since(&f, t0());
    let late = t0() + f.cap.settle_horizon + mins(60);
    let d = reconcile_at(&f, &unknown, ReconcileResult::NotFound, true, late);
    assert_eq!(
        (d.action, d.outcome.status),
        (Action::Respond, Status::Unknown)
    );
    assert!(d.record.is_none());
    assert!(d.outcome.reason.unwrap().message.contains("still running"));
    assert!(
        after_sweep(&unknown, ReconcileResult::NotFound, &f.cap, true, late).is_none(),
        "the sweep concludes nothing while the call runs"
    );
    // A failed read while the call runs is not escalated either: an approval would
    // execute beside the running call.
    let read_failed = ReconcileResult::Undecidable {
        message: "502".into(),
    };
    let held = reconcile_at(&f, &unknown, read_failed.clone(), true, late);
    assert_eq!(held.outcome.status, Status::Unknown);
    assert!(held.approval.is_none() && held.record.is_none());
    let escalated = reconcile_at(&f, &unknown, read_failed, false, late);
    assert_eq!(escalated.outcome.status, Status::PendingApproval);
    let done = after_sweep(&unknown, ReconcileResult::NotFound, &f.cap, false, late).unwrap();
    assert_eq!(done.record.unwrap().state, IntentState::NotApplied);
}

#[test]
fn keyed_not_found_re_executes_at_once_with_the_same_key() {
    for name in ["refund", "charge_card"] {
        let f = fixture(name);
        let unknown = unknown_since(&f, t0());
        // The provider dedupes on the key: its dedupe is the proof, even while the
        // first call may still land (or still runs).
        let d = reconcile_at(
            &f,
            &unknown,
            ReconcileResult::NotFound,
            true,
            t0() + secs(1),
        );
        assert_eq!(d.action, Action::Execute, "{name}");
        let claimed = d.record.unwrap();
        assert_eq!(
            claimed.upstream_key(),
            unknown.upstream_key(),
            "{name}: same key"
        );
        assert_eq!(claimed.executions, unknown.executions + 1);
    }
}

/// A re-execution of an unknown intent that sends nothing (a refused connection, a
/// 429) proves nothing about the earlier attempt, which may still land: the intent stays
/// unknown (keeping its budget, reconciled from the earlier attempt's end), never
/// `not_applied`. Found by the simulation: an escalated payout whose approved re-execution
/// was refused settled `not_applied`, released its budget, and a second payout passed
/// the limit while the first had been paid.
#[test]
fn a_re_execution_that_sends_nothing_leaves_an_unknown_intent_unknown() {
    let not_sent = || EffectResult::NotSent {
        message: "connection refused".into(),
    };
    let ended = t0();
    // An approved re-execution of an unknown first attempt.
    let f = fixture("append_ledger");
    let mut held = unknown_since(&f, ended);
    held.state = IntentState::PendingApproval;
    held.approval_id = Some("ap_1".into());
    let mut ap = pending_approval(&f, &held);
    ap.reason = ApprovalReason::UnknownFirstAttempt;
    let ApprovalDecision::Decided {
        record: Some(claimed),
        ..
    } = decide_approval(
        &held,
        &ap,
        "alice",
        Role::Approver,
        Choice::Approve,
        &f.cap,
        Executes::Here { owner: "gw" },
        t0() + secs(5),
    )
    else {
        panic!("approving executes")
    };
    assert_eq!(
        claimed.attempt_ended_at,
        Some(ended),
        "the earlier end is kept"
    );
    let d = record_effect(&claimed, not_sent(), &f.cap, "gw", t0() + secs(6));
    let rec = d.record.unwrap();
    // Never `not_applied`: the ledger has no read, so it goes back to a human at once.
    assert_eq!(
        (rec.state, d.outcome.status, rec.attempt_ended_at),
        (
            IntentState::PendingApproval,
            Status::PendingApproval,
            Some(ended)
        )
    );
    // A keyed re-execution with the same key while the first may still land.
    let f = fixture("charge_card");
    let unknown = unknown_since(&f, ended);
    let d = reconcile_at(
        &f,
        &unknown,
        ReconcileResult::NotFound,
        false,
        t0() + secs(1),
    );
    let d = record_effect(&d.record.unwrap(), not_sent(), &f.cap, "gw", t0() + secs(2));
    assert_eq!(d.record.unwrap().state, IntentState::Unknown);
    // Past the horizon "not found" is proof of absence: a refused re-execution is
    // simply not applied.
    let f = fixture("send_email");
    let unknown = unknown_since(&f, ended);
    let late = t0() + f.cap.settle_horizon + secs(1);
    let d = reconcile_at(&f, &unknown, ReconcileResult::NotFound, false, late);
    assert_eq!(d.action, Action::Execute);
    let claimed = d.record.unwrap();
    assert_eq!(claimed.attempt_ended_at, None, "absence proven");
    let d = record_effect(&claimed, not_sent(), &f.cap, "gw", late + secs(1));
    assert_eq!(d.record.unwrap().state, IntentState::NotApplied);
}

#[test]
fn the_sweep_waits_out_the_horizon_for_every_category() {
    for name in ["send_email", "refund", "charge_card"] {
        let f = fixture(name);
        let ended = t0() + secs(5);
        let unknown = unknown_since(&f, ended);
        let early = ended + secs(10);
        assert!(
            after_sweep(&unknown, ReconcileResult::NotFound, &f.cap, false, early).is_none(),
            "{name}: the sweep never executes, so it can always wait for the late commit"
        );
        let found = after_sweep(
            &unknown,
            ReconcileResult::Found {
                effect_ref: Some("x_1".into()),
                result: json!({"id": "x_1"}),
            },
            &f.cap,
            false,
            early,
        )
        .unwrap();
        let rec = found.record.unwrap();
        assert_eq!(
            (rec.state, rec.effect_ref.as_deref()),
            (IntentState::Applied, Some("x_1"))
        );
        let late = after_sweep(
            &unknown,
            ReconcileResult::NotFound,
            &f.cap,
            false,
            ended + f.cap.settle_horizon,
        )
        .unwrap();
        assert_eq!(
            late.record.unwrap().state,
            IntentState::NotApplied,
            "{name}"
        );
    }
}

#[test]
fn an_attempt_ends_when_its_execution_came_back_unknown_or_its_lease_expired() {
    let f = fixture("send_email");
    let claimed = f.record(IntentState::InFlight);
    let at = t0() + secs(5);
    let d = record_effect(
        &claimed,
        EffectResult::Unknown {
            message: "timeout".into(),
        },
        &f.cap,
        "planner",
        at,
    );
    let unknown = d.record.unwrap();
    assert_eq!(
        (unknown.state, unknown.attempt_ended_at),
        (IntentState::Unknown, Some(at))
    );
    // A later unknown answer of the same attempt (an MCP call left running) moves it.
    let later = record_effect(
        &unknown,
        EffectResult::Unknown {
            message: "given up".into(),
        },
        &f.cap,
        "planner",
        at + mins(10),
    );
    assert_eq!(later.record.unwrap().attempt_ended_at, Some(at + mins(10)));
    // A late applied answer of the same attempt settles it.
    let applied = record_effect(
        &unknown,
        EffectResult::Applied {
            effect_ref: Some("em_1".into()),
            result: json!({"id": "em_1"}),
        },
        &f.cap,
        "planner",
        at + secs(4),
    );
    let rec = applied.record.unwrap();
    assert_eq!(
        (rec.state, rec.effect_ref.as_deref()),
        (IntentState::Applied, Some("em_1"))
    );

    // A repeat finds the lease expired: the attempt ended at the lease's expiry.
    let expiry = t0() + f.cap.lease;
    let repeat = decide(
        Some(&claimed),
        &f.req(None, None),
        &f.cap,
        &PolicyVerdict::Allow,
        expiry + secs(30),
    );
    assert_eq!(repeat.action, Action::Reconcile);
    let rec = repeat.record.unwrap();
    assert_eq!(
        (rec.state, rec.attempt_ended_at, rec.lease),
        (IntentState::Unknown, Some(expiry), None)
    );
    // So does the sweep, which records the expiry even when it can conclude nothing.
    let swept = after_sweep(
        &claimed,
        ReconcileResult::NotFound,
        &f.cap,
        false,
        expiry + secs(30),
    )
    .unwrap();
    let rec = swept.record.unwrap();
    assert_eq!(
        (rec.state, rec.attempt_ended_at),
        (IntentState::Unknown, Some(expiry))
    );
    let absent = after_sweep(
        &claimed,
        ReconcileResult::NotFound,
        &f.cap,
        false,
        expiry + f.cap.settle_horizon,
    )
    .unwrap();
    assert_eq!(absent.record.unwrap().state, IntentState::NotApplied);
}

#[test]
fn an_outside_completion_is_fenced_by_execution_lease_and_state() {
    use oncegate_core::decide::{Completion, complete_claim, heartbeat_claim};
    let f = fixture("charge_card");
    let held = f.record(IntentState::InFlight);
    let (generation, execution) = (held.generation, held.executions);
    let applied = || EffectResult::Applied {
        effect_ref: Some("ch_1".into()),
        result: json!({"id": "ch_1"}),
    };
    let stale = |c: Completion| match c {
        Completion::Stale(reason, _) => {
            assert_eq!(reason.code, Code::StaleClaim);
            reason.message
        }
        other => panic!("expected stale, got {other:?}"),
    };

    // Live: recorded like the gate's own execution.
    let live = t0();
    let Completion::Record(d) = complete_claim(
        &held,
        generation,
        execution,
        "gw-0",
        applied(),
        &f.cap,
        "planner",
        live,
    ) else {
        panic!("a live claim records");
    };
    let done = d.record.unwrap();
    assert_eq!(done.state, IntentState::Applied);
    assert_eq!(d.outcome.status, Status::Applied);

    // The same completion again answers what was recorded; another one is stale.
    match complete_claim(
        &done,
        generation,
        execution,
        "gw-0",
        applied(),
        &f.cap,
        "planner",
        live,
    ) {
        Completion::Recorded(o) => {
            assert_eq!(o.status, Status::Applied);
            assert_eq!(o.effect_ref.as_deref(), Some("ch_1"));
        }
        other => panic!("expected the recorded outcome, got {other:?}"),
    }
    let failed = EffectResult::Failed {
        result: json!({}),
        message: "declined".into(),
    };
    stale(complete_claim(
        &done, generation, execution, "gw-0", failed, &f.cap, "planner", live,
    ));

    // Past the lease, or for another execution or generation: stale, even an applied
    // (unlike record_claim_effect, whose late applied is the truth).
    let late = t0() + f.cap.lease;
    let why = stale(complete_claim(
        &held,
        generation,
        execution,
        "gw-0",
        applied(),
        &f.cap,
        "planner",
        late,
    ));
    assert!(why.contains("lease expired"), "{why}");
    let why = stale(complete_claim(
        &held,
        generation,
        execution - 1,
        "gw-0",
        applied(),
        &f.cap,
        "planner",
        live,
    ));
    assert!(why.contains("superseded"), "{why}");
    let why = stale(complete_claim(
        &held,
        generation + 1,
        execution,
        "gw-0",
        applied(),
        &f.cap,
        "planner",
        live,
    ));
    assert!(why.contains("generation"), "{why}");
    // Counting executions is not enough: the claim's nonce must match its lease.
    for nonce in ["gw-1", ""] {
        let why = stale(complete_claim(
            &held,
            generation,
            execution,
            nonce,
            applied(),
            &f.cap,
            "planner",
            live,
        ));
        assert!(why.contains("token"), "{why}");
        assert!(
            heartbeat_claim(&held, generation, execution, nonce, &f.cap, "planner", live).is_err()
        );
    }
    let mut unknown = held.clone();
    unknown.state = IntentState::Unknown;
    unknown.lease = None;
    stale(complete_claim(
        &unknown,
        generation,
        execution,
        "gw-0",
        applied(),
        &f.cap,
        "planner",
        live,
    ));

    // A heartbeat runs the lease on from now, never shortens it, and is fenced alike.
    let beat = t0() + SignedDuration::from_secs(10);
    let d = heartbeat_claim(
        &held, generation, execution, "gw-0", &f.cap, "planner", beat,
    )
    .unwrap();
    let next = d.record.unwrap();
    assert_eq!(next.lease.as_ref().unwrap().expires_at, beat + f.cap.lease);
    assert_eq!(next.lease.as_ref().unwrap().owner, "gw-0");
    assert_eq!(
        (next.state, next.attempts, next.executions),
        (held.state, held.attempts, held.executions)
    );
    assert_eq!(d.event.detail["heartbeat"]["execution"], execution);
    let mut long = held.clone();
    long.lease.as_mut().unwrap().expires_at = t0() + f.cap.lease + mins(60);
    let d = heartbeat_claim(
        &long, generation, execution, "gw-0", &f.cap, "planner", beat,
    )
    .unwrap();
    assert_eq!(d.record.unwrap().lease, long.lease, "never shorter");
    let reason = heartbeat_claim(
        &held, generation, execution, "gw-0", &f.cap, "planner", late,
    )
    .unwrap_err();
    assert_eq!(reason.code, Code::StaleClaim);
    assert!(
        heartbeat_claim(
            &done, generation, execution, "gw-0", &f.cap, "planner", live
        )
        .is_err()
    );
}

#[test]
fn a_claim_only_approval_executes_nothing_and_the_next_claim_of_the_intent_executes_it_once() {
    let f = fixture("refund");
    let mut held = f.record(IntentState::PendingApproval);
    held.approval_id = Some("ap_1".into());
    let ap = pending_approval(&f, &held);
    let ApprovalDecision::Decided {
        action,
        record,
        approval,
        outcome,
        ..
    } = decide_approval(
        &held,
        &ap,
        "alice",
        Role::Approver,
        Choice::Approve,
        &f.cap,
        Executes::OnNextClaim,
        t0() + mins(5),
    )
    else {
        panic!("approve must decide");
    };
    assert_eq!(
        (action, outcome.status),
        (Action::Respond, Status::Approved)
    );
    let approved = approval.unwrap();
    let waiting = record.unwrap();
    assert_eq!(approved.state, ApprovalState::Approved);
    assert_eq!(
        (waiting.state, waiting.executions),
        (IntentState::PendingApproval, held.executions)
    );
    assert!(
        waiting.lease.is_none(),
        "nobody holds it until the caller claims"
    );

    // A second click answers the first decision, writes nothing.
    let ApprovalDecision::Decided {
        action,
        record,
        outcome,
        ..
    } = decide_approval(
        &waiting,
        &approved,
        "bob",
        Role::Approver,
        Choice::Approve,
        &f.cap,
        Executes::OnNextClaim,
        t0() + mins(6),
    )
    else {
        panic!("a second approve answers");
    };
    assert_eq!(
        (action, record.is_none(), outcome.status),
        (Action::Respond, true, Status::Approved)
    );

    // The caller's next claim executes it.
    let claim = decide(
        Some(&waiting),
        &f.req(Some(&approved), None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + mins(10),
    );
    assert_eq!(claim.action, Action::Execute);
    let running = claim.record.unwrap();
    assert_eq!(running.state, IntentState::InFlight);
    assert_eq!(running.executions, held.executions + 1);
    // The one after it finds it in flight: nothing more to execute.
    let repeat = decide(
        Some(&running),
        &f.req(Some(&approved), None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + mins(10),
    );
    assert_eq!(
        (repeat.action, repeat.outcome.status),
        (Action::Replay, Status::InFlight)
    );

    // An approval is not a standing permission: unclaimed past its time to live since
    // the decision, or under another policy, it no longer executes anything.
    let late = decide(
        Some(&waiting),
        &f.req(Some(&approved), None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + mins(5) + f.cap.approval_ttl,
    );
    assert_eq!(
        (late.action, late.outcome.status),
        (Action::Respond, Status::Denied)
    );
    assert_eq!(late.approval.unwrap().state, ApprovalState::Expired);
    let mut other_policy = approved.clone();
    other_policy.policy_hash = "another".into();
    let void = decide(
        Some(&waiting),
        &f.req(Some(&other_policy), None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + mins(10),
    );
    assert_eq!(
        (void.action, void.outcome.status),
        (Action::Respond, Status::Denied)
    );
    assert_eq!(void.approval.unwrap().state, ApprovalState::Void);
}

#[test]
fn a_claim_only_approval_executes_only_for_the_principal_it_was_asked_for_and_under_the_policy() {
    let f = fixture("refund");
    let mut held = f.record(IntentState::PendingApproval);
    held.approval_id = Some("ap_1".into());
    let mut approved = pending_approval(&f, &held);
    approved.state = ApprovalState::Approved;
    approved.decided_by = Some("alice".into());
    approved.decided_at = Some(t0());
    let mut other = f.req(Some(&approved), None);
    other.principal = "subagent";
    let d = decide(
        Some(&held),
        &other,
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + mins(1),
    );
    assert_eq!(
        (d.action, d.outcome.status),
        (Action::Respond, Status::Refused)
    );
    assert!(
        d.record.is_none(),
        "nothing changes for the approved principal's next claim"
    );
    let denied = decide(
        Some(&held),
        &f.req(Some(&approved), None),
        &f.cap,
        &PolicyVerdict::Deny {
            reason: "no".into(),
        },
        t0() + mins(1),
    );
    assert_eq!(
        (denied.action, denied.outcome.status),
        (Action::Respond, Status::Denied)
    );
    let dry = decide(
        Some(&held),
        &f.req(Some(&approved), None),
        &f.cap,
        &PolicyVerdict::DryRun,
        t0() + mins(1),
    );
    assert_eq!(
        (dry.action, dry.outcome.status),
        (Action::Respond, Status::DryRun)
    );
    let go = decide(
        Some(&held),
        &f.req(Some(&approved), None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + mins(1),
    );
    assert_eq!(go.action, Action::Execute);

    // An approved unknown-first-attempt left unclaimed past its TTL: the intent stays
    // unknown (it may have happened), and the caller hears unknown, not denied.
    let mut unknown_held = held.clone();
    unknown_held.attempts = 1;
    let mut ap = approved.clone();
    ap.reason = ApprovalReason::UnknownFirstAttempt;
    let late = decide(
        Some(&unknown_held),
        &f.req(Some(&ap), None),
        &f.cap,
        &PolicyVerdict::Allow,
        t0() + f.cap.approval_ttl,
    );
    assert_eq!(late.outcome.status, Status::Unknown);
    assert_eq!(late.record.unwrap().state, IntentState::Unknown);
}

/// Issue 32: after a rollback of the store was accepted, an intent the store does not
/// know, or knows as not applied from before the rollback, may have run in what the
/// rollback lost: it is unknown (read first, or held), never executed at once, until
/// the capability's replay window has passed since the rollback.
#[test]
fn after_an_accepted_rollback_a_forgotten_intent_is_read_before_it_executes() {
    let rolled_back = t0() + mins(5);
    for (capability, tweak) in [
        ("send_email", OnUnknown::Reconcile),
        ("send_email", OnUnknown::Escalate),
    ] {
        let f = fixture_with(capability, |mut c| {
            c.on_unknown = tweak;
            c
        });
        let req = CallRequest {
            rolled_back_at: Some(rolled_back),
            caller_sends: false,
            ..f.req(None, None)
        };
        let fresh = decide(
            None,
            &req,
            &f.cap,
            &PolicyVerdict::Allow,
            rolled_back + mins(1),
        );
        let old = f.record(IntentState::NotApplied);
        let again = decide(
            Some(&old),
            &req,
            &f.cap,
            &PolicyVerdict::Allow,
            rolled_back + mins(1),
        );
        for d in [&fresh, &again] {
            match tweak {
                OnUnknown::Reconcile => assert_eq!(d.action, Action::Reconcile, "{d:?}"),
                _ => {
                    assert_eq!(d.action, Action::Respond, "{d:?}");
                    assert_eq!(d.outcome.status, Status::PendingApproval, "{d:?}");
                }
            }
            assert_ne!(d.action, Action::Execute);
        }
        // Past the replay window since the rollback: as ever.
        let later = rolled_back + f.cap.replay_window + mins(1);
        let d = decide(None, &req, &f.cap, &PolicyVerdict::Allow, later);
        assert_eq!(d.action, Action::Execute, "{d:?}");
        // Without a rollback: as ever.
        let d = decide(
            None,
            &f.req(None, None),
            &f.cap,
            &PolicyVerdict::Allow,
            rolled_back,
        );
        assert_eq!(d.action, Action::Execute, "{d:?}");
    }
}

/// Issue 37: `on_unknown = "escalate"` without a reconciliation read goes to a human the
/// moment an attempt turns unknown (a timeout recorded, or a lease that expired under
/// the sweep): nothing would ever reconcile it, so waiting for the agent to repeat only
/// left it showing as "reconciling". With a read, the sweep reconciles as before.
#[test]
fn escalate_without_a_read_holds_an_unknown_attempt_for_a_human_at_once() {
    let f = fixture_with("send_email", |mut c| {
        c.on_unknown = OnUnknown::Escalate;
        c.reconcile = None;
        c
    });
    let claimed = f.record(IntentState::InFlight);
    let timeout = || EffectResult::Unknown {
        message: "timeout".into(),
    };
    let d = record_effect(&claimed, timeout(), &f.cap, "planner", t0());
    let rec = d.record.expect("the intent is written");
    let ap = d.approval.expect("an approval is opened at once");
    assert_eq!(
        (rec.state, d.outcome.status),
        (IntentState::PendingApproval, Status::PendingApproval)
    );
    assert_eq!(rec.approval_id.as_deref(), Some(ap.id.as_str()));
    assert_eq!(
        (ap.reason, ap.state, ap.key.as_str()),
        (
            ApprovalReason::UnknownFirstAttempt,
            ApprovalState::Pending,
            rec.key.as_str()
        )
    );
    // Two recorders of one attempt (a late answer racing the sweep) open one approval.
    let again = record_effect(&claimed, timeout(), &f.cap, "planner", t0() + secs(1));
    assert_eq!(again.approval.map(|a| a.id), Some(ap.id.clone()));
    // A definite answer is never held.
    let failed = record_effect(
        &claimed,
        EffectResult::Failed {
            result: json!({"error": "bounced"}),
            message: "422".into(),
        },
        &f.cap,
        "planner",
        t0(),
    );
    assert!(failed.approval.is_none(), "{failed:?}");

    // A lease that expired with nobody to record the attempt: unknown first (a stalled
    // worker, or another replica's call, may still land it), then, once the settle
    // horizon has passed since the lease expired, the sweep holds it for a human too.
    let expired = t0() + f.cap.lease + secs(1);
    let undecided = || ReconcileResult::Undecidable {
        message: "no reconciliation read".into(),
    };
    let swept = after_sweep(&claimed, undecided(), &f.cap, false, expired)
        .expect("an expired lease is news");
    assert_eq!(swept.outcome.status, Status::Unknown, "{swept:?}");
    assert!(swept.approval.is_none(), "{swept:?}");
    let lapsed = swept.record.expect("unknown now");
    let settled = t0() + f.cap.lease + f.cap.settle_horizon + secs(1);
    assert!(after_sweep(&lapsed, undecided(), &f.cap, false, settled - secs(2)).is_none());
    let swept = after_sweep(&lapsed, undecided(), &f.cap, false, settled)
        .expect("held once the horizon passed");
    assert_eq!(swept.outcome.status, Status::PendingApproval, "{swept:?}");
    let swept_ap = swept.approval.expect("an approval");
    assert_eq!(swept_ap.reason, ApprovalReason::UnknownFirstAttempt);
    assert_eq!(swept.record.and_then(|r| r.approval_id), Some(swept_ap.id));

    // Denied (or expired): back to unknown, and the sweep does not ask again for the
    // same attempt (the agent's repeat does, as ever).
    let mut refused = rec.clone();
    refused.state = IntentState::Unknown;
    let undecidable = || ReconcileResult::Undecidable {
        message: "no reconciliation read".into(),
    };
    assert!(after_sweep(&refused, undecidable(), &f.cap, false, expired).is_none());

    // An MCP tool call that timed out may still be running: held only once it ended.
    let mcp = fixture_with("send_email", |mut c| {
        c.on_unknown = OnUnknown::Escalate;
        c.reconcile = None;
        if let Some(u) = c.upstream.as_mut() {
            u.kind = UpstreamKind::Mcp;
        }
        c
    });
    let d = record_effect(
        &mcp.record(IntentState::InFlight),
        timeout(),
        &mcp.cap,
        "gw",
        t0(),
    );
    assert!(d.approval.is_none(), "{d:?}");
    let unknown = d.record.expect("recorded unknown");
    assert_eq!(unknown.state, IntentState::Unknown);
    assert!(after_sweep(&unknown, undecidable(), &mcp.cap, true, t0() + secs(3600)).is_none());
    let horizon = t0() + mcp.cap.settle_horizon;
    assert!(after_sweep(&unknown, undecidable(), &mcp.cap, false, horizon - secs(1)).is_none());
    let ended = after_sweep(&unknown, undecidable(), &mcp.cap, false, horizon + secs(1))
        .expect("held once the call ended and the horizon passed");
    assert_eq!(ended.outcome.status, Status::PendingApproval);
    assert!(ended.approval.is_some());

    // With a reconciliation read, an unknown attempt stays unknown and is reconciled.
    let read = fixture_with("send_email", |mut c| {
        c.on_unknown = OnUnknown::Escalate;
        c
    });
    assert!(read.cap.reconcile.is_some());
    let d = record_effect(
        &read.record(IntentState::InFlight),
        timeout(),
        &read.cap,
        "planner",
        t0(),
    );
    assert!(d.approval.is_none());
    assert_eq!(d.outcome.status, Status::Unknown);
}

#[test]
fn an_approval_is_bound_to_every_sent_argument_not_only_the_keys() {
    let f = fixture("send_email");
    let verdict = PolicyVerdict::RequireApproval {
        policies: vec!["every-email".into()],
    };
    let d = decide(None, &f.req(None, None), &f.cap, &verdict, t0());
    let ap = d.approval.unwrap();
    assert_eq!(ap.args_digest, oncegate_core::key::sent_digest(&f.args));
    assert_ne!(ap.args_digest, f.derived.args_digest, "more than the key's");
    let mut held = d.record.unwrap();
    held.version = 1;
    let approve = |record: &IntentRecord| {
        decide_approval(
            record,
            &ap,
            "alice",
            Role::Approver,
            Choice::Approve,
            &f.cap,
            Executes::Here { owner: "gw-1" },
            t0() + mins(1),
        )
    };
    // An argument outside the key changed under the approval: it is void.
    let mut changed = held.clone();
    changed.arguments["body"] = json!("Verify at https://evil.example");
    match approve(&changed) {
        ApprovalDecision::Decided {
            approval, outcome, ..
        } => {
            assert_eq!(approval.unwrap().state, ApprovalState::Void);
            assert_eq!(outcome.reason.unwrap().code, Code::ApprovalVoid);
        }
        ApprovalDecision::Rejected(r) => panic!("{r:?}"),
    }
    // Exactly what was asked: it executes those arguments.
    match approve(&held) {
        ApprovalDecision::Decided { action, record, .. } => {
            assert_eq!(action, Action::Execute);
            assert_eq!(record.unwrap().arguments, f.args);
        }
        ApprovalDecision::Rejected(r) => panic!("{r:?}"),
    }
}

#[test]
fn a_generation_a_human_was_asked_about_keeps_its_arguments_and_refuses_a_drifted_claim() {
    let f = fixture("send_email");
    let mut rec = f.record(IntentState::NotApplied);
    rec.approval_id = Some("ap_1".into());
    let mut drifted = f.args.clone();
    drifted["body"] = json!("Verify at https://evil.example");
    let at = t0() + mins(1);
    // The gate executes: the recorded arguments, whatever the repeat carries.
    let gate = CallRequest {
        arguments: &drifted,
        ..f.req(None, None)
    };
    let d = decide(Some(&rec), &gate, &f.cap, &PolicyVerdict::Allow, at);
    assert_eq!(d.action, Action::Execute);
    assert_eq!(d.record.unwrap().arguments, f.args);
    // A two-phase caller sends its own: refused, nothing written.
    let caller = CallRequest {
        arguments: &drifted,
        caller_sends: true,
        ..f.req(None, None)
    };
    let d = decide(Some(&rec), &caller, &f.cap, &PolicyVerdict::Allow, at);
    assert_eq!(d.action, Action::Respond);
    assert!(d.record.is_none());
    assert_eq!(d.outcome.status, Status::Refused);
    let reason = d.outcome.reason.unwrap();
    assert_eq!(reason.code, Code::ApprovalVoid);
    assert!(reason.message.contains("`body`"), "{}", reason.message);
    // The same claim with the held arguments executes them.
    let same = CallRequest {
        caller_sends: true,
        ..f.req(None, None)
    };
    let d = decide(Some(&rec), &same, &f.cap, &PolicyVerdict::Allow, at);
    assert_eq!(d.action, Action::Execute);
    // Unknown and reconciling: a drifted claim does not drive the read either.
    let mut unknown = rec.clone();
    unknown.state = IntentState::Unknown;
    let d = decide(Some(&unknown), &caller, &f.cap, &PolicyVerdict::Allow, at);
    assert_eq!(d.outcome.status, Status::Refused);
    let d = decide(Some(&unknown), &same, &f.cap, &PolicyVerdict::Allow, at);
    assert_eq!(d.action, Action::Reconcile);
}
