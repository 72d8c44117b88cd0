//! Sealing rows from before row seals existed: run once when an old store is opened.

use oncegate_core::audit::{
    AuditEvent, AuditKind, ChainKey, RowKind, RowSeal, add_control_seal, row_hash,
};
use oncegate_core::key::IntentKey;
use rusqlite::{Connection, OptionalExtension, params};

use super::read::unavailable;
use super::writer::{Sealable, append_audit, load_heads};
use crate::StoreError;

/// Seals rows written before row seals existed, once, with one admin audit record per
/// row, so an old store opens instead of failing every intent. Afterwards (`rows_sealed`
/// set) an unsealed row is an integrity failure, never adopted: otherwise clearing a
/// row's seal would launder an edit.
pub(super) fn adopt_unsealed_rows(
    conn: &mut Connection,
    key: Option<&ChainKey>,
    shards: u32,
) -> Result<(), StoreError> {
    let done = conn
        .query_row("SELECT 1 FROM meta WHERE name = 'rows_sealed'", [], |_| {
            Ok(())
        })
        .optional()
        .map_err(unavailable)?;
    if done.is_some() {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(unavailable)?;
    let mut heads = load_heads(&tx)?;
    struct Unsealed {
        kind: RowKind,
        id: String,
        intent_key: String,
        generation: u32,
        version: i64,
        body: String,
    }
    let mut found = Vec::new();
    for (kind, sql) in [
        (
            RowKind::Intent,
            "SELECT key, key, generation, version, body FROM intents WHERE row_hash IS NULL",
        ),
        (
            RowKind::Approval,
            "SELECT id, key, generation, version, body FROM approvals WHERE row_hash IS NULL",
        ),
    ] {
        let mut statement = tx.prepare(sql).map_err(unavailable)?;
        let rows = statement
            .query_map([], |r| {
                Ok(Unsealed {
                    kind,
                    id: r.get(0)?,
                    intent_key: r.get(1)?,
                    generation: r.get::<_, i64>(2)? as u32,
                    version: r.get(3)?,
                    body: r.get(4)?,
                })
            })
            .map_err(unavailable)?;
        for row in rows {
            found.push(row.map_err(unavailable)?);
        }
    }
    let now = jiff::Timestamp::now();
    let mut adopted = 0usize;
    for row in found {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(&row.body) else {
            tracing::warn!(row = %row.id, "an unreadable row from before row seals stays unsealed (it is refused on load)");
            continue;
        };
        let seal = RowSeal {
            key: row.id.clone(),
            generation: row.generation,
            version: row.version as u64,
            hash: row_hash(&value),
        };
        let mut event = AuditEvent {
            at: now,
            kind: AuditKind::Admin,
            key: Some(IntentKey::from_hex(row.intent_key)),
            generation: row.generation,
            capability: None,
            actor: "oncegate".into(),
            run_id: None,
            from: None,
            to: None,
            status: None,
            code: None,
            detail: serde_json::json!({"adopted": "row written before row seals existed, sealed as found"}),
        };
        add_control_seal(&mut event, row.kind, seal.clone());
        let sealed = append_audit(&tx, &Sealable::new(event), &mut heads, key, shards)?;
        let sql = if row.kind == RowKind::Intent {
            "UPDATE intents SET audit_shard = ?1, audit_seq = ?2, row_hash = ?3 WHERE key = ?4 AND generation = ?5"
        } else {
            "UPDATE approvals SET audit_shard = ?1, audit_seq = ?2, row_hash = ?3 WHERE id = ?4 AND ?5 = ?5"
        };
        tx.execute(
            sql,
            params![
                sealed.shard,
                sealed.seq,
                seal.hash,
                row.id,
                i64::from(row.generation)
            ],
        )
        .map_err(unavailable)?;
        adopted += 1;
    }
    tx.execute(
        "INSERT INTO meta (name, value) VALUES ('rows_sealed', ?1)",
        params![now.to_string()],
    )
    .map_err(unavailable)?;
    tx.commit().map_err(unavailable)?;
    if adopted > 0 {
        tracing::warn!(
            rows = adopted,
            "sealed rows written before row seals existed (one admin audit record each)"
        );
    }
    Ok(())
}
