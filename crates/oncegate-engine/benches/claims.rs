//! Durable throughput of the SQLite store through `Gate`, next to the raw SQLite floor
//! measured in the same run, on the same disk, with the same durability (WAL,
//! `synchronous=FULL`).
//!
//! - `gate/claim+record/{1,32}`: `Gate::invoke` of `charge_card` (examples/payments.toml)
//!   with a distinct order id each time, so every call is a real claim plus a recorded
//!   result: two durable commits, each with its chained audit record. `1` is one caller
//!   awaiting each call in turn; `32` is 32 callers issuing calls concurrently.
//! - `sqlite_floor/{1,32}_rows_per_txn`: sqlx on one connection to a separate database:
//!   `BEGIN IMMEDIATE; INSERT ×n; COMMIT` with n = 1 and n = 32.
//!
//! Throughput is reported in elements per second: claims (claim + record) for the gate,
//! rows for the floor. Run with `cargo bench -p oncegate-engine --bench claims`.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use oncegate_core::EffectResult;
use oncegate_core::intent::Status;
use oncegate_engine::config::load_registry;
use oncegate_engine::{Call, Gate, SystemClock};
use oncegate_store::SqliteStore;
use serde_json::json;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{Connection, SqliteConnection};
use tokio::runtime::Runtime;
use tokio::sync::Mutex;

/// Concurrent claimers in the contended case (and rows per transaction in the batched
/// floor).
const WIDE: u64 = 32;

/// Bytes of payload per floor row: about the size of a stored intent body.
const FLOOR_BODY_BYTES: usize = 640;

/// Order ids are never reused, across samples and benchmarks.
static NEXT_ORDER: AtomicU64 = AtomicU64::new(0);

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A scratch directory on the target's disk (not a tmpfs), so fsync costs what it costs.
fn scratch() -> tempfile::TempDir {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(base).expect("create CARGO_TARGET_TMPDIR");
    tempfile::Builder::new()
        .prefix("oncegate-bench-")
        .tempdir_in(base)
        .expect("a scratch directory")
}

fn example_config() -> PathBuf {
    [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "..",
        "examples",
        "payments.toml",
    ]
    .iter()
    .collect()
}

/// One real claim + record: a fresh order id, an effect that applies at once.
async fn charge_once(gate: &Gate) {
    let n = NEXT_ORDER.fetch_add(1, Ordering::Relaxed);
    let call = Call::new(
        "charge_card",
        json!({"order_id": format!("B-{n}"), "amount": "12.50"}),
    );
    let outcome = gate
        .invoke("planner", call, |_intent| async {
            EffectResult::Applied {
                effect_ref: Some("ch".into()),
                result: json!({}),
            }
        })
        .await
        .expect("the call is valid");
    assert_eq!(
        outcome.status,
        Status::Applied,
        "every benchmarked call must claim and record: {outcome:?}"
    );
}

/// `claimers` tasks each make `iters` calls back to back; returns the wall time.
async fn claim_wave(gate: &Gate, claimers: u64, iters: u64) -> Duration {
    let start = Instant::now();
    let tasks: Vec<_> = (0..claimers)
        .map(|_| {
            let gate = gate.clone();
            tokio::spawn(async move {
                for _ in 0..iters {
                    charge_once(&gate).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a claimer task panicked");
    }
    start.elapsed()
}

fn bench_gate(group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, db: &Path) {
    let registry =
        load_registry(&example_config()).unwrap_or_else(|e| panic!("invalid example config:\n{e}"));
    let store = rt
        .block_on(SqliteStore::scratch(db))
        .expect("open the gate's store");
    let gate = rt.block_on(async { Gate::with_store(registry, store, Arc::new(SystemClock)) });

    for claimers in [1, WIDE] {
        group.throughput(Throughput::Elements(claimers));
        group.bench_function(format!("gate/claim+record/{claimers}"), |b| {
            b.to_async(rt).iter_custom(|iters| {
                let gate = gate.clone();
                async move { claim_wave(&gate, claimers, iters).await }
            });
        });
    }
}

/// A connection with the store's durability settings, and the floor table.
async fn floor_connection(db: &Path) -> SqliteConnection {
    let options = SqliteConnectOptions::from_str("sqlite://")
        .expect("sqlite options")
        .filename(db)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(5));
    let mut conn = SqliteConnection::connect_with(&options)
        .await
        .expect("open the floor database");
    sqlx::query(
        "CREATE TABLE floor (
             id   INTEGER PRIMARY KEY AUTOINCREMENT,
             k    TEXT NOT NULL UNIQUE,
             body TEXT NOT NULL
         )",
    )
    .execute(&mut conn)
    .await
    .expect("create the floor table");
    conn
}

/// One transaction of `rows` inserts.
async fn floor_txn(conn: &mut SqliteConnection, rows: u64, body: &str) {
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut *conn)
        .await
        .expect("begin");
    for _ in 0..rows {
        let n = NEXT_ORDER.fetch_add(1, Ordering::Relaxed);
        sqlx::query("INSERT INTO floor (k, body) VALUES (?, ?)")
            .bind(format!("{n:064x}"))
            .bind(body)
            .execute(&mut *conn)
            .await
            .expect("insert");
    }
    sqlx::query("COMMIT")
        .execute(&mut *conn)
        .await
        .expect("commit");
}

fn bench_floor(group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, db: &Path) {
    let conn = Arc::new(Mutex::new(rt.block_on(floor_connection(db))));
    let body: Arc<str> = "x".repeat(FLOOR_BODY_BYTES).into();

    for rows in [1, WIDE] {
        group.throughput(Throughput::Elements(rows));
        group.bench_function(format!("sqlite_floor/{rows}_rows_per_txn"), |b| {
            b.to_async(rt).iter_custom(|iters| {
                let conn = conn.clone();
                let body = body.clone();
                async move {
                    let mut conn = conn.lock().await;
                    let start = Instant::now();
                    for _ in 0..iters {
                        floor_txn(&mut conn, rows, &body).await;
                    }
                    start.elapsed()
                }
            });
        });
    }
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let dir = scratch();
    let mut group = c.benchmark_group("claims");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5));
    bench_gate(&mut group, &rt, &dir.path().join("gate.db"));
    bench_floor(&mut group, &rt, &dir.path().join("floor.db"));
    group.finish();
}

criterion_group!(claims_benches, benches);
criterion_main!(claims_benches);
