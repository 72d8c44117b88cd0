//! The embedded SQLite backend.
//!
//! Why one file: one backend's SQL kept with its single writer task and its row seals,
//! hence one long file.
//!
//! WAL with `synchronous=FULL`: a commit is on disk when it returns. One writer task
//! owns the only write connection and group-commits: it drains every commit queued
//! while the previous fsync ran and applies them in one transaction, each under its
//! own savepoint so a lost compare-and-set rolls back alone. Durability therefore does
//! not cap throughput at one fsync per decision. Readers use their own pool.
//!
//! The writer runs as a spawned task, never under a caller's future: a caller that
//! gives up cannot cancel a transaction half-way.
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

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use oncegate_core::audit::{
    AuditEvent, AuditKind, AuditRecord, ChainHead, ChainKey, RowKind, RowSeal, StoredRow,
    add_row_seals, row_hash, seal_with,
};
use oncegate_core::intent::{Approval, ApprovalState, IntentRecord};
use oncegate_core::key::IntentKey;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection, Row, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

use crate::listing::{self, Dialect};
pub use crate::options::{OpenMode, StoreOptions};
use crate::rows::{self, PreparedApproval, PreparedIntent, RowData, body_hash, integrity, listed};
use crate::storage::{ApprovalRowV1, AuditRowV1, IntentRowV1};
use crate::{
    ClientKeyBinding, Commit, IntentFilter, KillSwitch, KillSwitchChange, Listing, McpSession,
    StoreError, StoreRead, StoreWrite, UnreadableRow,
};

/// Commits applied in one transaction at most.
const MAX_BATCH: usize = 256;

/// Work for the writer task (queued by value; commits dominate, so boxing buys nothing).
#[expect(
    clippy::large_enum_variant,
    reason = "commits are the common job; a binding is rare"
)]
enum Job {
    Commit(Commit, oneshot::Sender<Result<(), StoreError>>),
    Bind(
        ClientKeyBinding,
        oneshot::Sender<Result<ClientKeyBinding, StoreError>>,
    ),
    /// Readiness: can the writer take the write lock now?
    Probe(oneshot::Sender<Result<(), StoreError>>),
    /// Shared state outside the audit chain: sessions and work claims.
    Small(Small, oneshot::Sender<Result<bool, StoreError>>),
}

/// A small write outside the audit chain (answers a bool: work claimed, else true).
enum Small {
    PutSession(McpSession),
    DeleteSession(String, jiff::Timestamp),
    ClaimWork {
        work: String,
        owner: String,
        until: jiff::Timestamp,
        now: jiff::Timestamp,
    },
    ReleaseWork {
        work: String,
        owner: String,
    },
}

/// What the writer did for one job.
enum Done {
    Commit(Result<(), StoreError>),
    Bind(ClientKeyBinding),
    Probe,
    Small(bool),
}

impl Job {
    fn reply(self, done: Result<Done, StoreError>) {
        let mismatch =
            || StoreError::Corrupt("the writer answered a job with another job's result".into());
        match self {
            Job::Commit(_, tx) => {
                let _ = tx.send(match done {
                    Ok(Done::Commit(r)) => r,
                    Ok(_) => Err(mismatch()),
                    Err(e) => Err(e),
                });
            }
            Job::Bind(_, tx) => {
                let _ = tx.send(match done {
                    Ok(Done::Bind(b)) => Ok(b),
                    Ok(_) => Err(mismatch()),
                    Err(e) => Err(e),
                });
            }
            Job::Probe(tx) => {
                let _ = tx.send(match done {
                    Ok(Done::Probe) => Ok(()),
                    Ok(_) => Err(mismatch()),
                    Err(e) => Err(e),
                });
            }
            Job::Small(_, tx) => {
                let _ = tx.send(match done {
                    Ok(Done::Small(b)) => Ok(b),
                    Ok(_) => Err(mismatch()),
                    Err(e) => Err(e),
                });
            }
        }
    }
}

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
    /// The exclusive lock of a serving process on `<file>.lock` (released on drop).
    _lock: Option<std::fs::File>,
    path: PathBuf,
    store_id: String,
    chain_key: Option<ChainKey>,
    readers: SqlitePool,
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

