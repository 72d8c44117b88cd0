//! The embedded SQLite backend.
//!
//! Why one file for the rest: opening (inspection, the lock, migrations) and the
//! per-table trait impls ([`crate::Backend`]) are each short, and they share the one `Inner`;
//! the hot path lives in `sqlite/` beside it.
//!
//! WAL with `synchronous=FULL`: a commit is on disk when it returns. One writer thread
//! owns the only write connection and group-commits ([`writer`]); the reads that decide
//! a call run whole on reader threads of their own ([`read`]), each owning a blocking
//! connection, so neither pays a hand-off per statement. sqlx opens, inspects and
//! migrates the file and serves the listings and the audit reads, whose statements are
//! shared with PostgreSQL or are not on the hot path.
//!
//! A store is never created silently: [`OpenMode::Existing`] (serving) refuses a
//! missing, empty or foreign file, since a fresh store would re-execute every intent it
//! forgot. Creation is explicit ([`SqliteStore::create`], [`OpenMode::CreateIfMissing`]
//! for scratch stores).
//!
//! Every row written carries the (shard, seq) of the audit record that wrote it and the
//! hash of its body, which that record's event also seals (`detail.row_intent` /
//! `detail.row_approval`). Loads, and the writer before it replaces a row, check both;
//! a load that finds no row where the chain says one was written refuses too.
//!
//! Bodies are written and read through the storage forms of [`crate::storage`], never
//! the domain types' own serde.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use oncegate_core::audit::{AuditRecord, ChainKey, RowKind};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection, Row, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

pub use crate::options::{OpenMode, StoreOptions};
use crate::rows::RowData;
use crate::{Backend, Commit, StoreError};
use crate::{controls, decode};
use crate::{key_since, serve_anchor};

mod adopt;
mod anchor;
mod audit;
pub mod clock;
mod intents;
mod keyset;
mod limits;
mod lock;
mod pins;
mod read;
mod settled;
mod shared;
mod writer;

use lock::{canonical, lock_inode, lock_single_writer};
use writer::{Job, Small};

/// Reader threads for the reads that decide a call (the listings use sqlx's pool).
const READER_THREADS: usize = 4;

/// What is at a store path before anything is created.
enum Found {
    Missing,
    /// A zero-byte file, or SQLite with no tables at all.
    Empty,
    /// An oncegate store (with or without the identity of migration 4).
    Oncegate,
    /// Something else, described.
    Foreign(String),
}

/// The SQLite store. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The exclusive locks of a serving process: `<canonical file>.lock`, and one named
    /// by the file's device and inode (released on drop).
    _lock: Option<Vec<std::fs::File>>,
    path: PathBuf,
    store_id: String,
    chain_key: Option<ChainKey>,
    /// The store's `controls_sealed_at` (ms): controls from before it may be unsealed.
    legacy_before: Option<i64>,
    /// When a rollback of this store was accepted (`serve --accept-rollback`), if ever.
    rollback_accepted_at: Option<jiff::Timestamp>,
    /// The store's clock: every instant a decision on this store takes or judges.
    clock: Arc<crate::clock::StoreClock>,
    /// How the clock's timeline was found at open.
    continuity: clock::Continuity,
    /// Where this boot's timeline resumed over a gap, if it did.
    resumption: Option<crate::clock::Resumption>,
    /// Listings, audit reads and pings.
    readers: SqlitePool,
    /// Loads and approvals, whole on a blocking connection.
    blocking: read::Readers,
    /// Rows whose stored bytes were already checked against the chain.
    verified: Arc<read::Verified>,
    /// Applied rows for replays, kept only by a serving process (the file's only
    /// writer, so every intent write but a CLI command's passes through it).
    settled: Option<settled::Settled>,
    /// The keys with rows on disk, kept by a serving process likewise: a distinct
    /// intent's first load answers "absent" from it.
    keys: Option<Arc<keyset::KeySet>>,
    writer: mpsc::Sender<Job>,
}

/// How long readiness waits for the writer to answer a probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

