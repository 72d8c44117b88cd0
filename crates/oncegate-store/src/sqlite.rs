//! The embedded SQLite backend.
//!
//! WAL with `synchronous=FULL`: a commit is on disk when it returns. One writer task
//! owns the only write connection and group-commits: it drains every commit queued
//! while the previous fsync ran and applies them in one transaction, each under its
//! own savepoint so a lost compare-and-set rolls back alone. Durability therefore does
//! not cap throughput at one fsync per decision. Readers use their own pool.
//!
//! The writer runs as a spawned task, never under a caller's future: a caller that
//! gives up cannot cancel a transaction half-way.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use oncegate_core::audit::{AuditRecord, ChainHead, seal};
use oncegate_core::intent::{Approval, ApprovalState, IntentRecord};
use oncegate_core::key::IntentKey;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection, Row, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

use crate::{ClientKeyBinding, Commit, IntentFilter, StoreError, StoreRead, StoreWrite};

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
}

/// What the writer did for one job.
enum Done {
    Commit(Result<(), StoreError>),
    Bind(ClientKeyBinding),
}

impl Job {
    fn reply(self, done: Result<Done, StoreError>) {
        match (self, done) {
            (Job::Commit(_, tx), Ok(Done::Commit(r))) => {
                let _ = tx.send(r);
            }
            (Job::Bind(_, tx), Ok(Done::Bind(b))) => {
                let _ = tx.send(Ok(b));
            }
            (Job::Commit(_, tx), Err(e)) => {
                let _ = tx.send(Err(e));
            }
            (Job::Bind(_, tx), Err(e)) => {
                let _ = tx.send(Err(e));
            }
            (Job::Commit(_, tx), Ok(Done::Bind(_))) => {
                let _ = tx.send(Err(StoreError::Corrupt(
                    "writer answered a commit with a binding".into(),
                )));
            }
            (Job::Bind(_, tx), Ok(Done::Commit(_))) => {
                let _ = tx.send(Err(StoreError::Corrupt(
                    "writer answered a binding with a commit".into(),
                )));
            }
        }
    }
}

