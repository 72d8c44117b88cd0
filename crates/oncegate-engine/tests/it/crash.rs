//! A real crash: a child process claims, starts the effect, and is SIGKILLed before it
//! records anything. After restart and lease expiry the intent is unknown, never
//! applied, and a repeat does not execute.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use oncegate_core::codes::Code;
use oncegate_core::intent::{IntentState, Status};
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_engine::{Call, Executor, IntentHandle, ManualClock, SystemClock};
use oncegate_store::IntentsRead;
use serde_json::json;

use crate::support::{Scratch, gate_in};

const CHILD_ENV: &str = "ONCEGATE_TEST_CRASH_CHILD_DIR";
const TEST_NAME: &str = "crash::killed_between_effect_and_record_reads_unknown";

fn call() -> Call {
    Call::new("ledger", json!({"entry": "E-1", "memo": "first"}))
}

/// Plays the child when `ONCEGATE_TEST_CRASH_CHILD_DIR` is set (the parent runs this same
/// test binary filtered to this test); otherwise plays the parent and asserts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_effect_and_record_reads_unknown() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let dir = std::path::PathBuf::from(dir);
        let gate = gate_in(&dir, Arc::new(SystemClock)).await;
        let marker = dir.join("effect-started");
        let _ = gate
            .invoke("agent", call(), move |_intent| {
                let marker = marker.clone();
                async move {
                    std::fs::write(&marker, b"started").unwrap();
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    EffectResult::Applied {
                        effect_ref: Some("never".into()),
                        result: json!({}),
                    }
                }
            })
            .await;
        unreachable!("the parent kills this process before the effect returns");
    }

    let scratch = Scratch::new();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([TEST_NAME, "--exact", "--nocapture"])
        .env(CHILD_ENV, scratch.dir.path())
        .spawn()
        .unwrap();
    let marker = scratch.dir.path().join("effect-started");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !marker.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the child never started its effect"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child exited before the effect started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap(); // SIGKILL: no destructor, no flush, no goodbye.
    child.wait().unwrap();

    // Restart, with the clock past the claim's lease.
    let clock = ManualClock::new(Timestamp::now());
    clock.advance(SignedDuration::from_secs(31));
    let gate = gate_in(scratch.dir.path(), Arc::new(clock.clone())).await;
    let key = {
        let listed = gate
            .store()
            .list_intents(&Default::default())
            .await
            .unwrap()
            .items;
        assert_eq!(listed.len(), 1);
        let r = &listed[0];
        assert_eq!(
            r.state,
            IntentState::InFlight,
            "the claim was durable before the effect started"
        );
        assert!(
            r.lease.as_ref().unwrap().expires_at < clock_now(&clock),
            "the lease has expired"
        );
        r.key.clone()
    };

    let executions = Arc::new(AtomicUsize::new(0));
    let counter = executions.clone();
    let outcome = gate
        .invoke(
            "agent",
            Call::new(
                "ledger",
                json!({"entry": "E-1", "memo": "second try, please"}),
            ),
            move |_| {
                counter.fetch_add(1, Ordering::SeqCst);
                async {
                    EffectResult::Applied {
                        effect_ref: Some("dup".into()),
                        result: json!({}),
                    }
                }
            },
        )
        .await
        .unwrap();
    assert_eq!(
        executions.load(Ordering::SeqCst),
        0,
        "a repeat after a crash must not execute"
    );
    assert_eq!(outcome.status, Status::Refused);
    assert_eq!(outcome.reason.as_ref().unwrap().code, Code::UnknownRefused);
    let stored = gate.store().load(&key).await.unwrap().unwrap();
    assert_eq!(
        stored.state,
        IntentState::Unknown,
        "after lease expiry the intent reads unknown, never applied"
    );
    assert_eq!(stored.executions, 1);
}

fn clock_now(clock: &ManualClock) -> Timestamp {
    use oncegate_engine::Clock;
    clock.now()
}

/// An executor whose upstream timed out after committing, and whose reconciliation
/// read finds the effect.
struct TimedOutButCommitted {
    executions: AtomicUsize,
    reconciliations: AtomicUsize,
}

impl Executor for TimedOutButCommitted {
    async fn execute(&self, _intent: IntentHandle) -> EffectResult {
        self.executions.fetch_add(1, Ordering::SeqCst);
        EffectResult::Unknown {
            message: "timed out after 5s".into(),
        }
    }

    async fn reconcile(&self, intent: IntentHandle) -> ReconcileResult {
        self.reconciliations.fetch_add(1, Ordering::SeqCst);
        ReconcileResult::Found {
            effect_ref: Some(format!("ch_{}", &intent.key[..8])),
            result: json!({"found": true}),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_after_commit_is_reconciled_not_repeated() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let exec = Arc::new(TimedOutButCommitted {
        executions: AtomicUsize::new(0),
        reconciliations: AtomicUsize::new(0),
    });
    let first = gate
        .invoke_with(
            "agent",
            Call::new("pay", json!({"order_id": "A-1", "amount": "12.50"})),
            exec.clone(),
        )
        .await
        .unwrap();
    assert_eq!(first.status, Status::Unknown);
    // Three re-plans with drifting arguments.
    for amount in [json!(12.5), json!("USD 12.50"), json!({"minor": 1250})] {
        let again = gate
            .invoke_with(
                "agent2",
                Call::new(
                    "pay",
                    json!({"order_id": "A-1", "amount": amount, "memo": "retry"}),
                ),
                exec.clone(),
            )
            .await
            .unwrap();
        assert_eq!(again.status, Status::Replayed, "{again:?}");
        assert!(again.effect_ref.as_deref().unwrap().starts_with("ch_"));
    }
    assert_eq!(
        exec.executions.load(Ordering::SeqCst),
        1,
        "one execution for one intent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_repeats_of_an_unknown_all_get_the_reconciled_result() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let exec = Arc::new(TimedOutButCommitted {
        executions: AtomicUsize::new(0),
        reconciliations: AtomicUsize::new(0),
    });
    let call = || Call::new("pay", json!({"order_id": "U-1", "amount": "3.00"}));
    assert_eq!(
        gate.invoke_with("agent", call(), exec.clone())
            .await
            .unwrap()
            .status,
        Status::Unknown
    );
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (gate, exec) = (gate.clone(), exec.clone());
        tasks.push(tokio::spawn(async move {
            gate.invoke_with("agent", call(), exec).await.unwrap()
        }));
    }
    for t in tasks {
        let o = t.await.unwrap();
        assert_eq!(o.status, Status::Replayed, "{o:?}");
    }
    assert_eq!(exec.executions.load(Ordering::SeqCst), 1);
    let stored = gate
        .store()
        .list_intents(&Default::default())
        .await
        .unwrap()
        .items;
    let reads = exec.reconciliations.load(Ordering::SeqCst);
    assert!((1..=16).contains(&reads), "{reads} reconciliation reads");
    assert_eq!(
        stored[0].attempts as usize,
        1 + reads,
        "one execution plus the reconciliation reads that ran, no extra attempts from lost races or replays"
    );
}
