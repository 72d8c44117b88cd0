//! The two-phase API on a real SQLite file: claim, then complete or heartbeat from
//! outside the gate, fenced by the execution number and the lease (judged by the
//! gate's clock); and the sweep pass a server ticks.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use jiff::{SignedDuration, Timestamp};
use oncegate_core::codes::Code;
use oncegate_core::intent::{IntentRecord, IntentState, Status};
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_engine::{
    Call, Claim, Claimed, Executor, Fence, Gate, GateError, IntentHandle, ManualClock, SystemClock,
};
use oncegate_store::{AuditRead, IntentsRead};
use serde_json::json;

use crate::support::Scratch;

fn pay(order: &str) -> Call {
    Call::new("pay", json!({"order_id": order, "amount": "12.50"}))
}

fn applied(effect_ref: &str) -> EffectResult {
    EffectResult::Applied {
        effect_ref: Some(effect_ref.into()),
        result: json!({"id": effect_ref}),
    }
}

/// A reconciliation read with a fixed answer, counting how often it is asked. Never
/// executes: these tests execute through `complete`.
struct Reads {
    answer: ReconcileResult,
    asked: AtomicUsize,
}

impl Reads {
    fn new(answer: ReconcileResult) -> Arc<Self> {
        Arc::new(Self {
            answer,
            asked: AtomicUsize::new(0),
        })
    }
    fn undecidable() -> Arc<Self> {
        Self::new(ReconcileResult::Undecidable {
            message: "no record either way".into(),
        })
    }
    fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }
}

impl Executor for Reads {
    async fn execute(&self, _intent: IntentHandle) -> EffectResult {
        panic!("the claim's holder executes, never the gate");
    }
    async fn reconcile(&self, _intent: IntentHandle) -> ReconcileResult {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.answer.clone()
    }
}

async fn manual(scratch: &Scratch) -> (Gate, ManualClock) {
    let clock = ManualClock::new(Timestamp::now());
    let gate = scratch.gate(Arc::new(clock.clone())).await;
    (gate, clock)
}

async fn claimed(gate: &Gate, call: Call) -> Claim {
    match gate.claim("agent", call).await.unwrap() {
        Claimed::Execute(claim) => claim,
        other => panic!("expected a claim, got {other:?}"),
    }
}

async fn settled(gate: &Gate, call: Call) -> oncegate_core::intent::Outcome {
    match gate.claim("agent", call).await.unwrap() {
        Claimed::Settled(outcome) => outcome,
        other => panic!("expected a settled outcome, got {other:?}"),
    }
}

async fn stored(gate: &Gate, claim: &Claim) -> IntentRecord {
    gate.store().load(&claim.intent_key).await.unwrap().unwrap()
}

fn forbidden(result: Result<impl std::fmt::Debug, GateError>) {
    match result {
        Err(e @ GateError::Forbidden(_)) => assert_eq!(e.code(), Code::Forbidden),
        other => panic!("expected Forbidden, got {other:?}"),
    }
}

fn not_sent_now() -> EffectResult {
    EffectResult::NotSent {
        message: "forged".into(),
    }
}

fn stale(result: Result<impl std::fmt::Debug, GateError>) -> String {
    match result {
        Err(e @ GateError::StaleClaim(_)) => {
            assert_eq!(e.code(), Code::StaleClaim);
            assert_eq!(e.code().as_str(), "OG-0024");
            e.to_string()
        }
        other => panic!("expected StaleClaim, got {other:?}"),
    }
}

#[tokio::test]
async fn claim_then_complete_applied_then_a_repeat_replays_the_ref() {
    let scratch = Scratch::new();
    let (gate, _clock) = manual(&scratch).await;
    let claim = claimed(&gate, pay("A-1")).await;
    assert_eq!(
        (claim.generation, claim.execution, claim.attempt),
        (1, 1, 1)
    );
    assert_eq!(claim.intent.key, claim.intent_key.to_string());
    assert_eq!(claim.intent.arguments["order_id"], "A-1");
    assert_eq!(
        claim.lease_expires_at,
        gate.clock().now() + SignedDuration::from_secs(30)
    );
    assert_eq!(stored(&gate, &claim).await.state, IntentState::InFlight);

    let done = gate.complete(&claim, applied("ch_1")).await.unwrap();
    assert_eq!(done.status, Status::Applied);
    assert_eq!(done.effect_ref.as_deref(), Some("ch_1"));

    let repeat = settled(&gate, pay("A-1")).await;
    assert_eq!(repeat.status, Status::Replayed);
    assert_eq!(repeat.effect_ref.as_deref(), Some("ch_1"));
    assert_eq!(repeat.result, Some(json!({"id": "ch_1"})));
    // And through invoke, the same answer without executing.
    let executed = Arc::new(AtomicUsize::new(0));
    let counter = executed.clone();
    let again = gate
        .invoke("agent", pay("A-1"), move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { applied("ch_again") }
        })
        .await
        .unwrap();
    assert_eq!(
        executed.load(Ordering::SeqCst),
        0,
        "a settled intent never executes again"
    );
    assert_eq!(again.status, Status::Replayed);
    assert_eq!(again.effect_ref.as_deref(), Some("ch_1"));
}