fn millis(t: jiff::Timestamp) -> i64 {
    t.as_millisecond()
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
        let lock = if options.single_writer {
            Some(lock_single_writer(path)?)
        } else {
            None
        };
        let create = match (mode, found) {
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
        };
        let options_sql = SqliteConnectOptions::from_str("sqlite://")
            .map_err(unavailable)?
            .filename(path)
            .create_if_missing(create)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5));
        let mut writer = SqliteConnection::connect_with(&options_sql)
            .await
            .map_err(unavailable)?;
        sqlx::migrate!("migrations/sqlite")
            .run(&mut writer)
            .await
            .map_err(unavailable)?;
        adopt_unsealed_rows(
            &mut writer,
            options.chain_key.as_ref(),
            options.audit_shards,
        )
        .await?;
        let store_id: String = sqlx::query("SELECT value FROM meta WHERE name = 'store_id'")
            .fetch_one(&mut writer)
            .await
            .map_err(unavailable)?
            .get(0);
        let readers = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options_sql.clone())
            .await
            .map_err(unavailable)?;
        let inode = std::fs::metadata(path).map_err(unavailable)?.ino();
        let (tx, rx) = mpsc::channel(4096);
        tokio::spawn(writer_loop(
            writer,
            rx,
            path.to_owned(),
            inode,
            options.chain_key.clone(),
            options.audit_shards,
        ));
        Ok(Self {
            inner: Arc::new(Inner {
                _lock: lock,
                path: path.to_owned(),
                store_id,
                chain_key: options.chain_key,
                readers,
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

    /// The chain key this store seals with, if any.
    pub fn chain_key(&self) -> Option<&ChainKey> {
        self.inner.chain_key.as_ref()
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

/// Takes the exclusive lock that makes this process the file's only server: a second
/// `oncegate serve` on the same file would keep its own chain heads and race this one.
fn lock_single_writer(path: &Path) -> Result<std::fs::File, StoreError> {
    use std::io::{Read, Seek, Write};
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    let lock_path = path.with_file_name(name);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(|e| {
            StoreError::Unavailable(format!(
                "cannot open the lock file {}: {e}",
                lock_path.display()
            ))
        })?;
    match file.try_lock() {
        Ok(()) => {
            let _ = file.set_len(0);
            let _ = file.write_all(std::process::id().to_string().as_bytes());
            Ok(file)
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.rewind();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => String::new(),
                pid => format!(" (pid {pid})"),
            };
            Err(StoreError::Locked(format!(
                "another oncegate process{holder} already serves the SQLite store {}; the embedded store is single-process: to run several gateway replicas, point every replica at one PostgreSQL (`[store] url = \"postgres://...\"`, README \"Running several replicas\")",
                path.display()
            )))
        }
        Err(std::fs::TryLockError::Error(e)) => Err(StoreError::Unavailable(format!(
            "cannot lock {}: {e}",
            lock_path.display()
        ))),
    }
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

/// Seals rows written before row seals existed, once, with one admin audit record per
/// row, so an old store opens instead of failing every intent. Afterwards (`rows_sealed`
/// set) an unsealed row is an integrity failure, never adopted: otherwise clearing a
/// row's seal would launder an edit.
async fn adopt_unsealed_rows(
    conn: &mut SqliteConnection,
    key: Option<&ChainKey>,
    shards: u32,
) -> Result<(), StoreError> {
    let done = sqlx::query("SELECT 1 FROM meta WHERE name = 'rows_sealed'")
        .fetch_optional(&mut *conn)
        .await
        .map_err(unavailable)?;
    if done.is_some() {
        return Ok(());
    }
    exec(conn, "BEGIN IMMEDIATE").await?;
    let result = async {
        let mut heads = load_heads(conn).await?;
        let intents = sqlx::query("SELECT key, generation, version, body FROM intents WHERE row_hash IS NULL")
            .fetch_all(&mut *conn)
            .await
            .map_err(unavailable)?;
        let approvals = sqlx::query("SELECT id, key, generation, version, body FROM approvals WHERE row_hash IS NULL")
            .fetch_all(&mut *conn)
            .await
            .map_err(unavailable)?;
        let now = jiff::Timestamp::now();
        let mut adopted = 0usize;
        for (kind, row) in intents
            .iter()
            .map(|r| (RowKind::Intent, r))
            .chain(approvals.iter().map(|r| (RowKind::Approval, r)))
        {
            let (id, intent_key): (String, String) = match kind {
                RowKind::Intent => (row.get("key"), row.get("key")),
                RowKind::Approval => (row.get("id"), row.get("key")),
            };
            let generation = row.get::<i64, _>("generation") as u32;
            let Ok(value) = serde_json::from_str::<serde_json::Value>(row.get::<&str, _>("body"))
            else {
                tracing::warn!(row = %id, "an unreadable row from before row seals stays unsealed (it is refused on load)");
                continue;
            };
            let seal = RowSeal {
                key: id.clone(),
                generation,
                version: row.get::<i64, _>("version") as u64,
                hash: row_hash(&value),
            };
            let mut event = AuditEvent {
                at: now,
                kind: AuditKind::Admin,
                key: Some(IntentKey::from_hex(intent_key)),
                generation,
                capability: None,
                actor: "oncegate".into(),
                run_id: None,
                from: None,
                to: None,
                status: None,
                code: None,
                detail: serde_json::json!({"adopted": "row written before row seals existed, sealed as found"}),
            };
            let (intent_seal, approval_seal) = match kind {
                RowKind::Intent => (Some(seal.clone()), None),
                RowKind::Approval => (None, Some(seal.clone())),
            };
            add_row_seals(&mut event, intent_seal, approval_seal);
            let sealed = append_audit(conn, event, &mut heads, key, shards).await?;
            let sql = match kind {
                RowKind::Intent => "UPDATE intents SET audit_shard = ?1, audit_seq = ?2, row_hash = ?3 WHERE key = ?4 AND generation = ?5",
                RowKind::Approval => "UPDATE approvals SET audit_shard = ?1, audit_seq = ?2, row_hash = ?3 WHERE id = ?4 AND ?5 = ?5",
            };
            sqlx::query(sql)
                .bind(i64::from(sealed.shard))
                .bind(sealed.seq as i64)
                .bind(&seal.hash)
                .bind(&id)
                .bind(i64::from(generation))
                .execute(&mut *conn)
                .await
                .map_err(unavailable)?;
            adopted += 1;
        }
        sqlx::query("INSERT INTO meta (name, value) VALUES ('rows_sealed', ?)")
            .bind(now.to_string())
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        if adopted > 0 {
            tracing::warn!(rows = adopted, "sealed rows written before row seals existed (one admin audit record each)");
        }
        Ok::<_, StoreError>(())
    }
    .await;
    match result {
        Ok(()) => exec(conn, "COMMIT").await,
        Err(e) => {
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            Err(e)
        }
    }
}

/// Chains `event` after its shard's head, inserts it, and advances `heads`.
async fn append_audit(
    conn: &mut SqliteConnection,
    event: AuditEvent,
    heads: &mut HashMap<u32, ChainHead>,
    key: Option<&ChainKey>,
    shards: u32,
) -> Result<AuditRecord, StoreError> {
    let head = heads
        .get(&event.shard_in(shards))
        .cloned()
        .unwrap_or_else(ChainHead::genesis);
    let sealed = seal_with(event, &head, key, shards);
    let row = AuditRowV1::from(sealed.clone());
    sqlx::query("INSERT INTO audit (shard, seq, prev_hash, hash, body) VALUES (?, ?, ?, ?, ?)")
        .bind(i64::from(row.shard))
        .bind(row.seq as i64)
        .bind(&row.prev_hash)
        .bind(&row.hash)
        .bind(row.body_text())
        .execute(&mut *conn)
        .await
        .map_err(unavailable)?;
    heads.insert(
        sealed.shard,
        ChainHead {
            seq: sealed.seq,
            hash: sealed.hash.clone(),
        },
    );
    Ok(sealed)
}

async fn writer_loop(
    mut conn: SqliteConnection,
    mut rx: mpsc::Receiver<Job>,
    path: PathBuf,
    inode: u64,
    key: Option<ChainKey>,
    shards: u32,
) {
    // The chain heads live in memory: this task is the only writer of this file, so it
    // need not read them back on every commit. They are reloaded after any failed batch
    // (which also covers a second writer having appended meanwhile).
    let mut heads = load_heads(&mut conn).await.unwrap_or_default();
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let mut results = Err(StoreError::Unavailable("not attempted".into()));
        for _attempt in 0..2 {
            // A database file that was removed or replaced under us would swallow
            // writes into an unlinked inode: refuse instead (fail closed).
            let meta = std::fs::metadata(&path);
            let same_file = meta.as_ref().map(|m| m.ino() == inode).unwrap_or(false);
            if !same_file {
                results = Err(StoreError::Unavailable(format!(
                    "the database file {} was removed or replaced",
                    path.display()
                )));
                break;
            }
            // An operator who marks the file read-only means "stop writing"; root would
            // otherwise write through the permission bits.
            if meta.is_ok_and(|m| m.permissions().readonly()) {
                results = Err(StoreError::Unavailable(format!(
                    "the database file {} is read-only",
                    path.display()
                )));
                break;
            }
            if batch.iter().all(|j| matches!(j, Job::Probe(_))) {
                // Readiness alone: ask for the write lock without waiting out the busy
                // timeout, so a lock held elsewhere answers "not ready" at once.
                results = probe(&mut conn)
                    .await
                    .map(|()| batch.iter().map(|_| Done::Probe).collect());
                break;
            }
            results = apply_batch(&mut conn, &batch, &mut heads, key.as_ref(), shards).await;
            if results.is_ok() {
                break;
            }
            heads = match load_heads(&mut conn).await {
                Ok(h) => h,
                Err(_) => break,
            };
        }
        match results {
            Ok(results) => {
                for (job, done) in batch.drain(..).zip(results) {
                    job.reply(Ok(done));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, batch = batch.len(), "store write failed");
                let message = e.to_string();
                for job in batch.drain(..) {
                    job.reply(Err(StoreError::Unavailable(message.clone())));
                }
            }
        }
    }
}

/// The last record of every audit shard.
async fn load_heads(conn: &mut SqliteConnection) -> Result<HashMap<u32, ChainHead>, StoreError> {
    let rows = sqlx::query(
        "SELECT a.shard, a.seq, a.hash FROM audit a
         JOIN (SELECT shard, MAX(seq) AS seq FROM audit GROUP BY shard) m ON a.shard = m.shard AND a.seq = m.seq",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(unavailable)?;
    Ok(rows
        .iter()
        .map(|r| {
            (
                r.get::<i64, _>(0) as u32,
                ChainHead {
                    seq: r.get::<i64, _>(1) as u64,
                    hash: r.get(2),
                },
            )
        })
        .collect())
}

/// Takes and releases the write lock with no busy wait.
async fn probe(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    exec(conn, "PRAGMA busy_timeout = 0").await?;
    let taken = exec(conn, "BEGIN IMMEDIATE").await;
    if taken.is_ok() {
        let _ = exec(conn, "ROLLBACK").await;
    }
    exec(conn, "PRAGMA busy_timeout = 5000").await?;
    taken.map_err(|e| StoreError::Unavailable(format!("the store cannot be written now: {e}")))
}

async fn exec(conn: &mut SqliteConnection, sql: &'static str) -> Result<(), StoreError> {
    sqlx::query(sql)
        .execute(&mut *conn)
        .await
        .map(|_| ())
        .map_err(unavailable)
}

/// Applies a batch in one transaction. Several commits each get a savepoint so a lost
/// compare-and-set rolls back alone; a batch of one needs none (it rolls back whole).
/// `heads` advances only if the transaction commits.
async fn apply_batch(
    conn: &mut SqliteConnection,
    batch: &[Job],
    heads: &mut HashMap<u32, ChainHead>,
    key: Option<&ChainKey>,
    shards: u32,
) -> Result<Vec<Done>, StoreError> {
    let mut tentative = heads.clone();
    let result = async {
        exec(conn, "BEGIN IMMEDIATE").await?;
        let savepoints = batch.len() > 1;
        let mut results = Vec::with_capacity(batch.len());
        for job in batch {
            let commit = match job {
                Job::Commit(commit, _) => commit,
                Job::Bind(binding, _) => {
                    results.push(Done::Bind(bind(conn, binding).await?));
                    continue;
                }
                Job::Probe(_) => {
                    // Inside a transaction that took the write lock: writable.
                    results.push(Done::Probe);
                    continue;
                }
                Job::Small(job, _) => {
                    results.push(Done::Small(small(conn, job).await?));
                    continue;
                }
            };
            if savepoints {
                exec(conn, "SAVEPOINT one").await?;
            }
            match apply_one(conn, commit, &mut tentative, key, shards).await {
                Ok(()) => {
                    if savepoints {
                        exec(conn, "RELEASE one").await?;
                    }
                    results.push(Done::Commit(Ok(())));
                }
                Err(e @ (StoreError::Conflict | StoreError::Integrity(_))) => {
                    // Both are detected before the audit append, so the heads did not
                    // move; they fail this commit alone.
                    if savepoints {
                        exec(conn, "ROLLBACK TO one").await?;
                        exec(conn, "RELEASE one").await?;
                    } else {
                        exec(conn, "ROLLBACK").await?;
                        return Ok(vec![Done::Commit(Err(e))]);
                    }
                    results.push(Done::Commit(Err(e)));
                }
                Err(e) => return Err(e),
            }
        }
        exec(conn, "COMMIT").await?;
        Ok(results)
    }
    .await;
    match result {
        Ok(results) => {
            *heads = tentative;
            Ok(results)
        }
        Err(e) => {
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            Err(e)
        }
    }
}

/// Binds a client's `Idempotency-Key` to an intent, first writer wins; returns the
/// binding that holds.
async fn bind(
    conn: &mut SqliteConnection,
    b: &ClientKeyBinding,
) -> Result<ClientKeyBinding, StoreError> {
    sqlx::query(
        "INSERT INTO client_keys (principal, capability, client_key, intent_key, args_digest, created_at)
         VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
    )
    .bind(&b.principal)
    .bind(&b.capability)
    .bind(&b.client_key)
    .bind(b.intent_key.as_str())
    .bind(&b.args_digest)
    .bind(millis(b.created_at))
    .execute(&mut *conn)
    .await
    .map_err(unavailable)?;
    let row = sqlx::query("SELECT intent_key, args_digest, created_at FROM client_keys WHERE principal = ? AND capability = ? AND client_key = ?")
        .bind(&b.principal)
        .bind(&b.capability)
        .bind(&b.client_key)
        .fetch_one(&mut *conn)
        .await
        .map_err(unavailable)?;
    Ok(ClientKeyBinding {
        intent_key: IntentKey::from_hex(row.get::<String, _>(0)),
        args_digest: row.get(1),
        created_at: jiff::Timestamp::from_millisecond(row.get(2)).map_err(corrupt)?,
        ..b.clone()
    })
}

/// A write outside the audit chain.
async fn small(conn: &mut SqliteConnection, job: &Small) -> Result<bool, StoreError> {
    let done = match job {
        Small::PutSession(s) => {
            let state = s.state.as_ref().map(serde_json::Value::to_string);
            sqlx::query(
                "INSERT INTO mcp_sessions (id, principal, state, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO UPDATE SET principal = COALESCE(?2, principal),
                     state = COALESCE(?3, state), updated_at = ?4",
            )
            .bind(&s.id)
            .bind(s.principal.as_deref())
            .bind(state)
            .bind(millis(s.updated_at))
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
            true
        }
        Small::DeleteSession(id, idle_before) => {
            sqlx::query("DELETE FROM mcp_sessions WHERE id = ? OR updated_at < ?")
                .bind(id)
                .bind(millis(*idle_before))
                .execute(&mut *conn)
                .await
                .map_err(unavailable)?;
            true
        }
        Small::ClaimWork {
            work,
            owner,
            until,
            now,
        } => {
            sqlx::query(
                "INSERT INTO work_claims (work, owner, until) VALUES (?1, ?2, ?3)
                 ON CONFLICT (work) DO UPDATE SET owner = ?2, until = ?3
                 WHERE work_claims.owner = ?2 OR work_claims.until <= ?4",
            )
            .bind(work)
            .bind(owner)
            .bind(millis(*until))
            .bind(millis(*now))
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?
            .rows_affected()
                == 1
        }
        Small::ReleaseWork { work, owner } => {
            sqlx::query("DELETE FROM work_claims WHERE work = ? AND owner = ?")
                .bind(work)
                .bind(owner)
                .execute(&mut *conn)
                .await
                .map_err(unavailable)?;
            true
        }
    };
    Ok(done)
}

/// Sets or clears a kill switch inside a commit's transaction.
async fn write_kill_switch(
    conn: &mut SqliteConnection,
    change: &KillSwitchChange,
) -> Result<(), StoreError> {
    match &change.reason {
        Some(reason) => sqlx::query(
            "INSERT INTO kill_switches (target, reason, set_by, set_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (target) DO UPDATE SET reason = ?2, set_by = ?3, set_at = ?4",
        )
        .bind(&change.target)
        .bind(reason)
        .bind(&change.actor)
        .bind(millis(change.at)),
        None => sqlx::query("DELETE FROM kill_switches WHERE target = ?").bind(&change.target),
    }
    .execute(&mut *conn)
    .await
    .map_err(unavailable)?;
    Ok(())
}

async fn apply_one(
    conn: &mut SqliteConnection,
    commit: &Commit,
    heads: &mut HashMap<u32, ChainHead>,
    key: Option<&ChainKey>,
    shards: u32,
) -> Result<(), StoreError> {
    let mut event = commit.event.clone();
    let mut intent_row = None;
    if let Some(record) = &commit.record {
        let PreparedIntent { stored, body, seal } = rows::prepare_intent(record, |_| {});
        // The row about to be replaced must be the one the chain wrote (or, for an
        // insert, must never have existed): a commit never launders an edited or
        // deleted row into a fresh, sealed version.
        let what = format!("intent {} generation {}", stored.key, stored.generation);
        if record.version == 0 {
            if newest_intent_seal(conn, &stored.key, stored.generation)
                .await?
                .is_some()
                && fetch_intent(conn, &stored.key, stored.generation)
                    .await?
                    .is_none()
            {
                return Err(rows::deleted(&what));
            }
        } else if let Some(current) = fetch_intent(conn, &stored.key, stored.generation).await?
            && current.version == i64::try_from(record.version).unwrap_or(-1)
        {
            check_row(conn, RowKind::Intent, &current, key).await?;
        }
        intent_row = Some((stored, body, seal));
    }
    let mut approval_row = None;
    if let Some(approval) = &commit.approval {
        let PreparedApproval { stored, body, seal } = rows::prepare_approval(approval);
        let what = format!("approval {}", stored.id);
        if approval.version == 0 {
            if newest_approval_seal(conn, &stored.id).await?.is_some()
                && fetch_approval(conn, &stored.id).await?.is_none()
            {
                return Err(rows::deleted(&what));
            }
        } else if let Some(current) = fetch_approval(conn, &stored.id).await?
            && current.version == i64::try_from(approval.version).unwrap_or(-1)
        {
            check_row(conn, RowKind::Approval, &current, key).await?;
        }
        approval_row = Some((stored, body, seal));
    }
    add_row_seals(
        &mut event,
        intent_row.as_ref().map(|r| r.2.clone()),
        approval_row.as_ref().map(|r| r.2.clone()),
    );
    // Where the event will land; the rows name it. The heads move only on append.
    let head = heads
        .get(&event.shard_in(shards))
        .cloned()
        .unwrap_or_else(ChainHead::genesis);
    let (shard, seq) = (event.shard_in(shards), head.seq + 1);

    if let Some((stored, body, seal)) = &intent_row {
        let rows = if stored.version == 1 {
            sqlx::query(
                "INSERT INTO intents (key, generation, capability, state, cross_key, run_id, business_ref, breaker_tripped, updated_at, version, body, audit_shard, audit_seq, row_hash)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) ON CONFLICT (key, generation) DO NOTHING",
            )
        } else {
            sqlx::query(
                "UPDATE intents SET capability = ?3, state = ?4, cross_key = ?5, run_id = ?6, business_ref = ?7,
                        breaker_tripped = ?8, updated_at = ?9, version = ?10, body = ?11,
                        audit_shard = ?12, audit_seq = ?13, row_hash = ?14
                 WHERE key = ?1 AND generation = ?2 AND version = ?10 - 1",
            )
        }
        .bind(&stored.key)
        .bind(i64::from(stored.generation))
        .bind(&stored.capability)
        .bind(stored.state.as_str())
        .bind(stored.cross_key.as_deref())
        .bind(stored.run_id.as_deref())
        .bind(stored.business_ref.as_deref())
        .bind(stored.breaker_tripped)
        .bind(millis(stored.updated_at))
        .bind(stored.version as i64)
        .bind(body)
        .bind(i64::from(shard))
        .bind(seq as i64)
        .bind(&seal.hash)
        .execute(&mut *conn)
        .await
        .map_err(unavailable)?
        .rows_affected();
        if rows != 1 {
            return Err(StoreError::Conflict);
        }
    }
    if let Some((stored, body, seal)) = &approval_row {
        let rows = if stored.version == 1 {
            sqlx::query(
                "INSERT INTO approvals (id, key, generation, state, created_at, version, body, audit_shard, audit_seq, row_hash)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT (id) DO NOTHING",
            )
        } else {
            sqlx::query(
                "UPDATE approvals SET key = ?2, generation = ?3, state = ?4, created_at = ?5, version = ?6, body = ?7,
                        audit_shard = ?8, audit_seq = ?9, row_hash = ?10
                 WHERE id = ?1 AND version = ?6 - 1",
            )
        }
        .bind(&stored.id)
        .bind(&stored.key)
        .bind(i64::from(stored.generation))
        .bind(stored.state.as_str())
        .bind(millis(stored.created_at))
        .bind(stored.version as i64)
        .bind(body)
        .bind(i64::from(shard))
        .bind(seq as i64)
        .bind(&seal.hash)
        .execute(&mut *conn)
        .await
        .map_err(unavailable)?
        .rows_affected();
        if rows != 1 {
            return Err(StoreError::Conflict);
        }
    }
    if let Some(change) = &commit.kill_switch {
        write_kill_switch(conn, change).await?;
    }
    let sealed = append_audit(conn, event, heads, key, shards).await?;
    debug_assert_eq!((sealed.shard, sealed.seq), (shard, seq));
    Ok(())
}

fn row_data(row: &sqlx::sqlite::SqliteRow, kind: RowKind) -> RowData {
    let shard: Option<i64> = row.get("audit_shard");
    let seq: Option<i64> = row.get("audit_seq");
    RowData {
        id: match kind {
            RowKind::Intent => row.get("key"),
            RowKind::Approval => row.get("id"),
        },
        generation: row.get::<i64, _>("generation") as u32,
        version: row.get("version"),
        body: row.get("body"),
        row_hash: row.get("row_hash"),
        link: shard.zip(seq).map(|(a, b)| (a as u32, b as u64)),
    }
}

async fn fetch_intent(
    conn: &mut SqliteConnection,
    key: &str,
    generation: u32,
) -> Result<Option<RowData>, StoreError> {
    let row = sqlx::query(
        "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash FROM intents WHERE key = ? AND generation = ?",
    )
    .bind(key)
    .bind(i64::from(generation))
    .fetch_optional(&mut *conn)
    .await
    .map_err(unavailable)?;
    Ok(row.map(|r| row_data(&r, RowKind::Intent)))
}

async fn fetch_approval(
    conn: &mut SqliteConnection,
    id: &str,
) -> Result<Option<RowData>, StoreError> {
    let row = sqlx::query("SELECT id, generation, version, body, audit_shard, audit_seq, row_hash FROM approvals WHERE id = ?")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(unavailable)?;
    Ok(row.map(|r| row_data(&r, RowKind::Approval)))
}

/// The newest audit record that sealed intent (key, generation).
async fn newest_intent_seal(
    conn: &mut SqliteConnection,
    key: &str,
    generation: u32,
) -> Result<Option<AuditRecord>, StoreError> {
    let row = sqlx::query(
        "SELECT shard, seq, prev_hash, hash, body FROM audit
         WHERE json_extract(body, '$.detail.row_intent.key') = ?1
           AND json_extract(body, '$.detail.row_intent.generation') = ?2
         ORDER BY id DESC LIMIT 1",
    )
    .bind(key)
    .bind(i64::from(generation))
    .fetch_optional(&mut *conn)
    .await
    .map_err(unavailable)?;
    row.map(|r| audit_row(&r)).transpose()
}

/// The newest generation of `key` the audit chain sealed.
async fn newest_sealed_generation(
    conn: &mut SqliteConnection,
    key: &str,
) -> Result<Option<u32>, StoreError> {
    let row = sqlx::query(
        "SELECT MAX(json_extract(body, '$.detail.row_intent.generation')) FROM audit
         WHERE json_extract(body, '$.detail.row_intent.key') = ?1",
    )
    .bind(key)
    .fetch_one(&mut *conn)
    .await
    .map_err(unavailable)?;
    Ok(row.get::<Option<i64>, _>(0).map(|g| g as u32))
}

async fn newest_approval_seal(
    conn: &mut SqliteConnection,
    id: &str,
) -> Result<Option<AuditRecord>, StoreError> {
    let row = sqlx::query(
        "SELECT shard, seq, prev_hash, hash, body FROM audit
         WHERE json_extract(body, '$.detail.row_approval.key') = ?1
         ORDER BY id DESC LIMIT 1",
    )
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(unavailable)?;
    row.map(|r| audit_row(&r)).transpose()
}

/// Checks a row against the newest audit record that sealed it
/// ([`rows::check_sealed`]).
async fn check_row(
    conn: &mut SqliteConnection,
    kind: RowKind,
    row: &RowData,
    key: Option<&ChainKey>,
) -> Result<serde_json::Value, StoreError> {
    let newest = match kind {
        RowKind::Intent => newest_intent_seal(conn, &row.id, row.generation).await?,
        RowKind::Approval => newest_approval_seal(conn, &row.id).await?,
    };
    rows::check_sealed(kind, row, newest, key)
}

fn audit_row(row: &sqlx::sqlite::SqliteRow) -> Result<AuditRecord, StoreError> {
    AuditRowV1::from_columns(
        row.get::<i64, _>("shard") as u32,
        row.get::<i64, _>("seq") as u64,
        row.get("prev_hash"),
        row.get("hash"),
        row.get::<&str, _>("body"),
    )
    .map(AuditRecord::from)
    .map_err(corrupt)
}

impl SqliteStore {
    /// Reads one intent row and checks it against the chain.
    async fn checked_intent(
        &self,
        conn: &mut SqliteConnection,
        row: RowData,
    ) -> Result<IntentRecord, StoreError> {
        let value = check_row(conn, RowKind::Intent, &row, self.chain_key()).await?;
        rows::intent_from(&row, value)
    }

    async fn reader(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Sqlite>, StoreError> {
        self.inner.readers.acquire().await.map_err(unavailable)
    }
}

impl StoreRead for SqliteStore {
    async fn load(&self, key: &IntentKey) -> Result<Option<IntentRecord>, StoreError> {
        // One read transaction: the row and the chain's seals are read from the same
        // snapshot, so a commit landing in between never looks like a rollback.
        let mut conn = self.reader().await?;
        let mut tx = conn.begin().await.map_err(unavailable)?;
        let row = sqlx::query(
            "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash FROM intents WHERE key = ? ORDER BY generation DESC LIMIT 1",
        )
        .bind(key.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(unavailable)?
        .map(|r| row_data(&r, RowKind::Intent));
        // The chain's newest generation of this key: on a miss it tells "never written"
        // from "deleted"; on a hit, a newer sealed generation means the newest row is gone.
        let sealed = newest_sealed_generation(&mut tx, key.as_str()).await?;
        let result = match (row, sealed) {
            (None, None) => Ok(None),
            (None, Some(g)) => Err(integrity(
                &format!("intent {key} generation {g}"),
                "the audit chain wrote this row and it is gone (deleted row)",
            )),
            (Some(row), Some(g)) if g > row.generation => Err(integrity(
                &format!("intent {key} generation {g}"),
                "the audit chain wrote this generation and it is gone (deleted row)",
            )),
            (Some(row), _) => self.checked_intent(&mut tx, row).await.map(Some),
        };
        let _ = tx.rollback().await;
        result
    }

    async fn load_generation(
        &self,
        key: &IntentKey,
        generation: u32,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let mut conn = self.reader().await?;
        let mut tx = conn.begin().await.map_err(unavailable)?;
        let result = match fetch_intent(&mut tx, key.as_str(), generation).await? {
            Some(row) => self.checked_intent(&mut tx, row).await.map(Some),
            None => match newest_intent_seal(&mut tx, key.as_str(), generation).await? {
                None => Ok(None),
                Some(_) => Err(integrity(
                    &format!("intent {key} generation {generation}"),
                    "the audit chain wrote this row and it is gone (deleted row)",
                )),
            },
        };
        let _ = tx.rollback().await;
        result
    }

    async fn find_other_run(
        &self,
        cross_key: &IntentKey,
        run_id: Option<&str>,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let mut conn = self.reader().await?;
        let mut tx = conn.begin().await.map_err(unavailable)?;
        let row = sqlx::query(
            "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash FROM intents WHERE cross_key = ? AND run_id IS NOT ? AND state NOT IN ('denied', 'failed', 'not_applied')
             ORDER BY updated_at DESC LIMIT 1",
        )
        .bind(cross_key.as_str())
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(unavailable)?
        .map(|r| row_data(&r, RowKind::Intent));
        let result = match row {
            Some(row) => self.checked_intent(&mut tx, row).await.map(Some),
            None => Ok(None),
        };
        let _ = tx.rollback().await;
        result
    }

    async fn list_intents(
        &self,
        filter: &IntentFilter,
    ) -> Result<Listing<IntentRecord>, StoreError> {
        let rows = listing::intents_query(Dialect::Sqlite, filter)
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        let mut listing = Listing::default();
        for r in &rows {
            let row = row_data(r, RowKind::Intent);
            match listed::<IntentRowV1, _>(&row) {
                Ok(record) => listing.items.push(record),
                Err(problem) => {
                    tracing::warn!(key = %row.id, generation = row.generation, %problem, "an intent row cannot be listed");
                    listing.unreadable.push(UnreadableRow {
                        key: row.id,
                        generation: Some(row.generation),
                        problem,
                    });
                }
            }
        }
        Ok(listing)
    }

    async fn approval(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        let mut conn = self.reader().await?;
        let mut tx = conn.begin().await.map_err(unavailable)?;
        let result = match fetch_approval(&mut tx, id).await? {
            Some(row) => {
                match check_row(&mut tx, RowKind::Approval, &row, self.chain_key()).await {
                    Ok(value) => ApprovalRowV1::from_body(value)
                        .map(|a| Some(a.into()))
                        .map_err(|e| StoreError::Corrupt(format!("approval {id}: {e}"))),
                    Err(e) => Err(e),
                }
            }
            None => match newest_approval_seal(&mut tx, id).await? {
                None => Ok(None),
                Some(_) => Err(integrity(
                    &format!("approval {id}"),
                    "the audit chain wrote this row and it is gone (deleted row)",
                )),
            },
        };
        let _ = tx.rollback().await;
        result
    }

    async fn list_approvals(
        &self,
        state: Option<ApprovalState>,
    ) -> Result<Listing<Approval>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, generation, version, body, audit_shard, audit_seq, row_hash FROM approvals WHERE (?1 IS NULL OR state = ?1) ORDER BY created_at, id",
        )
        .bind(state.map(|s| s.as_str()))
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        let mut listing = Listing::default();
        for r in &rows {
            let row = row_data(r, RowKind::Approval);
            match listed::<ApprovalRowV1, _>(&row) {
                Ok(a) => listing.items.push(a),
                Err(problem) => {
                    tracing::warn!(approval = %row.id, %problem, "an approval row cannot be listed");
                    listing.unreadable.push(UnreadableRow {
                        key: row.id,
                        generation: None,
                        problem,
                    });
                }
            }
        }
        Ok(listing)
    }

    async fn stored_rows(&self) -> Result<Vec<StoredRow>, StoreError> {
        let mut out = Vec::new();
        for kind in [RowKind::Intent, RowKind::Approval] {
            let sql = match kind {
                RowKind::Intent => {
                    "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash FROM intents ORDER BY key, generation"
                }
                RowKind::Approval => {
                    "SELECT id, generation, version, body, audit_shard, audit_seq, row_hash FROM approvals ORDER BY id"
                }
            };
            let rows = sqlx::query(sql)
                .fetch_all(&self.inner.readers)
                .await
                .map_err(unavailable)?;
            for r in &rows {
                let row = row_data(r, kind);
                out.push(StoredRow {
                    kind,
                    generation: if kind == RowKind::Intent {
                        row.generation
                    } else {
                        0
                    },
                    body_hash: body_hash(&row.body).map(|(_, h)| h),
                    sealed_hash: row.row_hash,
                    link: row.link,
                    key: row.id,
                });
            }
        }
        Ok(out)
    }

    async fn audit_after(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, AuditRecord)>, StoreError> {
        let rows = sqlx::query("SELECT id, shard, seq, prev_hash, hash, body FROM audit WHERE id > ? ORDER BY id LIMIT ?")
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        rows.iter()
            .map(|r| Ok((r.get::<i64, _>("id"), audit_row(r)?)))
            .collect()
    }

    async fn audit_shard(&self, shard: u32) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT shard, seq, prev_hash, hash, body FROM audit WHERE shard = ? ORDER BY seq",
        )
        .bind(i64::from(shard))
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        rows.iter().map(audit_row).collect()
    }

    async fn audit_shards(&self) -> Result<Vec<u32>, StoreError> {
        let rows = sqlx::query("SELECT DISTINCT shard FROM audit ORDER BY shard")
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(|r| r.get::<i64, _>(0) as u32).collect())
    }

    async fn kill_switches(&self) -> Result<Vec<KillSwitch>, StoreError> {
        let rows =
            sqlx::query("SELECT target, reason, set_by, set_at FROM kill_switches ORDER BY target")
                .fetch_all(&self.inner.readers)
                .await
                .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                Ok(KillSwitch {
                    target: r.get(0),
                    reason: r.get(1),
                    set_by: r.get(2),
                    set_at: jiff::Timestamp::from_millisecond(r.get(3)).map_err(corrupt)?,
                })
            })
            .collect()
    }

    async fn mcp_session(&self, id: &str) -> Result<Option<McpSession>, StoreError> {
        let row =
            sqlx::query("SELECT id, principal, state, updated_at FROM mcp_sessions WHERE id = ?")
                .bind(id)
                .fetch_optional(&self.inner.readers)
                .await
                .map_err(unavailable)?;
        row.map(|r| {
            Ok(McpSession {
                id: r.get(0),
                principal: r.get(1),
                state: r
                    .get::<Option<&str>, _>(2)
                    .map(serde_json::from_str)
                    .transpose()
                    .map_err(corrupt)?,
                updated_at: jiff::Timestamp::from_millisecond(r.get(3)).map_err(corrupt)?,
            })
        })
        .transpose()
    }

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

impl StoreWrite for SqliteStore {
    async fn bind_client_key(
        &self,
        binding: ClientKeyBinding,
    ) -> Result<ClientKeyBinding, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .writer
            .send(Job::Bind(binding, tx))
            .await
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?
    }

    async fn put_mcp_session(&self, session: McpSession) -> Result<(), StoreError> {
        self.small(Small::PutSession(session)).await.map(drop)
    }

    async fn delete_mcp_session(
        &self,
        id: &str,
        idle_before: jiff::Timestamp,
    ) -> Result<(), StoreError> {
        self.small(Small::DeleteSession(id.to_owned(), idle_before))
            .await
            .map(drop)
    }

    async fn claim_work(
        &self,
        work: &str,
        owner: &str,
        now: jiff::Timestamp,
        ttl: jiff::SignedDuration,
    ) -> Result<bool, StoreError> {
        self.small(Small::ClaimWork {
            work: work.to_owned(),
            owner: owner.to_owned(),
            until: now + ttl,
            now,
        })
        .await
    }

    async fn release_work(&self, work: &str, owner: &str) -> Result<(), StoreError> {
        self.small(Small::ReleaseWork {
            work: work.to_owned(),
            owner: owner.to_owned(),
        })
        .await
        .map(drop)
    }

    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        let result = self.commit_inner(commit).await;
        metrics::histogram!("oncegate_store_commit_seconds")
            .record(started.elapsed().as_secs_f64());
        result
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
            .send(Job::Commit(commit, tx))
            .await
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?
    }
}
