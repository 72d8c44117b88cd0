//! The sweep's read-back on two gates sharing one SQLite store (two replicas), with a
//! manual clock: at most `read_back` applied intents per capability and interval, read
//! by one replica only; a read that does not find one doubts the capability, whose
//! "not found" then never leads to an execution.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use jiff::SignedDuration;
use oncegate_core::intent::Status;
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_engine::config::load_registry;
use oncegate_engine::{Call, Claimed, Doubt, Executor, Gate, IntentHandle, ManualClock};
use serde_json::json;

use crate::support::manual_gate;

/// A claim-only keyed capability with a reconciliation read (this test answers it),
/// read back two intents every ten minutes, settled for a minute.
const CONFIG: &str = r#"
[store]
url = "sqlite://oncegate.db"

[[principals]]
name = "agent"
role = "agent"
token_env = "T_AGENT"

[[capabilities]]
name = "pay"
category = "keyed"
attempt_ceiling = 100
settle_horizon = "1m"
key = { business_ref = "order_id" }

[capabilities.reconcile]
kind = "http"
url = "http://127.0.0.1:9/pay?key={key}"
found = "/found"
read_back = 2
read_back_every = "10m"
"#;

/// A reconciliation read that answers `found` (or not) and counts what it is asked.
struct Read {
    found: bool,
    asked: AtomicUsize,
}

impl Read {
    fn new(found: bool) -> Arc<Self> {
        Arc::new(Self {
            found,
            asked: AtomicUsize::new(0),
        })
    }

    fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }
}

impl Executor for Read {
    async fn execute(&self, _intent: IntentHandle) -> EffectResult {
        panic!("a read-back executes nothing");
    }

    async fn reconcile(&self, _intent: IntentHandle) -> ReconcileResult {
        self.asked.fetch_add(1, Ordering::SeqCst);
        if self.found {
            ReconcileResult::Found {
                effect_ref: Some("ch_1".into()),
                result: json!({}),
            }
        } else {
            ReconcileResult::NotFound
        }
    }
}

fn pay(order: &str) -> Call {
    Call::new("pay", json!({"order_id": order}))
}

/// Claims `order` and completes it with `result`.
async fn settle(gate: &Gate, order: &str, result: EffectResult) {
    match gate.claim("agent", pay(order)).await.unwrap() {
        Claimed::Execute(claim) => {
            gate.complete(&claim, result).await.unwrap();
        }
        other => panic!("{order}: {other:?}"),
    }
}

fn applied() -> EffectResult {
    EffectResult::Applied {
        effect_ref: Some("ch_1".into()),
        result: json!({}),
    }
}

/// Moves the clock to the first read-back slot whose window holds what settled now.
fn to_the_read_back(clock: &ManualClock) {
    clock.advance(SignedDuration::from_mins(11));
}

#[tokio::test]
async fn a_few_applied_intents_are_read_back_by_one_replica_and_a_miss_doubts_the_read() {
    let (dir, a, clock) = manual_gate(CONFIG, None).await;
    let registry = load_registry(&dir.path().join("oncegate.toml")).unwrap();
    let b = Gate::with_store(registry, a.store().clone(), Arc::new(clock.clone()));
    for order in ["P-1", "P-2", "P-3", "P-4", "P-5"] {
        settle(&a, order, applied()).await;
    }

    // Five applied, both replicas sweep: two reads in all (the rate), by one of them.
    to_the_read_back(&clock);
    let read = Read::new(true);
    a.sweep_pass(|_| Some(read.clone())).await;
    b.sweep_pass(|_| Some(read.clone())).await;
    a.sweep_pass(|_| Some(read.clone())).await;
    assert_eq!(read.asked(), 2);
    assert!(a.doubts().await.unwrap().is_empty());

    // A read that does not find an applied intent doubts the capability.
    settle(&a, "P-6", applied()).await;
    to_the_read_back(&clock);
    let blind = Read::new(false);
    b.sweep_pass(|_| Some(blind.clone())).await;
    assert_eq!(blind.asked(), 1, "the first miss is enough");
    let doubts = a.doubts().await.unwrap();
    assert_eq!(
        doubts
            .iter()
            .map(|d| (d.capability.as_str(), d.doubt))
            .collect::<Vec<_>>(),
        [("pay", Doubt::ReconciliationUnproven)]
    );

    // Its "not found" is no absence now, even for a keyed capability that would
    // otherwise re-execute at once with its key: the repeat goes to a human.
    settle(
        &a,
        "P-7",
        EffectResult::Unknown {
            message: "timed out".into(),
        },
    )
    .await;
    match a
        .claim_with("agent", pay("P-7"), blind.clone())
        .await
        .unwrap()
    {
        Claimed::Settled(outcome) => {
            assert_eq!(outcome.status, Status::PendingApproval, "{outcome:?}");
        }
        other => panic!("not found executed again: {other:?}"),
    }
    // And a doubted read is not read back again until an admin clears it.
    let asked = blind.asked();
    to_the_read_back(&clock);
    a.sweep_pass(|_| Some(blind.clone())).await;
    assert_eq!(blind.asked(), asked);
}
