//! The hash-chained audit log.
//!
//! Every decision is appended in the same transaction as the state change it explains.
//! The log is split into shards (by intent key) so writers do not serialise on one chain
//! head; each shard is its own chain: a record's hash covers the previous record's hash
//! and its own canonical JSON, so editing, dropping or reordering any record breaks
//! every later link of that shard.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::codes::Code;
use crate::intent::{IntentState, Status};
use crate::key::{IntentKey, digest};

/// Number of audit shards. Changing it re-shards only new records; verification walks
/// whatever shards exist.
pub const AUDIT_SHARDS: u32 = 16;

/// The hash that precedes the first record of every shard.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What kind of decision a record documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// A call was decided.
    Call,
    /// An effect's outcome was recorded.
    Effect,
    /// A reconciliation read was applied.
    Reconcile,
    /// A human decided an approval.
    Approval,
    /// An admin acted (breaker reset, kill switch).
    Admin,
}

/// One decision, before it is chained.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// When (the injected clock).
    pub at: Timestamp,
    /// What kind of decision.
    pub kind: AuditKind,
    /// The intent.
    pub key: Option<IntentKey>,
    /// Its generation.
    pub generation: u32,
    /// The capability.
    pub capability: Option<String>,
    /// Who acted (agent, approver or admin).
    pub actor: String,
    /// The run.
    pub run_id: Option<String>,
    /// State before.
    pub from: Option<IntentState>,
    /// State after.
    pub to: Option<IntentState>,
    /// What the caller was told.
    pub status: Option<Status>,
    /// The stable code, if any.
    pub code: Option<Code>,
    /// Anything else worth keeping (effect ref, approval id, alerts).
    pub detail: Value,
}

impl AuditEvent {
    /// The shard this event belongs to.
    pub fn shard(&self) -> u32 {
        let basis = self
            .key
            .as_ref()
            .map_or(self.actor.as_str(), IntentKey::as_str);
        let first = u32::from_str_radix(basis.get(..4).unwrap_or("0"), 16)
            .unwrap_or_else(|_| basis.bytes().map(u32::from).sum());
        first % AUDIT_SHARDS
    }
}

/// A chained audit record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// The shard.
    pub shard: u32,
    /// Position in the shard, from 1.
    pub seq: u64,
    /// The previous record's hash (or [`GENESIS`]).
    pub prev_hash: String,
    /// This record's hash.
    pub hash: String,
    /// The decision.
    pub event: AuditEvent,
}

/// The head of one shard's chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainHead {
    /// Last sequence number (0 when empty).
    pub seq: u64,
    /// Last hash (or [`GENESIS`]).
    pub hash: String,
}

impl ChainHead {
    /// An empty shard.
    pub fn genesis() -> Self {
        Self {
            seq: 0,
            hash: GENESIS.to_owned(),
        }
    }
}

fn hash_of(shard: u32, seq: u64, prev_hash: &str, event: &AuditEvent) -> String {
    let body = serde_json::to_value(event).expect("audit events serialise");
    digest(&json!({"shard": shard, "seq": seq.to_string(), "prev": prev_hash, "event": body}))
}

/// Chains `event` after `head`.
pub fn seal(event: AuditEvent, head: &ChainHead) -> AuditRecord {
    let shard = event.shard();
    let seq = head.seq + 1;
    let hash = hash_of(shard, seq, &head.hash, &event);
    AuditRecord {
        shard,
        seq,
        prev_hash: head.hash.clone(),
        hash,
        event,
    }
}

/// The first broken link found by [`verify_shard`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BrokenLink {
    /// The shard.
    pub shard: u32,
    /// The record whose link is broken.
    pub seq: u64,
    /// What is wrong.
    pub problem: String,
}

/// Verifies one shard's records, in sequence order.
pub fn verify_shard(shard: u32, records: &[AuditRecord]) -> Result<ChainHead, BrokenLink> {
    let mut head = ChainHead::genesis();
    for r in records {
        let broken = |problem: String| BrokenLink {
            shard,
            seq: r.seq,
            problem,
        };
        if r.shard != shard {
            return Err(broken(format!("record claims shard {}", r.shard)));
        }
        if r.seq != head.seq + 1 {
            return Err(broken(format!(
                "expected seq {}, found {} (a record is missing)",
                head.seq + 1,
                r.seq
            )));
        }
        if r.prev_hash != head.hash {
            return Err(broken(
                "prev_hash does not match the previous record's hash".into(),
            ));
        }
        if r.event.shard() != shard {
            return Err(broken(
                "the event's key belongs to another shard (edited key)".into(),
            ));
        }
        let expected = hash_of(shard, r.seq, &r.prev_hash, &r.event);
        if r.hash != expected {
            return Err(broken(
                "hash does not match the record's content (edited record)".into(),
            ));
        }
        head = ChainHead {
            seq: r.seq,
            hash: r.hash.clone(),
        };
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: i64) -> AuditEvent {
        AuditEvent {
            at: Timestamp::from_second(1_700_000_000 + n).unwrap(),
            kind: AuditKind::Call,
            key: Some(IntentKey::from_hex("ab".repeat(32))),
            generation: 1,
            capability: Some("charge_card".into()),
            actor: "planner".into(),
            run_id: None,
            from: None,
            to: Some(IntentState::InFlight),
            status: Some(Status::InFlight),
            code: None,
            detail: json!({"n": n}),
        }
    }

    #[test]
    fn chain_verifies_and_detects_edits() {
        let mut head = ChainHead::genesis();
        let mut records = Vec::new();
        for n in 0..5 {
            let r = seal(event(n), &head);
            head = ChainHead {
                seq: r.seq,
                hash: r.hash.clone(),
            };
            records.push(r);
        }
        let shard = records[0].shard;
        assert_eq!(verify_shard(shard, &records).unwrap(), head);

        let mut edited = records.clone();
        edited[2].event.detail = json!({"n": 99});
        assert_eq!(verify_shard(shard, &edited).unwrap_err().seq, 3);

        let mut dropped = records.clone();
        dropped.remove(1);
        assert_eq!(verify_shard(shard, &dropped).unwrap_err().seq, 3);
    }

    #[test]
    fn audit_record_snapshot() {
        let r = seal(event(0), &ChainHead::genesis());
        insta::assert_json_snapshot!(r);
    }
}