fn guidance(path: &Path) -> String {
    format!(
        "if this is the first start, run `oncegate init` (or `oncegate serve --init`); if the gateway ran before, the store at {} is lost (an unmounted volume looks the same): restore it, since a fresh store would re-execute every intent it forgot",
        path.display()
    )
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

/// `key`, trusting the records from before it was set as the store's key-since mark
/// says (written now, the first time the store is opened with a key): see
/// [`crate::key_since`].
async fn trusting_history(
    conn: &mut SqliteConnection,
    key: ChainKey,
    store_id: &str,
) -> Result<ChainKey, StoreError> {
    let stored: Option<String> = sqlx::query_scalar("SELECT value FROM meta WHERE name = ?1")
        .bind(key_since::MARK)
        .fetch_optional(&mut *conn)
        .await
        .map_err(unavailable)?;
    let heads = match stored {
        Some(text) => key_since::read(&key, store_id, &text),
        None => {
            let shards = sqlx::query(
                "SELECT shard, MAX(seq), MIN(CASE WHEN hash LIKE 'hmac-sha256:%' THEN seq END) FROM audit GROUP BY shard",
            )
            .fetch_all(&mut *conn)
            .await
            .map_err(unavailable)?;
            let (text, heads) = key_since::derive(
                &key,
                store_id,
                shards.iter().map(|r| {
                    (
                        r.get::<i64, _>(0) as u32,
                        r.get::<i64, _>(1) as u64,
                        r.get::<Option<i64>, _>(2).map(|seq| seq as u64),
                    )
                }),
            );
            sqlx::query("INSERT INTO meta (name, value) VALUES (?1, ?2)")
                .bind(key_since::MARK)
                .bind(text)
                .execute(&mut *conn)
                .await
                .map_err(unavailable)?;
            heads
        }
    };
    Ok(key.trusting_unkeyed_until(heads))
}

impl SqliteStore {
    /// Opens an existing oncegate store (serving): see [`OpenMode::Existing`].
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, OpenMode::Existing, StoreOptions::default()).await
    }

    /// Creates a new store (`oncegate init`): see [`OpenMode::Create`].
    pub async fn create(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, OpenMode::Create, StoreOptions::default()).await
    }

    /// Opens or creates a scratch store: see [`OpenMode::CreateIfMissing`].
    pub async fn scratch(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, OpenMode::CreateIfMissing, StoreOptions::default()).await
    }

    /// Opens the database at `path` as `mode` says, applies pending migrations and
    /// seals rows from before row seals existed.
    pub async fn open_with(
        path: &Path,
        mode: OpenMode,
        options: StoreOptions,
    ) -> Result<Self, StoreError> {
        let found = inspect(path).await?;
        let mut lock = if options.single_writer {
            Some(lock_single_writer(path)?)
        } else {
            None
        };
        let create = creates(path, mode, found)?;
        let options_sql = SqliteConnectOptions::from_str("sqlite://")
            .map_err(unavailable)?
            .filename(path)
            .create_if_missing(create)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5));
        let mut migrator = SqliteConnection::connect_with(&options_sql)
            .await
            .map_err(unavailable)?;
        // The file exists now (created by this connection if it is new).
        if let Some(locks) = lock.as_mut() {
            lock_inode(path, locks)?;
        }
        sqlx::migrate!("migrations/sqlite")
            .run(&mut migrator)
            .await
            .map_err(unavailable)?;
        let store_id: String = sqlx::query("SELECT value FROM meta WHERE name = 'store_id'")
            .fetch_one(&mut migrator)
            .await
            .map_err(unavailable)?
            .get(0);
        let legacy_before: Option<i64> =
            sqlx::query("SELECT value FROM meta WHERE name = 'controls_sealed_at'")
                .fetch_optional(&mut migrator)
                .await
                .map_err(unavailable)?
                .and_then(|r| r.get::<String, _>(0).parse().ok());
        let (clock, continuity, resumption) = clock::open(&mut migrator).await?;
        if let clock::Continuity::Resumed { at, wall, newest } = &continuity {
            tracing::info!(store = %path.display(), resumes_at = %at, wall_clock = %wall, newest = ?newest, "the store's clock starts a timeline for this boot (its time never runs back from the newest instant it holds)");
        }
        let chain_key = match options.chain_key {
            Some(key) => Some(trusting_history(&mut migrator, key, &store_id).await?),
            None => None,
        };
        migrator.close().await.map_err(unavailable)?;
        let readers = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options_sql.clone())
            .await
            .map_err(unavailable)?;
        let file = writer::WriterFile {
            path: path.to_owned(),
            inode: std::fs::metadata(path).map_err(unavailable)?.ino(),
            key: chain_key.clone(),
            shards: options.audit_shards,
            legacy_before,
            known: Default::default(),
            verified: Arc::default(),
            // Only the server keeps the anchor (CLI commands beside it only add records,
            // which leave the store ahead of it).
            anchor: options.single_writer.then(|| {
                serve_anchor::AnchorFile::beside(&canonical(path), &store_id, chain_key.clone())
            }),
        };
        let verified = file.verified.clone();
        let now = crate::clock::Clock::now(&clock);
        let accept = options.accept_rollback;
        let shown = path.display().to_string();
        let (conn, file, rollback_accepted_at) = tokio::task::spawn_blocking(move || {
            let mut conn = read::connect(&file.path, true)?;
            // Before anything is added: a store behind its anchor is judged as found.
            if let Some(anchor) = &file.anchor {
                anchor::check(&conn, anchor, accept, now, &shown)?;
            }
            adopt::adopt_unsealed_rows(&mut conn, file.key.as_ref(), file.shards)?;
            let at = anchor::rollback_accepted_at(&conn)?;
            Ok::<_, StoreError>((conn, file, at))
        })
        .await
        .map_err(unavailable)??;
        let blocking = read::Readers::start(path, READER_THREADS)?;
        let keys = if options.single_writer {
            Some(keyset::KeySet::start(path)?)
        } else {
            None
        };
        let (tx, rx) = mpsc::channel(4096);
        writer::start(conn, rx, file)?;
        Ok(Self {
            inner: Arc::new(Inner {
                _lock: lock,
                path: path.to_owned(),
                store_id,
                chain_key,
                legacy_before,
                rollback_accepted_at,
                clock: Arc::new(clock),
                continuity,
                resumption,
                readers,
                blocking,
                verified,
                settled: options.single_writer.then(settled::Settled::default),
                keys,
                writer: tx,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The store's identity, written once when its schema was created.
    pub fn store_id(&self) -> &str {
        &self.inner.store_id
    }

    /// The store's clock (see [`clock`]).
    pub fn clock(&self) -> Arc<crate::clock::StoreClock> {
        self.inner.clock.clone()
    }

    /// How the store's clock found its timeline when this process opened the store.
    pub fn clock_continuity(&self) -> &clock::Continuity {
        &self.inner.continuity
    }

    /// Where this boot's timeline resumed over a gap (a reboot), if it did.
    pub fn resumption(&self) -> Option<crate::clock::Resumption> {
        self.inner.resumption
    }

    /// The chain key this store seals with, if any.
    pub fn chain_key(&self) -> Option<&ChainKey> {
        self.inner.chain_key.as_ref()
    }

    /// When a rollback of this store to an earlier state was accepted (`oncegate serve
    /// --accept-rollback`), if ever: see [`crate::serve_anchor`].
    pub fn rollback_accepted_at(&self) -> Option<jiff::Timestamp> {
        self.inner.rollback_accepted_at
    }

    /// Closes the reader pool (the writer stops when the last clone is dropped).
    pub async fn close(&self) {
        self.inner.readers.close().await;
    }
}

/// The migrations of this build that the SQLite store at `path` has not applied (none
/// are applied here; a missing file has none pending, and opening it says why).
pub async fn pending_migrations(path: &Path) -> Result<Vec<(i64, String)>, StoreError> {
    let migrator = sqlx::migrate!("migrations/sqlite");
    if !path.exists() {
        return Ok(Vec::new());
    }
    let options = SqliteConnectOptions::from_str("sqlite://")
        .map_err(unavailable)?
        .filename(path)
        .read_only(true)
        .busy_timeout(Duration::from_secs(5));
    let mut conn = SqliteConnection::connect_with(&options)
        .await
        .map_err(unavailable)?;
    let has_table = sqlx::query(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
    )
    .fetch_optional(&mut conn)
    .await
    .map_err(unavailable)?
    .is_some();
    let applied: Vec<i64> = if has_table {
        sqlx::query("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(&mut conn)
            .await
            .map_err(unavailable)?
            .iter()
            .map(|r| r.get(0))
            .collect()
    } else {
        Vec::new()
    };
    let _ = conn.close().await;
    Ok(migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration() && !applied.contains(&m.version))
        .map(|m| (m.version, m.description.to_string()))
        .collect())
}

/// Looks at a store path without creating or changing anything.
async fn inspect(path: &Path) -> Result<Found, StoreError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => {
            return Err(StoreError::Unavailable(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    if !meta.is_file() {
        return Ok(Found::Foreign("not a regular file".into()));
    }
    if meta.len() == 0 {
        return Ok(Found::Empty);
    }
    let options = SqliteConnectOptions::from_str("sqlite://")
        .map_err(unavailable)?
        .filename(path)
        .create_if_missing(false)
        .busy_timeout(Duration::from_secs(5));
    let mut conn = match SqliteConnection::connect_with(&options).await {
        Ok(c) => c,
        Err(e) => return Ok(Found::Foreign(format!("cannot be opened as SQLite: {e}"))),
    };
    let tables =
        match sqlx::query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .fetch_all(&mut conn)
            .await
        {
            Ok(rows) => rows
                .iter()
                .map(|r| r.get::<String, _>(0))
                .collect::<Vec<_>>(),
            Err(e) => return Ok(Found::Foreign(format!("not a SQLite database: {e}"))),
        };
    let _ = conn.close().await;
    let has = |t: &str| tables.iter().any(|n| n == t);
    Ok(if tables.is_empty() {
        Found::Empty
    } else if has("meta") && has("intents") && has("audit") {
        Found::Oncegate
    } else if has("_sqlx_migrations") && has("intents") && has("audit") {
        // A store from before migration 4 (no identity yet): migrating gives it one.
        Found::Oncegate
    } else {
        let mut shown = tables.join(", ");
        if shown.len() > 120 {
            shown.truncate(120);
            shown.push_str("...");
        }
        Found::Foreign(format!("its tables are {shown}"))
    })
}

fn row_data(row: &sqlx::sqlite::SqliteRow, kind: RowKind) -> RowData {
    let Ok(row) = decode::row_data(row, kind);
    row
}

fn audit_row(row: &sqlx::sqlite::SqliteRow) -> Result<AuditRecord, StoreError> {
    decode::audit_record(row)
}

impl SqliteStore {
    /// What a read on a reader thread checks rows with (never the whole store: the
    /// reader threads must not own what only the runtime may drop).
    fn checks(&self) -> (Option<ChainKey>, Arc<read::Verified>) {
        (self.inner.chain_key.clone(), self.inner.verified.clone())
    }
}

impl Backend for SqliteStore {
    async fn ping(&self) -> Result<(), StoreError> {
        let meta = std::fs::metadata(&self.inner.path).map_err(unavailable)?;
        if meta.permissions().readonly() {
            return Err(StoreError::Unavailable(format!(
                "{} is read-only",
                self.inner.path.display()
            )));
        }
        sqlx::query("SELECT 1")
            .execute(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        // The reads that decide calls run on the reader threads: they must answer too.
        let answered = self.inner.blocking.run(|conn| {
            conn.query_row("SELECT 1", [], |_| Ok(()))
                .map_err(read::unavailable)
        });
        match tokio::time::timeout(PROBE_TIMEOUT, answered).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(StoreError::Unavailable(format!(
                    "the store readers did not answer within {PROBE_TIMEOUT:?}"
                )));
            }
        }
        // Reads answering says nothing about writes: another process holding the write
        // lock makes every commit fail after the busy timeout. Ask the writer, briefly.
        let (tx, rx) = oneshot::channel();
        self.inner.writer.try_send(Job::Probe(tx)).map_err(|_| {
            StoreError::Unavailable("the store writer is saturated or stopped".into())
        })?;
        match tokio::time::timeout(PROBE_TIMEOUT, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(StoreError::Unavailable(
                "the store writer has stopped".into(),
            )),
            Err(_) => Err(StoreError::Unavailable(format!(
                "the store writer did not answer within {PROBE_TIMEOUT:?} (writes are waiting on a lock)"
            ))),
        }
    }
}

impl SqliteStore {
    async fn small(&self, job: Small) -> Result<bool, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .writer
            .send(Job::Small(job, tx))
            .await
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?
    }

    async fn commit_inner(&self, commit: Commit) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .writer
            .send(Job::Commit(writer::Prepared::new(commit), tx))
            .await
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?
    }
}

fn finding_row(r: &sqlx::sqlite::SqliteRow) -> Result<controls::FindingRead, StoreError> {
    decode::finding(r)
}

fn switch_read(r: &sqlx::sqlite::SqliteRow) -> controls::SwitchRead {
    let Ok(switch) = decode::switch(r);
    switch
}

/// Whether opening `path` as `mode` creates the database, given what is found there;
/// an error when the mode and what is found do not go together.
fn creates(path: &Path, mode: OpenMode, found: Found) -> Result<bool, StoreError> {
    Ok(match (mode, found) {
        (_, Found::Foreign(what)) => {
            return Err(StoreError::NotInitialised(format!(
                "{} is not an oncegate store ({what}); point `[store] url` at the gateway's own store, or at a new path and run `oncegate init`",
                path.display()
            )));
        }
        (OpenMode::Existing, Found::Missing) => {
            return Err(StoreError::NotInitialised(format!(
                "the store {} does not exist; {}",
                path.display(),
                guidance(path)
            )));
        }
        (OpenMode::Existing, Found::Empty) => {
            return Err(StoreError::NotInitialised(format!(
                "the store {} is empty (no oncegate schema); {}",
                path.display(),
                guidance(path)
            )));
        }
        (OpenMode::Create, Found::Oncegate) => {
            return Err(StoreError::AlreadyExists(format!(
                "an oncegate store already exists at {}; nothing was changed (`oncegate migrate` applies pending migrations to it)",
                path.display()
            )));
        }
        (_, Found::Oncegate) => false,
        (_, Found::Missing | Found::Empty) => true,
    })
}
