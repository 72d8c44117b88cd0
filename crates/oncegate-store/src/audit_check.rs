//! `audit verify` and `audit anchor` over any store: the chain of every shard, every
//! row against the record that wrote it, and every anchored head.
//!
//! A clean verify leaves a checkpoint in the store (every shard's head as it walked
//! it); a verify from the checkpoint ([`Walk::FromCheckpoint`], `audit verify
//! --since-checkpoint`) walks only the records after it, checking that each
//! checkpointed record is still there with the same hash, and checks the rows those
//! newer records wrote. So it costs what was written since, not what the store holds.
//! What only the full walk (the default) catches: a record before the checkpoint edited in place
//! so that the chain no longer links (the checkpointed head still does), and an old row
//! edited in place (every load checks its row against the chain, so such a row is
//! refused before anything is decided on it). Anchors need the full walk too.
//!
//! The checkpoint lives in the store, so it is trusted as far as the store is: with a
//! chain key it carries an HMAC under the key (one without a valid MAC is ignored), and
//! the checkpointed record must still pass its own hash check; without a key, anyone who
//! can rewrite the chain can rewrite the checkpoint too (anchors kept elsewhere are the
//! outside reference).
//!
//! The checks themselves are pure (`oncegate_core::audit`); this module only reads,
//! except [`save_checkpoint`].

use std::collections::BTreeMap;

use oncegate_core::audit::{
    Anchor, AnchorHead, AuditRecord, BrokenLink, ChainHead, ChainKey, RowKind, RowProblem,
    check_anchor, check_record, sealed_rows, verify_rows_through, verify_shard_from,
    verify_shard_with,
};
use oncegate_core::key::IntentKey;
use serde::{Deserialize, Serialize};

use crate::{AuditRead, AuditWrite, IntentsRead, LimitsRead, StoreError};

/// Records read per page of a shard.
const PAGE: u32 = 5000;

/// What `audit verify` found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AuditReport {
    /// Audit records walked (since the checkpoint, when the walk started from one).
    pub records: usize,
    /// Shards walked.
    pub shards: usize,
    /// Intent and approval rows checked.
    pub rows: usize,
    /// Anchored heads that the chain still extends.
    pub anchored_heads: usize,
    /// Broken links and failed anchors (at most one per shard, the first).
    pub broken: Vec<BrokenLink>,
    /// Rows that do not match the chain (edited, rolled back, deleted, unsealed).
    pub row_problems: Vec<RowProblem>,
    /// The checkpoint the walk started from; `None` for a full walk.
    pub since: Option<Checkpoint>,
    /// Every shard's head where this walk ended: the next checkpoint, if it is clean.
    #[serde(skip)]
    pub heads: BTreeMap<u32, AnchorHead>,
}

impl AuditReport {
    /// Nothing wrong.
    pub fn ok(&self) -> bool {
        self.broken.is_empty() && self.row_problems.is_empty()
    }
}

/// Where the last clean `audit verify` ended, kept in the store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The store it was taken of.
    pub store_id: String,
    /// When.
    pub at: jiff::Timestamp,
    /// Every shard's head as verified.
    pub heads: BTreeMap<u32, AnchorHead>,
    /// Records verified up to it, over every walk.
    pub records: u64,
    /// With a chain key, the HMAC of the rest under it: without the key the checkpoint
    /// cannot be moved past records edited after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

impl Checkpoint {
    fn mac_under(&self, key: &ChainKey) -> String {
        let unsealed = Checkpoint {
            mac: None,
            ..self.clone()
        };
        key.mac(&serde_json::to_value(unsealed).unwrap_or_default())
    }
}

/// How much of the chain to walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk {
    /// Every record and every row.
    Full,
    /// From the stored checkpoint when there is one (and no anchor is given), else full.
    FromCheckpoint,
}

