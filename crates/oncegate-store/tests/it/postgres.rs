//! The PostgreSQL backend against the local server (`ONCEGATE_TEST_POSTGRES_URL`,
//! default `postgres://postgres@127.0.0.1:5432/test`). Every test works in databases of
//! its own, created with random names and dropped at the end.

use std::path::Path;

use jiff::{SignedDuration, Timestamp};
use oncegate_core::audit::{AuditEvent, AuditKind, ChainKey, verify_shard_with};
use oncegate_core::intent::{IntentState, Lease};
use oncegate_store::conformance::{run_all, sample_record};
use oncegate_store::{
    AuditRead, Backend, Commit, IntentsRead, IntentsWrite, KillSwitchChange, Location, McpSession,
    OpenMode, PgStore, SharedRead, SharedWrite, Store, StoreError, StoreOptions, location, open,
};
use sqlx::Connection;

/// The server the tests use.
pub fn server_url() -> String {
    std::env::var("ONCEGATE_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A database of this test's own, dropped by [`TestDb::drop`].
pub struct TestDb {
    /// Its name.
    pub name: String,
    /// A URL that opens it.
    pub url: String,
}

impl TestDb {
    /// Creates an empty database with a random name.
    pub async fn create() -> Self {
        let name = format!("og_test_{:016x}", rand::random::<u64>());
        let mut admin = sqlx::PgConnection::connect(&server_url())
            .await
            .expect("the test PostgreSQL server answers (ONCEGATE_TEST_POSTGRES_URL)");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .expect("create a test database");
        let _ = admin.close().await;
        let url = oncegate_store::postgres::with_database(&server_url(), &name);
        Self { name, url }
    }

    /// Drops the database (and the connections to it, which are this test's own).
    pub async fn drop(self) {
        let mut admin = sqlx::PgConnection::connect(&server_url()).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&mut admin)
        .await
        .expect("drop the test database");
        let _ = admin.close().await;
    }

    /// Opens it as a store.
    pub async fn store(
        &self,
        mode: OpenMode,
        options: StoreOptions,
    ) -> Result<PgStore, StoreError> {
        PgStore::open(&self.url, mode, options).await
    }
}

fn event(key: &str, at: Timestamp, n: u64) -> AuditEvent {
    AuditEvent {
        at,
        kind: AuditKind::Call,
        key: Some(oncegate_core::key::IntentKey::from_hex(key)),
        generation: 1,
        capability: Some("charge_card".into()),
        actor: "planner".into(),
        run_id: None,
        from: None,
        to: Some(IntentState::InFlight),
        status: None,
        code: None,
        detail: serde_json::json!({"n": n}),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_passes_the_conformance_suite() {
    let dbs = std::sync::Mutex::new(Vec::new());
    run_all(|| async {
        let db = TestDb::create().await;
        let store = db
            .store(OpenMode::CreateIfMissing, StoreOptions::default())
            .await
            .unwrap();
        dbs.lock().unwrap().push(db);
        store
    })
    .await;
    let dbs = std::mem::take(&mut *dbs.lock().unwrap());
    for db in dbs {
        db.drop().await;
    }
}

/// The paging check alone (also in the suite), for a quick run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_listing_pages() {
    let db = TestDb::create().await;
    let store = db
        .store(OpenMode::CreateIfMissing, StoreOptions::default())
        .await
        .unwrap();
    oncegate_store::conformance::listing_pages(&store).await;
    store.close().await;
    db.drop().await;
}

/// Three pools on one database are three replicas: they commit concurrently to the same
/// shards (four, so every shard sees all three), and every shard still chains without a
/// fork, and every row matches the record that wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_commit_concurrently_and_no_shard_forks() {
    replicas_race(None).await;
}

/// The same race with a chain key: the records are sealed in the gateway (the key never
/// goes to the database), at a head that another replica may move first; such a commit
/// is sealed again at the new head, and no shard forks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_keyed_replicas_commit_concurrently_and_no_shard_forks() {
    let key = ChainKey::new(b"the replicas' chain key").unwrap();
    replicas_race(Some(key)).await;
}

