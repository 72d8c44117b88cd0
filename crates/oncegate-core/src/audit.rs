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
//! Why one file (beside `audit/encoding.rs`, the frozen wire form): the record's hash,
//! the shard walk that checks it, the anchors and the row seals are one definition of
//! what the chain proves, and share its private hashing (`hash_of`, `mac_hex`) and the
//! seal fields each event carries. The row seals (`row_hash` to `verify_rows_through`)
//! are the part that could stand in a module of their own, next time this file grows;
//! the chain key itself (its secret and the key-since trust) is in `audit/key.rs`.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::codes::Code;
use crate::intent::{IntentState, Status};
use crate::key::{IntentKey, canonical_json, digest};

mod encoding;
mod key;

pub use key::ChainKey;

use encoding::mac_bytes;
pub use encoding::{EncodedEvent, EventV1};

/// The default number of audit shards (`[store] audit_shards`). Changing it re-shards only new records; verification walks
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

impl AuditKind {
    /// The audit's spelling (`call`, `effect`, `reconcile`, `approval`, `admin`).
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::Call => "call",
            AuditKind::Effect => "effect",
            AuditKind::Reconcile => "reconcile",
            AuditKind::Approval => "approval",
            AuditKind::Admin => "admin",
        }
    }
}

/// One decision, before it is chained. A domain type, free to change: the chain hashes
/// (and stores keep) its frozen form [`EventV1`].
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
    /// The shard this event belongs to, of the default [`AUDIT_SHARDS`].
    pub fn shard(&self) -> u32 {
        self.shard_in(AUDIT_SHARDS)
    }

    /// The shard this event belongs to in a store of `shards` shards (`[store]
    /// audit_shards`; 0 counts as 1).
    pub fn shard_in(&self, shards: u32) -> u32 {
        let basis = self
            .key
            .as_ref()
            .map_or(self.actor.as_str(), IntentKey::as_str);
        let first = u32::from_str_radix(basis.get(..4).unwrap_or("0"), 16)
            .unwrap_or_else(|_| basis.bytes().map(u32::from).sum());
        first % shards.max(1)
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

/// How a keyed record's hash is spelled: `hmac-sha256:` then the hex MAC.
pub const KEYED_PREFIX: &str = "hmac-sha256:";

fn hash_of(
    shard: u32,
    seq: u64,
    prev_hash: &str,
    event: &AuditEvent,
    key: Option<&ChainKey>,
) -> String {
    // The event's frozen V1 form, never its domain serde: see `encoding`.
    encoding::hash_at(&encoding::canonical_v1(event), shard, seq, prev_hash, key)
}

fn mac_hex(key: &ChainKey, material: &Value) -> String {
    mac_bytes(key, canonical_json(material).as_bytes())
}

/// Chains `event` after `head` (no chain key, the default shard count).
pub fn seal(event: AuditEvent, head: &ChainHead) -> AuditRecord {
    seal_with(event, head, None, AUDIT_SHARDS)
}

/// Chains `event` after `head` (its shard's head in a store of `shards` shards), with
/// the chain key when there is one.
pub fn seal_with(
    event: AuditEvent,
    head: &ChainHead,
    key: Option<&ChainKey>,
    shards: u32,
) -> AuditRecord {
    let shard = event.shard_in(shards);
    let seq = head.seq + 1;
    let hash = hash_of(shard, seq, &head.hash, &event, key);
    AuditRecord {
        shard,
        seq,
        prev_hash: head.hash.clone(),
        hash,
        event,
    }
}

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

/// The detail field where the store seals the intent row a commit wrote.
pub const ROW_INTENT: &str = "row_intent";
/// The detail field where the store seals the approval row a commit wrote.
pub const ROW_APPROVAL: &str = "row_approval";
/// The detail field where the store seals the kill switch (or hold) row a commit wrote.
pub const ROW_SWITCH: &str = "row_switch";
/// The detail field where the store seals the finding row a commit wrote.
pub const ROW_FINDING: &str = "row_finding";
/// The detail field where the store seals the heads of the limit ledgers a commit
/// appended to (a list of [`LimitSeal`]).
pub const ROW_LIMITS: &str = "row_limits";

/// What an audit event says about a row written in its transaction.
///
/// A storage form, not a domain type: it is written into the event's `detail`, so its
/// field names are part of the hashed bytes and of the SQLite queries that find a row's
/// seal (`$.detail.row_intent.key`). It changes only with a new event version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowSeal {
    /// The intent key (intent rows) or the approval id (approval rows).
    pub key: String,
    /// The generation (intent rows; approvals carry their intent's).
    pub generation: u32,
    /// The row's stored version.
    pub version: u64,
    /// [`row_hash`] of the row's stored body.
    pub hash: String,
}

/// The hash of a stored row: SHA-256 over the canonical JSON of its body.
pub fn row_hash(body: &Value) -> String {
    digest(body)
}

/// [`row_hash`] of a body in its storage form, serialised straight to canonical JSON
/// (what a commit seals; the same hash as `row_hash` of its value form).
pub fn row_hash_of(body: &impl Serialize) -> String {
    hex::encode(<Sha256 as sha2::Digest>::digest(
        crate::key::canonical_json_of(body).as_bytes(),
    ))
}

