//! The commit in two round trips, with no transaction held open between them: the
//! path of every commit that writes an intent and/or an approval with its audit record
//! and no control (the claims and records that are nearly all of a gateway's commits).
//!
//! 1. One statement reads, in one snapshot, the database's `now()` (and a clock sample),
//!    the row the commit replaces with the newest audit record that sealed it (for an
//!    intent and for an approval), and the shard's head. The row is checked against its
//!    seal here, as the transaction did after locking it.
//! 2. One call of `oncegate_commit_v1` (migration 0008) does the rest as its own
//!    transaction: refuses a decision whose validity ran out, locks the replaced row and
//!    requires it to be the version, seal and audit link step 1 checked (a takeover also
//!    needs its lease run out by `now()`), locks the shard's head, hashes the record on
//!    the server (SHA-256 over the bytes `oncegate_core::audit` hashes) or, with a chain
//!    key, takes the hash sealed here at the head step 1 read (the key never leaves the
//!    gateway; a head that moved meanwhile is answered with the head now, and the record
//!    is sealed again and sent again), writes the rows, appends the record and moves the
//!    head.
//!
//! Why not one: the row body a commit writes holds instants re-timed to the database's
//! `now()` (a lease's expiry, an attempt's end), and the body is what the row seal and so
//! the audit record hash; the rules for re-timing also need the replaced row's lease.
//! Both come from step 1. A commit was about nine round trips inside BEGIN ... COMMIT
//! before (BENCHMARKS.md, "PostgreSQL, profiled"); `fused_commit_makes_two_statements`
//! counts them.
//!
//! Commits with controls (kill switches, findings, reservations, releases,
//! reconciliations) keep the transaction of `commit.rs`: their ledgers are read and
//! extended statement by statement under the locks they take.

use oncegate_core::audit::{ChainHead, EncodedEvent, RowKind, add_row_seals, row_seal};
use oncegate_core::intent::IntentRecord;
use sqlx::{PgConnection, Row};

use super::util::{row_at, seal_at};
use super::{PgStore, db_error, from_micros, ts};
use crate::rows::{self, PreparedApproval, PreparedIntent, RowData};
use crate::storage::{AuditRowV1, IntentRowV1, LeaseV1};
use crate::{Commit, StoreError};

/// Step 1: `now()`, a clock sample, the intent row ($1, $2) and its newest seal, the
/// approval row ($3) and its newest seal, the head of shard $4.
const READ: &str = "SELECT (extract(epoch from now()) * 1000000)::int8, (extract(epoch from clock_timestamp()) * 1000000)::int8,
        i.key, i.generation, i.version, i.body, i.audit_shard, i.audit_seq, i.row_hash,
        si.shard, si.seq, si.prev_hash, si.hash, si.body,
        a.id, a.generation, a.version, a.body, a.audit_shard, a.audit_seq, a.row_hash,
        sa.shard, sa.seq, sa.prev_hash, sa.hash, sa.body,
        h.seq, h.hash
   FROM (SELECT 1) AS one
   LEFT JOIN intents i ON i.key = $1 AND i.generation = $2
   LEFT JOIN LATERAL (SELECT shard, seq, prev_hash, hash, body FROM audit
                       WHERE row_intent_key = $1 AND row_intent_generation = $2
                       ORDER BY id DESC LIMIT 1) si ON true
   LEFT JOIN approvals a ON a.id = $3
   LEFT JOIN LATERAL (SELECT shard, seq, prev_hash, hash, body FROM audit
                       WHERE row_approval_key = $3 ORDER BY id DESC LIMIT 1) sa ON true
   LEFT JOIN audit_heads h ON h.shard = $4";

/// Step 2 (see migration 0008 for the parameters).
const WRITE: &str = "SELECT oncegate_commit_v1($1::timestamptz,
        $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15::timestamptz, $16, $17, $18::timestamptz,
        $19, $20, $21, $22, $23, $24, $25, $26, $27::timestamptz, $28, $29, $30, $31::timestamptz,
        $32, $33, $34, $35, $36, $37, $38, $39, $40, $41, $42, $43, $44)";