/// Every audit record, in store order, and grouped by shard in sequence order.
async fn all_records<S: IntentsRead + AuditRead + LimitsRead>(
    store: &S,
) -> Result<(Vec<AuditRecord>, BTreeMap<u32, Vec<AuditRecord>>), StoreError> {
    let mut all = Vec::new();
    let mut position = 0;
    loop {
        let page = store.audit_after(position, PAGE).await?;
        let Some((last, _)) = page.last() else { break };
        position = *last;
        all.extend(page.into_iter().map(|(_, r)| r));
    }
    let mut shards: BTreeMap<u32, Vec<AuditRecord>> = BTreeMap::new();
    for r in &all {
        shards.entry(r.shard).or_default().push(r.clone());
    }
    for records in shards.values_mut() {
        records.sort_by_key(|r| r.seq);
    }
    Ok((all, shards))
}

/// The stored checkpoint, if any. One that does not parse, names another store, or
/// (with a chain key) lacks a valid MAC under it is ignored (the walk is then whole),
/// never trusted.
pub async fn checkpoint<S: IntentsRead + AuditRead + LimitsRead>(
    store: &S,
    key: Option<&ChainKey>,
    store_id: &str,
) -> Result<Option<Checkpoint>, StoreError> {
    let Some(text) = store.audit_checkpoint().await? else {
        return Ok(None);
    };
    match serde_json::from_str::<Checkpoint>(&text) {
        Ok(c)
            if c.store_id == store_id
                && key.is_none_or(|k| c.mac.as_deref() == Some(c.mac_under(k).as_str())) =>
        {
            Ok(Some(c))
        }
        Ok(_) | Err(_) => {
            tracing::warn!(
                alert = "audit_checkpoint",
                "the stored audit checkpoint is unreadable, of another store, or not sealed with the chain key; walking the whole chain"
            );
            Ok(None)
        }
    }
}

/// Verifies the store: every shard's chain (with the chain key when given), the rows,
/// and every anchor (taken of the store `store_id`). [`Walk::FromCheckpoint`] walks
/// only what came after the stored checkpoint (see the module docs for what only a full
/// walk catches).
pub async fn verify_audit<S: IntentsRead + AuditRead + LimitsRead>(
    store: &S,
    key: Option<&ChainKey>,
    store_id: &str,
    anchors: &[Anchor],
    walk: Walk,
) -> Result<AuditReport, StoreError> {
    if walk == Walk::FromCheckpoint
        && anchors.is_empty()
        && let Some(from) = checkpoint(store, key, store_id).await?
    {
        return verify_from(store, key, from).await;
    }
    verify_full(store, key, store_id, anchors).await
}

async fn verify_full<S: IntentsRead + AuditRead + LimitsRead>(
    store: &S,
    key: Option<&ChainKey>,
    store_id: &str,
    anchors: &[Anchor],
) -> Result<AuditReport, StoreError> {
    let (all, shards) = all_records(store).await?;
    let mut report = AuditReport {
        records: all.len(),
        shards: shards.len(),
        ..AuditReport::default()
    };
    // Anchors first: an anchored prefix is what lets unkeyed records from before the
    // chain key was set pass once a key is configured.
    let mut trusted: BTreeMap<u32, u64> = BTreeMap::new();
    for anchor in anchors {
        match check_anchor(anchor, store_id, &shards) {
            Ok(heads) => {
                report.anchored_heads += heads.len();
                for (shard, seq) in heads {
                    let t = trusted.entry(shard).or_default();
                    *t = (*t).max(seq);
                }
            }
            Err(broken) => report.broken.push(broken),
        }
    }
    for (shard, records) in &shards {
        let until = trusted.get(shard).copied().unwrap_or(0);
        match verify_shard_with(*shard, records, key, until) {
            Ok(head) => {
                report.heads.insert(
                    *shard,
                    AnchorHead {
                        seq: head.seq,
                        hash: head.hash,
                    },
                );
            }
            Err(broken) => report.broken.push(broken),
        }
    }
    let rows = store.stored_rows().await?;
    report.rows = rows.len();
    // Rows written after the walk read the chain are the next walk's: those linked to a
    // record that exists now, past the walked head.
    let through: BTreeMap<u32, u64> = shards
        .iter()
        .map(|(shard, records)| (*shard, records.last().map_or(0, |r| r.seq)))
        .collect();
    let mut later = through.clone();
    for shard in store.audit_shards().await? {
        let head = later.entry(shard).or_default();
        loop {
            let page = store.audit_shard_after(shard, *head, PAGE).await?;
            let Some(last) = page.last() else { break };
            *head = last.seq;
        }
    }
    report.row_problems = verify_rows_through(&all, &rows, Some((&through, &later)));
    let ledgers = store.ledgers().await?;
    report.rows += ledgers.heads.len();
    report
        .row_problems
        .extend(ledger_problems(&all, &ledgers, |(shard, seq)| {
            seq > through.get(&shard).copied().unwrap_or(0)
        }));
    Ok(report)
}

