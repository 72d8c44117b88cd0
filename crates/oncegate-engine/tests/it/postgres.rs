//! Two gates on one PostgreSQL database, one with a clock ten minutes fast: the store
//! judges leases by the database's clock, so the fast gate cannot take over a live
//! lease the other holds. The database is the test's own (random name, dropped after);
//! the server is `ONCEGATE_TEST_POSTGRES_URL` (default the local one).

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use oncegate_core::intent::{IntentState, Status};
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_engine::config::load_registry;
use oncegate_engine::{Call, Claimed, Executor, Gate, IntentHandle, SystemClock, TokioClock};
use oncegate_store::{IntentsRead, OpenMode, StoreOptions};
use serde_json::json;
use sqlx::Connection;

use crate::support::Scratch;

fn server_url() -> String {
    std::env::var("ONCEGATE_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into())
}

async fn admin(sql: String) {
    let mut conn = sqlx::PgConnection::connect(&server_url())
        .await
        .expect("the test PostgreSQL server answers (ONCEGATE_TEST_POSTGRES_URL)");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&mut conn)
        .await
        .unwrap();
    let _ = conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_whose_clock_runs_ten_minutes_fast_cannot_take_over_a_live_lease() {
    let name = format!("og_engine_{:016x}", rand_u64());
    admin(format!("CREATE DATABASE {name}")).await;
    let url = oncegate_store::postgres::with_database(&server_url(), &name);
    let scratch = Scratch::new();
    let registry = || load_registry(&scratch.config()).unwrap_or_else(|e| panic!("{e}"));
    let open = |mode| oncegate_store::open(&url, scratch.dir.path(), mode, StoreOptions::default());
    let holder = Gate::with_store(
        registry(),
        open(OpenMode::CreateIfMissing).await.unwrap(),
        Arc::new(SystemClock),
    );
    let fast = Gate::with_store(
        registry(),
        open(OpenMode::Existing).await.unwrap(),
        Arc::new(TokioClock::starting_at(
            Timestamp::now() + SignedDuration::from_mins(10),
        )),
    );
    let call = || Call::new("pay", json!({"order_id": "A-1", "amount": "12.50"}));
    let claim = match holder.claim("agent", call()).await.unwrap() {
        Claimed::Execute(claim) => claim,
        other => panic!("the holder claims: {other:?}"),
    };
    let held = holder
        .store()
        .load(&claim.intent_key)
        .await
        .unwrap()
        .unwrap();
    let owner = held.lease.as_ref().map(|l| l.owner.clone());
    assert!(owner.is_some(), "the claim holds a lease");

    // By its own clock the 30 s lease ran out 9.5 minutes ago; by the database's it
    // has 30 s to go.
    let outcome = match fast.claim("agent2", call()).await.unwrap() {
        Claimed::Settled(outcome) => outcome,
        Claimed::Execute(_) => panic!("the fast gate took over a live lease"),
        Claimed::Read(_) => panic!("not a read"),
    };
    assert_eq!(outcome.status, Status::InFlight, "{outcome:?}");
    let record = fast.store().load(&claim.intent_key).await.unwrap().unwrap();
    assert_eq!(record.state, IntentState::InFlight);
    assert_eq!(record.executions, 1, "nothing re-executed");
    assert_eq!(
        record.lease.as_ref().map(|l| l.owner.clone()),
        owner,
        "the lease stays with its holder"
    );

    // The sweep of the fast gate does not turn the live intent unknown either.
    let reads = Arc::new(Undecidable);
    assert_eq!(fast.sweep_pass(|_| Some(reads.clone())).await, 0);
    let record = holder
        .store()
        .load(&claim.intent_key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.state,
        IntentState::InFlight,
        "the sweep left it alone"
    );

    // The holder completes within its lease: one effect, applied.
    let done = holder
        .complete(
            &claim,
            EffectResult::Applied {
                effect_ref: Some("ch_1".into()),
                result: json!({"id": "ch_1"}),
            },
        )
        .await
        .unwrap();
    assert_eq!(done.status, Status::Applied);
    let replay = fast.claim("agent2", call()).await.unwrap();
    assert!(
        matches!(&replay, Claimed::Settled(o) if o.status == Status::Replayed),
        "{replay:?}"
    );
    holder.store().close().await;
    fast.store().close().await;
    admin(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
}

/// A reconciliation read that cannot tell (the sweep would turn an expired attempt
/// unknown with it). Never executes.
struct Undecidable;

impl Executor for Undecidable {
    async fn execute(&self, _intent: IntentHandle) -> EffectResult {
        panic!("the sweep never executes");
    }
    async fn reconcile(&self, _intent: IntentHandle) -> ReconcileResult {
        ReconcileResult::Undecidable {
            message: "no record either way".into(),
        }
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish()
}

/// A holder whose clock lags the database's by 25 s (of a 30 s lease) heartbeats: by its
/// own clock the stored expiry (database time) is later than `now + lease`, so the
/// engine's never-shorter renewal leaves the expiry as it was; the store still re-times
/// a heartbeat from the database's now, so the lease is extended and nobody may take the
/// intent over while its holder is alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_clock_lags_still_extends_its_lease_by_heartbeat() {
    let name = format!("og_engine_{:016x}", rand_u64());
    admin(format!("CREATE DATABASE {name}")).await;
    let url = oncegate_store::postgres::with_database(&server_url(), &name);
    let scratch = Scratch::new();
    let registry = load_registry(&scratch.config()).unwrap_or_else(|e| panic!("{e}"));
    let store = oncegate_store::open(
        &url,
        scratch.dir.path(),
        OpenMode::CreateIfMissing,
        StoreOptions::default(),
    )
    .await
    .unwrap();
    let slow = Gate::with_store(
        registry,
        store,
        Arc::new(TokioClock::starting_at(
            Timestamp::now() - SignedDuration::from_secs(25),
        )),
    );
    let call = Call::new("pay", json!({"order_id": "HB-1", "amount": "3.00"}));
    let claim = match slow.claim("agent", call).await.unwrap() {
        Claimed::Execute(claim) => claim,
        other => panic!("the holder claims: {other:?}"),
    };
    let expiry = || async {
        let record = slow.store().load(&claim.intent_key).await.unwrap().unwrap();
        record.lease.expect("in flight with a lease").expires_at
    };
    let before = expiry().await;
    // Let the database's clock move on, so a renewal from its now is later.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    slow.heartbeat(&claim).await.unwrap();
    let after = expiry().await;
    assert!(
        after > before,
        "the heartbeat extended the lease: {before} -> {after}"
    );
    slow.store().close().await;
    admin(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
}
