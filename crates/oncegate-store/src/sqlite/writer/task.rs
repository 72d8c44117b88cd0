//! The writer thread: its loop, the checkpointer beside it, and how a batch of commits
//! is applied in one transaction (`apply_batch`, `apply_one`). The jobs it runs and the
//! chain helpers they share are in `writer.rs`, below it.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use oncegate_core::audit::{ChainHead, RowKind, RowSeal};
use rusqlite::{Connection, params};
use tokio::sync::mpsc;

use super::controls::{insert_finding, reconcile, release, reserve, write_kill_switch};
use super::shared::{bind, small};
use super::time::millis;
use super::{
    Done, Job, MAX_BATCH, Own, Prepared, Sealable, WriterFile, append_audit, load_heads,
    own_fingerprint,
};
use crate::StoreError;
use crate::ledger::Sealing;
use crate::rows::{self, PreparedApproval, PreparedIntent};
use crate::sqlite::read::{
    Remember, check_row, fetch_approval, fetch_intent, fingerprint, newer_row_exists,
    newest_approval_seal, newest_sealed_generation, unavailable,
};

/// How long the checkpointer lets commits gather before it checkpoints them.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

/// Starts the writer thread on `conn` and its checkpointer; both stop when the last
/// sender is dropped.
pub(in crate::sqlite) fn start(
    conn: Connection,
    rx: mpsc::Receiver<Job>,
    file: WriterFile,
) -> Result<(), StoreError> {
    // The WAL is copied back into the database by a thread of its own, off the one
    // writer's path (SQLite's automatic checkpoint would run inside the writer's
    // COMMIT, with its fsync of the database file). It checkpoints at most every
    // CHECKPOINT_EVERY while commits come, and sleeps on a channel when none do.
    conn.execute_batch("PRAGMA wal_autocheckpoint = 0")
        .map_err(unavailable)?;
    let checkpointer = crate::sqlite::read::connect(&file.path, true)?;
    let (kick, kicks) = std_mpsc::sync_channel(1);
    let path = file.path.clone();
    std::thread::Builder::new()
        .name("oncegate-sqlite-checkpoint".into())
        .spawn(move || checkpoints(&checkpointer, &kicks, &path))
        .map_err(unavailable)?;
    std::thread::Builder::new()
        .name("oncegate-sqlite-writer".into())
        .spawn(move || run(conn, rx, &file, &kick))
        .map(drop)
        .map_err(unavailable)
}

/// Checkpoints (passively: never waits for a reader or the writer) after commits.
fn checkpoints(conn: &Connection, kicks: &std_mpsc::Receiver<()>, path: &std::path::Path) {
    while kicks.recv().is_ok() {
        std::thread::sleep(CHECKPOINT_EVERY);
        // A file marked read-only is not written, even to copy committed pages back.
        if std::fs::metadata(path).is_ok_and(|m| m.permissions().readonly()) {
            continue;
        }
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "the SQLite checkpoint failed; the WAL grows until the next one");
        }
    }
}

