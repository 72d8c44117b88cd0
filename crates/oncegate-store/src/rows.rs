//! What the SQL backends share about rows and their seals: preparing the row a commit
//! writes, and checking a stored row against the audit record that wrote it.
//!
//! Pure functions only. Each backend reads the row and the newest audit record that
//! sealed it in its own dialect (SQLite by `json_extract` over the event, PostgreSQL by
//! the `row_*` columns filled on insert) and hands both here, so the rules for an
//! edited, rolled-back, deleted or unsealed row are written once.

use oncegate_core::audit::{
    AuditRecord, ChainKey, KEYED_PREFIX, RowKind, RowSeal, check_record, row_hash, row_hash_of,
    row_seal,
};
use oncegate_core::intent::{Approval, IntentRecord};

use crate::StoreError;
use crate::storage::{ApprovalRowV1, IntentRowV1};

/// A row as read, with its seal columns.
pub(crate) struct RowData {
    /// Intent key or approval id.
    pub(crate) id: String,
    pub(crate) generation: u32,
    pub(crate) version: i64,
    pub(crate) body: String,
    pub(crate) row_hash: Option<String>,
    pub(crate) link: Option<(u32, u64)>,
}

impl RowData {
    /// The row as people name it in errors.
    pub(crate) fn what(&self, kind: RowKind) -> String {
        kind.name(&self.id, self.generation)
    }
}

/// An integrity failure: logged once as an alert, counted, and returned.
pub(crate) fn integrity(what: &str, problem: impl std::fmt::Display) -> StoreError {
    tracing::error!(alert = "store_integrity", row = %what, problem = %problem, "a stored row does not match the audit chain; refusing it (fail closed)");
    metrics::counter!("oncegate_store_integrity_failures_total").increment(1);
    StoreError::Integrity(format!("{what}: {problem}; run `oncegate audit verify`"))
}

/// The integrity failure of a row the chain wrote and that is gone.
pub(crate) fn deleted(what: &str) -> StoreError {
    integrity(
        what,
        "the audit chain wrote this row and it is gone (deleted row)",
    )
}

/// The body's hash, or the reason it is not JSON at all.
pub(crate) fn body_hash(body: &str) -> Result<(serde_json::Value, String), String> {
    let value: serde_json::Value = serde_json::from_str(body).map_err(|e| e.to_string())?;
    let hash = row_hash(&value);
    Ok((value, hash))
}

/// An intent row a commit writes: its storage form at the next version, its body text
/// and its seal.
pub(crate) struct PreparedIntent {
    pub(crate) stored: IntentRowV1,
    pub(crate) body: String,
    pub(crate) seal: RowSeal,
}

/// An approval row a commit writes, as [`PreparedIntent`].
pub(crate) struct PreparedApproval {
    pub(crate) stored: ApprovalRowV1,
    pub(crate) body: String,
    pub(crate) seal: RowSeal,
}

/// The intent row `record` becomes (version + 1). `adjust` may change the storage form
/// before it is hashed (PostgreSQL re-times the lease by the database's clock).
pub(crate) fn prepare_intent(
    record: &IntentRecord,
    adjust: impl FnOnce(&mut IntentRowV1),
) -> PreparedIntent {
    let mut stored = IntentRowV1::from(record);
    stored.version = record.version + 1;
    adjust(&mut stored);
    let seal = RowSeal {
        key: stored.key.clone(),
        generation: stored.generation,
        version: stored.version,
        hash: row_hash_of(&stored),
    };
    PreparedIntent {
        body: stored.body_text(),
        stored,
        seal,
    }
}

/// The approval row `approval` becomes (version + 1).
pub(crate) fn prepare_approval(approval: &Approval) -> PreparedApproval {
    let mut stored = ApprovalRowV1::from(approval);
    stored.version = approval.version + 1;
    let seal = RowSeal {
        key: stored.id.clone(),
        generation: stored.generation,
        version: stored.version,
        hash: row_hash_of(&stored),
    };
    PreparedApproval {
        body: stored.body_text(),
        stored,
        seal,
    }
}

