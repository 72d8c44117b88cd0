//! The blocking side of the SQLite store: connections owned by threads of their own,
//! and the reads that decide a call (a load and its seal checks), each run whole on one
//! of those threads.
//!
//! Why threads and rusqlite rather than sqlx here: sqlx runs every statement of a
//! SQLite connection on a worker thread and hands each one across a channel, so a load
//! (begin, row, newest seal, newest generation, rollback) cost five round trips between
//! the async runtime and that worker, and the profile was mostly those hand-offs. A
//! blocking connection on its own thread runs the whole read in one hand-off. sqlx
//! still opens and migrates the file and serves the listings (`listing.rs` shares its
//! statements with PostgreSQL).

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncegate_core::audit::{AuditRecord, ChainKey, RowKind};
use oncegate_core::intent::{Approval, IntentRecord};
use oncegate_core::key::IntentKey;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, params};
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

use crate::StoreError;
use crate::rows::{self, RowData, integrity};
use crate::storage::{ApprovalRowV1, IntentRowV1};

pub(super) fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// A failed read: a column that does not hold what the schema says (edited behind the
/// store's back) is corrupt, anything else a store that cannot answer now.
fn read_failed(e: rusqlite::Error) -> StoreError {
    match e {
        rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) => StoreError::Corrupt(e.to_string()),
        e => unavailable(e),
    }
}

/// Statements kept prepared per connection (the hot path uses about a dozen).
const STATEMENT_CACHE: usize = 64;

/// Opens a blocking connection to an existing store file. `write` connections get the
/// durability the store promises (`synchronous=FULL` under WAL: a commit is on disk when
/// it returns); read connections are read-only.
pub(super) fn connect(path: &Path, write: bool) -> Result<Connection, StoreError> {
    let flags = if write {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(path, flags).map_err(unavailable)?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(unavailable)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // The same settings sqlx's connections use (its defaults plus the store's options).
    // temp_store=MEMORY keeps the writer's savepoint journals (one per commit of a
    // batch) off the disk: they only roll back a commit inside the open transaction,
    // and the WAL is what makes a transaction durable.
    conn.execute_batch(
        "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL; PRAGMA temp_store = MEMORY;",
    )
    .map_err(unavailable)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .map_err(unavailable)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Unavailable(format!(
            "{} is in journal mode {mode}, not WAL",
            path.display()
        )));
    }
    Ok(conn)
}

/// How long a caller waits for a reader thread (what sqlx's pool waited to acquire).
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A read to run on a reader thread.
type ReadJob = Box<dyn FnOnce(&mut Connection) + Send>;

/// Reader threads, each owning one read-only connection, taking whole reads from one
/// queue. They stop when the last handle is dropped.
#[derive(Clone)]
pub(super) struct Readers {
    jobs: std_mpsc::Sender<ReadJob>,
}

impl Readers {
    pub(super) fn start(path: &Path, threads: usize) -> Result<Self, StoreError> {
        let (tx, rx) = std_mpsc::channel::<ReadJob>();
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..threads {
            let mut conn = connect(path, false)?;
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .name(format!("oncegate-sqlite-read-{n}"))
                .spawn(move || {
                    loop {
                        // The lock is held only while waiting for the next job; the job
                        // runs after it is released, so the threads read in parallel.
                        let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        match job {
                            Ok(job) => job(&mut conn),
                            Err(_) => break,
                        }
                    }
                })
                .map_err(unavailable)?;
        }
        Ok(Self { jobs: tx })
    }

    /// Runs `read` on a reader thread. A caller that gives up leaves the read to finish
    /// on its own (reads change nothing).
    pub(super) async fn run<T: Send + 'static>(
        &self,
        read: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Box::new(move |conn| {
                let _ = tx.send(read(conn));
            }))
            .map_err(|_| StoreError::Unavailable("the store readers have stopped".into()))?;
        match tokio::time::timeout(READ_TIMEOUT, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(StoreError::Unavailable(
                "the store readers have stopped".into(),
            )),
            Err(_) => Err(StoreError::Unavailable(format!(
                "no store reader answered within {READ_TIMEOUT:?}"
            ))),
        }
    }
}

/// An audit record's columns as stored, before its body is parsed.
pub(super) use crate::decode::AuditColumns as RawRecord;

