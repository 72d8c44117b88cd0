//! The SQLite store's one writer: a thread that owns the only write connection and
//! group-commits.
//!
//! It drains every job queued while the previous fsync ran and applies them in one
//! transaction, each commit under its own savepoint so a lost compare-and-set rolls back
//! alone. Durability therefore does not cap throughput at one fsync per decision, and a
//! whole batch runs in one blocking call: a commit costs one hand-off in and one answer
//! out, not one per statement.
//!
//! A thread, never a caller's future: a caller that gives up cannot cancel a transaction
//! half-way.
//!
//! Here: the jobs (`Job`, `Prepared`, `Sealable`), the chain heads and the audit append,
//! which `adopt.rs` shares. The thread's loop and the batch it applies are in
//! `writer/task.rs`, in one file: the batch loop, the savepoint around each commit and
//! the per-commit checks (row seals, compare-and-set, limit reservations, finding ids)
//! share one rule, that every error a single commit can cause is raised before its audit
//! append, so rolling back to its savepoint leaves the chain heads where they were. The
//! jobs outside a commit's event are in `writer/shared.rs`, its controls' writes in
//! `writer/controls.rs`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use oncegate_core::audit::{AuditEvent, ChainHead, ChainKey, EncodedEvent, RowSeal, add_row_seals};
use rusqlite::{Connection, params};
use tokio::sync::oneshot;

use super::read::{RawRecord, Verified, fingerprint, unavailable};
use crate::rows::{self, PreparedApproval, PreparedIntent};
use crate::storage::AuditRowV1;
use crate::{ClientKeyBinding, Commit, StoreError};

mod shared;
mod task;
mod time;

pub(super) use shared::Small;
pub(super) use task::start;
mod controls;

/// Jobs applied in one transaction at most.
const MAX_BATCH: usize = 256;

/// Intent rows [`Own`] remembers at most (then it starts again).
const OWN_ROWS: usize = 50_000;

/// The intent rows this thread committed, as it wrote them: a fingerprint of each row's
/// version, body, seal hash and audit link ([`own_fingerprint`]).
///
/// Before it replaces a row the writer makes sure the row is the one the chain wrote.
/// A row found exactly as this thread committed it needs no lookup of the newest record
/// that sealed it (the most expensive statement of a claim's completion): a newer seal
/// for it could only come from another writer, which would have appended to the row's
/// shard (intent seals go to their key's shard), so this thread's next append there
/// collides on `UNIQUE (shard, seq)`, the batch fails, and this map is cleared with the
/// chain heads before the batch is tried again with every check. Any edit of the row
/// changes the fingerprint and gets the full check.
#[derive(Default)]
struct Own(HashMap<(String, u32), [u8; 32]>);

impl Own {
    fn wrote(&self, row: &rows::RowData) -> bool {
        self.0
            .get(&(row.id.clone(), row.generation))
            .is_some_and(|fp| {
                *fp == own_fingerprint(row.version, &row.body, row.row_hash.as_deref(), row.link)
            })
    }

    fn remember(&mut self, id: String, generation: u32, fp: [u8; 32]) {
        if self.0.len() >= OWN_ROWS {
            self.0.clear();
        }
        self.0.insert((id, generation), fp);
    }
}

/// What [`Own`] keeps of a row: its fingerprint without a sealing record.
fn own_fingerprint(
    version: i64,
    body: &str,
    row_hash: Option<&str>,
    link: Option<(u32, u64)>,
) -> [u8; 32] {
    fingerprint(version, body, row_hash, link, None)
}

/// Work for the writer (queued by value; commits dominate, so boxing buys nothing).
#[expect(
    clippy::large_enum_variant,
    reason = "commits are the common job; a binding is rare"
)]
pub(super) enum Job {
    Commit(Prepared, oneshot::Sender<Result<(), StoreError>>),
    Bind(
        ClientKeyBinding,
        oneshot::Sender<Result<ClientKeyBinding, StoreError>>,
    ),
    /// Readiness: can the writer take the write lock now?
    Probe(oneshot::Sender<Result<(), StoreError>>),
    /// Shared state outside the audit chain: sessions and work claims.
    Small(Small, oneshot::Sender<Result<bool, StoreError>>),
}