#[tokio::test]
async fn a_stale_completion_after_the_lease_expired_and_another_claim_changes_nothing() {
    let scratch = Scratch::new();
    let (gate, clock) = manual(&scratch).await;
    let first = claimed(&gate, pay("A-1")).await;

    // The first worker stalls past its lease; a repeat reconciles ("not found": the
    // keyed provider dedupes on the key) and claims a second execution.
    clock.advance(SignedDuration::from_secs(31));
    let reads = Reads::new(ReconcileResult::NotFound);
    let second = match gate.claim_with("agent", pay("A-1"), reads.clone()).await {
        Ok(Claimed::Execute(claim)) => claim,
        other => panic!("expected a second claim, got {other:?}"),
    };
    assert_eq!(reads.asked(), 1);
    assert_eq!(second.execution, first.execution + 1);
    assert_eq!(second.intent.key, first.intent.key, "the same upstream key");
    assert!(second.lease_expires_at > first.lease_expires_at);

    let before = stored(&gate, &second).await;
    let why = stale(gate.complete(&first, applied("ch_stale")).await);
    assert!(why.contains("superseded"), "{why}");
    assert_eq!(stored(&gate, &second).await, before, "nothing recorded");
    // Its heartbeat is refused too, and changes nothing either.
    stale(gate.heartbeat(&first).await);
    assert_eq!(stored(&gate, &second).await, before);

    let done = gate.complete(&second, applied("ch_2")).await.unwrap();
    assert_eq!(done.status, Status::Applied);
    let repeat = settled(&gate, pay("A-1")).await;
    assert_eq!(repeat.status, Status::Replayed);
    assert_eq!(repeat.effect_ref.as_deref(), Some("ch_2"));
    // The first worker still cannot write over it.
    stale(gate.complete(&first, applied("ch_stale")).await);
    assert_eq!(
        stored(&gate, &second).await.effect_ref.as_deref(),
        Some("ch_2")
    );
    // But what it reported is evidence (a second effect, perhaps): in the audit chain,
    // once per report, with the reference it claimed.
    let mut reported = Vec::new();
    for shard in gate.store().audit_shards().await.unwrap() {
        for r in gate.store().audit_shard(shard).await.unwrap() {
            if let Some(s) = r.event.detail.get("stale_completion") {
                reported.push(s["effect_ref"].clone());
            }
        }
    }
    assert_eq!(reported, vec![json!("ch_stale"), json!("ch_stale")]);
}

#[tokio::test]
async fn a_completion_after_the_sweep_turned_the_intent_unknown_records_nothing() {
    let scratch = Scratch::new();
    let (gate, clock) = manual(&scratch).await;
    let claim = claimed(&gate, pay("A-1")).await;
    clock.advance(SignedDuration::from_secs(31));
    let reads = Reads::undecidable();
    assert_eq!(gate.sweep_pass(|_| Some(reads.clone())).await, 1);
    let unknown = stored(&gate, &claim).await;
    assert_eq!(unknown.state, IntentState::Unknown);
    assert_eq!(unknown.executions, claim.execution, "no new execution");

    for result in [
        applied("ch_late"),
        EffectResult::Unknown {
            message: "timed out".into(),
        },
        EffectResult::NotSent {
            message: "refused".into(),
        },
    ] {
        let why = stale(gate.complete(&claim, result).await);
        assert!(why.contains("unknown"), "{why}");
        assert_eq!(stored(&gate, &claim).await, unknown, "nothing recorded");
    }
}