/// How many times a keyed commit is sealed again at a head that moved before it gives
/// up as a lost race (each time another commit of the shard went first).
const RESEALS: usize = 64;

/// Whether `commit` goes by [`PgStore::fused_commit`]: it writes no control.
pub(super) fn fusable(commit: &Commit) -> bool {
    commit.kill_switch.is_none()
        && commit.finding.is_none()
        && commit.reservations.is_empty()
        && commit.limit_reconcile.is_none()
        && !commit.record.as_ref().is_some_and(crate::releases)
}

/// A row step 1 read and checked, as step 2 must find it: its row hash and audit link.
struct Seen {
    hash: String,
    link: (u32, u64),
}

impl PgStore {
    /// Commits `commit` (see [`fusable`]) in two statements.
    pub(super) async fn fused_commit(&self, commit: &Commit) -> Result<(), StoreError> {
        let key = self.chain_key();
        let shards = self.inner.audit_shards;
        let shard = commit.event.shard_in(shards);
        let approval = commit.approval.as_ref().map(rows::prepare_approval);
        let mut conn = self.conn().await?;

        let clock = &self.inner.clock;
        let before = clock.ticks();
        let read = sqlx::query(READ)
            .bind(commit.record.as_ref().map(|r| r.key.as_str()))
            .bind(
                commit
                    .record
                    .as_ref()
                    .map_or(0, |r| i64::from(r.generation)),
            )
            .bind(approval.as_ref().map(|a| a.stored.id.as_str()))
            .bind(i64::from(shard))
            .fetch_one(&mut *conn)
            .await
            .map_err(db_error)?;
        let after = clock.ticks();
        let db_now = from_micros(read.get(0))?;
        super::clock::observe(clock, before, from_micros(read.get(1))?, after);
        if let Some(until) = commit.valid_until
            && db_now >= until
        {
            return Err(StoreError::Conflict);
        }

        let mut event = commit.event.clone();
        let mut intent = None;
        if let Some(record) = &commit.record {
            let (current, newest) = (row_at(&read, 2), seal_at(&read, 9)?);
            let what = format!(
                "intent {} generation {}",
                record.key.as_str(),
                record.generation
            );
            let (mut lease, mut ended, mut seen) = (None, None, None);
            if record.version == 0 {
                if newest.is_some() && current.is_none() {
                    return Err(rows::deleted(&what));
                }
            } else {
                let current = expected(current, record.version)?;
                let value = rows::check_sealed(RowKind::Intent, &current, newest, key)?;
                if let Ok(row) = IntentRowV1::from_body(value) {
                    lease = row.lease;
                    ended = row.attempt_ended_at;
                }
                seen = Some(seen_of(current));
            }
            intent = Some((
                prepare_at_db_time(commit, record, db_now, lease, ended),
                seen,
            ));
        }
        let mut approval_seen = None;
        if let (Some(prepared), Some(wanted)) = (&approval, &commit.approval) {
            let (current, newest) = (row_at(&read, 14), seal_at(&read, 21)?);
            if wanted.version == 0 {
                if newest.is_some() && current.is_none() {
                    return Err(rows::deleted(&format!("approval {}", prepared.stored.id)));
                }
            } else {
                let current = expected(current, wanted.version)?;
                rows::check_sealed(RowKind::Approval, &current, newest, key)?;
                approval_seen = Some(seen_of(current));
            }
        }
        add_row_seals(
            &mut event,
            intent.as_ref().map(|(r, _)| r.seal.clone()),
            approval.as_ref().map(|r| r.seal.clone()),
        );
        let encoded = EncodedEvent::new(event);
        let mut head = match read.get::<Option<i64>, _>(26) {
            Some(seq) => ChainHead {
                seq: seq as u64,
                hash: read.get(27),
            },
            None => ChainHead::genesis(),
        };
        drop(read);

        let fused = Fused {
            commit,
            shard,
            body: AuditRowV1::body_text_of(encoded.event()),
            encoded,
            intent,
            approval,
            approval_seen,
        };
        for _ in 0..RESEALS {
            let hash = key.map(|k| fused.encoded.hash_at(shard, &head, Some(k)));
            match fused.send(&mut conn, hash, &head).await {
                Ok(()) => return Ok(()),
                Err(e) => match refusal(e, commit) {
                    Refusal::HeadMoved(now) if key.is_some() => head = now,
                    Refusal::HeadMoved(_) => {
                        return Err(StoreError::Corrupt(
                            "the commit function answered a moved head to an unkeyed commit".into(),
                        ));
                    }
                    Refusal::Error(e) => return Err(e),
                },
            }
        }
        Err(StoreError::Conflict)
    }
}

