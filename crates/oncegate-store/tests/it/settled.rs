//! The settled-row cache of a serving SQLite store (issue 35): a replay's load is
//! answered from memory, but never with a row this store's own commit replaced, and a
//! row edited on disk is refused once its entry has aged out.

use std::path::Path;
use std::time::Duration;

use oncegate_core::intent::IntentState;
use oncegate_store::conformance::{run_all, sample_record};
use oncegate_store::{
    Commit, IntentsRead, IntentsWrite, OpenMode, SqliteStore, StoreError, StoreOptions,
};
use sqlx::Connection;

use crate::integrity::event;

/// How `oncegate serve` opens its store: the file's only writer.
pub(crate) async fn serving(db: &Path) -> SqliteStore {
    let options = StoreOptions {
        single_writer: true,
        ..StoreOptions::default()
    };
    SqliteStore::open_with(db, OpenMode::CreateIfMissing, options)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_sqlite_store_passes_the_conformance_suite() {
    let dirs = std::sync::Mutex::new(Vec::new());
    run_all(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        dirs.lock().unwrap().push(dir);
        async move { serving(&path).await }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_never_answers_a_row_this_stores_commit_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let store = serving(&dir.path().join("s.db")).await;
    let mut rec = sample_record("cc01", 1);
    rec.state = IntentState::Applied;
    rec.result = Some(serde_json::json!({"id": "ch_0"}));
    for round in 1..=12u64 {
        store
            .commit(Commit::new(Some(rec.clone()), None, event(&rec)))
            .await
            .unwrap();
        // Loaded twice: an `applied` row's second load is the cached copy.
        for _ in 0..2 {
            let loaded = store.load(&rec.key).await.unwrap().unwrap();
            assert_eq!(loaded.version, rec.version + 1, "round {round}");
            assert_eq!(loaded.state, rec.state, "round {round}");
            assert_eq!(loaded.result, rec.result, "round {round}");
        }
        // The next commit replaces the row: a new attempt's claim every third round,
        // a corrected result otherwise.
        rec.version += 1;
        rec.state = if round % 3 == 0 {
            IntentState::InFlight
        } else {
            IntentState::Applied
        };
        rec.result = Some(serde_json::json!({"id": format!("ch_{round}")}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_edited_on_disk_is_refused_once_its_entry_has_aged_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("e.db");
    let store = serving(&db).await;
    let mut rec = sample_record("dd01", 1);
    rec.state = IntentState::Applied;
    store
        .commit(Commit::new(Some(rec.clone()), None, event(&rec)))
        .await
        .unwrap();
    assert!(store.load(&rec.key).await.unwrap().is_some());
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    // Behind the server's back: the applied row made to look never sent.
    sqlx::query(
        "UPDATE intents SET state = 'not_applied', body = json_set(body, '$.state', 'not_applied')",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    // Until its entry ages out, a load may still answer the applied row (a replay:
    // less than the edit asks for, never more); after, the edit is refused.
    match store.load(&rec.key).await {
        Ok(Some(r)) => assert_eq!(r.state, IntentState::Applied),
        Err(StoreError::Integrity(_)) => {}
        other => panic!("the cached applied row or a refusal: {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let err = store.load(&rec.key).await.unwrap_err();
    assert!(matches!(err, StoreError::Integrity(_)), "{err}");
}