#[tokio::test]
async fn a_completion_after_a_repeat_turned_the_intent_unknown_records_nothing() {
    let scratch = Scratch::new();
    let (gate, clock) = manual(&scratch).await;
    let ledger = || Call::new("ledger", json!({"entry": "E-1"}));
    let claim = claimed(&gate, ledger()).await;
    clock.advance(SignedDuration::from_secs(31));
    // `ledger` refuses repeats of an unknown intent: the repeat writes it unknown.
    let repeat = settled(&gate, ledger()).await;
    assert_eq!(repeat.status, Status::Refused);
    assert_eq!(repeat.reason.unwrap().code, Code::UnknownRefused);
    let unknown = stored(&gate, &claim).await;
    assert_eq!(unknown.state, IntentState::Unknown);

    stale(gate.complete(&claim, applied("le_1")).await);
    assert_eq!(stored(&gate, &claim).await, unknown);
}

#[tokio::test]
async fn a_completion_after_the_lease_expired_records_nothing_even_unswept() {
    let scratch = Scratch::new();
    let (gate, clock) = manual(&scratch).await;
    let claim = claimed(&gate, pay("A-1")).await;
    clock.advance(SignedDuration::from_secs(30));
    let before = stored(&gate, &claim).await;
    let why = stale(gate.complete(&claim, applied("ch_1")).await);
    assert!(why.contains("lease expired"), "{why}");
    assert_eq!(stored(&gate, &claim).await, before);
}

#[tokio::test]
async fn a_heartbeat_extends_the_lease_and_a_stale_one_is_refused() {
    let scratch = Scratch::new();
    let (gate, clock) = manual(&scratch).await;
    let t0 = gate.clock().now();
    let claim = claimed(&gate, pay("A-1")).await;
    assert_eq!(claim.lease_expires_at, t0 + SignedDuration::from_secs(30));

    clock.advance(SignedDuration::from_secs(20));
    let beat = gate.heartbeat(&claim).await.unwrap();
    assert_eq!(beat.lease_expires_at, t0 + SignedDuration::from_secs(50));
    assert_eq!(beat.fence(), claim.fence());
    let lease = stored(&gate, &claim).await.lease.unwrap();
    assert_eq!(
        lease.expires_at,
        t0 + SignedDuration::from_secs(50),
        "durable"
    );

    // Past the first lease, inside the extended one: a repeat sees it in flight.
    clock.advance(SignedDuration::from_secs(20));
    let repeat = settled(&gate, pay("A-1")).await;
    assert_eq!(repeat.status, Status::InFlight);
    assert_eq!(repeat.reason.unwrap().code, Code::InFlight);
    // The holder (with its original claim: the fence is what counts) completes.
    let done = gate.complete(&claim, applied("ch_1")).await.unwrap();
    assert_eq!(done.status, Status::Applied);
    // A heartbeat after the completion is stale.
    stale(gate.heartbeat(&claim).await);

    // A heartbeat after the lease expired is refused and extends nothing.
    let other = claimed(&gate, pay("B-1")).await;
    clock.advance(SignedDuration::from_secs(31));
    let before = stored(&gate, &other).await;
    let why = stale(gate.heartbeat(&other).await);
    assert!(why.contains("lease expired"), "{why}");
    assert_eq!(stored(&gate, &other).await, before);
}

#[tokio::test]
async fn a_repeated_identical_completion_answers_the_recorded_outcome() {
    let scratch = Scratch::new();
    let (gate, clock) = manual(&scratch).await;
    let claim = claimed(&gate, pay("A-1")).await;
    let first = gate.complete(&claim, applied("ch_1")).await.unwrap();
    let recorded = stored(&gate, &claim).await;
    // A client retrying its own complete, even after the lease would have expired.
    clock.advance(SignedDuration::from_secs(60));
    let again = gate.complete(&claim, applied("ch_1")).await.unwrap();
    assert_eq!(again, first);
    assert_eq!(stored(&gate, &claim).await, recorded, "nothing rewritten");
    // A different answer for the same claim is not a repeat.
    stale(gate.complete(&claim, applied("ch_other")).await);
    stale(
        gate.complete(
            &claim,
            EffectResult::Unknown {
                message: "timed out".into(),
            },
        )
        .await,
    );
    assert_eq!(stored(&gate, &claim).await, recorded);

    // The same holds for an `unknown` completion.
    let claim = claimed(&gate, pay("B-1")).await;
    let timed_out = || EffectResult::Unknown {
        message: "timed out".into(),
    };
    let first = gate.complete(&claim, timed_out()).await.unwrap();
    assert_eq!(first.status, Status::Unknown);
    let recorded = stored(&gate, &claim).await;
    assert_eq!(gate.complete(&claim, timed_out()).await.unwrap(), first);
    assert_eq!(stored(&gate, &claim).await, recorded);
}