/// A commit prepared for step 2.
struct Fused<'a> {
    commit: &'a Commit,
    shard: u32,
    encoded: EncodedEvent,
    /// The audit row's body column.
    body: String,
    intent: Option<(PreparedIntent, Option<Seen>)>,
    approval: Option<PreparedApproval>,
    approval_seen: Option<Seen>,
}

impl Fused<'_> {
    /// One call of the commit function; `hash` is the record's when the chain is keyed
    /// (sealed at `head`).
    async fn send(
        &self,
        conn: &mut PgConnection,
        hash: Option<String>,
        head: &ChainHead,
    ) -> Result<(), sqlx::Error> {
        let event = self.encoded.event();
        let seal = |kind: RowKind| row_seal(event, kind.field());
        let (row_intent, row_approval) = (seal(RowKind::Intent), seal(RowKind::Approval));
        let (row_switch, row_finding) = (seal(RowKind::Switch), seal(RowKind::Finding));
        let (i, i_seen) = match &self.intent {
            Some((p, seen)) => (Some(p), seen.as_ref()),
            None => (None, None),
        };
        let (a, a_seen) = (self.approval.as_ref(), self.approval_seen.as_ref());
        let q = sqlx::query(WRITE)
            .bind(self.commit.valid_until.map(ts))
            .bind(i.map(|p| p.stored.key.as_str()))
            .bind(i.map(|p| i64::from(p.stored.generation)))
            .bind(i.map(|p| p.stored.version as i64))
            .bind(i_seen.map(|s| s.hash.as_str()))
            .bind(i_seen.map(|s| i64::from(s.link.0)))
            .bind(i_seen.map(|s| s.link.1 as i64))
            .bind(self.commit.takes_over)
            .bind(i.map(|p| p.stored.capability.as_str()))
            .bind(i.map(|p| p.stored.state.as_str()))
            .bind(i.and_then(|p| p.stored.cross_key.as_deref()))
            .bind(i.and_then(|p| p.stored.run_id.as_deref()))
            .bind(i.and_then(|p| p.stored.business_ref.as_deref()))
            .bind(i.map(|p| p.stored.breaker_tripped))
            .bind(i.map(|p| ts(p.stored.updated_at)))
            .bind(i.map(|p| p.body.as_str()))
            .bind(i.map(|p| p.seal.hash.as_str()))
            .bind(i.and_then(|p| p.stored.lease.as_ref().map(|l| ts(l.expires_at))));
        let q = q
            .bind(a.map(|p| p.stored.id.as_str()))
            .bind(a.map(|p| p.stored.key.as_str()))
            .bind(a.map(|p| i64::from(p.stored.generation)))
            .bind(a.map(|p| p.stored.version as i64))
            .bind(a_seen.map(|s| s.hash.as_str()))
            .bind(a_seen.map(|s| i64::from(s.link.0)))
            .bind(a_seen.map(|s| s.link.1 as i64))
            .bind(a.map(|p| p.stored.state.as_str()))
            .bind(a.map(|p| ts(p.stored.created_at)))
            .bind(a.map(|p| p.body.as_str()))
            .bind(a.map(|p| p.seal.hash.as_str()))
            .bind(a.map(|p| p.stored.principal.as_str()))
            .bind(a.map(|p| ts(p.stored.expires_at)));
        q.bind(i64::from(self.shard))
            .bind(ChainHead::genesis().hash)
            .bind(self.encoded.canonical().as_bytes())
            .bind(self.body.as_str())
            .bind(row_intent.as_ref().map(|s| s.key.as_str()))
            .bind(row_intent.as_ref().map(|s| i64::from(s.generation)))
            .bind(row_approval.as_ref().map(|s| s.key.as_str()))
            .bind(event.key.as_ref().map(|k| k.as_str()))
            .bind(row_switch.as_ref().map(|s| s.key.as_str()))
            .bind(row_finding.as_ref().map(|s| s.key.as_str()))
            .bind(hash)
            .bind(head.seq as i64)
            .bind(head.hash.as_str())
            .fetch_one(conn)
            .await
            .map(drop)
    }
}

