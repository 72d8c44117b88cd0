//! The Gate end to end on a real SQLite file: races, approvals, breakers, the audit
//! chain, and failing closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use oncegate_core::EffectResult;
use oncegate_core::audit::verify_shard;
use oncegate_core::codes::Code;
use oncegate_core::decide::Choice;
use oncegate_core::intent::{ApprovalState, IntentState, Status};
use oncegate_engine::{Call, Executor, GateError, IntentHandle, SystemClock};
use oncegate_store::{AuditRead, Backend, IntentsRead};
use serde_json::json;

use crate::support::Scratch;

/// Counts executions; each takes a little while, like a real provider.
struct Counting {
    executions: AtomicUsize,
    delay: Duration,
}

impl Counting {
    fn new(delay_ms: u64) -> Arc<Self> {
        Arc::new(Self {
            executions: AtomicUsize::new(0),
            delay: Duration::from_millis(delay_ms),
        })
    }
    fn count(&self) -> usize {
        self.executions.load(Ordering::SeqCst)
    }
}

impl Executor for Counting {
    async fn execute(&self, intent: IntentHandle) -> EffectResult {
        let n = self.executions.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        EffectResult::Applied {
            effect_ref: Some(format!("fx_{n}")),
            result: json!({"key": intent.key}),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_racers_one_execution() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let exec = Counting::new(100);
    let mut tasks = Vec::new();
    for i in 0..64 {
        let gate = gate.clone();
        let exec = exec.clone();
        let principal = if i % 2 == 0 { "agent" } else { "agent2" };
        tasks.push(tokio::spawn(async move {
            let args = json!({"order_id": "A-1", "amount": if i % 3 == 0 { json!("12.50") } else { json!(12.5) }, "memo": format!("try {i}")});
            gate.invoke_with(principal, Call::new("pay", args), exec).await.unwrap()
        }));
    }
    let mut statuses = std::collections::BTreeMap::new();
    for t in tasks {
        let o = t.await.unwrap();
        *statuses.entry(o.status.as_str()).or_insert(0) += 1;
        assert!(
            matches!(
                o.status,
                Status::Applied | Status::InFlight | Status::Replayed
            ),
            "{o:?}"
        );
    }
    assert_eq!(exec.count(), 1, "exactly one execution: {statuses:?}");
    assert_eq!(statuses.get("applied"), Some(&1), "{statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_orders_are_distinct_intents() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let exec = Counting::new(0);
    let mut tasks = Vec::new();
    for i in 0..10 {
        let gate = gate.clone();
        let exec = exec.clone();
        tasks.push(tokio::spawn(async move {
            gate.invoke_with(
                "agent",
                Call::new(
                    "pay",
                    json!({"order_id": format!("O-{i}"), "amount": "12.50"}),
                ),
                exec,
            )
            .await
            .unwrap()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().status, Status::Applied);
    }
    assert_eq!(exec.count(), 10, "no false dedupe");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_double_approval_executes_once() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let exec = Counting::new(50);
    let held = gate
        .invoke_with(
            "agent",
            Call::new("refund", json!({"order_id": "A-1", "amount": "250.00"})),
            exec.clone(),
        )
        .await
        .unwrap();
    assert_eq!(held.status, Status::PendingApproval);
    let id = held.approval_id.clone().unwrap();
    assert_eq!(exec.count(), 0);

    // The agent repeats while it waits: same approval, nothing runs.
    let repeat = gate
        .invoke_with(
            "agent",
            Call::new("refund", json!({"order_id": "A-1", "amount": 250})),
            exec.clone(),
        )
        .await
        .unwrap();
    assert_eq!(
        (repeat.status, repeat.approval_id.as_deref()),
        (Status::PendingApproval, Some(id.as_str()))
    );

    // Agents cannot approve; nobody approves their own call.
    let denied = gate
        .decide_approval("agent2", &id, Choice::Approve, exec.clone())
        .await;
    assert!(matches!(denied, Err(GateError::Forbidden(_))), "{denied:?}");

    let (a, b) = tokio::join!(
        gate.decide_approval("alice", &id, Choice::Approve, exec.clone()),
        gate.decide_approval("bob", &id, Choice::Approve, exec.clone()),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(exec.count(), 1, "two approvers, one execution: {a:?} {b:?}");
    assert!(a.status == Status::Applied || b.status == Status::Applied);
    let stored = gate.store().approval(&id).await.unwrap().unwrap();
    assert_eq!(stored.state, ApprovalState::Approved);

    // A third click returns the first result.
    let third = gate
        .decide_approval("bob", &id, Choice::Approve, exec.clone())
        .await
        .unwrap();
    assert_eq!((third.status, exec.count()), (Status::Replayed, 1));
    let after = gate
        .invoke_with(
            "agent",
            Call::new("refund", json!({"order_id": "A-1", "amount": "250"})),
            exec.clone(),
        )
        .await
        .unwrap();
    assert_eq!(after.status, Status::Replayed);
}

/// A provider that keeps answering 429: nothing happens, so every repeat executes again.
struct RateLimited {
    executions: AtomicUsize,
}

impl Executor for RateLimited {
    async fn execute(&self, _intent: IntentHandle) -> EffectResult {
        self.executions.fetch_add(1, Ordering::SeqCst);
        EffectResult::NotSent {
            message: "429".into(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ceiling_trips_on_a_storm_of_executions_and_an_admin_resets_it() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let limited = Arc::new(RateLimited {
        executions: AtomicUsize::new(0),
    });
    let call = || Call::new("ledger", json!({"entry": "E-7"}));
    let mut refused = 0;
    for _ in 0..50 {
        let o = gate
            .invoke_with("agent", call(), limited.clone())
            .await
            .unwrap();
        if o.status == Status::Refused {
            assert_eq!(o.reason.unwrap().code, Code::AttemptCeiling);
            refused += 1;
        }
    }
    assert_eq!(
        (limited.executions.load(Ordering::SeqCst), refused),
        (5, 45),
        "ceiling 5: five executions, then refused"
    );
    let key = gate
        .store()
        .list_intents(&oncegate_store::IntentFilter {
            breaker_tripped: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .items[0]
        .key
        .clone();
    assert!(matches!(
        gate.reset_breaker("agent", &key).await,
        Err(GateError::Forbidden(_))
    ));
    gate.reset_breaker("ops", &key).await.unwrap();
    // The provider is back: the reset intent executes once, and repeats replay.
    let exec = Counting::new(0);
    let o = gate
        .invoke_with("agent", call(), exec.clone())
        .await
        .unwrap();
    assert_eq!((o.status, exec.count()), (Status::Applied, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_replays_never_trips_the_breaker_and_raises_an_alert() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let exec = Counting::new(0);
    let call = || Call::new("ledger", json!({"entry": "E-8"}));
    let first = gate
        .invoke_with("agent", call(), exec.clone())
        .await
        .unwrap();
    assert_eq!(first.status, Status::Applied);
    let audit_before = gate.store().audit_after(0, 10_000).await.unwrap().len();
    let mut storms = 0;
    for _ in 0..50 {
        let o = gate
            .invoke_with("agent", call(), exec.clone())
            .await
            .unwrap();
        assert_eq!(o.status, Status::Replayed, "{o:?}");
        assert_eq!(
            o.effect_ref, first.effect_ref,
            "the effect reference, every time"
        );
        storms += o
            .alerts
            .iter()
            .filter(|a| matches!(a, oncegate_core::intent::Alert::ReplayStorm { .. }))
            .count();
    }
    assert_eq!(exec.count(), 1);
    assert_eq!(storms, 1, "one alert per storm window, not one per call");
    assert_eq!(
        gate.store().audit_after(0, 10_000).await.unwrap().len(),
        audit_before,
        "a replay needs no durable write"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_database_fails_closed() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let exec = Counting::new(0);
    assert_eq!(
        gate.invoke_with(
            "agent",
            Call::new("pay", json!({"order_id": "A-1", "amount": "1"})),
            exec.clone()
        )
        .await
        .unwrap()
        .status,
        Status::Applied
    );
    std::fs::remove_file(scratch.db()).unwrap();
    let o = gate
        .invoke_with(
            "agent",
            Call::new("pay", json!({"order_id": "A-2", "amount": "1"})),
            exec.clone(),
        )
        .await
        .unwrap();
    assert_eq!(o.status, Status::Refused);
    assert_eq!(o.reason.unwrap().code, Code::StoreUnavailable);
    assert_eq!(exec.count(), 1, "no effect without a durable claim");
    assert!(
        gate.store().ping().await.is_err(),
        "readiness reports the outage"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_audit_row_breaks_the_chain() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let exec = Counting::new(0);
    for i in 0..20 {
        gate.invoke_with(
            "agent",
            Call::new("pay", json!({"order_id": format!("O-{i}"), "amount": "1"})),
            exec.clone(),
        )
        .await
        .unwrap();
    }
    let store = gate.store();
    let mut total = 0;
    for shard in store.audit_shards().await.unwrap() {
        total += verify_shard(shard, &store.audit_shard(shard).await.unwrap())
            .unwrap()
            .seq;
    }
    assert_eq!(total, 40, "every decision (claim and record) is audited");

    // Tamper with one row directly in the database file.
    let (id, shard, seq): (i64, i64, i64) = {
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", scratch.db().display()))
            .await
            .unwrap();
        let row: (i64, i64, i64) =
            sqlx::query_as("SELECT id, shard, seq FROM audit WHERE seq = 2 LIMIT 1")
                .fetch_one(&pool)
                .await
                .unwrap();
        sqlx::query(
            "UPDATE audit SET body = replace(body, '\"agent\"', '\"mallory\"') WHERE id = ?",
        )
        .bind(row.0)
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
        row
    };
    let _ = id;
    let broken = verify_shard(
        shard as u32,
        &store.audit_shard(shard as u32).await.unwrap(),
    )
    .unwrap_err();
    assert_eq!(broken.seq, seq as u64, "verify names the first broken link");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_hangs_up_does_not_lose_the_effect() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let exec = Counting::new(300);
    let call = || Call::new("pay", json!({"order_id": "H-1", "amount": "5"}));
    let g = gate.clone();
    let e = exec.clone();
    let hung_up = tokio::time::timeout(Duration::from_millis(50), async move {
        g.invoke_with("agent", call(), e).await
    })
    .await;
    assert!(hung_up.is_err(), "the caller gave up mid-call");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let listed = gate
        .store()
        .list_intents(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(
        listed[0].state,
        IntentState::Applied,
        "the effect finished and was recorded"
    );
    let o = gate
        .invoke_with("agent", call(), exec.clone())
        .await
        .unwrap();
    assert_eq!((o.status, exec.count()), (Status::Replayed, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_database_fails_closed() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let exec = Counting::new(0);
    std::fs::set_permissions(scratch.db(), std::fs::Permissions::from_mode(0o444)).unwrap();
    let o = gate
        .invoke_with(
            "agent",
            Call::new("pay", json!({"order_id": "RO-1", "amount": "1"})),
            exec.clone(),
        )
        .await
        .unwrap();
    assert_eq!(
        (o.status, o.reason.unwrap().code),
        (Status::Refused, Code::StoreUnavailable)
    );
    assert_eq!(exec.count(), 0, "no effect without a durable claim");
    assert!(gate.store().ping().await.is_err());
    std::fs::set_permissions(scratch.db(), std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = gate
        .invoke_with(
            "agent",
            Call::new("pay", json!({"order_id": "RO-1", "amount": "1"})),
            exec.clone(),
        )
        .await
        .unwrap();
    assert_eq!(
        o.status,
        Status::Applied,
        "writable again: the store recovers"
    );
}

/// An execution that times out while its call keeps running: the gate answers unknown
/// at once, and records the call's late answer through the same record path.
struct LateApplied {
    running: std::sync::atomic::AtomicBool,
}

impl Executor for LateApplied {
    async fn execute(&self, _: IntentHandle) -> EffectResult {
        unreachable!("the gate executes through execute_attempt")
    }

    async fn execute_attempt(&self, _: IntentHandle) -> oncegate_engine::Attempt {
        self.running.store(true, Ordering::SeqCst);
        let late = async {
            EffectResult::Applied {
                effect_ref: Some("fx_late".into()),
                result: json!({"id": "fx_late"}),
            }
        };
        oncegate_engine::Attempt {
            result: EffectResult::Unknown {
                message: "timed out".into(),
            },
            late: Some(oncegate_engine::LateAnswer {
                answer: Box::pin(late),
                hold: None,
            }),
        }
    }

    fn attempt_running(&self, _: &IntentHandle) -> bool {
        self.running.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn a_late_answer_is_recorded_and_settles_the_intent_applied() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let exec = Arc::new(LateApplied {
        running: Default::default(),
    });
    let args = json!({"order_id": "L-1", "amount": "3.00"});
    let first = gate
        .invoke_with("agent", Call::new("pay", args.clone()), exec.clone())
        .await
        .unwrap();
    assert_eq!(first.status, Status::Unknown, "{first:?}");
    let key = first.key.clone().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let record = loop {
        let r = gate.store().load(&key).await.unwrap().unwrap();
        if r.state == IntentState::Applied || tokio::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(record.state, IntentState::Applied);
    assert_eq!(record.effect_ref.as_deref(), Some("fx_late"));
    assert_eq!(record.executions, 1, "nothing re-executed");
    let again = gate
        .invoke_with("agent", Call::new("pay", args), exec)
        .await
        .unwrap();
    assert_eq!(again.status, Status::Replayed);
    assert_eq!(again.effect_ref.as_deref(), Some("fx_late"));
}

/// The first execution times out and never took effect; it records every execution's
/// arguments.
#[derive(Default)]
struct LostThenRecorded {
    seen: std::sync::Mutex<Vec<serde_json::Value>>,
}

impl Executor for LostThenRecorded {
    async fn execute(&self, intent: IntentHandle) -> EffectResult {
        let mut seen = self.seen.lock().unwrap();
        seen.push(intent.arguments.clone());
        if seen.len() == 1 {
            EffectResult::Unknown {
                message: "timed out".into(),
            }
        } else {
            EffectResult::Applied {
                effect_ref: Some("fx_2".into()),
                result: json!({}),
            }
        }
    }

    async fn reconcile(&self, _intent: IntentHandle) -> oncegate_core::ReconcileResult {
        oncegate_core::ReconcileResult::NotFound
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_intent_reconciled_absent_re_executes_with_its_first_arguments() {
    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let exec = Arc::new(LostThenRecorded::default());
    let first = json!({"order_id": "R-1", "amount": "5.00", "memo": "first"});
    let fixed = json!({"order_id": "R-1", "amount": "5.00", "memo": "corrected"});
    let o = gate
        .invoke_with("agent", Call::new("pay", first.clone()), exec.clone())
        .await
        .unwrap();
    assert_eq!(o.status, Status::Unknown);
    // `pay` is keyed: a confirmed absence re-executes at once, with the same key and the
    // same body (a provider's idempotency layer refuses a repeated key with a changed
    // one, which would read as a failure while the first request may still land).
    let o = gate
        .invoke_with("agent", Call::new("pay", fixed.clone()), exec.clone())
        .await
        .unwrap();
    assert_eq!(o.status, Status::Applied, "{o:?}");
    assert_eq!(*exec.seen.lock().unwrap(), vec![first.clone(), first]);
}

/// The simulation's crash hook: killing a gate's `Process` aborts its detached effect
/// task at the await it reached (as SIGKILL would), so nothing is recorded and the
/// claim stays in flight; a gate without a process is unaffected by other kills.
#[tokio::test(start_paused = true)]
async fn a_killed_process_aborts_the_gates_effect_tasks() {
    struct Flag(Arc<AtomicUsize>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let scratch = Scratch::new();
    let registry = oncegate_engine::config::load_registry(&scratch.config()).unwrap();
    let store = oncegate_store::MemoryStore::new();
    let process = oncegate_engine::Process::new();
    let gate = oncegate_engine::Gate::with_store(
        registry,
        store.clone(),
        Arc::new(oncegate_engine::TokioClock::starting_at(
            jiff::Timestamp::from_second(1_800_000_000).unwrap(),
        )),
    )
    .in_process(process.clone());
    let dropped = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let (d, s) = (dropped.clone(), started.clone());
    let g = gate.clone();
    let caller = process.spawn(async move {
        g.invoke(
            "agent",
            Call::new("ledger", json!({"entry": "E-9"})),
            move |_| {
                let (d, s) = (d.clone(), s.clone());
                async move {
                    let _flag = Flag(d);
                    s.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    EffectResult::Applied {
                        effect_ref: Some("never".into()),
                        result: json!({}),
                    }
                }
            },
        )
        .await
    });
    while started.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    process.kill();
    assert!(caller.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the effect task was aborted, not left running"
    );
    let listed = store.list_intents(&Default::default()).await.unwrap().items;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].state,
        IntentState::InFlight,
        "nothing was recorded after the kill"
    );
    assert!(process.is_killed());
    assert!(
        process.spawn(async {}).await.unwrap_err().is_cancelled(),
        "a killed process runs nothing new"
    );
}

/// A principal an identity provider vouches for (name and role proved by its token) is
/// not in the registry: its proved role decides what it may do, and its name is what
/// the intent and the audit chain record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_principal_acts_by_its_proved_role_without_a_registry_entry() {
    use oncegate_core::config::Role;
    use oncegate_engine::Who;

    let scratch = Scratch::new();
    let gate = scratch.gate(Arc::new(SystemClock)).await;
    let exec = Counting::new(0);
    assert!(gate.registry().principal("idp:carol").is_none());

    // By name only, an unknown principal is refused.
    let unknown = gate
        .invoke_with(
            "idp:carol",
            Call::new("pay", json!({"order_id": "V-1", "amount": 5})),
            exec.clone(),
        )
        .await;
    assert!(
        matches!(unknown, Err(GateError::Forbidden(_))),
        "{unknown:?}"
    );

    // Proved an agent, it calls.
    let carol = Who::verified("idp:carol", Role::Agent);
    let paid = gate
        .invoke_with(
            carol,
            Call::new("pay", json!({"order_id": "V-1", "amount": 5})),
            exec.clone(),
        )
        .await
        .unwrap();
    assert_eq!((paid.status, exec.count()), (Status::Applied, 1));
    let key = paid.key.clone().expect("an applied call names its intent");
    let record = gate.store().load(&key).await.unwrap().unwrap();
    assert_eq!(record.principal, "idp:carol");

    // Proved an approver, it cannot call; proved an agent, it cannot approve.
    let approver = Who::verified("idp:dave", Role::Approver);
    let refused = gate
        .invoke_with(
            approver,
            Call::new("pay", json!({"order_id": "V-2", "amount": 5})),
            exec.clone(),
        )
        .await;
    assert!(
        matches!(refused, Err(GateError::Forbidden(_))),
        "{refused:?}"
    );
    let held = gate
        .invoke_with(
            carol,
            Call::new("refund", json!({"order_id": "V-1", "amount": 250})),
            exec.clone(),
        )
        .await
        .unwrap();
    assert_eq!(held.status, Status::PendingApproval);
    let id = held.approval_id.clone().unwrap();
    let by_agent = gate
        .decide_approval(
            Who::verified("idp:erin", Role::Agent),
            &id,
            Choice::Approve,
            exec.clone(),
        )
        .await;
    assert!(
        matches!(by_agent, Err(GateError::Forbidden(_))),
        "{by_agent:?}"
    );
    let approved = gate
        .decide_approval(approver, &id, Choice::Approve, exec.clone())
        .await
        .unwrap();
    assert_eq!((approved.status, exec.count()), (Status::Applied, 2));
}