#[tokio::test]
async fn a_fence_travels_as_the_intent_key_and_a_token() {
    let scratch = Scratch::new();
    let (gate, _clock) = manual(&scratch).await;
    let claim = claimed(&gate, pay("A-1")).await;
    let fence = claim.fence();
    let token = fence.token();
    let nonce = token
        .strip_prefix("g1.e1.")
        .expect("generation, execution, nonce");
    assert_eq!(nonce.len(), 32, "128 random bits: {token}");
    assert!(
        !format!("{fence:?}").contains(nonce),
        "the nonce stays out of logs"
    );
    let back = Fence::from_token(claim.intent_key.clone(), &token).unwrap();
    assert_eq!(back, fence);
    for bad in [
        "",
        "g1",
        "1.1",
        "g1.e",
        "g1.e1",
        "g1.e1.",
        "g.e1.ab",
        "g1.e1x.ab",
        "g-1.e1.ab",
        "g1.e99999999999.ab",
        "g1.e1.not-hex",
    ] {
        assert_eq!(
            Fence::from_token(claim.intent_key.clone(), bad),
            None,
            "{bad}"
        );
    }
    // Counting executions is not enough: a fence with another nonce is stale.
    let guessed = Fence {
        nonce: "0".repeat(32),
        ..back.clone()
    };
    stale(
        gate.complete_fenced("agent", &guessed, applied("ch_1"))
            .await,
    );
    assert!(matches!(
        gate.heartbeat_fenced("agent", &guessed).await,
        Err(GateError::StaleClaim(_))
    ));
    // The claim is its claimer's: another agent holding the right token is refused
    // (403), and nothing is recorded.
    forbidden(gate.heartbeat_fenced("agent2", &back).await);
    forbidden(gate.complete_fenced("agent2", &back, not_sent_now()).await);
    assert_eq!(stored(&gate, &claim).await.state, IntentState::InFlight);
    // Completed by fence alone (the wire API's path), by its claimer; a heartbeat's
    // claim still carries the nonce.
    let beat = gate.heartbeat_fenced("agent", &back).await.unwrap();
    assert_eq!(beat.execution, 1);
    assert_eq!(beat.fence(), back);
    let done = gate
        .complete_fenced("agent", &back, applied("ch_1"))
        .await
        .unwrap();
    assert_eq!(done.status, Status::Applied);
    // Approvers cannot complete claims; a fence for a newer execution is stale.
    assert!(matches!(
        gate.complete_fenced("alice", &back, applied("ch_1")).await,
        Err(GateError::Forbidden(_))
    ));
    let ahead = Fence {
        execution: 2,
        ..back.clone()
    };
    stale(gate.complete_fenced("agent", &ahead, applied("ch_1")).await);
    let unknown = Fence {
        intent_key: gate.derive_key("agent", &pay("Z-9")).unwrap().key,
        ..back
    };
    assert!(matches!(
        gate.complete_fenced("agent", &unknown, applied("ch_1"))
            .await,
        Err(GateError::UnknownIntent(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_concurrent_claims_of_one_intent_make_one_claim() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let mut tasks = Vec::new();
    for i in 0..32 {
        let gate = gate.clone();
        let principal = if i % 2 == 0 { "agent" } else { "agent2" };
        tasks.push(tokio::spawn(async move {
            gate.claim(principal, pay("A-1")).await.unwrap()
        }));
    }
    let mut claims = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Claimed::Execute(claim) => claims.push(claim),
            Claimed::Settled(o) => assert_eq!(o.status, Status::InFlight, "{o:?}"),
            Claimed::Read(h) => panic!("pay is not a read: {h:?}"),
        }
    }
    assert_eq!(claims.len(), 1, "exactly one claim");
    let done = gate.complete(&claims[0], applied("ch_1")).await.unwrap();
    assert_eq!(done.status, Status::Applied);
}

#[tokio::test]
async fn a_sweep_pass_reads_only_unknown_and_lease_expired_intents() {
    let scratch = Scratch::new();
    let (gate, clock) = manual(&scratch).await;
    let old = claimed(&gate, pay("A-1")).await;
    clock.advance(SignedDuration::from_secs(20));
    let live = claimed(&gate, pay("B-1")).await;
    clock.advance(SignedDuration::from_secs(15));

    // No executor for the capability in this process: nothing is read or changed.
    assert_eq!(gate.sweep_pass(|_| None::<Arc<Reads>>).await, 0);
    assert_eq!(stored(&gate, &old).await.state, IntentState::InFlight);

    let reads = Reads::undecidable();
    assert_eq!(gate.sweep_pass(|_| Some(reads.clone())).await, 1);
    assert_eq!(reads.asked(), 1, "the live claim is not read");
    assert_eq!(stored(&gate, &old).await.state, IntentState::Unknown);
    assert_eq!(stored(&gate, &live).await.state, IntentState::InFlight);
    // Still undecidable: an unknown intent stays as it is (nothing to write).
    assert_eq!(gate.sweep_pass(|_| Some(reads.clone())).await, 0);
    assert_eq!(reads.asked(), 2);

    // The provider shows the effect: the sweep settles it applied.
    let found = Reads::new(ReconcileResult::Found {
        effect_ref: Some("ch_1".into()),
        result: json!({"id": "ch_1"}),
    });
    assert_eq!(gate.sweep_pass(|_| Some(found.clone())).await, 1);
    let settled = stored(&gate, &old).await;
    assert_eq!(settled.state, IntentState::Applied);
    assert_eq!(settled.effect_ref.as_deref(), Some("ch_1"));
    assert_eq!(stored(&gate, &live).await.state, IntentState::InFlight);
}

/// The schedule a review found: while the gate runs an effect of its own, another agent
/// who can count executions sends a completion for it (`not_sent`, or a forged
/// `applied`). Neither may land: a `not_sent` would let the next repeat execute a
/// second time, a forged `applied` would hide the real result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_completes_the_gates_own_execution_from_outside() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let effects = Arc::new(AtomicUsize::new(0));
    let (release, held) = tokio::sync::oneshot::channel::<()>();
    let held = Arc::new(tokio::sync::Mutex::new(Some(held)));
    let running = {
        let (gate, effects, held) = (gate.clone(), effects.clone(), held.clone());
        tokio::spawn(async move {
            gate.invoke("agent", pay("O-1"), move |_intent| {
                let (effects, held) = (effects.clone(), held.clone());
                async move {
                    if let Some(wait) = held.lock().await.take() {
                        let _ = wait.await;
                    }
                    effects.fetch_add(1, Ordering::SeqCst);
                    applied("ch_real")
                }
            })
            .await
        })
    };
    let key = gate.derive_key("agent", &pay("O-1")).unwrap().key;
    // Wait until the gate's own claim is committed.
    let record = loop {
        if let Some(r) = gate.store().load(&key).await.unwrap()
            && r.state == IntentState::InFlight
        {
            break r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    for nonce in ["0".repeat(32), "ab".into()] {
        let guess = Fence {
            intent_key: key.clone(),
            generation: record.generation,
            execution: record.executions,
            nonce,
        };
        let not_sent = EffectResult::NotSent {
            message: "forged".into(),
        };
        // The claimer itself cannot guess the nonce of the gate's own execution...
        stale(
            gate.complete_fenced("agent", &guess, not_sent.clone())
                .await,
        );
        stale(
            gate.complete_fenced("agent", &guess, applied("ch_forged"))
                .await,
        );
        // ...and another principal is refused before any nonce is looked at.
        forbidden(gate.complete_fenced("agent2", &guess, not_sent).await);
    }
    assert_eq!(
        gate.store().load(&key).await.unwrap().unwrap().state,
        IntentState::InFlight,
        "nothing the guesses sent was recorded"
    );
    release.send(()).unwrap();
    let outcome = running.await.unwrap().unwrap();
    assert_eq!(outcome.status, Status::Applied);
    assert_eq!(outcome.effect_ref.as_deref(), Some("ch_real"));
    let again = gate
        .invoke("agent", pay("O-1"), |_| async { applied("ch_second") })
        .await
        .unwrap();
    assert_eq!(again.status, Status::Replayed);
    assert_eq!(again.effect_ref.as_deref(), Some("ch_real"));
    assert_eq!(effects.load(Ordering::SeqCst), 1, "one intent, one effect");
}