fn run(
    conn: Connection,
    mut rx: mpsc::Receiver<Job>,
    file: &WriterFile,
    kick: &std_mpsc::SyncSender<()>,
) {
    // The chain heads live in memory: this thread is the only writer of this file, so
    // it need not read them back on every commit. They are reloaded after any failed
    // batch (which also covers a second writer having appended meanwhile).
    let mut heads = load_heads(&conn).unwrap_or_default();
    let mut own = Own::default();
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = rx.blocking_recv() {
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
            let meta = std::fs::metadata(&file.path);
            let same_file = meta
                .as_ref()
                .map(|m| m.ino() == file.inode)
                .unwrap_or(false);
            if !same_file {
                results = Err(StoreError::Unavailable(format!(
                    "the database file {} was removed or replaced",
                    file.path.display()
                )));
                break;
            }
            // An operator who marks the file read-only means "stop writing"; root would
            // otherwise write through the permission bits.
            if meta.is_ok_and(|m| m.permissions().readonly()) {
                results = Err(StoreError::Unavailable(format!(
                    "the database file {} is read-only",
                    file.path.display()
                )));
                break;
            }
            if batch.iter().all(|j| matches!(j, Job::Probe(_))) {
                // Readiness alone: ask for the write lock without waiting out the busy
                // timeout, so a lock held elsewhere answers "not ready" at once.
                results = probe(&conn).map(|()| batch.iter().map(|_| Done::Probe).collect());
                break;
            }
            results = apply_batch(&conn, &batch, &mut heads, &mut own, file);
            if results.is_ok() {
                break;
            }
            // Another writer may have appended (see `Own`): check everything again.
            own = Own::default();
            heads = match load_heads(&conn) {
                Ok(h) => h,
                Err(_) => break,
            };
        }
        match results {
            Ok(results) => {
                // Before anyone hears of the commit: a restore that loses it is refused.
                if let Some(anchor) = &file.anchor
                    && let Err(e) = anchor.write(&heads)
                {
                    tracing::error!(anchor = %anchor.path().display(), error = %e, "the serve anchor could not be written; a restore of the store to before this commit would go unnoticed");
                }
                // Full: a checkpoint is already due.
                let _ = kick.try_send(());
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

/// Takes and releases the write lock with no busy wait.
fn probe(conn: &Connection) -> Result<(), StoreError> {
    let restore = |conn: &Connection| {
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(unavailable)
    };
    conn.busy_timeout(std::time::Duration::ZERO)
        .map_err(unavailable)?;
    let taken = conn.execute_batch("BEGIN IMMEDIATE");
    if taken.is_ok() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    restore(conn)?;
    taken.map_err(|e| StoreError::Unavailable(format!("the store cannot be written now: {e}")))
}

fn exec(conn: &Connection, sql: &'static str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute([]))
        .map(drop)
        .map_err(unavailable)
}

/// Applies a batch in one transaction. Several commits each get a savepoint so a lost
/// compare-and-set rolls back alone; a batch of one needs none (it rolls back whole).
/// `heads` advances only if the transaction commits.
fn apply_batch(
    conn: &Connection,
    batch: &[Job],
    heads: &mut HashMap<u32, ChainHead>,
    own: &mut Own,
    file: &WriterFile,
) -> Result<Vec<Done>, StoreError> {
    let mut tentative = heads.clone();
    let mut written = Vec::new();
    let result = (|| {
        exec(conn, "BEGIN IMMEDIATE")?;
        let savepoints = batch.len() > 1;
        let mut results = Vec::with_capacity(batch.len());
        for job in batch {
            let prepared = match job {
                Job::Commit(prepared, _) => prepared,
                Job::Bind(binding, _) => {
                    results.push(Done::Bind(bind(conn, binding)?));
                    continue;
                }
                Job::Probe(_) => {
                    // Inside a transaction that took the write lock: writable.
                    results.push(Done::Probe);
                    continue;
                }
                Job::Small(job, _) => {
                    results.push(Done::Small(small(conn, job)?));
                    continue;
                }
            };
            if savepoints {
                exec(conn, "SAVEPOINT one")?;
            }
            match apply_one(conn, prepared, &mut tentative, own, file) {
                Ok(rows) => {
                    written.extend(rows);
                    if savepoints {
                        exec(conn, "RELEASE one")?;
                    }
                    results.push(Done::Commit(Ok(())));
                }
                Err(
                    e @ (StoreError::Conflict
                    | StoreError::Integrity(_)
                    | StoreError::LimitReached { .. }),
                ) => {
                    // Both are detected before the audit append, so the heads did not
                    // move; they fail this commit alone.
                    if savepoints {
                        exec(conn, "ROLLBACK TO one")?;
                        exec(conn, "RELEASE one")?;
                    } else {
                        exec(conn, "ROLLBACK")?;
                        return Ok(vec![Done::Commit(Err(e))]);
                    }
                    results.push(Done::Commit(Err(e)));
                }
                Err(e) => return Err(e),
            }
        }
        exec(conn, "COMMIT")?;
        Ok(results)
    })();
    match result {
        Ok(results) => {
            *heads = tentative;
            for w in written {
                if let Some(fp) = w.own {
                    own.remember(w.id.clone(), w.generation, fp);
                }
                file.verified.insert(w.kind, w.id, w.generation, w.verified);
            }
            Ok(results)
        }
        Err(e) => {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            Err(e)
        }
    }
}

/// A row a commit wrote: for [`Verified`], and (intent rows) for [`Own`].
struct Written {
    kind: RowKind,
    id: String,
    generation: u32,
    verified: [u8; 32],
    own: Option<[u8; 32]>,
}

// Long on purpose: one commit's statements inside the writer's transaction, in the order
// every backend runs them, read side by side with memory.rs `Data::apply` and
// postgres/commit.rs `apply`; issue 35 rewrites the commit path, and cutting it now would
// move the same code twice.
fn apply_one(
    conn: &Connection,
    prepared: &Prepared,
    heads: &mut HashMap<u32, ChainHead>,
    own: &Own,
    file: &WriterFile,
) -> Result<Vec<Written>, StoreError> {
    let key = file.key.as_ref();
    let shards = file.shards;
    let Prepared {
        commit,
        intent,
        approval,
        switch,
        finding,
        event,
    } = prepared;
    // The engine's clock is this store's clock (one process): a decision whose deadline
    // has passed by it is not written.
    if commit
        .valid_until
        .is_some_and(|until| commit.event.at >= until)
    {
        return Err(StoreError::Conflict);
    }
    let mut intent_row = None;
    if let (Some(record), Some(PreparedIntent { stored, body, seal })) = (&commit.record, intent) {
        // The row about to be replaced must be the one the chain wrote (or, for an
        // insert, must never have existed): a commit never launders an edited or
        // deleted row into a fresh, sealed version.
        let what = format!("intent {} generation {}", stored.key, stored.generation);
        if record.version == 0 {
            // A new generation below one that exists (a row, or a seal of one) was
            // decided from a load that missed it (the store's key set answered
            // "absent"): re-decide from the disk, whose load refuses what it must.
            // The newest sealed generation answers both questions: a later one is a
            // conflict, and this one sealed with no row is a deleted row.
            let sealed = newest_sealed_generation(conn, &stored.key)?;
            if sealed.is_some_and(|g| g > stored.generation)
                || newer_row_exists(conn, &stored.key, stored.generation)?
            {
                return Err(StoreError::Conflict);
            }
            if sealed == Some(stored.generation)
                && fetch_intent(conn, &stored.key, stored.generation)?.is_none()
            {
                return Err(rows::deleted(&what));
            }
        } else if let Some(current) = fetch_intent(conn, &stored.key, stored.generation)?
            && current.version == i64::try_from(record.version).unwrap_or(-1)
            && !own.wrote(&current)
        {
            check_row(
                conn,
                RowKind::Intent,
                &current,
                key,
                &file.verified,
                Remember::No,
            )?;
        }
        intent_row = Some((stored, body, seal));
    }
    let mut approval_row = None;
    if let (Some(approval), Some(PreparedApproval { stored, body, seal })) =
        (&commit.approval, approval)
    {
        let what = format!("approval {}", stored.id);
        if approval.version == 0 {
            if newest_approval_seal(conn, &stored.id)?.is_some()
                && fetch_approval(conn, &stored.id)?.is_none()
            {
                return Err(rows::deleted(&what));
            }
        } else if let Some(current) = fetch_approval(conn, &stored.id)?
            && current.version == i64::try_from(approval.version).unwrap_or(-1)
        {
            check_row(
                conn,
                RowKind::Approval,
                &current,
                key,
                &file.verified,
                Remember::No,
            )?;
        }
        approval_row = Some((stored, body, seal));
    }
    // Where the event will land; the rows name it. The heads move only on append.
    let shard = event.encoded.event().shard_in(shards);
    let seq = heads.get(&shard).map_or(0, |h| h.seq) + 1;

    if let Some((stored, body, seal)) = &intent_row {
        let sql = if stored.version == 1 {
            "INSERT INTO intents (key, generation, capability, state, cross_key, run_id, business_ref, breaker_tripped, updated_at, version, body, audit_shard, audit_seq, row_hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) ON CONFLICT (key, generation) DO NOTHING"
        } else {
            "UPDATE intents SET capability = ?3, state = ?4, cross_key = ?5, run_id = ?6, business_ref = ?7,
                    breaker_tripped = ?8, updated_at = ?9, version = ?10, body = ?11,
                    audit_shard = ?12, audit_seq = ?13, row_hash = ?14
             WHERE key = ?1 AND generation = ?2 AND version = ?10 - 1"
        };
        let rows = conn
            .prepare_cached(sql)
            .and_then(|mut s| {
                s.execute(params![
                    stored.key,
                    i64::from(stored.generation),
                    stored.capability,
                    stored.state.as_str(),
                    stored.cross_key,
                    stored.run_id,
                    stored.business_ref,
                    stored.breaker_tripped,
                    millis(stored.updated_at),
                    stored.version as i64,
                    body,
                    i64::from(shard),
                    seq as i64,
                    seal.hash,
                ])
            })
            .map_err(unavailable)?;
        if rows != 1 {
            return Err(StoreError::Conflict);
        }
    }
    if let Some((stored, body, seal)) = &approval_row {
        let sql = if stored.version == 1 {
            "INSERT INTO approvals (id, key, generation, state, created_at, version, body, audit_shard, audit_seq, row_hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT (id) DO NOTHING"
        } else {
            "UPDATE approvals SET key = ?2, generation = ?3, state = ?4, created_at = ?5, version = ?6, body = ?7,
                    audit_shard = ?8, audit_seq = ?9, row_hash = ?10
             WHERE id = ?1 AND version = ?6 - 1"
        };
        let rows = conn
            .prepare_cached(sql)
            .and_then(|mut s| {
                s.execute(params![
                    stored.id,
                    stored.key,
                    i64::from(stored.generation),
                    stored.state.as_str(),
                    millis(stored.created_at),
                    stored.version as i64,
                    body,
                    i64::from(shard),
                    seq as i64,
                    seal.hash,
                ])
            })
            .map_err(unavailable)?;
        if rows != 1 {
            return Err(StoreError::Conflict);
        }
    }
    let mut sealing = Sealing::new((shard, seq), key, file.legacy_before, &file.known);
    if let Some(r) = &commit.limit_reconcile {
        reconcile(conn, r, &mut sealing)?;
    }
    if let (Some(change), Some(seal)) = (&commit.kill_switch, switch) {
        write_kill_switch(conn, change, seal, &sealing)?;
    }
    if let Some(record) = &commit.record {
        if crate::releases(record) {
            release(
                conn,
                record.key.as_str(),
                record.generation,
                commit.event.at,
                &mut sealing,
            )?;
        }
        reserve(
            conn,
            record.key.as_str(),
            record.generation,
            &commit.reservations,
            commit.event.at,
            &mut sealing,
        )?;
    }
    if let (Some(f), Some(seal)) = (&commit.finding, finding) {
        insert_finding(conn, f, seal, &sealing)?;
    }
    // The ledger heads are known only now: the event is encoded again with them (only
    // commits that reserve, release or reconcile pay for it).
    let resealed;
    let event = if sealing.is_empty() {
        event
    } else {
        let mut with_limits = event.encoded.event().clone();
        sealing.seal_into(&mut with_limits);
        resealed = Sealable::new(with_limits);
        &resealed
    };
    let raw = append_audit(conn, event, heads, key, shards)?;
    debug_assert_eq!((raw.shard, raw.seq), (i64::from(shard), seq as i64));
    // What the loads need not check again: exactly the bytes just written.
    let fp = |version: u64, body: &str, seal: &RowSeal| {
        fingerprint(
            version as i64,
            body,
            Some(&seal.hash),
            Some((shard, seq)),
            Some(&raw),
        )
    };
    let mut written = Vec::with_capacity(2);
    if let Some((stored, body, seal)) = &intent_row {
        written.push(Written {
            kind: RowKind::Intent,
            id: stored.key.clone(),
            generation: stored.generation,
            verified: fp(stored.version, body, seal),
            own: Some(own_fingerprint(
                stored.version as i64,
                body,
                Some(&seal.hash),
                Some((shard, seq)),
            )),
        });
    }
    if let Some((stored, body, seal)) = &approval_row {
        written.push(Written {
            kind: RowKind::Approval,
            id: stored.id.clone(),
            generation: stored.generation,
            verified: fp(stored.version, body, seal),
            own: None,
        });
    }
    Ok(written)
}