async fn replicas_race(chain_key: Option<ChainKey>) {
    let db = TestDb::create().await;
    let options = StoreOptions {
        audit_shards: 4,
        pool_size: 4,
        chain_key: chain_key.clone(),
        ..StoreOptions::default()
    };
    let first = db
        .store(OpenMode::CreateIfMissing, options.clone())
        .await
        .unwrap();
    let replicas = [
        first,
        db.store(OpenMode::Existing, options.clone()).await.unwrap(),
        db.store(OpenMode::Existing, options).await.unwrap(),
    ];
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for (r, store) in replicas.iter().enumerate() {
        for worker in 0..4 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut written = 0;
                for i in 0..15u64 {
                    // 30 keys shared by every replica: each insert races the others'.
                    let key = format!("{:04x}", (i * 4 + worker) % 30);
                    let mut rec = sample_record(&key, 1);
                    rec.principal = format!("replica-{r}");
                    let at = Timestamp::now();
                    let result = match store.load(&rec.key).await.unwrap() {
                        None => {
                            store
                                .commit(Commit::new(Some(rec), None, event(&key, at, i)))
                                .await
                        }
                        Some(mut current) => {
                            current.attempts += 1;
                            store
                                .commit(Commit::new(Some(current), None, event(&key, at, i)))
                                .await
                        }
                    };
                    match result {
                        Ok(()) => written += 1,
                        Err(StoreError::Conflict) => {}
                        Err(e) => panic!("replica {r}: unexpected {e}"),
                    }
                }
                written
            }));
        }
    }
    let mut written = 0;
    for t in tasks {
        written += t.await.unwrap();
    }
    assert!(
        written >= 30,
        "at least one write per key landed ({written})"
    );
    let check = &replicas[1];
    let shards = check.audit_shards().await.unwrap();
    assert_eq!(shards.len(), 4, "every shard was written");
    let mut records = 0;
    for shard in shards {
        let chain = check.audit_shard(shard).await.unwrap();
        records += chain.len();
        verify_shard_with(shard, &chain, chain_key.as_ref(), 0)
            .unwrap_or_else(|b| panic!("shard {shard} forked: {b:?}"));
    }
    assert_eq!(records, written, "one audit record per successful commit");
    let report = oncegate_store::audit_check::verify_audit(
        check,
        chain_key.as_ref(),
        check.store_id(),
        &[],
        oncegate_store::audit_check::Walk::Full,
    )
    .await
    .unwrap();
    assert!(report.ok(), "audit verify: {report:?}");
    eprintln!(
        "three replicas: {written} commits, {records} records in {:?}",
        started.elapsed()
    );
    for r in &replicas {
        r.close().await;
    }
    db.drop().await;
}

