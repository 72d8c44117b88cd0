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

use oncegate_core::audit::{AuditRecord, ChainKey, RowKind, StoredRow};
use oncegate_core::intent::{Approval, IntentRecord};
use oncegate_core::key::IntentKey;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection, Row, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

use crate::ledger::{self, LimitLedgers};
use crate::listing::{self, Dialect, live_count};
pub use crate::options::{OpenMode, StoreOptions};
use crate::rows::{RowData, body_hash, listed};
use crate::storage::{ApprovalRowV1, IntentRowV1};
use crate::{
    ApprovalFilter, AuditRead, AuditWrite, Backend, ClientKeyBinding, Commit, IntentFilter,
    IntentsRead, IntentsWrite, KillSwitch, LimitsRead, LimitsWrite, Listing, McpSession,
    SharedRead, SharedWrite, StoreError, UnreadableRow,
};
use crate::{controls, decode};
use crate::{key_since, serve_anchor};

mod adopt;
mod anchor;
pub mod clock;
mod pins;
mod read;
mod writer;

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

/// Takes the exclusive locks that make this process the file's only server: a second
/// `oncegate serve` on the same file would keep its own chain heads and race this one.
/// One file, whatever the path that reaches it: the lock is taken beside the canonical
/// path (a symlink, `..` or a relative path resolve to it), and again on a lock named by
/// the file's device and inode in the system's temporary directory (a hard link).
fn lock_single_writer(path: &Path) -> Result<Vec<std::fs::File>, StoreError> {
    let canonical = canonical(path);
    let mut name = canonical.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    Ok(vec![lock_file(
        &canonical.with_file_name(name),
        path,
        true,
    )?])
}

/// The lock named by the store file's device and inode (taken once the file exists: a
/// store created now has no other name yet).
fn lock_inode(path: &Path, locks: &mut Vec<std::fs::File>) -> Result<(), StoreError> {
    if let Ok(meta) = std::fs::metadata(canonical(path)) {
        let dir = std::env::temp_dir().join("oncegate-locks");
        if std::fs::create_dir_all(&dir).is_ok() {
            use std::os::unix::fs::PermissionsExt;
            // Shared by every user's gateways on this host, as /tmp is.
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777));
            let by_inode = dir.join(format!("{}-{}.lock", meta.dev(), meta.ino()));
            match lock_file(&by_inode, path, false) {
                Ok(file) => locks.push(file),
                Err(e @ StoreError::Locked(_)) => return Err(e),
                Err(e) => {
                    tracing::warn!(lock = %by_inode.display(), error = %e, "the store's inode lock could not be taken; a second path to the same file by a hard link would not be refused")
                }
            }
        }
    }
    Ok(())
}

/// `path` with symlinks and `..` resolved (its directory's, for a file not created yet).
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        match (std::fs::canonicalize(dir), path.file_name()) {
            (Ok(dir), Some(name)) => dir.join(name),
            _ => path.to_owned(),
        }
    })
}