/// The SQLite store. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    readers: SqlitePool,
    writer: mpsc::Sender<Job>,
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
    /// Opens (creating if needed) the database at `path` and runs migrations.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str("sqlite://")
            .map_err(unavailable)?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5));
        let mut writer = SqliteConnection::connect_with(&options)
            .await
            .map_err(unavailable)?;
        sqlx::migrate!("migrations/sqlite")
            .run(&mut writer)
            .await
            .map_err(unavailable)?;
        let readers = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.clone())
            .await
            .map_err(unavailable)?;
        let inode = std::fs::metadata(path).map_err(unavailable)?.ino();
        let (tx, rx) = mpsc::channel(4096);
        tokio::spawn(writer_loop(writer, rx, path.to_owned(), inode));
        Ok(Self {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                readers,
                writer: tx,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Closes the reader pool (the writer stops when the last clone is dropped).
    pub async fn close(&self) {
        self.inner.readers.close().await;
    }
}

async fn writer_loop(
    mut conn: SqliteConnection,
    mut rx: mpsc::Receiver<Job>,
    path: PathBuf,
    inode: u64,
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
            results = apply_batch(&mut conn, &batch, &mut heads).await;
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
            };
            if savepoints {
                exec(conn, "SAVEPOINT one").await?;
            }
            match apply_one(conn, commit, &mut tentative).await {
                Ok(()) => {
                    if savepoints {
                        exec(conn, "RELEASE one").await?;
                    }
                    results.push(Done::Commit(Ok(())));
                }
                Err(StoreError::Conflict) => {
                    // A conflict is detected before the audit append, so the heads
                    // did not move.
                    if savepoints {
                        exec(conn, "ROLLBACK TO one").await?;
                        exec(conn, "RELEASE one").await?;
                    } else {
                        exec(conn, "ROLLBACK").await?;
                        return Ok(vec![Done::Commit(Err(StoreError::Conflict))]);
                    }
                    results.push(Done::Commit(Err(StoreError::Conflict)));
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

async fn apply_one(
    conn: &mut SqliteConnection,
    commit: &Commit,
    heads: &mut HashMap<u32, ChainHead>,
) -> Result<(), StoreError> {
    if let Some(record) = &commit.record {
        let mut stored = record.clone();
        stored.version = record.version + 1;
        let body = serde_json::to_string(&stored).map_err(corrupt)?;
        let rows = if record.version == 0 {
            sqlx::query(
                "INSERT INTO intents (key, generation, capability, state, cross_key, run_id, business_ref, breaker_tripped, updated_at, version, body)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key, generation) DO NOTHING",
            )
        } else {
            sqlx::query(
                "UPDATE intents SET capability = ?3, state = ?4, cross_key = ?5, run_id = ?6, business_ref = ?7,
                        breaker_tripped = ?8, updated_at = ?9, version = ?10, body = ?11
                 WHERE key = ?1 AND generation = ?2 AND version = ?10 - 1",
            )
        }
        .bind(stored.key.as_str())
        .bind(i64::from(stored.generation))
        .bind(&stored.capability)
        .bind(stored.state.as_str())
        .bind(stored.cross_key.as_ref().map(IntentKey::as_str))
        .bind(stored.run_id.as_deref())
        .bind(stored.business_ref.as_deref())
        .bind(stored.breaker_tripped)
        .bind(millis(stored.updated_at))
        .bind(stored.version as i64)
        .bind(body)
        .execute(&mut *conn)
        .await
        .map_err(unavailable)?
        .rows_affected();
        if rows != 1 {
            return Err(StoreError::Conflict);
        }
    }
    if let Some(approval) = &commit.approval {
        let mut stored = approval.clone();
        stored.version = approval.version + 1;
        let body = serde_json::to_string(&stored).map_err(corrupt)?;
        let rows = if approval.version == 0 {
            sqlx::query(
                "INSERT INTO approvals (id, key, generation, state, created_at, version, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (id) DO NOTHING",
            )
        } else {
            sqlx::query(
                "UPDATE approvals SET key = ?2, generation = ?3, state = ?4, created_at = ?5, version = ?6, body = ?7
                 WHERE id = ?1 AND version = ?6 - 1",
            )
        }
        .bind(&stored.id)
        .bind(stored.key.as_str())
        .bind(i64::from(stored.generation))
        .bind(stored.state.as_str())
        .bind(millis(stored.created_at))
        .bind(stored.version as i64)
        .bind(body)
        .execute(&mut *conn)
        .await
        .map_err(unavailable)?
        .rows_affected();
        if rows != 1 {
            return Err(StoreError::Conflict);
        }
    }
    let shard = commit.event.shard();
    let head = heads
        .get(&shard)
        .cloned()
        .unwrap_or_else(ChainHead::genesis);
    let sealed = seal(commit.event.clone(), &head);
    let body = serde_json::to_string(&sealed.event).map_err(corrupt)?;
    sqlx::query("INSERT INTO audit (shard, seq, prev_hash, hash, body) VALUES (?, ?, ?, ?, ?)")
        .bind(i64::from(sealed.shard))
        .bind(sealed.seq as i64)
        .bind(&sealed.prev_hash)
        .bind(&sealed.hash)
        .bind(body)
        .execute(&mut *conn)
        .await
        .map_err(unavailable)?;
    heads.insert(
        sealed.shard,
        ChainHead {
            seq: sealed.seq,
            hash: sealed.hash,
        },
    );
    Ok(())
}

fn decode<T: serde::de::DeserializeOwned>(body: &str) -> Result<T, StoreError> {
    serde_json::from_str(body).map_err(corrupt)
}

fn audit_row(row: &sqlx::sqlite::SqliteRow) -> Result<AuditRecord, StoreError> {
    Ok(AuditRecord {
        shard: row.get::<i64, _>("shard") as u32,
        seq: row.get::<i64, _>("seq") as u64,
        prev_hash: row.get("prev_hash"),
        hash: row.get("hash"),
        event: decode(row.get::<&str, _>("body"))?,
    })
}

impl StoreRead for SqliteStore {
    async fn load(&self, key: &IntentKey) -> Result<Option<IntentRecord>, StoreError> {
        let row =
            sqlx::query("SELECT body FROM intents WHERE key = ? ORDER BY generation DESC LIMIT 1")
                .bind(key.as_str())
                .fetch_optional(&self.inner.readers)
                .await
                .map_err(unavailable)?;
        row.map(|r| decode(r.get::<&str, _>(0))).transpose()
    }

    async fn load_generation(
        &self,
        key: &IntentKey,
        generation: u32,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let row = sqlx::query("SELECT body FROM intents WHERE key = ? AND generation = ?")
            .bind(key.as_str())
            .bind(i64::from(generation))
            .fetch_optional(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        row.map(|r| decode(r.get::<&str, _>(0))).transpose()
    }

    async fn find_other_run(
        &self,
        cross_key: &IntentKey,
        run_id: Option<&str>,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT body FROM intents WHERE cross_key = ? AND run_id IS NOT ? AND state NOT IN ('denied', 'failed', 'not_applied')
             ORDER BY updated_at DESC LIMIT 1",
        )
        .bind(cross_key.as_str())
        .bind(run_id)
        .fetch_optional(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        row.map(|r| decode(r.get::<&str, _>(0))).transpose()
    }

    async fn list_intents(&self, filter: &IntentFilter) -> Result<Vec<IntentRecord>, StoreError> {
        let limit = if filter.limit == 0 { 100 } else { filter.limit };
        // Two fixed statements rather than a spliced ORDER BY: no SQL is built from input.
        let sql = if filter.oldest_first {
            "SELECT body FROM intents WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR capability = ?2)
             AND (?3 = 0 OR breaker_tripped = 1) ORDER BY updated_at ASC LIMIT ?4"
        } else {
            "SELECT body FROM intents WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR capability = ?2)
             AND (?3 = 0 OR breaker_tripped = 1) ORDER BY updated_at DESC LIMIT ?4"
        };
        let rows = sqlx::query(sql)
            .bind(filter.state.map(|s| s.as_str()))
            .bind(filter.capability.as_deref())
            .bind(filter.breaker_tripped)
            .bind(i64::from(limit))
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        rows.iter().map(|r| decode(r.get::<&str, _>(0))).collect()
    }

    async fn approval(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        let row = sqlx::query("SELECT body FROM approvals WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        row.map(|r| decode(r.get::<&str, _>(0))).transpose()
    }

    async fn list_approvals(
        &self,
        state: Option<ApprovalState>,
    ) -> Result<Vec<Approval>, StoreError> {
        let rows = sqlx::query(
            "SELECT body FROM approvals WHERE (?1 IS NULL OR state = ?1) ORDER BY created_at, id",
        )
        .bind(state.map(|s| s.as_str()))
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        rows.iter().map(|r| decode(r.get::<&str, _>(0))).collect()
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
        Ok(())
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

    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        let result = self.commit_inner(commit).await;
        metrics::histogram!("oncegate_store_commit_seconds")
            .record(started.elapsed().as_secs_f64());
        result
    }
}

impl SqliteStore {
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
