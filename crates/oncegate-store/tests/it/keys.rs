//! The key set of a serving SQLite store (issue 35): a claim's first load of a key it
//! has never seen is answered "absent" without a read, but a row another process wrote
//! is found (at once by a plain load, and by a claim over it, which is a conflict; by a
//! claim's load within the refresh), a row deleted before the store opened is still
//! refused at its load, and a row edited on disk to another key is refused, not claimed
//! over.

use std::path::Path;
use std::time::Duration;

use oncegate_core::intent::IntentState;
use oncegate_core::key::IntentKey;
use oncegate_store::conformance::sample_record;
use oncegate_store::{
    Commit, IntentsRead, IntentsWrite, OpenMode, SqliteStore, StoreError, StoreOptions,
};

use crate::controls::tamper;
use crate::integrity::event;
use crate::settled::serving;

/// A CLI command's store beside the server: not the file's only writer.
async fn beside(db: &Path) -> SqliteStore {
    SqliteStore::open_with(db, OpenMode::CreateIfMissing, StoreOptions::default())
        .await
        .unwrap()
}

/// Longer than the key set's refresh, with room for a slow machine.
const AFTER_A_REFRESH: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_another_process_wrote_are_found_and_a_claim_over_one_is_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    let server = serving(&db).await;
    let cli = beside(&db).await;
    // The server's first scan has finished: loads of unseen keys no longer read.
    tokio::time::sleep(AFTER_A_REFRESH).await;
    let unseen = IntentKey::from_hex("ee00");
    assert!(server.load_to_claim(&unseen).await.unwrap().is_none());

    let mut theirs = sample_record("ee01", 1);
    theirs.state = IntentState::Applied;
    cli.commit(Commit::new(Some(theirs.clone()), None, event(&theirs)))
        .await
        .unwrap();
    // At once, before any refresh could have seen it: a plain load reads the disk...
    let found = server.load(&theirs.key).await.unwrap();
    assert_eq!(found.map(|r| r.state), Some(IntentState::Applied));
    // ...and the server's claim of the same key is refused as a conflict, never
    // written over the other row...
    let mut ours = sample_record("ee01", 1);
    ours.state = IntentState::InFlight;
    let err = server
        .commit(Commit::new(Some(ours.clone()), None, event(&ours)))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict), "{err}");
    // ...and the re-decision's load reads the row from disk.
    let found = server.load_to_claim(&ours.key).await.unwrap().unwrap();
    assert_eq!(found.state, IntentState::Applied);

    // A row the server neither claimed over nor loaded is found after a refresh.
    let mut later = sample_record("ee02", 1);
    later.state = IntentState::Applied;
    cli.commit(Commit::new(Some(later.clone()), None, event(&later)))
        .await
        .unwrap();
    tokio::time::sleep(AFTER_A_REFRESH).await;
    let found = server.load_to_claim(&later.key).await.unwrap();
    assert_eq!(found.map(|r| r.state), Some(IntentState::Applied));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_deleted_before_the_server_opened_is_refused_at_its_load() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("d.db");
    let mut rec = sample_record("ef01", 1);
    rec.state = IntentState::Applied;
    {
        let cli = beside(&db).await;
        cli.commit(Commit::new(Some(rec.clone()), None, event(&rec)))
            .await
            .unwrap();
    }
    tamper(&db, "DELETE FROM intents").await;

    let server = serving(&db).await;
    tokio::time::sleep(AFTER_A_REFRESH).await;
    let err = server.load_to_claim(&rec.key).await.unwrap_err();
    assert!(matches!(err, StoreError::Integrity(_)), "{err}");
    // A key no row or record ever named is still absent.
    let never = IntentKey::from_hex("ef02");
    assert!(server.load_to_claim(&never).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_generation_edited_to_an_unseen_key_is_refused_not_claimed_over() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    let server = serving(&db).await;
    tokio::time::sleep(AFTER_A_REFRESH).await;
    for generation in [1, 2] {
        let mut rec = sample_record("f001", generation);
        rec.state = IntentState::Applied;
        server
            .commit(Commit::new(Some(rec.clone()), None, event(&rec)))
            .await
            .unwrap();
    }
    // Behind the server's back, the second generation's row is given a key the server
    // has never seen: the set cannot know it (no new rowid, no new record).
    tamper(
        &db,
        "UPDATE intents SET key = 'f002' WHERE key = 'f001' AND generation = 2",
    )
    .await;
    let edited = IntentKey::from_hex("f002");
    assert!(server.load_to_claim(&edited).await.unwrap().is_none());
    // A claim of its first generation would execute again: the insert finds the later
    // generation and is a conflict...
    let mut claim = sample_record("f002", 1);
    claim.state = IntentState::InFlight;
    let err = server
        .commit(Commit::new(Some(claim.clone()), None, event(&claim)))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict), "{err}");
    // ...and the re-decision's load reads the edited row and refuses it.
    let err = server.load_to_claim(&edited).await.unwrap_err();
    assert!(matches!(err, StoreError::Integrity(_)), "{err}");
}