/// A lease is timed and judged by the database's clock: a writer whose clock runs ten
/// minutes fast writes a 30 s lease that still runs 30 s by the database, and a
/// takeover of a live lease is refused with `LeaseLive`, changing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_timed_and_judged_by_the_database_clock() {
    let db = TestDb::create().await;
    let store = db
        .store(OpenMode::CreateIfMissing, StoreOptions::default())
        .await
        .unwrap();
    let fast = Timestamp::now() + SignedDuration::from_mins(10);
    let mut rec = sample_record("ab01", 1);
    rec.lease = Some(Lease {
        owner: "holder/1".into(),
        expires_at: fast + SignedDuration::from_secs(30),
        nonce: None,
    });
    store
        .commit(Commit::new(Some(rec.clone()), None, event("ab01", fast, 1)))
        .await
        .unwrap();
    let stored = store.load(&rec.key).await.unwrap().unwrap();
    let expires = stored.lease.as_ref().unwrap().expires_at;
    let left = expires.duration_since(Timestamp::now());
    assert!(
        left > SignedDuration::from_secs(20) && left <= SignedDuration::from_secs(31),
        "the lease runs 30 s from the database's now, not the writer's ({left:?})"
    );

    // Another replica, its clock ten minutes fast too, judges the lease expired and
    // takes over: the database says it is live.
    let mut takeover = stored.clone();
    takeover.lease = Some(Lease {
        owner: "thief/2".into(),
        expires_at: fast + SignedDuration::from_mins(1),
        nonce: None,
    });
    let result = store
        .commit(Commit::new(Some(takeover.clone()), None, event("ab01", fast, 2)).taking_over(true))
        .await;
    assert!(
        matches!(result, Err(StoreError::LeaseLive(_))),
        "a live lease cannot be taken over: {result:?}"
    );
    let after = store.load(&rec.key).await.unwrap().unwrap();
    assert_eq!(after.version, 1, "nothing was written");
    assert_eq!(after.lease.unwrap().owner, "holder/1");

    // The same write without the takeover flag passes, leaving the lease as it was,
    // and a stale takeover is a plain conflict.
    store
        .commit(Commit::new(
            Some(stored.clone()),
            None,
            event("ab01", fast, 3),
        ))
        .await
        .unwrap();
    assert_eq!(
        store
            .load(&rec.key)
            .await
            .unwrap()
            .unwrap()
            .lease
            .unwrap()
            .expires_at,
        expires,
        "a lease carried unchanged keeps its expiry (a fast clock does not move it)"
    );
    let stale = store
        .commit(Commit::new(Some(takeover), None, event("ab01", fast, 4)).taking_over(true))
        .await;
    assert!(matches!(stale, Err(StoreError::Conflict)), "{stale:?}");

    // Once the database's clock passes the lease, a takeover succeeds.
    let mut short = store.load(&rec.key).await.unwrap().unwrap();
    let now = Timestamp::now();
    short.lease = Some(Lease {
        owner: "holder/1".into(),
        expires_at: now + SignedDuration::from_millis(200),
        nonce: None,
    });
    store
        .commit(Commit::new(Some(short), None, event("ab01", now, 5)))
        .await
        .unwrap();
    let current = store.load(&rec.key).await.unwrap().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut next = current.clone();
        next.lease = None;
        next.state = IntentState::Unknown;
        match store
            .commit(
                Commit::new(Some(next), None, event("ab01", Timestamp::now(), 6)).taking_over(true),
            )
            .await
        {
            Ok(()) => break,
            Err(StoreError::LeaseLive(_)) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            other => panic!("the expired lease should be taken over: {other:?}"),
        }
    }
    assert_eq!(
        store.load(&rec.key).await.unwrap().unwrap().state,
        IntentState::Unknown
    );
    store.close().await;
    db.drop().await;
}