/// Rows whose exact stored bytes (row and sealing record) this process has checked
/// against the chain, or written itself. A load that reads the same bytes again skips
/// re-hashing them (canonical JSON of the body and the record's own hash were most of a
/// replay's cost); any edit of the row, its seal columns or its record changes the
/// fingerprint and gets the full check.
#[derive(Default)]
pub(super) struct Verified(Mutex<HashMap<(RowKind, String, u32), [u8; 32]>>);

/// Entries kept at most (about 15 MB); the map starts over when full.
const VERIFIED_CAPACITY: usize = 100_000;

impl Verified {
    fn holds(&self, kind: RowKind, row: &RowData, fingerprint: &[u8; 32]) -> bool {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&(kind, row.id.clone(), row.generation)) == Some(fingerprint)
    }

    pub(super) fn insert(&self, kind: RowKind, id: String, generation: u32, fp: [u8; 32]) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= VERIFIED_CAPACITY {
            map.clear();
        }
        map.insert((kind, id, generation), fp);
    }
}

/// The fingerprint of a row as stored and the record that sealed it (without a
/// record: of the row alone, what the writer remembers of its own rows).
pub(super) fn fingerprint(
    version: i64,
    body: &str,
    row_hash: Option<&str>,
    link: Option<(u32, u64)>,
    record: Option<&RawRecord>,
) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(&version.to_le_bytes());
    field(body.as_bytes());
    field(row_hash.unwrap_or("").as_bytes());
    match link {
        Some((shard, seq)) => {
            field(&shard.to_le_bytes());
            field(&seq.to_le_bytes());
        }
        None => field(b"unlinked"),
    }
    if let Some(record) = record {
        field(&record.shard.to_le_bytes());
        field(&record.seq.to_le_bytes());
        field(record.prev_hash.as_bytes());
        field(record.hash.as_bytes());
        field(record.body.as_bytes());
    }
    h.finalize().into()
}

fn row_data(row: &Row<'_>, kind: RowKind) -> rusqlite::Result<RowData> {
    crate::decode::row_data(row, kind)
}

pub(super) fn fetch_intent(
    conn: &Connection,
    key: &str,
    generation: u32,
) -> Result<Option<RowData>, StoreError> {
    conn.prepare_cached(
        "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash FROM intents WHERE key = ?1 AND generation = ?2",
    )
    .and_then(|mut s| {
        s.query_row(params![key, i64::from(generation)], |r| {
            row_data(r, RowKind::Intent)
        })
        .optional()
    })
    .map_err(read_failed)
}

pub(super) fn fetch_approval(conn: &Connection, id: &str) -> Result<Option<RowData>, StoreError> {
    conn.prepare_cached(
        "SELECT id, generation, version, body, audit_shard, audit_seq, row_hash FROM approvals WHERE id = ?1",
    )
    .and_then(|mut s| {
        s.query_row(params![id], |r| row_data(r, RowKind::Approval))
            .optional()
    })
    .map_err(read_failed)
}

/// The newest audit record that sealed intent (key, generation), as stored.
pub(super) fn newest_intent_seal(
    conn: &Connection,
    key: &str,
    generation: u32,
) -> Result<Option<RawRecord>, StoreError> {
    conn.prepare_cached(
        "SELECT shard, seq, prev_hash, hash, body FROM audit
         WHERE json_extract(body, '$.detail.row_intent.key') = ?1
           AND json_extract(body, '$.detail.row_intent.generation') = ?2
         ORDER BY id DESC LIMIT 1",
    )
    .and_then(|mut s| {
        s.query_row(params![key, i64::from(generation)], |r| {
            crate::decode::audit_columns(r)
        })
        .optional()
    })
    .map_err(read_failed)
}

/// The newest audit record that sealed the kill switch or finding `id`. The query text
/// repeats the expressions of the indexes `audit_by_row_switch` / `audit_by_row_finding`.
pub(super) fn newest_control_seal(
    conn: &Connection,
    kind: RowKind,
    id: &str,
) -> Result<Option<RawRecord>, StoreError> {
    let sql = match kind {
        RowKind::Switch => {
            "SELECT shard, seq, prev_hash, hash, body FROM audit
             WHERE json_extract(body, '$.detail.row_switch.key') = ?1 ORDER BY id DESC LIMIT 1"
        }
        _ => {
            "SELECT shard, seq, prev_hash, hash, body FROM audit
             WHERE json_extract(body, '$.detail.row_finding.key') = ?1 ORDER BY id DESC LIMIT 1"
        }
    };
    conn.prepare_cached(sql)
        .and_then(|mut s| {
            s.query_row(params![id], |r| crate::decode::audit_columns(r))
                .optional()
        })
        .map_err(read_failed)
}

