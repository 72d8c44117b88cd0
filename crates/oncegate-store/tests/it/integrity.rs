//! Rows covered by the audit chain (issue 9, section 3) and listings that survive an
//! unreadable row (section 4), on real SQLite files edited behind the store's back.

use std::path::Path;

use oncegate_core::audit::{ChainHead, ChainKey, seal};
use oncegate_store::audit_check::{Walk, save_checkpoint, verify_audit};
use oncegate_store::conformance::sample_record;
use oncegate_store::{
    AuditRead, Backend, Commit, IntentsRead, IntentsWrite, OpenMode, SqliteStore, StoreError,
    StoreOptions,
};
use sqlx::{Connection, Row};

/// The audit event of a commit that writes `rec`.
pub(crate) fn event(rec: &oncegate_core::intent::IntentRecord) -> oncegate_core::audit::AuditEvent {
    oncegate_core::audit::AuditEvent {
        at: rec.created_at,
        kind: oncegate_core::audit::AuditKind::Call,
        key: Some(rec.key.clone()),
        generation: rec.generation,
        capability: Some(rec.capability.clone()),
        actor: "agent".into(),
        run_id: None,
        from: None,
        to: Some(rec.state),
        status: None,
        code: None,
        detail: serde_json::json!({}),
    }
}

async fn write(store: &SqliteStore, key: &str) {
    let rec = sample_record(key, 1);
    store
        .commit(Commit::new(Some(rec.clone()), None, event(&rec)))
        .await
        .unwrap();
}

/// A scratch store with these options.
async fn scratch_with(db: &Path, options: StoreOptions) -> SqliteStore {
    SqliteStore::open_with(db, OpenMode::CreateIfMissing, options)
        .await
        .unwrap()
}