/// Writes the seals of the rows a commit writes into its event (before it is chained).
pub fn add_row_seals(event: &mut AuditEvent, intent: Option<RowSeal>, approval: Option<RowSeal>) {
    if let Some(seal) = intent {
        add_control_seal(event, RowKind::Intent, seal);
    }
    if let Some(seal) = approval {
        add_control_seal(event, RowKind::Approval, seal);
    }
}

/// Writes the seal of one row of `kind` into an event (before it is chained).
pub fn add_control_seal(event: &mut AuditEvent, kind: RowKind, seal: RowSeal) {
    detail_object(event).insert(
        kind.field().into(),
        serde_json::to_value(seal).expect("seals serialise"),
    );
}

/// Writes the heads of the limit ledgers a commit appended to into its event.
pub fn add_limit_seals(event: &mut AuditEvent, seals: &[LimitSeal]) {
    if seals.is_empty() {
        return;
    }
    detail_object(event).insert(
        ROW_LIMITS.into(),
        serde_json::to_value(seals).expect("seals serialise"),
    );
}

/// Writes what an admin's reconciliation of a limit did into its event.
pub fn add_reconciled(event: &mut AuditEvent, outcome: Value) {
    detail_object(event).insert("limit_reconciled".into(), outcome);
}

fn detail_object(event: &mut AuditEvent) -> &mut serde_json::Map<String, Value> {
    if !event.detail.is_object() {
        let old = std::mem::take(&mut event.detail);
        event.detail = if old.is_null() {
            json!({})
        } else {
            json!({"value": old})
        };
    }
    event.detail.as_object_mut().expect("made an object above")
}

/// The limit ledger heads an event sealed.
pub fn limit_seals(event: &AuditEvent) -> Vec<LimitSeal> {
    event
        .detail
        .get(ROW_LIMITS)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}

/// The head of one budget's ledger of reservations, as a commit sealed it.
///
/// A storage form, like [`RowSeal`]: its field names are hashed bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitSeal {
    /// The budget (`name` or `name@principal`).
    pub scope: String,
    /// The ledger's last entry, from 1.
    pub seq: u64,
    /// [`ledger_link`] of that entry.
    pub chain: String,
}

/// One entry of a budget's ledger: a reservation made (or made again) or released.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The budget.
    pub scope: String,
    /// Its place in the budget's ledger, from 1.
    pub seq: u64,
    /// The intent (key, generation) it is for.
    pub key: String,
    /// The generation.
    pub generation: u32,
    /// What was reserved (0 for a release).
    pub amount: i64,
    /// When, by the store's clock, in its own unit (milliseconds on SQLite,
    /// microseconds on PostgreSQL: the unit of its reservations' `reserved_at`).
    pub at: i64,
    /// A reservation (true) or a release (false).
    pub reserve: bool,
}

/// The chain value of `entry` after `prev` (the previous entry's, or [`GENESIS`]):
/// SHA-256 over the previous value and the entry's canonical JSON.
pub fn ledger_link(prev: &str, entry: &LedgerEntry) -> String {
    let mut hasher = <Sha256 as sha2::Digest>::new();
    sha2::Digest::update(&mut hasher, prev.as_bytes());
    sha2::Digest::update(&mut hasher, b"\n");
    sha2::Digest::update(&mut hasher, crate::key::canonical_json_of(entry).as_bytes());
    hex::encode(sha2::Digest::finalize(hasher))
}

/// The seal of kind `field` ([`ROW_INTENT`] / [`ROW_APPROVAL`]) an event carries.
pub fn row_seal(event: &AuditEvent, field: &str) -> Option<RowSeal> {
    serde_json::from_value(event.detail.get(field)?.clone()).ok()
}

/// Which table a row lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    /// `intents`.
    Intent,
    /// `approvals`.
    Approval,
    /// `kill_switches` (kill switches and holds; a cleared one stays as a row that says
    /// so, so a deleted row is always tampering).
    Switch,
    /// `findings`.
    Finding,
    /// A budget's ledger of reservations (`limit_ledger`, its head and the
    /// `reservations` it explains); the key is the budget.
    Limit,
}

impl RowKind {
    /// The detail field its seal is written in.
    pub fn field(self) -> &'static str {
        match self {
            RowKind::Intent => ROW_INTENT,
            RowKind::Approval => ROW_APPROVAL,
            RowKind::Switch => ROW_SWITCH,
            RowKind::Finding => ROW_FINDING,
            RowKind::Limit => ROW_LIMITS,
        }
    }

    /// The kinds sealed one row per event, by a [`RowSeal`].
    pub const SEALED: [RowKind; 4] = [
        RowKind::Intent,
        RowKind::Approval,
        RowKind::Switch,
        RowKind::Finding,
    ];

    /// A row of this kind as people name it.
    pub fn name(self, key: &str, generation: u32) -> String {
        match self {
            RowKind::Intent => format!("intent {key} generation {generation}"),
            RowKind::Approval => format!("approval {key}"),
            RowKind::Switch => format!("kill switch {key}"),
            RowKind::Finding => format!("finding {key}"),
            RowKind::Limit => format!("the ledger of limit {key}"),
        }
    }
}