/// The intent row `record` becomes, its instants re-timed to the database's `db_now`
/// (see the comments inside); `current_lease` and `current_ended` are those of the
/// checked row it replaces, if any.
pub(super) fn prepare_at_db_time(
    commit: &Commit,
    record: &IntentRecord,
    db_now: jiff::Timestamp,
    current_lease: Option<LeaseV1>,
    current_ended: Option<jiff::Timestamp>,
) -> PreparedIntent {
    let retime = |t: jiff::Timestamp| rows::retime(t, commit.event.at, db_now);
    rows::prepare_intent(record, |stored| {
        // A new or renewed lease runs for the length the engine meant, from the
        // database's now. A lease the commit carries unchanged keeps its stored
        // expiry: re-timing it by this gate's clock would move another holder's.
        // A heartbeat is always re-timed, even when it left the expiry as it was:
        // a holder whose clock lags the database's keeps the stored (database
        // clock) expiry as its `max`, and would never extend its lease. A heartbeat
        // by the same holder never moves the lease backwards.
        let heartbeat = commit.event.detail.get("heartbeat").is_some();
        if let Some(lease) = &mut stored.lease
            && (heartbeat || current_lease.as_ref() != Some(&*lease))
        {
            let mut expires_at = retime(lease.expires_at);
            if heartbeat
                && let Some(current) = &current_lease
                && current.owner == lease.owner
            {
                expires_at = expires_at.max(current.expires_at);
            }
            lease.expires_at = expires_at;
        }
        // An attempt that ended with this decision (its execution came back
        // unknown) ended by the database's clock: the settle horizon counts from
        // there on every replica. An end taken from a lease's expiry is already
        // the database's.
        if stored.attempt_ended_at == Some(commit.event.at)
            && stored.attempt_ended_at != current_ended
        {
            stored.attempt_ended_at = Some(db_now);
        }
    })
}

/// The row a commit at `version` replaces: there, and at that version, else the commit
/// lost a race (the row moved on, or went) and writes nothing.
fn expected(current: Option<RowData>, version: u64) -> Result<RowData, StoreError> {
    match current {
        Some(row) if row.version == i64::try_from(version).unwrap_or(-1) => Ok(row),
        _ => Err(StoreError::Conflict),
    }
}

fn seen_of(row: RowData) -> Seen {
    Seen {
        // A checked row has both (check_sealed refuses a row without).
        hash: row.row_hash.unwrap_or_default(),
        link: row.link.unwrap_or_default(),
    }
}

/// What a refused call of the commit function means.
enum Refusal {
    /// A keyed commit sealed at a head that moved: the head now.
    HeadMoved(ChainHead),
    Error(StoreError),
}

fn refusal(e: sqlx::Error, commit: &Commit) -> Refusal {
    if let sqlx::Error::Database(db) = &e {
        match db.code().as_deref() {
            Some("OGL01") => {
                let left_ms = db.message().trim();
                let (key, generation) = commit
                    .record
                    .as_ref()
                    .map_or(("?", 0), |r| (r.key.as_str(), r.generation));
                return Refusal::Error(StoreError::LeaseLive(format!(
                    "intent {key} generation {generation}: the lease runs {left_ms} ms more by the database's clock"
                )));
            }
            Some("OGH01") => {
                if let Some((seq, hash)) = db.message().split_once(' ')
                    && let Ok(seq) = seq.parse()
                {
                    return Refusal::HeadMoved(ChainHead {
                        seq,
                        hash: hash.to_owned(),
                    });
                }
            }
            _ => {}
        }
    }
    Refusal::Error(db_error(e))
}