/// Work claims expire by the database's clock; the caller's `now` is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_claims_kill_switches_and_sessions_are_shared() {
    let db = TestDb::create().await;
    let a = db
        .store(OpenMode::CreateIfMissing, StoreOptions::default())
        .await
        .unwrap();
    let b = db
        .store(OpenMode::Existing, StoreOptions::default())
        .await
        .unwrap();
    let far_future = Timestamp::now() + SignedDuration::from_hours(1);
    let ttl = SignedDuration::from_secs(60);
    assert!(
        a.claim_work("reconcile:aa:1", "a", Timestamp::now(), ttl)
            .await
            .unwrap()
    );
    assert!(
        !b.claim_work("reconcile:aa:1", "b", far_future, ttl)
            .await
            .unwrap(),
        "a replica whose clock is an hour ahead cannot take a live claim"
    );
    assert!(
        a.claim_work("reconcile:aa:1", "a", Timestamp::now(), ttl)
            .await
            .unwrap()
    );
    a.release_work("reconcile:aa:1", "a").await.unwrap();
    assert!(
        b.claim_work("reconcile:aa:1", "b", Timestamp::now(), ttl)
            .await
            .unwrap()
    );

    let on = KillSwitchChange {
        target: "capability:charge_card".into(),
        reason: Some("incident 7".into()),
        actor: "ops".into(),
        at: Timestamp::from_second(1_800_000_000).unwrap(),
    };
    let mut commit = Commit::event(event("ffff", on.at, 1));
    commit.kill_switch = Some(on.clone());
    a.commit(commit).await.unwrap();
    let switches = b.kill_switches().await.unwrap();
    assert_eq!(switches.len(), 1);
    assert_eq!(
        (switches[0].reason.as_str(), switches[0].set_at),
        ("incident 7", on.at)
    );
    let mut commit = Commit::event(event("ffff", on.at, 2));
    commit.kill_switch = Some(KillSwitchChange { reason: None, ..on });
    b.commit(commit).await.unwrap();
    assert!(a.kill_switches().await.unwrap().is_empty());

    let at = Timestamp::from_second(1_800_000_100).unwrap();
    a.put_mcp_session(McpSession {
        id: "s1".into(),
        principal: Some("planner".into()),
        state: Some(serde_json::json!({"protocolVersion": "2025-11-25"})),
        updated_at: at,
    })
    .await
    .unwrap();
    b.put_mcp_session(McpSession {
        id: "s1".into(),
        principal: None,
        state: None,
        updated_at: at + SignedDuration::from_secs(5),
    })
    .await
    .unwrap();
    let s = a.mcp_session("s1").await.unwrap().unwrap();
    assert_eq!(
        s.principal.as_deref(),
        Some("planner"),
        "None keeps what is stored"
    );
    assert_eq!(s.updated_at, at + SignedDuration::from_secs(5));
    b.delete_mcp_session("s1", at).await.unwrap();
    assert!(a.mcp_session("s1").await.unwrap().is_none());
    a.close().await;
    b.close().await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_refuses_a_database_without_the_schema_and_init_refuses_an_existing_one() {
    let db = TestDb::create().await;
    let e = db
        .store(OpenMode::Existing, StoreOptions::default())
        .await
        .err()
        .expect("an empty database is refused");
    assert!(matches!(e, StoreError::NotInitialised(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("oncegate migrate") && text.contains("oncegate init"),
        "{text}"
    );
    assert_eq!(e.code().as_str(), "OG-0031");

    let created = db
        .store(OpenMode::Create, StoreOptions::default())
        .await
        .unwrap();
    assert!(created.pending_migrations().await.unwrap().is_empty());
    let id = created.store_id().to_owned();
    assert_eq!(id.len(), 32, "a store id: {id}");
    created.close().await;
    let e = db
        .store(OpenMode::Create, StoreOptions::default())
        .await
        .err()
        .expect("init on an existing store is refused");
    assert!(matches!(e, StoreError::AlreadyExists(_)), "{e:?}");
    let served = db
        .store(OpenMode::Existing, StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(served.store_id(), id, "the identity is kept");
    served.close().await;
    db.drop().await;

    // A database holding someone else's tables is never taken over.
    let foreign = TestDb::create().await;
    let mut conn = sqlx::PgConnection::connect(&foreign.url).await.unwrap();
    sqlx::raw_sql("CREATE TABLE customers (id int)")
        .execute(&mut conn)
        .await
        .unwrap();
    let _ = conn.close().await;
    let e = foreign
        .store(OpenMode::CreateIfMissing, StoreOptions::default())
        .await
        .err()
        .expect("a foreign database is refused");
    assert!(
        matches!(&e, StoreError::NotInitialised(t) if t.contains("customers")),
        "{e:?}"
    );
    foreign.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_are_clear_and_never_show_the_password() {
    let base = Path::new("/etc/oncegate");
    for url in [
        "postgres://u:s3cret@db.example/og",
        "postgresql://u:s3cret@db/og?sslmode=require",
    ] {
        let loc = location(url, base).unwrap();
        assert_eq!(loc, Location::Postgres(url.to_owned()));
        let shown = loc.to_string();
        assert!(
            !shown.contains("s3cret") && shown.contains("://***@db"),
            "{shown}"
        );
    }
    for url in ["postgres://", "postgresql:///db"] {
        let e = location(url, base).unwrap_err();
        assert!(matches!(e, StoreError::UnsupportedUrl(_)), "{url}: {e:?}");
        assert!(e.to_string().contains("postgres://USER"), "{e}");
    }
    // Nothing listens on port 1: unavailable, naming the database without its password.
    let e = open(
        "postgres://u:s3cret@127.0.0.1:1/og",
        base,
        OpenMode::Existing,
        StoreOptions::default(),
    )
    .await
    .err()
    .expect("no server");
    assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("127.0.0.1:1") && !text.contains("s3cret"),
        "{text}"
    );
    // An unknown sslmode is a URL problem.
    let e = open(
        "postgres://u@127.0.0.1/og?sslmode=sometimes",
        base,
        OpenMode::Existing,
        StoreOptions::default(),
    )
    .await
    .err()
    .expect("bad sslmode");
    assert!(matches!(e, StoreError::UnsupportedUrl(_)), "{e:?}");
}

/// `open` with a postgres URL gives a `Store` that forwards everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_by_url_gives_a_postgres_store() {
    let db = TestDb::create().await;
    let store = open(
        &db.url,
        Path::new("."),
        OpenMode::CreateIfMissing,
        StoreOptions {
            pool_size: 2,
            statement_timeout: std::time::Duration::from_millis(300),
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap();
    assert!(matches!(store, Store::Postgres(_)));
    assert!(store.describe().contains(&db.name));
    assert!(store.path().is_none());
    store.ping().await.unwrap();
    let Store::Postgres(pg) = &store else {
        unreachable!()
    };
    // The statement timeout is set on every connection.
    let e = sqlx::query("SELECT pg_sleep(2)")
        .execute(pg.pool())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("statement timeout"), "{e}");
    store.close().await;
    db.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refuses_at_load_a_row_resealed_without_the_chain_key() {
    let db = TestDb::create().await;
    crate::integrity::a_row_resealed_without_the_chain_key_fails_closed(async |chain_key| {
        db.store(
            OpenMode::CreateIfMissing,
            StoreOptions {
                chain_key,
                ..StoreOptions::default()
            },
        )
        .await
        .unwrap()
    })
    .await;
    db.drop().await;
}

/// Issue 32: after a point-in-time restore the operator records the acceptance as
/// docs/guide/fault-model.md says, and every replica that opens the store afterwards knows it (the engine
/// then reads forgotten intents before they execute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_recorded_after_a_point_in_time_restore_reaches_every_replica() {
    let db = TestDb::create().await;
    let first = db
        .store(OpenMode::CreateIfMissing, StoreOptions::default())
        .await
        .unwrap();
    assert_eq!(first.rollback_accepted_at(), None);
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    // The statement docs/guide/fault-model.md gives, as written there.
    sqlx::query(
        r#"INSERT INTO meta (name, value) VALUES ('rollback_accepted_at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')) ON CONFLICT (name) DO UPDATE SET value = excluded.value"#,
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let _ = conn.close().await;
    for _ in 0..2 {
        let replica = db
            .store(OpenMode::Existing, StoreOptions::default())
            .await
            .unwrap();
        let at = replica
            .rollback_accepted_at()
            .expect("the acceptance is read");
        assert!(
            Timestamp::now().duration_since(at).abs() < SignedDuration::from_mins(5),
            "{at}"
        );
    }
    db.drop().await;
}

/// Issue 32: kill switches, holds, reservations and findings deleted or edited in the
/// database are refused at load and reported by `audit verify`, as on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_controls_deleted_or_edited_are_refused_and_reported() {
    let db = TestDb::create().await;
    let store = db
        .store(OpenMode::CreateIfMissing, StoreOptions::default())
        .await
        .unwrap();
    crate::controls::controls_are_chained(&store, async |sql: &str| tamper(&db.url, sql).await)
        .await;
    store.close().await;
    db.drop().await;
}

/// Controls written after an audit checkpoint are checked from it, as on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_controls_after_a_checkpoint_are_checked_from_it() {
    let db = TestDb::create().await;
    let store = db
        .store(OpenMode::CreateIfMissing, StoreOptions::default())
        .await
        .unwrap();
    crate::controls::controls_after_a_checkpoint_are_checked(&store, async |sql: &str| {
        tamper(&db.url, sql).await;
    })
    .await;
    store.close().await;
    db.drop().await;
}

/// Runs `sql` on the database behind the store's back.
async fn tamper(url: &str, sql: &str) {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .unwrap();
    let _ = conn.close().await;
}