/// A commit with its rows serialised and hashed and its audit event encoded (row seals
/// written), by the caller: that work needs no database and no chain head, and done
/// here it would run on the one writer thread. The writer only chains the event
/// ([`EncodedEvent::hash_at`]: one SHA-256 of the encoded bytes).
pub(super) struct Prepared {
    commit: Commit,
    intent: Option<PreparedIntent>,
    approval: Option<PreparedApproval>,
    /// The seals of the kill switch and the finding the commit writes.
    switch: Option<RowSeal>,
    finding: Option<RowSeal>,
    event: Sealable,
}

impl Prepared {
    pub(super) fn new(commit: Commit) -> Self {
        let intent = commit
            .record
            .as_ref()
            .map(|r| rows::prepare_intent(r, |_| {}));
        let approval = commit.approval.as_ref().map(rows::prepare_approval);
        let mut event = commit.event.clone();
        add_row_seals(
            &mut event,
            intent.as_ref().map(|r| r.seal.clone()),
            approval.as_ref().map(|r| r.seal.clone()),
        );
        let (switch, finding) = crate::controls::seal_controls(&commit, &mut event);
        Self {
            intent,
            approval,
            switch,
            finding,
            event: Sealable::new(event),
            commit,
        }
    }
}

/// An audit event ready to be chained: encoded for its hash, with its body column's text.
pub(super) struct Sealable {
    encoded: EncodedEvent,
    body: String,
}

impl Sealable {
    pub(super) fn new(event: AuditEvent) -> Self {
        Self {
            body: AuditRowV1::body_text_of(&event),
            encoded: EncodedEvent::new(event),
        }
    }
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

/// What the writer thread needs to know about its file.
pub(super) struct WriterFile {
    pub(super) path: PathBuf,
    pub(super) inode: u64,
    pub(super) key: Option<ChainKey>,
    pub(super) shards: u32,
    /// When the store was upgraded to chained controls (ms): reservations before it may
    /// have no ledger ([`controls::Sealing::legacy_before`]).
    pub(super) legacy_before: Option<i64>,
    /// The ledger entries this writer already checked.
    pub(super) known: crate::ledger::Known,
    /// What the loads need not check again: the rows this writer committed.
    pub(super) verified: Arc<Verified>,
    /// The serve anchor, rewritten after every commit when this process serves the file.
    pub(super) anchor: Option<crate::serve_anchor::AnchorFile>,
}

/// The last record of every audit shard.
pub(super) fn load_heads(conn: &Connection) -> Result<HashMap<u32, ChainHead>, StoreError> {
    let mut statement = conn
        .prepare_cached(
            "SELECT a.shard, a.seq, a.hash FROM audit a
             JOIN (SELECT shard, MAX(seq) AS seq FROM audit GROUP BY shard) m ON a.shard = m.shard AND a.seq = m.seq",
        )
        .map_err(unavailable)?;
    let rows = statement
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)? as u32,
                ChainHead {
                    seq: r.get::<_, i64>(1)? as u64,
                    hash: r.get(2)?,
                },
            ))
        })
        .map_err(unavailable)?;
    rows.collect::<Result<_, _>>().map_err(unavailable)
}

/// Chains `event` after its shard's head, inserts it, and advances `heads`; returns the
/// record as stored.
pub(super) fn append_audit(
    conn: &Connection,
    event: &Sealable,
    heads: &mut HashMap<u32, ChainHead>,
    key: Option<&ChainKey>,
    shards: u32,
) -> Result<RawRecord, StoreError> {
    let shard = event.encoded.event().shard_in(shards);
    let head = heads
        .get(&shard)
        .cloned()
        .unwrap_or_else(ChainHead::genesis);
    let raw = RawRecord {
        shard: i64::from(shard),
        seq: (head.seq + 1) as i64,
        body: event.body.clone(),
        hash: event.encoded.hash_at(shard, &head, key),
        prev_hash: head.hash,
    };
    conn.prepare_cached(
        "INSERT INTO audit (shard, seq, prev_hash, hash, body) VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut s| {
        s.execute(params![
            raw.shard,
            raw.seq,
            raw.prev_hash,
            raw.hash,
            raw.body
        ])
    })
    .map_err(unavailable)?;
    heads.insert(
        shard,
        ChainHead {
            seq: head.seq + 1,
            hash: raw.hash.clone(),
        },
    );
    Ok(raw)
}