async fn raw(db: &Path) -> sqlx::SqliteConnection {
    sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_unreadable_row_never_breaks_a_listing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.db");
    let store = SqliteStore::scratch(&db).await.unwrap();
    write(&store, "aa01").await;
    write(&store, "aa02").await;
    write(&store, "aa03").await;
    let mut conn = raw(&db).await;
    // Nested deeper than serde_json's recursion limit, and plain invalid JSON.
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    sqlx::query("UPDATE intents SET body = ? WHERE key = 'aa01'")
        .bind(deep)
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("UPDATE intents SET body = '{not json' WHERE key = 'aa02'")
        .execute(&mut conn)
        .await
        .unwrap();
    let listing = store.list_intents(&Default::default()).await.unwrap();
    assert_eq!(listing.items.len(), 1, "the readable row is listed");
    assert_eq!(listing.items[0].key.as_str(), "aa03");
    let mut bad: Vec<_> = listing.unreadable.iter().map(|u| u.key.as_str()).collect();
    bad.sort_unstable();
    assert_eq!(bad, ["aa01", "aa02"], "{:?}", listing.unreadable);
    assert!(matches!(
        store
            .load(&oncegate_core::key::IntentKey::from_hex("aa02"))
            .await,
        Err(StoreError::Corrupt(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_row_is_refused_on_load() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.db");
    let store = SqliteStore::scratch(&db).await.unwrap();
    let mut rec = sample_record("bb01", 1);
    store
        .commit(Commit::new(Some(rec.clone()), None, event(&rec)))
        .await
        .unwrap();
    let mut conn = raw(&db).await;
    let old = sqlx::query("SELECT body, audit_shard, audit_seq, row_hash, version FROM intents")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    rec.version = 1;
    rec.state = oncegate_core::intent::IntentState::Applied;
    store
        .commit(Commit::new(Some(rec.clone()), None, event(&rec)))
        .await
        .unwrap();
    // Put the whole older version back, seal columns included.
    sqlx::query("UPDATE intents SET body = ?, audit_shard = ?, audit_seq = ?, row_hash = ?, version = ?, state = 'in_flight'")
        .bind(old.get::<String, _>(0))
        .bind(old.get::<i64, _>(1))
        .bind(old.get::<i64, _>(2))
        .bind(old.get::<String, _>(3))
        .bind(old.get::<i64, _>(4))
        .execute(&mut conn)
        .await
        .unwrap();
    let err = store.load(&rec.key).await.unwrap_err();
    assert!(matches!(err, StoreError::Integrity(_)), "{err}");
    let report = verify_audit(&store, None, store.store_id(), &[], Walk::Full)
        .await
        .unwrap();
    assert!(!report.row_problems.is_empty(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_key_catches_a_recomputed_shard() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    let key = ChainKey::new(b"a secret the editor does not have").unwrap();
    let store = scratch_with(
        &db,
        StoreOptions {
            chain_key: Some(key.clone()),
            ..StoreOptions::default()
        },
    )
    .await;
    for k in ["cc01", "cc02", "cc03"] {
        write(&store, k).await;
    }
    let clean = verify_audit(&store, Some(&key), store.store_id(), &[], Walk::Full)
        .await
        .unwrap();
    assert!(clean.ok(), "{clean:?}");

    // Edit one event, then recompute its whole shard with the plain hash, as someone
    // without the key would, so every link holds again.
    let shard = store.audit_shards().await.unwrap()[0];
    let records = store.audit_shard(shard).await.unwrap();
    let mut conn = raw(&db).await;
    let mut head = ChainHead::genesis();
    for (i, r) in records.iter().enumerate() {
        let mut event = r.event.clone();
        if i == 0 {
            event.actor = "someone else".into();
        }
        let resealed = seal(event, &head);
        sqlx::query(
            "UPDATE audit SET prev_hash = ?, hash = ?, body = ? WHERE shard = ? AND seq = ?",
        )
        .bind(&resealed.prev_hash)
        .bind(&resealed.hash)
        .bind(serde_json::to_string(&resealed.event).unwrap())
        .bind(i64::from(shard))
        .bind(resealed.seq as i64)
        .execute(&mut conn)
        .await
        .unwrap();
        head = ChainHead {
            seq: resealed.seq,
            hash: resealed.hash,
        };
    }
    // Without the key the rewritten shard passes, which is the reproduction (the other
    // shards are keyed and cannot be checked without it); with the key, it fails.
    let unkeyed = verify_audit(&store, None, store.store_id(), &[], Walk::Full)
        .await
        .unwrap();
    assert!(
        unkeyed.broken.iter().all(|b| b.shard != shard),
        "{unkeyed:?}"
    );
    let keyed = verify_audit(&store, Some(&key), store.store_id(), &[], Walk::Full)
        .await
        .unwrap();
    assert!(
        keyed
            .broken
            .iter()
            .any(|b| b.shard == shard && b.problem.contains("chain key")),
        "{keyed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_from_before_row_seals_are_adopted_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    {
        let store = SqliteStore::scratch(&db).await.unwrap();
        write(&store, "dd01").await;
        store.close().await;
    }
    // What a store from before migration 4 looks like to the adoption: no seals, flag
    // unset.
    let mut conn = raw(&db).await;
    sqlx::query("UPDATE intents SET row_hash = NULL, audit_shard = NULL, audit_seq = NULL")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("DELETE FROM meta WHERE name = 'rows_sealed'")
        .execute(&mut conn)
        .await
        .unwrap();
    let store = SqliteStore::open(&db).await.unwrap();
    let key = oncegate_core::key::IntentKey::from_hex("dd01");
    assert!(
        store.load(&key).await.unwrap().is_some(),
        "the old row is adopted"
    );
    assert!(
        verify_audit(&store, None, store.store_id(), &[], Walk::Full)
            .await
            .unwrap()
            .ok()
    );
    // Clearing a seal later is not adopted again: it is refused.
    sqlx::query("UPDATE intents SET row_hash = NULL")
        .execute(&mut conn)
        .await
        .unwrap();
    store.close().await;
    let store = SqliteStore::open(&db).await.unwrap();
    assert!(matches!(
        store.load(&key).await,
        Err(StoreError::Integrity(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_refuses_missing_empty_and_foreign_stores() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let missing = SqliteStore::open(&db).await.err().unwrap();
    assert!(
        matches!(missing, StoreError::NotInitialised(_)),
        "{missing}"
    );
    assert!(!db.exists(), "open created nothing");
    std::fs::write(&db, b"").unwrap();
    assert!(matches!(
        SqliteStore::open(&db).await,
        Err(StoreError::NotInitialised(_))
    ));
    std::fs::write(&db, b"this is not a database at all, just text").unwrap();
    assert!(matches!(
        SqliteStore::create(&db).await,
        Err(StoreError::NotInitialised(_))
    ));
    std::fs::remove_file(&db).unwrap();
    let created = SqliteStore::create(&db).await.unwrap();
    let id = created.store_id().to_owned();
    created.close().await;
    assert!(matches!(
        SqliteStore::create(&db).await,
        Err(StoreError::AlreadyExists(_))
    ));
    assert_eq!(
        SqliteStore::open(&db).await.unwrap().store_id(),
        id,
        "the identity is kept"
    );
}

/// `audit verify` from a checkpoint: it walks only the records after the last clean
/// verify, checks the rows they wrote, and refuses a checkpointed record that changed;
/// an old record edited in place is what only the full walk catches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_from_a_checkpoint_walks_only_what_came_after() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let store = scratch_with(
        &db,
        StoreOptions {
            audit_shards: 1,
            ..StoreOptions::default()
        },
    )
    .await;
    let id = store.store_id().to_owned();
    let verify = async |walk| verify_audit(&store, None, &id, &[], walk).await.unwrap();
    for k in ["dd01", "dd02", "dd03", "dd04"] {
        write(&store, k).await;
    }
    let first = verify(Walk::FromCheckpoint).await;
    assert!(
        first.ok() && first.since.is_none(),
        "no checkpoint yet: a full walk {first:?}"
    );
    assert_eq!(first.records, 4);
    let saved = save_checkpoint(&store, None, &id, &first, jiff::Timestamp::now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(saved.records, 4);

    let idle = verify(Walk::FromCheckpoint).await;
    assert!(idle.ok(), "{idle:?}");
    assert_eq!(
        (idle.records, idle.rows),
        (0, 0),
        "nothing new, nothing walked"
    );

    for k in ["dd05", "dd06"] {
        write(&store, k).await;
    }
    let next = verify(Walk::FromCheckpoint).await;
    assert!(next.ok(), "{next:?}");
    assert_eq!((next.records, next.rows), (2, 2));
    assert_eq!(next.since.as_ref().map(|c| c.records), Some(4));
    assert_eq!(
        save_checkpoint(&store, None, &id, &next, jiff::Timestamp::now())
            .await
            .unwrap()
            .map(|c| c.records),
        Some(6)
    );

    // A row written after the checkpoint and edited behind the store's back is found,
    // and so is one deleted.
    write(&store, "dd07").await;
    write(&store, "dd08").await;
    let mut conn = raw(&db).await;
    sqlx::query("UPDATE intents SET body = json_set(body, '$.edited', 1) WHERE key = 'dd07'")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("DELETE FROM intents WHERE key = 'dd08'")
        .execute(&mut conn)
        .await
        .unwrap();
    let tampered = verify(Walk::FromCheckpoint).await;
    let mut found: Vec<_> = tampered
        .row_problems
        .iter()
        .map(|p| p.key.as_str())
        .collect();
    found.sort_unstable();
    assert_eq!(found, ["dd07", "dd08"], "{tampered:?}");
    assert!(
        tampered.row_problems[1].problem.contains("deleted"),
        "{tampered:?}"
    );
    assert!(
        save_checkpoint(&store, None, &id, &tampered, jiff::Timestamp::now())
            .await
            .unwrap()
            .is_none(),
        "a walk with problems moves no checkpoint"
    );
    sqlx::query("DELETE FROM intents WHERE key = 'dd07'")
        .execute(&mut conn)
        .await
        .unwrap();

    // An old record edited in place (the checkpointed head still links): only the full
    // walk sees it.
    sqlx::query("UPDATE audit SET body = json_set(body, '$.actor', 'someone else') WHERE seq = 2")
        .execute(&mut conn)
        .await
        .unwrap();
    let full = verify(Walk::Full).await;
    assert!(full.broken.iter().any(|b| b.seq == 2), "{full:?}");

    // The checkpointed head itself rewritten: refused from the checkpoint.
    sqlx::query("UPDATE audit SET hash = 'rewritten' WHERE seq = 6")
        .execute(&mut conn)
        .await
        .unwrap();
    let rewritten = verify(Walk::FromCheckpoint).await;
    assert!(
        rewritten
            .broken
            .iter()
            .any(|b| b.seq == 6 && b.problem.contains("checkpointed")),
        "{rewritten:?}"
    );
}

/// Loads skip re-hashing bytes they (or the writer) already checked; any edit of the
/// row, its seal columns or the record that sealed it is still refused on the next load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_checked_before_and_edited_since_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("v.db");
    let store = SqliteStore::scratch(&db).await.unwrap();
    for k in ["ee01", "ee02", "ee03"] {
        write(&store, k).await;
    }
    let key = |k: &str| oncegate_core::key::IntentKey::from_hex(k);
    for k in ["ee01", "ee02", "ee03"] {
        assert!(store.load(&key(k)).await.unwrap().is_some(), "{k} loads");
        assert!(
            store.load(&key(k)).await.unwrap().is_some(),
            "{k} loads again"
        );
    }
    let mut conn = raw(&db).await;
    for sql in [
        // The row's body.
        "UPDATE intents SET body = json_set(body, '$.edited', 1) WHERE key = 'ee01'",
        // The record that sealed the row.
        "UPDATE audit SET body = json_set(body, '$.actor', 'someone else') WHERE json_extract(body, '$.detail.row_intent.key') = 'ee02'",
        // The row's link to that record.
        "UPDATE intents SET audit_seq = audit_seq + 100 WHERE key = 'ee03'",
    ] {
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    }
    for k in ["ee01", "ee02", "ee03"] {
        let err = store.load(&key(k)).await.unwrap_err();
        assert!(matches!(err, StoreError::Integrity(_)), "{k}: {err}");
    }
}

/// A row relinked past every head the walk read (to a record that does not exist) is
/// not deferred as "written during the walk": the whole walk reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_relinked_past_the_chain_is_reported_by_the_whole_walk() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.db");
    let store = SqliteStore::scratch(&db).await.unwrap();
    write(&store, "ff01").await;
    write(&store, "ff02").await;
    let mut conn = raw(&db).await;
    sqlx::query("UPDATE intents SET body = json_set(body, '$.edited', 1), audit_seq = 9999999 WHERE key = 'ff01'")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("UPDATE intents SET audit_shard = 999 WHERE key = 'ff02'")
        .execute(&mut conn)
        .await
        .unwrap();
    let report = verify_audit(&store, None, store.store_id(), &[], Walk::Full)
        .await
        .unwrap();
    let mut found: Vec<_> = report.row_problems.iter().map(|p| p.key.as_str()).collect();
    found.sort_unstable();
    found.dedup();
    assert_eq!(found, ["ff01", "ff02"], "{report:?}");
}

/// With a chain key, the checkpoint carries a MAC under it: one edited without the key
/// is ignored (the walk is whole), never trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_edited_without_the_chain_key_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let key = ChainKey::new(b"the verifier's secret").unwrap();
    let store = scratch_with(
        &db,
        StoreOptions {
            chain_key: Some(key.clone()),
            ..StoreOptions::default()
        },
    )
    .await;
    let id = store.store_id().to_owned();
    write(&store, "gg01").await;
    let first = verify_audit(&store, Some(&key), &id, &[], Walk::Full)
        .await
        .unwrap();
    let saved = save_checkpoint(&store, Some(&key), &id, &first, jiff::Timestamp::now())
        .await
        .unwrap()
        .unwrap();
    assert!(saved.mac.is_some());
    let trusted = verify_audit(&store, Some(&key), &id, &[], Walk::FromCheckpoint)
        .await
        .unwrap();
    assert!(trusted.ok() && trusted.since.is_some(), "{trusted:?}");

    let mut conn = raw(&db).await;
    sqlx::query(
        "UPDATE meta SET value = json_set(value, '$.records', 99) WHERE name = 'audit_checkpoint'",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let whole = verify_audit(&store, Some(&key), &id, &[], Walk::FromCheckpoint)
        .await
        .unwrap();
    assert!(whole.ok(), "{whole:?}");
    assert!(
        whole.since.is_none(),
        "an edited checkpoint is ignored: {whole:?}"
    );
    assert_eq!(whole.records, 1);
}

/// The writer skips the seal lookup before replacing a row it finds exactly as it
/// committed it. A row edited since, or sealed since by another writer (whose record is
/// the next of the row's shard, so this writer's append there collides) and then put
/// back, is still refused, and nothing is laundered into a fresh sealed version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_changed_since_this_writer_committed_it_is_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let store = SqliteStore::scratch(&db).await.unwrap();
    // One shard each (the first four hex digits pick it).
    let keys = ["dd01", "dd02", "dd03"];
    let mut loaded = Vec::new();
    for k in keys {
        write(&store, k).await;
        let key = oncegate_core::key::IntentKey::from_hex(k);
        loaded.push(store.load(&key).await.unwrap().expect("written"));
    }
    let mut conn = raw(&db).await;
    for sql in [
        "UPDATE intents SET body = json_set(body, '$.edited', 1) WHERE key = 'dd01'",
        "INSERT INTO audit (shard, seq, prev_hash, hash, body)
         SELECT shard, seq + 1, hash, 'another writer', json_set(body, '$.detail.row_intent.version', 2)
         FROM audit WHERE json_extract(body, '$.detail.row_intent.key') = 'dd02'",
    ] {
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    }
    let mut outcomes = Vec::new();
    for rec in loaded {
        let result = store
            .commit(Commit::new(Some(rec.clone()), None, event(&rec)))
            .await;
        outcomes.push(match result {
            Ok(()) => "replaced",
            Err(StoreError::Integrity(_)) => "refused",
            Err(e) => panic!("{}: {e}", rec.key),
        });
    }
    assert_eq!(outcomes, ["refused", "refused", "replaced"]);
    let versions: Vec<i64> = sqlx::query("SELECT version FROM intents ORDER BY key")
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, [1, 1, 2], "only the untouched row moved on");
}

/// Issue 32: with a chain key set, a row whose newest audit record is sealed without it
/// (someone with the software but not the secret re-sealed it) fails closed at load,
/// while rows last written before the key was set still load (the store's key-since
/// mark vouches for them). `open` opens the one store with or without the key.
pub async fn a_row_resealed_without_the_chain_key_fails_closed<S, F>(open: F)
where
    S: Backend,
    F: AsyncFn(Option<ChainKey>) -> S,
{
    use oncegate_core::intent::IntentState;
    use oncegate_core::key::IntentKey;

    let key = ChainKey::new(b"the gateway's chain key").unwrap();
    let commit = async |store: &S, rec: &oncegate_core::intent::IntentRecord| {
        store
            .commit(Commit::new(Some(rec.clone()), None, event(rec)))
            .await
            .unwrap();
    };
    let before = IntentKey::from_hex("dd01");
    let after = IntentKey::from_hex("dd02");
    {
        let store = open(None).await;
        commit(&store, &sample_record("dd01", 1)).await;
    }
    {
        let store = open(Some(key.clone())).await;
        assert!(
            store.load(&before).await.is_ok(),
            "a row from before the key was set still loads"
        );
        let mut rec = sample_record("dd02", 1);
        rec.state = IntentState::Applied;
        commit(&store, &rec).await;
    }
    {
        // Without the key: the software re-seals both rows with plain hashes, links
        // and row seals all consistent.
        let store = open(None).await;
        let mut rec = store.load(&before).await.unwrap().unwrap();
        rec.state = IntentState::NotApplied;
        commit(&store, &rec).await;
        // (A keyed row cannot even be read or rewritten through the store without the
        // key: `dd02` stays as the key sealed it.)
    }
    let store = open(Some(key)).await;
    match store.load(&before).await {
        Err(StoreError::Integrity(problem)) => {
            assert!(
                problem.contains("not sealed with the chain key"),
                "{problem}"
            )
        }
        other => panic!("a row re-sealed without the key must fail closed: {other:?}"),
    }
    assert!(
        store.load(&after).await.unwrap().is_some(),
        "the keyed row loads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_refuses_at_load_a_row_resealed_without_the_chain_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("key.db");
    a_row_resealed_without_the_chain_key_fails_closed(async |chain_key| {
        scratch_with(
            &db,
            StoreOptions {
                chain_key,
                ..StoreOptions::default()
            },
        )
        .await
    })
    .await;
}