async fn verify_from<S: IntentsRead + AuditRead + LimitsRead>(
    store: &S,
    key: Option<&ChainKey>,
    from: Checkpoint,
) -> Result<AuditReport, StoreError> {
    let mut report = AuditReport::default();
    let walked = walk_since(store, key, &from, &mut report).await?;
    check_rows_written(store, &walked, &mut report).await?;
    report.since = Some(from);
    Ok(report)
}

/// Walks every shard on from the checkpoint's heads (a checkpointed record that is gone
/// or changed is a broken link), recording each shard's new head; returns the records
/// walked, whose rows `check_rows_written` then checks.
async fn walk_since<S: AuditRead>(
    store: &S,
    key: Option<&ChainKey>,
    from: &Checkpoint,
    report: &mut AuditReport,
) -> Result<Vec<AuditRecord>, StoreError> {
    let mut walked = Vec::new();
    let shards = store.audit_shards().await?;
    for shard in from.heads.keys().filter(|s| !shards.contains(s)) {
        report.broken.push(BrokenLink {
            shard: *shard,
            seq: from.heads[shard].seq,
            problem: "the shard the last verify checkpointed has no records now (deleted)".into(),
        });
    }
    for shard in shards {
        report.shards += 1;
        let mut head = match from.heads.get(&shard) {
            None => ChainHead::genesis(),
            Some(checked) => {
                let found = store
                    .audit_shard_after(shard, checked.seq.saturating_sub(1), 1)
                    .await?;
                match found.first() {
                    // The record itself must still hash to what it says, not only say it.
                    Some(r)
                        if r.seq == checked.seq
                            && r.hash == checked.hash
                            && check_record(r, key).is_ok() =>
                    {
                        ChainHead {
                            seq: r.seq,
                            hash: r.hash.clone(),
                        }
                    }
                    _ => {
                        report.broken.push(BrokenLink {
                            shard,
                            seq: checked.seq,
                            problem: "the record the last verify checkpointed is gone or has changed (the chain was rewritten after it was verified)".into(),
                        });
                        continue;
                    }
                }
            }
        };
        loop {
            let page = store.audit_shard_after(shard, head.seq, PAGE).await?;
            if page.is_empty() {
                break;
            }
            match verify_shard_from(shard, head.clone(), &page, key, 0) {
                Ok(next) => head = next,
                Err(broken) => {
                    report.broken.push(broken);
                    break;
                }
            }
            report.records += page.len();
            walked.extend(page);
        }
        report.heads.insert(
            shard,
            AnchorHead {
                seq: head.seq,
                hash: head.hash,
            },
        );
    }
    Ok(walked)
}

