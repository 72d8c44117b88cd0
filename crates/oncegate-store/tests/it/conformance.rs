//! The conformance suite against the SQLite backend, plus SQLite-specific durability.

use oncegate_core::audit::verify_shard;
use oncegate_store::conformance::{run_all, sample_record};
use oncegate_store::{AuditRead, Backend, Commit, IntentsRead, IntentsWrite, SqliteStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_passes_the_conformance_suite() {
    let dirs = std::sync::Mutex::new(Vec::new());
    run_all(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        dirs.lock().unwrap().push(dir);
        async move { SqliteStore::scratch(&path).await.unwrap() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let rec = sample_record("1234abcd", 1);
    {
        let store = SqliteStore::scratch(&path).await.unwrap();
        let event = oncegate_core::audit::AuditEvent {
            at: rec.created_at,
            kind: oncegate_core::audit::AuditKind::Call,
            key: Some(rec.key.clone()),
            generation: 1,
            capability: Some("pay".into()),
            actor: "agent".into(),
            run_id: None,
            from: None,
            to: Some(rec.state),
            status: None,
            code: None,
            detail: serde_json::json!({}),
        };
        store
            .commit(Commit::new(Some(rec.clone()), None, event))
            .await
            .unwrap();
        store.close().await;
    }
    let reopened = SqliteStore::scratch(&path).await.unwrap();
    let mut back = reopened
        .load(&rec.key)
        .await
        .unwrap()
        .expect("the record survived");
    assert_eq!(back.version, 1);
    back.version = 0;
    assert_eq!(back, rec);
    for shard in reopened.audit_shards().await.unwrap() {
        verify_shard(shard, &reopened.audit_shard(shard).await.unwrap()).unwrap();
    }
}

fn event_for(key: &str, n: i64) -> oncegate_core::audit::AuditEvent {
    oncegate_core::audit::AuditEvent {
        at: jiff::Timestamp::from_second(1_800_000_000 + n).unwrap(),
        kind: oncegate_core::audit::AuditKind::Call,
        key: Some(oncegate_core::key::IntentKey::from_hex(key)),
        generation: 1,
        capability: Some("pay".into()),
        actor: "agent".into(),
        run_id: None,
        from: None,
        to: None,
        status: None,
        code: None,
        detail: serde_json::json!({"n": n}),
    }
}

/// The writer keeps chain heads in memory: after a restart, and with a second writer
/// appending to the same file, every shard must still chain without gaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_chain_continues_across_restarts_and_writers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let key = "abcd0001";
    {
        let store = SqliteStore::scratch(&path).await.unwrap();
        for n in 0..3 {
            store
                .commit(Commit::new(None, None, event_for(key, n)))
                .await
                .unwrap();
        }
        store.close().await;
    }
    let first = SqliteStore::scratch(&path).await.unwrap();
    let second = SqliteStore::scratch(&path).await.unwrap();
    for n in 3..9 {
        let store = if n % 2 == 0 { &first } else { &second };
        store
            .commit(Commit::new(None, None, event_for(key, n)))
            .await
            .unwrap();
    }
    let shard = event_for(key, 0).shard();
    let records = first.audit_shard(shard).await.unwrap();
    assert_eq!(verify_shard(shard, &records).unwrap().seq, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_passes_the_conformance_suite() {
    run_all(|| async { oncegate_store::MemoryStore::new() }).await;
}

/// The simulation's store faults: down means every operation fails closed, and coming
/// back loses nothing that was committed before.
#[tokio::test(start_paused = true)]
async fn memory_store_unavailable_window_fails_closed_and_keeps_data() {
    let store = oncegate_store::MemoryStore::with_latency(7, std::time::Duration::from_millis(5));
    let rec = sample_record("77aa", 1);
    store
        .commit(Commit::new(Some(rec.clone()), None, event_for("77aa", 1)))
        .await
        .unwrap();
    store.set_unavailable(true);
    assert!(matches!(
        store.load(&rec.key).await,
        Err(oncegate_store::StoreError::Unavailable(_))
    ));
    assert!(store.ping().await.is_err());
    let mut next = rec.clone();
    next.version = 1;
    let refused = store
        .commit(Commit::new(Some(next.clone()), None, event_for("77aa", 2)))
        .await;
    assert!(matches!(
        refused,
        Err(oncegate_store::StoreError::Unavailable(_))
    ));
    store.set_unavailable(false);
    let back = store.load(&rec.key).await.unwrap().unwrap();
    assert_eq!(back.version, 1, "the refused write changed nothing");
    store
        .commit(Commit::new(Some(next), None, event_for("77aa", 2)))
        .await
        .unwrap();
    let shard = event_for("77aa", 0).shard();
    assert_eq!(
        verify_shard(shard, &store.audit_shard(shard).await.unwrap())
            .unwrap()
            .seq,
        2
    );
}

/// The paging check alone (also in the suite), for a quick run: `-E 'test(/listing_pages/)'`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_listing_pages() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::scratch(&dir.path().join("p.db"))
        .await
        .unwrap();
    oncegate_store::conformance::listing_pages(&store).await;
}

#[tokio::test]
async fn memory_listing_pages() {
    let store = oncegate_store::MemoryStore::new();
    oncegate_store::conformance::listing_pages(&store).await;
}