/// A row as the store holds it, for [`verify_rows`].
#[derive(Clone, Debug)]
pub struct StoredRow {
    /// Its table.
    pub kind: RowKind,
    /// Intent key or approval id.
    pub key: String,
    /// Its generation (intent rows; 0 for approvals, whose identity is the id).
    pub generation: u32,
    /// [`row_hash`] of its body as stored now, or why the body is not JSON.
    pub body_hash: Result<String, String>,
    /// The hash it was sealed with (its `row_hash` column).
    pub sealed_hash: Option<String>,
    /// The audit record that wrote its current version: (shard, seq).
    pub link: Option<(u32, u64)>,
}

/// One row that does not match the audit chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RowProblem {
    /// Its table.
    pub kind: RowKind,
    /// Intent key or approval id.
    pub key: String,
    /// Generation (intent rows).
    pub generation: u32,
    /// What is wrong.
    pub problem: String,
}

/// The rows `records` (in store order, oldest first) wrote, each once: kind, key and
/// generation (0 for an approval).
pub fn sealed_rows(records: &[AuditRecord]) -> Vec<(RowKind, String, u32)> {
    let mut rows: Vec<_> = newest_seals(records).into_keys().collect();
    rows.sort();
    rows
}

/// The newest seal of a row among `records` (given in store order, oldest first).
fn newest_seals(records: &[AuditRecord]) -> HashMap<(RowKind, String, u32), (u32, u64, String)> {
    let mut newest = HashMap::new();
    for r in records {
        for kind in RowKind::SEALED {
            if let Some(seal) = row_seal(&r.event, kind.field()) {
                let generation = if kind == RowKind::Intent {
                    seal.generation
                } else {
                    0
                };
                newest.insert((kind, seal.key, generation), (r.shard, r.seq, seal.hash));
            }
        }
    }
    newest
}

/// Checks every stored row against the newest audit record that sealed it, and finds
/// rows the chain says were written but that are gone. `records` is every audit record
/// in store order (oldest first); the chain itself is [`verify_shard_with`]'s job.
pub fn verify_rows(records: &[AuditRecord], rows: &[StoredRow]) -> Vec<RowProblem> {
    verify_rows_through(records, rows, None)
}

/// Each shard's last sequence number as walked, and as read again after the rows.
pub type WalkedHeads<'a> = (&'a BTreeMap<u32, u64>, &'a BTreeMap<u32, u64>);

/// [`verify_rows`] for a walk that ended at `through` (each shard's last walked
/// sequence number) while writes went on: a row linked to a record after the walked
/// head that exists (up to `later`, each shard's head read after the rows) was written
/// after the walk read the chain. It is left for the next walk, neither checked against
/// an older seal nor reported deleted. A row linked past `later`, to a record that does
/// not exist, is checked (and refused) like any other.
pub fn verify_rows_through(
    records: &[AuditRecord],
    rows: &[StoredRow],
    through: Option<WalkedHeads<'_>>,
) -> Vec<RowProblem> {
    let mut newest = newest_seals(records);
    let mut problems = Vec::new();
    for row in rows {
        if let (Some((through, later)), Some((shard, seq))) = (through, row.link)
            && seq > through.get(&shard).copied().unwrap_or(0)
            && later.get(&shard).is_some_and(|head| seq <= *head)
        {
            newest.remove(&(row.kind, row.key.clone(), row.generation));
            continue;
        }
        let id = (row.kind, row.key.clone(), row.generation);
        let problem = |p: String| RowProblem {
            kind: row.kind,
            key: row.key.clone(),
            generation: row.generation,
            problem: p,
        };
        let seal = newest.remove(&id);
        match &row.body_hash {
            Err(e) => {
                problems.push(problem(format!("the row's body is not readable JSON: {e}")));
                continue;
            }
            Ok(h) if row.sealed_hash.as_deref() != Some(h) => {
                problems.push(problem(
                    "the row's content does not match the hash it was sealed with (edited row)"
                        .into(),
                ));
                continue;
            }
            Ok(_) => {}
        }
        let Some((shard, seq, hash)) = seal else {
            problems.push(problem(
                "no audit record wrote this row (inserted or adopted outside oncegate)".into(),
            ));
            continue;
        };
        if row.link != Some((shard, seq)) {
            problems.push(problem(format!(
                "the row names audit record {:?} but the newest record that wrote it is shard {shard} seq {seq} (rolled back or relinked)",
                row.link
            )));
        } else if row.sealed_hash.as_deref() != Some(hash.as_str()) {
            problems.push(problem(
                "the row's hash differs from the one its audit record sealed (edited row)".into(),
            ));
        }
    }
    let mut deleted: Vec<_> = newest.into_iter().collect();
    deleted.sort();
    for ((kind, key, generation), (shard, seq, _)) in deleted {
        problems.push(RowProblem {
            kind,
            key,
            generation,
            problem: format!("the audit chain (shard {shard} seq {seq}) wrote this row, and it is gone (deleted row)"),
        });
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

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