/// Locks `lock_path` exclusively for the store at `path`, writing this process's id into
/// it when `write_pid` (the lock beside the file; the inode lock may be another user's
/// file, opened read-only).
fn lock_file(lock_path: &Path, path: &Path, write_pid: bool) -> Result<std::fs::File, StoreError> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o666)
        .open(lock_path)
        .or_else(|e| {
            if write_pid || e.kind() != std::io::ErrorKind::PermissionDenied {
                return Err(e);
            }
            std::fs::File::open(lock_path)
        });
    let mut file = opened.map_err(|e| {
        StoreError::Unavailable(format!(
            "cannot open the lock file {}: {e}",
            lock_path.display()
        ))
    })?;
    match file.try_lock() {
        Ok(()) => {
            if write_pid {
                let _ = file.set_len(0);
                let _ = file.write_all(std::process::id().to_string().as_bytes());
            }
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

impl IntentsRead for SqliteStore {
    async fn load(&self, key: &IntentKey) -> Result<Option<IntentRecord>, StoreError> {
        let (key, keys) = (key.clone(), self.checks());
        self.inner
            .blocking
            .run(move |conn| read::load(conn, &key, keys.0.as_ref(), &keys.1))
            .await
    }

    async fn load_generation(
        &self,
        key: &IntentKey,
        generation: u32,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let (key, keys) = (key.clone(), self.checks());
        self.inner
            .blocking
            .run(move |conn| {
                read::load_generation(conn, &key, generation, keys.0.as_ref(), &keys.1)
            })
            .await
    }

    async fn find_other_run(
        &self,
        cross_key: &IntentKey,
        run_id: Option<&str>,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let (cross_key, keys) = (cross_key.clone(), self.checks());
        let run_id = run_id.map(str::to_owned);
        self.inner
            .blocking
            .run(move |conn| {
                read::find_other_run(
                    conn,
                    &cross_key,
                    run_id.as_deref(),
                    keys.0.as_ref(),
                    &keys.1,
                )
            })
            .await
    }

    async fn list_intents(
        &self,
        filter: &IntentFilter,
    ) -> Result<Listing<IntentRecord>, StoreError> {
        let rows = listing::intents_query(Dialect::Sqlite, filter)
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        let (rows, next) = listing::page_of(Dialect::Sqlite, rows, Some(filter.limit), |r| {
            let row = row_data(r, RowKind::Intent);
            (r.get("sort_at"), row.id, row.generation)
        });
        let mut listing = Listing {
            next,
            ..Listing::default()
        };
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
        let (id, keys) = (id.to_owned(), self.checks());
        self.inner
            .blocking
            .run(move |conn| read::approval(conn, &id, keys.0.as_ref(), &keys.1))
            .await
    }

    async fn list_approvals(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<Listing<Approval>, StoreError> {
        let rows = listing::approvals_query(Dialect::Sqlite, filter)
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        let limit = (filter.limit > 0).then_some(filter.limit);
        let (rows, next) = listing::page_of(Dialect::Sqlite, rows, limit, |r| {
            (r.get("sort_at"), r.get("id"), 0)
        });
        let mut listing = Listing {
            next,
            ..Listing::default()
        };
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

    async fn pending_approvals_of(
        &self,
        principal: &str,
        now: jiff::Timestamp,
    ) -> Result<u32, StoreError> {
        // The expiry is read from the body (no column): the index narrows the rows to
        // this principal's pending ones, which the budget keeps few.
        let rows = sqlx::query(
            "SELECT json_extract(body, '$.expires_at') AS expires_at FROM approvals
             WHERE state = 'pending' AND json_extract(body, '$.principal') = ?1",
        )
        .bind(principal)
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        Ok(live_count(
            rows.iter()
                .map(|r| r.get::<Option<String>, _>("expires_at")),
            now,
        ))
    }

    async fn stored_rows(&self) -> Result<Vec<StoredRow>, StoreError> {
        let mut out = Vec::new();
        for (kind, sql) in [
            (
                RowKind::Intent,
                "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash FROM intents ORDER BY key, generation",
            ),
            (
                RowKind::Approval,
                "SELECT id, generation, version, body, audit_shard, audit_seq, row_hash FROM approvals ORDER BY id",
            ),
        ] {
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
        for r in sqlx::query(
            "SELECT target, reason, set_by, set_at, audit_shard, audit_seq, row_hash FROM kill_switches",
        )
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?
        {
            let switch = switch_read(&r);
            if switch.row_hash.is_some()
                || self
                    .inner
                    .legacy_before
                    .is_none_or(|t| switch.row.set_at_ms >= t)
            {
                out.push(switch.stored());
            }
        }
        for r in sqlx::query(
            "SELECT id, rule, raised_at, body, delivered_at, attempts, next_attempt_at, audit_shard, audit_seq, row_hash FROM findings",
        )
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?
        {
            let finding = finding_row(&r)?;
            if finding.row_hash.is_some()
                || self
                    .inner
                    .legacy_before
                    .is_none_or(|t| finding.finding.raised_at.as_millisecond() >= t)
            {
                out.push(finding.stored());
            }
        }
        Ok(out)
    }
}

impl IntentsWrite for SqliteStore {
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

    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        let result = self.commit_inner(commit).await;
        metrics::histogram!("oncegate_store_commit_seconds")
            .record(started.elapsed().as_secs_f64());
        result
    }
}

impl AuditRead for SqliteStore {
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

    async fn audit_shard_after(
        &self,
        shard: u32,
        after: u64,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT shard, seq, prev_hash, hash, body FROM audit WHERE shard = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(i64::from(shard))
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        rows.iter().map(audit_row).collect()
    }

    async fn audit_checkpoint(&self) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query("SELECT value FROM meta WHERE name = 'audit_checkpoint'")
                .fetch_optional(&self.inner.readers)
                .await
                .map_err(unavailable)?
                .map(|r| r.get(0)),
        )
    }

    async fn audit_of_intent(
        &self,
        key: &IntentKey,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        // The newest `limit` through `audit_by_key` (the expression spelled as the index
        // spells it), then in chain order.
        let rows = sqlx::query(
            "SELECT shard, seq, prev_hash, hash, body FROM (
                 SELECT id, shard, seq, prev_hash, hash, body FROM audit
                  WHERE json_extract(body, '$.key') = ? ORDER BY id DESC LIMIT ?
             ) ORDER BY id",
        )
        .bind(key.as_str())
        .bind(i64::from(limit))
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
}

impl AuditWrite for SqliteStore {
    async fn put_audit_checkpoint(&self, checkpoint: String) -> Result<(), StoreError> {
        self.small(Small::PutCheckpoint(checkpoint)).await.map(drop)
    }
}

impl SharedRead for SqliteStore {
    async fn kill_switches(&self) -> Result<Vec<KillSwitch>, StoreError> {
        let rows = sqlx::query(
            "SELECT target, reason, set_by, set_at, audit_shard, audit_seq, row_hash FROM kill_switches ORDER BY target",
        )
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        let mut read = Vec::with_capacity(rows.len());
        for r in &rows {
            let switch = switch_read(r);
            let newest = sqlx::query(
                "SELECT shard, seq, prev_hash, hash, body FROM audit
                 WHERE json_extract(body, '$.detail.row_switch.key') = ? ORDER BY id DESC LIMIT 1",
            )
            .bind(&switch.row.target)
            .fetch_optional(&self.inner.readers)
            .await
            .map_err(unavailable)?
            .as_ref()
            .map(audit_row)
            .transpose()?;
            read.push((switch, newest));
        }
        // Every target the chain ever sealed (an index scan): one with no row was deleted.
        let sealed = sqlx::query(
            "SELECT json_extract(body, '$.detail.row_switch.key') AS target, MAX(id) FROM audit
             WHERE json_extract(body, '$.detail.row_switch.key') IS NOT NULL GROUP BY target",
        )
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        let mut deleted = Vec::new();
        for r in &sealed {
            let target: String = r.get(0);
            if read.iter().any(|(s, _)| s.row.target == target) {
                continue;
            }
            let at =
                sqlx::query("SELECT shard, seq, prev_hash, hash, body FROM audit WHERE id = ?")
                    .bind(r.get::<i64, _>(1))
                    .fetch_one(&self.inner.readers)
                    .await
                    .map_err(unavailable)
                    .and_then(|row| audit_row(&row))
                    .map_or(jiff::Timestamp::UNIX_EPOCH, |record| record.event.at);
            deleted.push((target, at));
        }
        Ok(controls::switches_on(
            read,
            deleted,
            self.inner.chain_key.as_ref(),
            self.inner.legacy_before,
        ))
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
}

impl SharedWrite for SqliteStore {
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
}

impl LimitsRead for SqliteStore {
    async fn limit_used(&self, scope: &str, since: jiff::Timestamp) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "SELECT COALESCE(SUM(amount), 0) FROM reservations WHERE scope = ? AND active = 1 AND reserved_at >= ?",
        )
        .bind(scope)
        .bind(since.as_millisecond())
        .fetch_one(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        Ok(row.get(0))
    }

    async fn findings(
        &self,
        limit: u32,
        after: Option<&crate::PageAfter>,
    ) -> Result<Vec<crate::FindingRow>, StoreError> {
        let limit = i64::from(limit.max(1));
        let query = match after {
            None => sqlx::query(
                "SELECT id, rule, raised_at, body, delivered_at, attempts, next_attempt_at, audit_shard, audit_seq, row_hash FROM findings
                 ORDER BY raised_at DESC, id DESC LIMIT ?1",
            )
            .bind(limit),
            Some(after) => sqlx::query(
                "SELECT id, rule, raised_at, body, delivered_at, attempts, next_attempt_at, audit_shard, audit_seq, row_hash FROM findings
                 WHERE (raised_at, id) < (?2, ?3) ORDER BY raised_at DESC, id DESC LIMIT ?1",
            )
            .bind(limit)
            .bind(after.at.as_millisecond())
            .bind(after.id.clone()),
        };
        let rows = query
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        rows.iter()
            .map(|r| Ok(finding_row(r)?.listed(self.inner.legacy_before)))
            .collect()
    }

    async fn findings_due(
        &self,
        now: jiff::Timestamp,
        limit: u32,
    ) -> Result<Vec<crate::FindingRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, rule, raised_at, body, delivered_at, attempts, next_attempt_at, audit_shard, audit_seq, row_hash FROM findings
             WHERE delivered_at IS NULL AND next_attempt_at <= ? ORDER BY next_attempt_at, id LIMIT ?",
        )
        .bind(now.as_millisecond())
        .bind(i64::from(limit.max(1)))
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        rows.iter()
            .map(|r| Ok(finding_row(r)?.listed(self.inner.legacy_before)))
            .collect()
    }

    async fn ledgers(&self) -> Result<LimitLedgers, StoreError> {
        let mut ledgers = LimitLedgers::default();
        for r in sqlx::query("SELECT scope, seq, chain, audit_shard, audit_seq FROM limit_heads")
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?
        {
            ledgers.heads.insert(
                r.get(0),
                ledger::Head {
                    seq: r.get::<i64, _>(1) as u64,
                    chain: r.get(2),
                    link: (r.get::<i64, _>(3) as u32, r.get::<i64, _>(4) as u64),
                },
            );
        }
        for r in sqlx::query(
            "SELECT scope, seq, key, generation, amount, at, reserve, chain FROM limit_ledger ORDER BY scope, seq",
        )
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?
        {
            let scope: String = r.get(0);
            ledgers
                .entries
                .entry(scope.clone())
                .or_default()
                .push(ledger::StoredEntry {
                    entry: oncegate_core::audit::LedgerEntry {
                        scope,
                        seq: r.get::<i64, _>(1) as u64,
                        key: r.get(2),
                        generation: r.get::<i64, _>(3) as u32,
                        amount: r.get(4),
                        at: r.get(5),
                        reserve: r.get(6),
                    },
                    chain: r.get(7),
                });
        }
        for r in sqlx::query(
            "SELECT scope, key, generation, amount, active, reserved_at FROM reservations ORDER BY scope",
        )
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?
        {
            let scope: String = r.get(0);
            let legacy = self
                .inner
                .legacy_before
                .is_some_and(|t| r.get::<i64, _>(5) < t);
            if legacy && !ledgers.entries.contains_key(&scope) {
                continue;
            }
            ledgers.table.entry(scope).or_default().push((
                ledger::Active {
                    key: r.get(1),
                    generation: r.get::<i64, _>(2) as u32,
                    amount: r.get(3),
                },
                r.get::<i64, _>(4) == 1,
            ));
        }
        Ok(ledgers)
    }
}

impl LimitsWrite for SqliteStore {
    async fn finding_delivery(
        &self,
        id: &str,
        attempts: u32,
        delivered_at: Option<jiff::Timestamp>,
        next_attempt_at: Option<jiff::Timestamp>,
    ) -> Result<(), StoreError> {
        self.small(Small::FindingDelivery {
            id: id.to_owned(),
            attempts,
            delivered_at,
            next_attempt_at,
        })
        .await
        .map(drop)
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
