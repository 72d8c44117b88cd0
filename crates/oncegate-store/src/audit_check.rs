//! `audit verify` and `audit anchor` over any store: the chain of every shard, every
//! row against the record that wrote it, and every anchored head.
//!
//! The checks themselves are pure (`oncegate_core::audit`); this module only reads.

use std::collections::BTreeMap;

use oncegate_core::audit::{
    Anchor, AnchorHead, AuditRecord, BrokenLink, ChainKey, RowProblem, check_anchor, verify_rows,
    verify_shard_with,
};
use serde::Serialize;

use crate::{StoreError, StoreRead};

/// What `audit verify` found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AuditReport {
    /// Audit records walked.
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
}

impl AuditReport {
    /// Nothing wrong.
    pub fn ok(&self) -> bool {
        self.broken.is_empty() && self.row_problems.is_empty()
    }
}

/// Every audit record, in store order, and grouped by shard in sequence order.
async fn all_records<S: StoreRead>(
    store: &S,
) -> Result<(Vec<AuditRecord>, BTreeMap<u32, Vec<AuditRecord>>), StoreError> {
    let mut all = Vec::new();
    let mut position = 0;
    loop {
        let page = store.audit_after(position, 5000).await?;
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

/// Verifies the whole store: every shard's chain (with the chain key when given), every
/// row, and every anchor (taken of the store `store_id`).
pub async fn verify_audit<S: StoreRead>(
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
        if let Err(broken) = verify_shard_with(*shard, records, key, until) {
            report.broken.push(broken);
        }
    }
    let rows = store.stored_rows().await?;
    report.rows = rows.len();
    report.row_problems = verify_rows(&all, &rows);
    Ok(report)
}

/// The heads of every shard now, as an anchor of the store `store_id`.
pub async fn anchor<S: StoreRead>(
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
