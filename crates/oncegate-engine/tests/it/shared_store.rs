//! Several gates on one store (what replicas are): kill switches set through one gate
//! reach the others within a second and survive reopening the store; one gate at a
//! time asks the upstream about an unknown intent; an approval expires once.
//!
//! Two gates on one SQLite file share one opened store (the file has one writer per
//! process); each gate keeps its own caches, exactly as two replicas would.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use oncegate_core::codes::Code;
use oncegate_core::decide::Choice;
use oncegate_core::intent::{ApprovalState, IntentState, Outcome, Status};
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_engine::config::load_registry;
use oncegate_engine::{Call, Claimed, Executor, Gate, IntentHandle, ManualClock};
use oncegate_store::{AuditRead, IntentsRead, MemoryStore};
use serde_json::json;

use crate::support::{CONFIG, Scratch};

fn pay(order: &str) -> Call {
    Call::new("pay", json!({"order_id": order, "amount": "12.50"}))
}

/// A second gate on `gate`'s store, with its own caches and owner (another replica).
fn replica(scratch: &Scratch, gate: &Gate, clock: &ManualClock) -> Gate {
    let registry = load_registry(&scratch.config()).unwrap_or_else(|e| panic!("{e}"));
    Gate::with_store(registry, gate.store().clone(), Arc::new(clock.clone()))
}

/// What a call answers, claiming nothing it is given to execute (the claim is left in
/// flight).
async fn answer(gate: &Gate, principal: &str, call: Call) -> Result<Outcome, &'static str> {
    match gate.claim(principal, call).await.unwrap() {
        Claimed::Settled(outcome) => Ok(outcome),
        Claimed::Execute(_) => Err("execute"),
        Claimed::Read(_) => Err("read"),
    }
}

fn refused_by_switch(answer: Result<Outcome, &'static str>) -> String {
    let outcome = answer.expect("a kill switch answers, it claims nothing");
    assert_eq!(outcome.status, Status::Refused, "{outcome:?}");
    let reason = outcome.reason.expect("a refusal says why");
    assert_eq!(reason.code, Code::KillSwitch, "{reason:?}");
    reason.message
}

#[tokio::test]
async fn a_kill_switch_set_on_one_gate_stops_another_within_a_second_and_clears_on_both() {
    let scratch = Scratch::new();
    let clock = ManualClock::new(Timestamp::now());
    let a = scratch.gate(Arc::new(clock.clone())).await;
    let b = replica(&scratch, &a, &clock);
    // B has read the switches (none) before A sets one.
    assert_eq!(answer(&b, "agent", pay("O-1")).await, Err("execute"));

    a.set_kill_switch("ops", "capability:pay", Some("incident 7".into()))
        .await
        .unwrap();
    // The gate that set it honours it at once.
    let why = refused_by_switch(answer(&a, "agent", pay("O-2")).await);
    assert!(why.contains("incident 7"), "{why}");
    // B's cache is trusted for under half a second: it reads the store that often, not
    // on every call.
    clock.advance(SignedDuration::from_millis(400));
    assert_eq!(answer(&b, "agent", pay("O-3")).await, Err("execute"));
    // Half a second after B last read: B reads again and honours it.
    clock.advance(SignedDuration::from_millis(100));
    refused_by_switch(answer(&b, "agent", pay("O-4")).await);
    assert_eq!(
        b.kill_switches().await.unwrap().get("capability:pay"),
        Some(&"incident 7".to_owned()),
        "the admin listing reads the store"
    );

    // Cleared through B: B at once, A within the same bound.
    b.set_kill_switch("ops", "capability:pay", None)
        .await
        .unwrap();
    assert_eq!(answer(&b, "agent", pay("O-5")).await, Err("execute"));
    clock.advance(SignedDuration::from_millis(500));
    assert_eq!(answer(&a, "agent", pay("O-6")).await, Err("execute"));
    assert!(a.kill_switches().await.unwrap().is_empty());

    // Both changes are in the audit chain, with who made them.
    let admin: Vec<_> = a
        .store()
        .audit_after(0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, r)| r.event.code == Some(Code::KillSwitch) && r.event.key.is_none())
        .map(|(_, r)| (r.event.actor, r.event.detail["on"].as_bool()))
        .collect();
    assert_eq!(
        admin,
        vec![
            ("ops".to_owned(), Some(true)),
            ("ops".to_owned(), Some(false))
        ]
    );
}

