//! `open(url)`: the one place a URL becomes a backend.

use std::path::Path;

use oncegate_store::conformance::run_all;
use oncegate_store::{
    Backend, Location, MemoryStore, OpenMode, Store, StoreError, StoreOptions, location, open,
};

#[test]
fn sqlite_urls_resolve_against_the_base_directory() {
    let base = Path::new("/etc/oncegate");
    assert_eq!(
        location("sqlite://oncegate.db", base).unwrap(),
        Location::Sqlite(base.join("oncegate.db"))
    );
    assert_eq!(
        location("sqlite:data/o.db", base).unwrap(),
        Location::Sqlite(base.join("data/o.db"))
    );
    assert_eq!(
        location("sqlite:///var/lib/o.db", base).unwrap(),
        Location::Sqlite("/var/lib/o.db".into())
    );
}

#[test]
fn unknown_schemes_name_the_supported_ones() {
    for url in [
        "mysql://db",
        "postgress://x",
        "oncegate.db",
        "sqlite://",
        "",
        "memory://",
    ] {
        let e = location(url, Path::new(".")).unwrap_err();
        assert!(matches!(e, StoreError::UnsupportedUrl(_)), "{url}: {e:?}");
        let text = e.to_string();
        assert!(text.contains("sqlite://PATH"), "{url}: {text}");
        assert!(text.contains(&format!("`{url}`")), "{url}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_creates_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let missing = open(
        "sqlite://o.db",
        dir.path(),
        OpenMode::Existing,
        StoreOptions::default(),
    )
    .await;
    assert!(matches!(missing, Err(StoreError::NotInitialised(_))));
    assert!(
        !dir.path().join("o.db").exists(),
        "serving never creates a store"
    );
    let store = open(
        "sqlite://o.db",
        dir.path(),
        OpenMode::Create,
        StoreOptions::default(),
    )
    .await
    .unwrap();
    assert!(matches!(store, Store::Sqlite(_)));
    assert_eq!(store.path(), Some(dir.path().join("o.db").as_path()));
    store.ping().await.unwrap();
    let id = store.store_id().to_owned();
    store.close().await;
    let again = open(
        "sqlite://o.db",
        dir.path(),
        OpenMode::Existing,
        StoreOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(again.store_id(), id, "the same store, reopened");
    let twice = open(
        "sqlite://o.db",
        dir.path(),
        OpenMode::Create,
        StoreOptions::default(),
    )
    .await;
    assert!(matches!(twice, Err(StoreError::AlreadyExists(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_run_time_store_passes_the_conformance_suite() {
    let dirs = std::sync::Mutex::new(Vec::new());
    run_all(|| {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().to_owned();
        dirs.lock().unwrap().push(dir);
        async move {
            open(
                "sqlite://c.db",
                &base,
                OpenMode::CreateIfMissing,
                StoreOptions::default(),
            )
            .await
            .unwrap()
        }
    })
    .await;
    run_all(|| async { Store::from(MemoryStore::new()) }).await;
}