/// The rows the walked records wrote: intents and approvals read the way a call reads
/// them, kill switches, findings and ledgers checked against their newest seal.
async fn check_rows_written<S: IntentsRead + LimitsRead>(
    store: &S,
    walked: &[AuditRecord],
    report: &mut AuditReport,
) -> Result<(), StoreError> {
    // The rows the new records wrote, each read the way a call reads it: checked against
    // the newest record that sealed it (which may be newer than this walk).
    let mut sealed_controls = std::collections::BTreeSet::new();
    for (kind, id, generation) in sealed_rows(walked) {
        let found = match kind {
            RowKind::Intent => store
                .load_generation(&IntentKey::from_hex(id.clone()), generation)
                .await
                .map(|r| r.is_some()),
            RowKind::Approval => store.approval(&id).await.map(|a| a.is_some()),
            // Controls are few: checked (and counted) below against every stored one.
            RowKind::Switch | RowKind::Finding => {
                sealed_controls.insert((kind, id));
                continue;
            }
            RowKind::Limit => continue,
        };
        report.rows += 1;
        let problem = match found {
            Ok(true) => continue,
            Ok(false) => "the audit chain wrote this row, and it is gone (deleted row)".into(),
            Err(StoreError::Integrity(problem) | StoreError::Corrupt(problem)) => problem,
            Err(e) => return Err(e),
        };
        report.row_problems.push(RowProblem {
            kind,
            key: id,
            generation,
            problem,
        });
    }
    // Kill switches, findings and ledgers the new records wrote, against the rows as
    // they are now (the newest seal of each is among the new records). The controls
    // are read alone: reading every row cost a 10,000-record check of a 1M-intent
    // store 24 s.
    let controls: Vec<_> = store
        .stored_controls()
        .await?
        .into_iter()
        .filter(|r| sealed_controls.contains(&(r.kind, r.key.clone())))
        .collect();
    report.rows += controls.len();
    report.row_problems.extend(
        verify_rows_through(walked, &controls, None)
            .into_iter()
            .filter(|p| matches!(p.kind, RowKind::Switch | RowKind::Finding)),
    );
    let mut ledgers = store.ledgers().await?;
    let sealed: std::collections::BTreeSet<String> = walked
        .iter()
        .flat_map(|w| oncegate_core::audit::limit_seals(&w.event))
        .map(|s| s.scope)
        .collect();
    ledgers.keep(|scope| sealed.contains(scope));
    report.rows += ledgers.heads.len();
    report
        .row_problems
        .extend(ledger_problems(walked, &ledgers, |_| false));
    Ok(())
}

/// The ledgers' problems as row problems. `after_walk` says whether an audit record
/// (shard, seq) was written after the walk read the chain.
fn ledger_problems(
    records: &[AuditRecord],
    ledgers: &crate::LimitLedgers,
    after_walk: impl Fn((u32, u64)) -> bool,
) -> Vec<RowProblem> {
    crate::ledger::verify_all(records, ledgers, |head| after_walk(head.link))
        .into_iter()
        .map(|(scope, problem)| RowProblem {
            kind: RowKind::Limit,
            key: scope,
            generation: 0,
            problem,
        })
        .collect()
}

/// Stores where a clean walk ended, for the next [`Walk::FromCheckpoint`]. A report
/// with problems leaves the previous checkpoint in place.
pub async fn save_checkpoint<S: AuditWrite>(
    store: &S,
    key: Option<&ChainKey>,
    store_id: &str,
    report: &AuditReport,
    at: jiff::Timestamp,
) -> Result<Option<Checkpoint>, StoreError> {
    if !report.ok() {
        return Ok(None);
    }
    let before = report.since.as_ref().map_or(0, |c| c.records);
    let mut heads = report
        .since
        .as_ref()
        .map(|c| c.heads.clone())
        .unwrap_or_default();
    heads.extend(report.heads.clone());
    let mut checkpoint = Checkpoint {
        store_id: store_id.to_owned(),
        at,
        heads,
        records: before + report.records as u64,
        mac: None,
    };
    checkpoint.mac = key.map(|k| checkpoint.mac_under(k));
    let text = serde_json::to_string(&checkpoint)
        .map_err(|e| StoreError::Corrupt(format!("the audit checkpoint: {e}")))?;
    store.put_audit_checkpoint(text).await?;
    Ok(Some(checkpoint))
}

/// The heads of every shard now, as an anchor of the store `store_id`.
pub async fn anchor<S: IntentsRead + AuditRead + LimitsRead>(
    store: &S,
    store_id: &str,
    at: jiff::Timestamp,
) -> Result<Anchor, StoreError> {
    let (_, shards) = all_records(store).await?;
    let heads = shards
        .into_iter()
        .filter_map(|(shard, records)| {
            records.last().map(|r| {
                (
                    shard,
                    AnchorHead {
                        seq: r.seq,
                        hash: r.hash.clone(),
                    },
                )
            })
        })
        .collect();
    Ok(Anchor {
        store_id: store_id.to_owned(),
        at,
        heads,
    })
}