#[tokio::test]
async fn a_kill_switch_survives_reopening_the_store() {
    let scratch = Scratch::new();
    let clock = ManualClock::new(Timestamp::now());
    let gate = scratch.gate(Arc::new(clock.clone())).await;
    gate.set_kill_switch("ops", "agent:agent2", Some("looping".into()))
        .await
        .unwrap();
    gate.store().close().await;
    drop(gate);

    let reopened = scratch.gate(Arc::new(clock.clone())).await;
    let why = refused_by_switch(answer(&reopened, "agent2", pay("O-1")).await);
    assert!(why.contains("looping"), "{why}");
    // Another agent is not switched off.
    assert_eq!(answer(&reopened, "agent", pay("O-1")).await, Err("execute"));
    reopened
        .set_kill_switch("ops", "agent:agent2", None)
        .await
        .unwrap();
    assert_eq!(
        answer(&reopened, "agent2", pay("O-2")).await,
        Err("execute")
    );
}

/// A registry with a read capability beside the test config's.
fn with_lookup(scratch: &Scratch) -> oncegate_core::Registry {
    let text = format!(
        "{CONFIG}\n[[capabilities]]\nname = \"lookup\"\ncategory = \"read\"\nkey = {{ business_ref = \"order_id\" }}\n"
    );
    std::fs::write(scratch.config(), text).unwrap();
    load_registry(&scratch.config()).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn without_the_store_consequential_calls_fail_closed_and_reads_keep_the_last_switches() {
    let scratch = Scratch::new();
    let clock = ManualClock::new(Timestamp::now());
    let store = MemoryStore::new();
    let a = Gate::with_store(
        with_lookup(&scratch),
        store.clone(),
        Arc::new(clock.clone()),
    );
    let b = Gate::with_store(
        with_lookup(&scratch),
        store.clone(),
        Arc::new(clock.clone()),
    );
    let lookup = || Call::new("lookup", json!({"order_id": "O-1"}));
    let store_refused = |answer: Result<Outcome, &'static str>| {
        let down = answer.expect("refused");
        assert_eq!(down.status, Status::Refused);
        assert_eq!(down.reason.unwrap().code, Code::StoreUnavailable);
    };
    assert_eq!(answer(&b, "agent", lookup()).await, Err("read"));

    // B's switches (none) are stale and cannot be reloaded: the read goes on with them,
    // a consequential call is refused as for any store outage.
    store.set_unavailable(true);
    clock.advance(SignedDuration::from_secs(1));
    assert_eq!(answer(&b, "agent", lookup()).await, Err("read"));
    store_refused(answer(&b, "agent", pay("O-1")).await);
    store.set_unavailable(false);

    a.set_kill_switch("ops", "capability:lookup", Some("upstream abuse".into()))
        .await
        .unwrap();
    clock.advance(SignedDuration::from_millis(500));
    refused_by_switch(answer(&b, "agent", lookup()).await);

    store.set_unavailable(true);
    clock.advance(SignedDuration::from_secs(1));
    // The last known switches still stop the read (its refusal cannot be audited, so it
    // is answered as a store refusal: it never passes through).
    store_refused(answer(&b, "agent", lookup()).await);
    store_refused(answer(&b, "agent", pay("O-1")).await);
    // Setting or listing a switch needs the store.
    assert!(
        a.set_kill_switch("ops", "capability:lookup", None)
            .await
            .is_err()
    );
    assert!(a.kill_switches().await.is_err());

    store.set_unavailable(false);
    a.set_kill_switch("ops", "capability:lookup", None)
        .await
        .unwrap();
    clock.advance(SignedDuration::from_millis(500));
    assert_eq!(answer(&b, "agent", lookup()).await, Err("read"));
    assert_eq!(answer(&b, "agent", pay("O-1")).await, Err("execute"));
}

/// A reconciliation read that counts how often it is asked and answers only when the
/// test lets it (one permit per answer).
struct HeldRead {
    asked: AtomicUsize,
    go: tokio::sync::Semaphore,
    answer: ReconcileResult,
}

impl HeldRead {
    fn new(answer: ReconcileResult) -> Arc<Self> {
        Arc::new(Self {
            asked: AtomicUsize::new(0),
            go: tokio::sync::Semaphore::new(0),
            answer,
        })
    }

    fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }

    async fn until_asked(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.asked() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the read was not asked"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Executor for HeldRead {
    async fn execute(&self, _intent: IntentHandle) -> EffectResult {
        panic!("reconciliation executes nothing here");
    }

    async fn reconcile(&self, _intent: IntentHandle) -> ReconcileResult {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.go.acquire().await.unwrap().forget();
        self.answer.clone()
    }
}

fn found() -> ReconcileResult {
    ReconcileResult::Found {
        effect_ref: Some("ch_1".into()),
        result: json!({"id": "ch_1"}),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gates_sweeping_one_unknown_intent_ask_the_upstream_once() {
    let scratch = Scratch::new();
    let clock = ManualClock::new(Timestamp::now());
    let a = scratch.gate(Arc::new(clock.clone())).await;
    let b = replica(&scratch, &a, &clock);
    // A claim whose holder vanished: its lease runs out, and both gates sweep.
    let Claimed::Execute(claim) = a.claim("agent", pay("O-1")).await.unwrap() else {
        panic!("expected a claim");
    };
    clock.advance(SignedDuration::from_secs(31));

    let read = HeldRead::new(found());
    let sweep_a = tokio::spawn({
        let (a, read) = (a.clone(), read.clone());
        async move { a.sweep_pass(|_| Some(read.clone())).await }
    });
    read.until_asked(1).await;
    // B sweeps while A's read is still out: B asks nothing and changes nothing.
    assert_eq!(b.sweep_pass(|_| Some(read.clone())).await, 0);
    assert_eq!(read.asked(), 1, "B did not ask the upstream");

    read.go.add_permits(1);
    assert_eq!(
        sweep_a.await.unwrap(),
        1,
        "A recorded what the upstream said"
    );
    assert_eq!(read.asked(), 1);
    let settled = a.store().load(&claim.intent_key).await.unwrap().unwrap();
    assert_eq!(settled.state, IntentState::Applied);
    assert_eq!(settled.effect_ref.as_deref(), Some("ch_1"));

    // Released once recorded: nothing is left to reconcile, and nothing is read.
    assert_eq!(b.sweep_pass(|_| Some(read.clone())).await, 0);
    assert_eq!(read.asked(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_an_intent_another_gate_is_reconciling_waits_for_its_answer_and_reads_nothing() {
    let scratch = Scratch::new();
    let clock = ManualClock::new(Timestamp::now());
    let a = scratch.gate(Arc::new(clock.clone())).await;
    let b = replica(&scratch, &a, &clock);
    let Claimed::Execute(claim) = a.claim("agent", pay("O-1")).await.unwrap() else {
        panic!("expected a claim");
    };
    clock.advance(SignedDuration::from_secs(31));
    // A first pass turns it unknown (the upstream cannot tell yet).
    let undecided = HeldRead::new(ReconcileResult::Undecidable {
        message: "no record either way".into(),
    });
    undecided.go.add_permits(1);
    assert_eq!(a.sweep_pass(|_| Some(undecided.clone())).await, 1);
    let unknown = a.store().load(&claim.intent_key).await.unwrap().unwrap();
    assert_eq!(unknown.state, IntentState::Unknown);

    let read = HeldRead::new(found());
    let sweep_a = tokio::spawn({
        let (a, read) = (a.clone(), read.clone());
        async move { a.sweep_pass(|_| Some(read.clone())).await }
    });
    read.until_asked(1).await;
    // The agent repeats on B meanwhile: B asks nothing of its own, it waits for A's
    // answer and replays it.
    let repeat = tokio::spawn({
        let (b, read) = (b.clone(), read.clone());
        async move { b.claim_with("agent", pay("O-1"), read).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!repeat.is_finished(), "B waits while A's read is out");
    read.go.add_permits(1);
    assert_eq!(sweep_a.await.unwrap(), 1, "A's answer lands");
    let Claimed::Settled(repeat) = repeat.await.unwrap() else {
        panic!("expected a settled answer");
    };
    assert_eq!(repeat.status, Status::Replayed, "{repeat:?}");
    assert_eq!(repeat.effect_ref.as_deref(), Some("ch_1"));
    assert_eq!(read.asked(), 1, "one read for both gates");
    let settled = a.store().load(&claim.intent_key).await.unwrap().unwrap();
    assert_eq!(settled.state, IntentState::Applied, "{settled:?}");
    assert_eq!(
        settled.attempts, unknown.attempts,
        "B's repeat counted no read of its own"
    );
}

/// Audit records of `key` that moved it out of pending approval.
async fn expiries(gate: &Gate, key: &oncegate_core::key::IntentKey) -> usize {
    gate.store()
        .audit_after(0, 10_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, r)| {
            r.event.key.as_ref() == Some(key)
                && r.event.from == Some(IntentState::PendingApproval)
                && r.event.to != Some(IntentState::PendingApproval)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gates_expiring_one_approval_write_one_transition() {
    let scratch = Scratch::new();
    let clock = ManualClock::new(Timestamp::now());
    let a = scratch.gate(Arc::new(clock.clone())).await;
    let b = replica(&scratch, &a, &clock);
    let refund = |order: &str| Call::new("refund", json!({"order_id": order, "amount": "250.00"}));
    let mut held = Vec::new();
    for order in ["R-1", "R-2"] {
        let outcome = answer(&a, "agent", refund(order)).await.unwrap();
        assert_eq!(outcome.status, Status::PendingApproval);
        held.push(outcome);
    }
    clock.advance(SignedDuration::from_hours(24 * 30));

    // the agent repeats on both gates at once, after the approval expired.
    let (ra, rb) = tokio::join!(
        answer(&a, "agent", refund("R-1")),
        answer(&b, "agent", refund("R-1"))
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!((ra.status, rb.status), (Status::Denied, Status::Denied));
    // two approvers click on two gates at once, too late.
    let exec = HeldRead::new(found());
    let id = held[1].approval_id.clone().unwrap();
    let (da, db) = tokio::join!(
        a.decide_approval("alice", &id, Choice::Approve, exec.clone()),
        b.decide_approval("bob", &id, Choice::Approve, exec.clone())
    );
    for decided in [da.unwrap(), db.unwrap()] {
        assert_eq!(decided.status, Status::Denied, "{decided:?}");
    }

    for outcome in &held {
        let key = outcome.key.clone().unwrap();
        assert_eq!(expiries(&a, &key).await, 1, "one transition for {key}");
        let approval = a
            .store()
            .approval(outcome.approval_id.as_deref().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(approval.state, ApprovalState::Expired);
    }
}

/// A call that waited for another gate's reconciliation re-decides on its answer; when
/// the answer is "never happened" it would execute. A kill switch set (on a third gate)
/// while it waited stops that execution: the switches are read again before anything
/// executes, not only when the call began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_set_while_a_call_waits_for_a_reconciliation_stops_its_execution() {
    let scratch = Scratch::new();
    let clock = ManualClock::new(Timestamp::now());
    let a = scratch.gate(Arc::new(clock.clone())).await;
    let b = replica(&scratch, &a, &clock);
    let c = replica(&scratch, &a, &clock);
    let Claimed::Execute(claim) = a.claim("agent", pay("O-9")).await.unwrap() else {
        panic!("expected a claim");
    };
    // Long past the lease and any settle horizon: "not found" is proof of absence.
    clock.advance(SignedDuration::from_hours(1));
    let undecided = HeldRead::new(ReconcileResult::Undecidable {
        message: "no record either way".into(),
    });
    undecided.go.add_permits(1);
    assert_eq!(a.sweep_pass(|_| Some(undecided.clone())).await, 1);
    clock.advance(SignedDuration::from_hours(1));

    let read = HeldRead::new(ReconcileResult::NotFound);
    let sweep_a = tokio::spawn({
        let (a, read) = (a.clone(), read.clone());
        async move { a.sweep_pass(|_| Some(read.clone())).await }
    });
    read.until_asked(1).await;
    let repeat = tokio::spawn({
        let (b, read) = (b.clone(), read.clone());
        async move { b.claim_with("agent", pay("O-9"), read).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!repeat.is_finished(), "B waits while A's read is out");
    c.set_kill_switch("ops", "capability:pay", Some("incident 9".into()))
        .await
        .unwrap();
    clock.advance(SignedDuration::from_secs(1));
    read.go.add_permits(1);
    sweep_a.await.unwrap();
    match repeat.await.unwrap() {
        Claimed::Settled(outcome) => {
            assert_eq!(outcome.status, Status::Refused, "{outcome:?}");
        }
        Claimed::Execute(_) => panic!("B executed past a kill switch set while it waited"),
        Claimed::Read(_) => panic!("not a read"),
    }
    let record = a.store().load(&claim.intent_key).await.unwrap().unwrap();
    assert_eq!(record.executions, 1, "nothing executed again: {record:?}");
}
