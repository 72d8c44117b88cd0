//! Row seals: what an audit event says about the rows its commit wrote (intents,
//! approvals, kill switches, findings, and the heads of limit ledgers), and the check of
//! stored rows against the newest seal of each ([`verify_rows`]). Split from `audit.rs`
//! when controls were sealed too: the chain proves its own records there; here is what
//! it proves about the tables beside it.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::Sha256;

use super::{AuditEvent, AuditRecord};
use crate::canonical::digest;

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
        crate::canonical::canonical_json_of(body).as_bytes(),
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
    sha2::Digest::update(
        &mut hasher,
        crate::canonical::canonical_json_of(entry).as_bytes(),
    );
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