/// The audit record at (shard, seq), parsed.
pub(super) fn record_at(
    conn: &Connection,
    (shard, seq): (u32, u64),
) -> Result<Option<AuditRecord>, StoreError> {
    conn.prepare_cached(
        "SELECT shard, seq, prev_hash, hash, body FROM audit WHERE shard = ?1 AND seq = ?2",
    )
    .and_then(|mut s| {
        s.query_row(params![i64::from(shard), seq as i64], |r| {
            crate::decode::audit_columns(r)
        })
        .optional()
    })
    .map_err(read_failed)?
    .map(|r| r.parse())
    .transpose()
}

/// The newest generation of `key` the audit chain sealed.
pub(super) fn newest_sealed_generation(
    conn: &Connection,
    key: &str,
) -> Result<Option<u32>, StoreError> {
    conn.prepare_cached(
        "SELECT MAX(json_extract(body, '$.detail.row_intent.generation')) FROM audit
         WHERE json_extract(body, '$.detail.row_intent.key') = ?1",
    )
    .and_then(|mut s| s.query_row(params![key], |r| r.get::<_, Option<i64>>(0)))
    .map(|g| g.map(|g| g as u32))
    .map_err(read_failed)
}

/// Whether `key` has a row of a generation above `generation`.
pub(super) fn newer_row_exists(
    conn: &Connection,
    key: &str,
    generation: u32,
) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM intents WHERE key = ?1 AND generation > ?2)")
        .and_then(|mut s| s.query_row(params![key, i64::from(generation)], |r| r.get(0)))
        .map_err(read_failed)
}

pub(super) fn newest_approval_seal(
    conn: &Connection,
    id: &str,
) -> Result<Option<RawRecord>, StoreError> {
    conn.prepare_cached(
        "SELECT shard, seq, prev_hash, hash, body FROM audit
         WHERE json_extract(body, '$.detail.row_approval.key') = ?1
         ORDER BY id DESC LIMIT 1",
    )
    .and_then(|mut s| {
        s.query_row(params![id], |r| crate::decode::audit_columns(r))
            .optional()
    })
    .map_err(read_failed)
}

/// Checks a row against the newest audit record that sealed it
/// ([`rows::check_sealed`]), unless these exact bytes were checked before. Returns the
/// parsed body when it was checked now, `None` when the bytes were already known good.
pub(super) fn check_row(
    conn: &Connection,
    kind: RowKind,
    row: &RowData,
    key: Option<&ChainKey>,
    verified: &Verified,
    remember: Remember,
) -> Result<Option<serde_json::Value>, StoreError> {
    let raw = match kind {
        RowKind::Intent => newest_intent_seal(conn, &row.id, row.generation)?,
        RowKind::Approval => newest_approval_seal(conn, &row.id)?,
        RowKind::Switch | RowKind::Finding => newest_control_seal(conn, kind, &row.id)?,
        RowKind::Limit => {
            return Err(StoreError::Corrupt(
                "a limit's ledger is checked by its head, not as a row".into(),
            ));
        }
    };
    let fp = raw.as_ref().map(|r| {
        fingerprint(
            row.version,
            &row.body,
            row.row_hash.as_deref(),
            row.link,
            Some(r),
        )
    });
    if let Some(fp) = &fp
        && verified.holds(kind, row, fp)
    {
        return Ok(None);
    }
    let newest = raw.as_ref().map(RawRecord::parse).transpose()?;
    let value = rows::check_sealed(kind, row, newest, key)?;
    if let (Some(fp), Remember::Yes) = (fp, remember) {
        verified.insert(kind, row.id.clone(), row.generation, fp);
    }
    Ok(Some(value))
}

/// Whether a passed check goes into [`Verified`]: not from inside the writer's open
/// transaction, whose reads may see a row that is then rolled back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Remember {
    Yes,
    No,
}

/// A row checked against the chain, decoded in its storage form `T`.
fn checked<T: DeserializeOwned>(
    conn: &Connection,
    kind: RowKind,
    row: &RowData,
    key: Option<&ChainKey>,
    verified: &Verified,
) -> Result<T, StoreError> {
    let decoded = match check_row(conn, kind, row, key, verified, Remember::Yes)? {
        Some(value) => serde_json::from_value(value),
        None => serde_json::from_str(&row.body),
    };
    decoded.map_err(|e| StoreError::Corrupt(format!("{}: {e}", row.what(kind))))
}

