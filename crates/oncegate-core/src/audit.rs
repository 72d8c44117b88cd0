//! The hash-chained audit log.
//!
//! Every decision is appended in the same transaction as the state change it explains.
//! The log is split into shards (by intent key) so writers do not serialise on one chain
//! head; each shard is its own chain: a record's hash covers the previous record's hash
//! and its own canonical JSON, so editing, dropping or reordering any record breaks
//! every later link of that shard.
//!
//! Three things make the chain cover more than itself:
//! - **Row seals.** The store writes, into the event of each commit, a [`RowSeal`] of
//!   every intent or approval row it wrote (the row's identity, version and the hash of
//!   its canonical JSON). A row is trusted only while it matches the newest seal for
//!   it, so an edited, rolled-back or deleted row is found ([`verify_rows`]) and refused
//!   on load.
//! - **Anchors.** [`Anchor`] holds every shard's head, kept outside the store;
//!   [`check_anchor`] proves the chain still extends each anchored head (truncation).
//! - **A chain key.** With a secret, each record's hash is an HMAC-SHA256 (spelled
//!   `hmac-sha256:HEX`), so someone who edits a shard cannot recompute it.
//!
//! This file is the check of the chain: a record against its hash, a shard's links, the
//! anchors. Below it, layered so that no import runs back up: `audit/event.rs` (the
//! event, the record and a shard's head), `audit/key.rs` (the chain key and its HMAC),
//! `audit/encoding.rs` (the frozen form a record's hash covers, and sealing a record
//! with it) and `audit/seals.rs` (the row seals and the check of rows against them).

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

mod encoding;
mod event;
mod key;
mod seals;

pub use crate::config::AUDIT_SHARDS;
pub use encoding::{EncodedEvent, EventV1, seal, seal_with};
pub use event::{AuditEvent, AuditKind, AuditRecord, ChainHead, GENESIS, KEYED_PREFIX};
pub use key::ChainKey;
pub use seals::*;

use encoding::hash_of;

/// Whether one record's hash matches its content (the per-load check; the links
/// between records are [`verify_shard_with`]'s job). A keyed record needs the key.
pub fn check_record(record: &AuditRecord, key: Option<&ChainKey>) -> Result<(), String> {
    let keyed = record.hash.starts_with(KEYED_PREFIX);
    let expected = match (keyed, key) {
        (true, None) => {
            return Err(
                "the record is sealed with a chain key and none is configured (set the variable `[audit] chain_key_env` names)"
                    .into(),
            );
        }
        (true, Some(k)) => hash_of(
            record.shard,
            record.seq,
            &record.prev_hash,
            &record.event,
            Some(k),
        ),
        (false, _) => hash_of(
            record.shard,
            record.seq,
            &record.prev_hash,
            &record.event,
            None,
        ),
    };
    if record.hash == expected {
        Ok(())
    } else if keyed {
        Err(
            "the record's HMAC does not match its content (edited record, or another chain key)"
                .into(),
        )
    } else {
        Err("hash does not match the record's content (edited record)".into())
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

/// Verifies one shard's records, in sequence order (no chain key).
pub fn verify_shard(shard: u32, records: &[AuditRecord]) -> Result<ChainHead, BrokenLink> {
    verify_shard_with(shard, records, None, 0)
}

/// Verifies one shard's records, in sequence order. With a chain key every record after
/// `trusted_until` (the highest anchored sequence number that checked out, see
/// [`check_anchor`]) must be keyed: an unkeyed one could have been recomputed by anyone.
pub fn verify_shard_with(
    shard: u32,
    records: &[AuditRecord],
    key: Option<&ChainKey>,
    trusted_until: u64,
) -> Result<ChainHead, BrokenLink> {
    verify_shard_from(shard, ChainHead::genesis(), records, key, trusted_until)
}

/// Verifies records that continue one shard after `start`, a head verified before (an
/// `audit verify` checkpoint, or the previous page of a walk), in sequence order; the
/// rules are [`verify_shard_with`]'s. Returns the new head.
pub fn verify_shard_from(
    shard: u32,
    start: ChainHead,
    records: &[AuditRecord],
    key: Option<&ChainKey>,
    trusted_until: u64,
) -> Result<ChainHead, BrokenLink> {
    let mut head = start;
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
        // Which shard a key lands in depends on the store's `audit_shards`, so it is not
        // re-derived here; the record's hash covers its key and its shard.
        check_record(r, key).map_err(broken)?;
        if key.is_some() && !r.hash.starts_with(KEYED_PREFIX) && r.seq > trusted_until {
            return Err(broken(
                "the record is not sealed with the chain key (recomputed without it?); records from before the key was set pass only when an anchor (`audit verify --anchor`) covers them"
                    .into(),
            ));
        }
        head = ChainHead {
            seq: r.seq,
            hash: r.hash.clone(),
        };
    }
    Ok(head)
}

/// The heads of every shard at one moment, to be kept outside the store
/// (`oncegate audit anchor`). One JSON object per line in an anchor file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anchor {
    /// The store's identity (its `meta` table), so an anchor is never checked against
    /// another store.
    pub store_id: String,
    /// When it was taken.
    pub at: Timestamp,
    /// Every shard's head: shard number -> (seq, hash).
    pub heads: BTreeMap<u32, AnchorHead>,
}

/// One anchored head.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnchorHead {
    /// The shard's last sequence number then.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
}

/// Checks that every anchored head is still in its shard, at its sequence number with
/// its hash: a truncated shard (newest records dropped) or a rewritten one fails.
/// Returns, per shard, the highest anchored sequence number that checked out.
/// `shards` holds each shard's records in sequence order.
pub fn check_anchor(
    anchor: &Anchor,
    store_id: &str,
    shards: &BTreeMap<u32, Vec<AuditRecord>>,
) -> Result<BTreeMap<u32, u64>, BrokenLink> {
    if anchor.store_id != store_id {
        return Err(BrokenLink {
            shard: 0,
            seq: 0,
            problem: format!(
                "the anchor was taken of store {}, this is store {store_id}",
                anchor.store_id
            ),
        });
    }
    let mut trusted = BTreeMap::new();
    for (shard, head) in &anchor.heads {
        let records = shards.get(shard).map(Vec::as_slice).unwrap_or_default();
        let found = head
            .seq
            .checked_sub(1)
            .and_then(|i| records.get(usize::try_from(i).ok()?));
        match found {
            Some(r) if r.seq == head.seq && r.hash == head.hash => {
                trusted.insert(*shard, head.seq);
            }
            Some(_) => {
                return Err(BrokenLink {
                    shard: *shard,
                    seq: head.seq,
                    problem: format!(
                        "the record at the anchored head (seq {}, taken {}) has another hash: the shard was rewritten",
                        head.seq, anchor.at
                    ),
                });
            }
            None if head.seq == 0 => {}
            None => {
                return Err(BrokenLink {
                    shard: *shard,
                    seq: head.seq,
                    problem: format!(
                        "the shard ends at seq {} but an anchor taken {} saw seq {}: records were dropped",
                        records.len(),
                        anchor.at,
                        head.seq
                    ),
                });
            }
        }
    }
    Ok(trusted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::{IntentState, Status};
    use crate::key::IntentKey;
    use serde_json::json;

    #[test]
    fn a_kind_is_spelled_as_the_audit_spells_it() {
        for kind in [
            AuditKind::Call,
            AuditKind::Effect,
            AuditKind::Reconcile,
            AuditKind::Approval,
            AuditKind::Admin,
        ] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }

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