/// Checks a row against `newest`, the newest audit record that sealed it: its body
/// hashes to its seal, it names that record, and that record's own hash holds. Returns
/// the body.
pub(crate) fn check_sealed(
    kind: RowKind,
    row: &RowData,
    newest: Option<AuditRecord>,
    key: Option<&ChainKey>,
) -> Result<serde_json::Value, StoreError> {
    let what = row.what(kind);
    let (value, hash) = body_hash(&row.body).map_err(|e| {
        StoreError::Corrupt(format!("{what}: the stored body is not readable: {e}"))
    })?;
    let Some(sealed_hash) = row.row_hash.as_deref() else {
        return Err(integrity(
            &what,
            "the row carries no audit seal (written outside oncegate)",
        ));
    };
    if sealed_hash != hash {
        return Err(integrity(
            &what,
            "the row's content does not match the hash it was sealed with (edited row)",
        ));
    }
    let Some(record) = newest else {
        return Err(integrity(&what, "no audit record wrote this row"));
    };
    if row.link != Some((record.shard, record.seq)) {
        return Err(integrity(
            &what,
            format!(
                "the row names audit record {:?}, but the newest record that wrote it is shard {} seq {} (rolled back)",
                row.link, record.shard, record.seq
            ),
        ));
    }
    match row_seal(&record.event, kind.field()) {
        Some(seal)
            if seal.hash == hash && i64::try_from(seal.version).ok() == Some(row.version) => {}
        _ => {
            return Err(integrity(
                &what,
                "the row differs from what its audit record sealed (edited row)",
            ));
        }
    }
    trusted_record(&what, &record, key)?;
    Ok(value)
}

/// Checks the audit record that sealed `what`: its own hash holds, and with a chain key
/// it is sealed with the key (or the store's key-since mark vouches for it).
pub(crate) fn trusted_record(
    what: &str,
    record: &AuditRecord,
    key: Option<&ChainKey>,
) -> Result<(), StoreError> {
    check_record(record, key).map_err(|p| integrity(what, format!("its audit record: {p}")))?;
    if let Some(key) = key
        && !record.hash.starts_with(KEYED_PREFIX)
        && !key.trusts_unkeyed(record.shard, record.seq)
    {
        return Err(integrity(
            what,
            format!(
                "its audit record (shard {} seq {}) is not sealed with the chain key, and the store's key-since mark does not vouch for it (a record written without the key after the key was set)",
                record.shard, record.seq
            ),
        ));
    }
    Ok(())
}

/// Decodes a checked intent body.
pub(crate) fn intent_from(
    row: &RowData,
    value: serde_json::Value,
) -> Result<IntentRecord, StoreError> {
    IntentRowV1::from_body(value)
        .map(Into::into)
        .map_err(|e| StoreError::Corrupt(format!("{}: {e}", row.what(RowKind::Intent))))
}

/// Decodes a checked approval body.
pub(crate) fn approval_from(
    row: &RowData,
    value: serde_json::Value,
) -> Result<Approval, StoreError> {
    ApprovalRowV1::from_body(value)
        .map(Into::into)
        .map_err(|e| StoreError::Corrupt(format!("{}: {e}", row.what(RowKind::Approval))))
}

/// Decodes a listed row in its storage form `R`, checking only that its body matches its
/// seal (no audit read per row: loads do the full check before anything is decided on a
/// row).
pub(crate) fn listed<R: serde::de::DeserializeOwned + Into<T>, T>(
    row: &RowData,
) -> Result<T, String> {
    let (value, hash) =
        body_hash(&row.body).map_err(|e| format!("the stored body is not readable: {e}"))?;
    if row.row_hash.as_deref() != Some(hash.as_str()) {
        return Err(
            "the row does not match its audit seal (edited row); run `oncegate audit verify`"
                .into(),
        );
    }
    serde_json::from_value::<R>(value)
        .map(Into::into)
        .map_err(|e| format!("the stored body does not decode: {e}"))
}

/// A listing page of rows of `kind` (intents or approvals), each decoded as [`listed`];
/// a row that cannot be is reported as unreadable (and logged), never dropped.
pub(crate) fn listing_of<R: serde::de::DeserializeOwned + Into<T>, T>(
    kind: RowKind,
    rows: impl IntoIterator<Item = RowData>,
    next: Option<crate::PageAfter>,
) -> crate::Listing<T> {
    let mut listing = crate::Listing {
        next,
        ..crate::Listing::default()
    };
    for row in rows {
        match listed::<R, T>(&row) {
            Ok(item) => listing.items.push(item),
            Err(problem) => {
                let generation = (kind == RowKind::Intent).then_some(row.generation);
                if generation.is_some() {
                    tracing::warn!(key = %row.id, generation = row.generation, %problem, "an intent row cannot be listed");
                } else {
                    tracing::warn!(approval = %row.id, %problem, "an approval row cannot be listed");
                }
                listing.unreadable.push(crate::UnreadableRow {
                    key: row.id,
                    generation,
                    problem,
                });
            }
        }
    }
    listing
}

/// An instant the engine measured from its decision's `now` (`event_at`: a lease's
/// expiry, a window's start), re-timed to a store's own clock: the same distance from
/// `store_now`. A store with a clock of its own (PostgreSQL) writes and judges by it.
pub(crate) fn retime(
    t: jiff::Timestamp,
    event_at: jiff::Timestamp,
    store_now: jiff::Timestamp,
) -> jiff::Timestamp {
    store_now
        .saturating_add(t.duration_since(event_at))
        .unwrap_or(t)
}