fn checked_intent(
    conn: &Connection,
    row: RowData,
    chain_key: Option<&ChainKey>,
    verified: &Verified,
) -> Result<IntentRecord, StoreError> {
    checked::<IntentRowV1>(conn, RowKind::Intent, &row, chain_key, verified).map(Into::into)
}

/// The newest generation of an intent, checked against the chain. One read transaction:
/// the row and the chain's seals come from the same snapshot, so a commit landing in
/// between never looks like a rollback.
pub(super) fn load(
    conn: &mut Connection,
    key: &IntentKey,
    chain_key: Option<&ChainKey>,
    verified: &Verified,
) -> Result<Option<IntentRecord>, StoreError> {
    let tx = conn.transaction().map_err(unavailable)?;
    let row = tx
        .prepare_cached(
            "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash FROM intents WHERE key = ?1 ORDER BY generation DESC LIMIT 1",
        )
        .and_then(|mut s| {
            s.query_row(params![key.as_str()], |r| row_data(r, RowKind::Intent))
                .optional()
        })
        .map_err(read_failed)?;
    // The chain's newest generation of this key: on a miss it tells "never written" from
    // "deleted"; on a hit, a newer sealed generation means the newest row is gone.
    let sealed = newest_sealed_generation(&tx, key.as_str())?;
    match (row, sealed) {
        (None, None) => Ok(None),
        (None, Some(g)) => Err(rows::deleted(&format!("intent {key} generation {g}"))),
        (Some(row), Some(g)) if g > row.generation => Err(integrity(
            &format!("intent {key} generation {g}"),
            "the audit chain wrote this generation and it is gone (deleted row)",
        )),
        (Some(row), _) => checked_intent(&tx, row, chain_key, verified).map(Some),
    }
}

/// One generation of an intent, checked against the chain.
pub(super) fn load_generation(
    conn: &mut Connection,
    key: &IntentKey,
    generation: u32,
    chain_key: Option<&ChainKey>,
    verified: &Verified,
) -> Result<Option<IntentRecord>, StoreError> {
    let tx = conn.transaction().map_err(unavailable)?;
    match fetch_intent(&tx, key.as_str(), generation)? {
        Some(row) => checked_intent(&tx, row, chain_key, verified).map(Some),
        None => match newest_intent_seal(&tx, key.as_str(), generation)? {
            None => Ok(None),
            Some(_) => Err(rows::deleted(&format!(
                "intent {key} generation {generation}"
            ))),
        },
    }
}

/// The newest live intent of the same cross-run key in another run, checked.
pub(super) fn find_other_run(
    conn: &mut Connection,
    cross_key: &IntentKey,
    run_id: Option<&str>,
    chain_key: Option<&ChainKey>,
    verified: &Verified,
) -> Result<Option<IntentRecord>, StoreError> {
    let tx = conn.transaction().map_err(unavailable)?;
    let row = tx
        .prepare_cached(
            "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash FROM intents WHERE cross_key = ?1 AND run_id IS NOT ?2 AND state NOT IN ('denied', 'failed', 'not_applied')
             ORDER BY updated_at DESC LIMIT 1",
        )
        .and_then(|mut s| {
            s.query_row(params![cross_key.as_str(), run_id], |r| {
                row_data(r, RowKind::Intent)
            })
            .optional()
        })
        .map_err(read_failed)?;
    match row {
        Some(row) => checked_intent(&tx, row, chain_key, verified).map(Some),
        None => Ok(None),
    }
}

/// One approval, checked against the chain.
pub(super) fn approval(
    conn: &mut Connection,
    id: &str,
    chain_key: Option<&ChainKey>,
    verified: &Verified,
) -> Result<Option<Approval>, StoreError> {
    let tx = conn.transaction().map_err(unavailable)?;
    match fetch_approval(&tx, id)? {
        Some(row) => checked::<ApprovalRowV1>(&tx, RowKind::Approval, &row, chain_key, verified)
            .map(|a| Some(a.into())),
        None => match newest_approval_seal(&tx, id)? {
            None => Ok(None),
            Some(_) => Err(rows::deleted(&format!("approval {id}"))),
        },
    }
}
