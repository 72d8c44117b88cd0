//! The writer's jobs outside a commit's audit event: client-key bindings, MCP sessions,
//! work claims, the verify checkpoint and pinned tool definitions. They run on the writer's thread, inside its
//! transaction, like commits.

use oncegate_core::key::IntentKey;
use rusqlite::{Connection, params};

use super::time::millis;
use crate::sqlite::read::unavailable;
use crate::{ClientKeyBinding, McpSession, StoreError};

/// A small write outside the audit chain (answers a bool: work claimed, else true).
pub(in crate::sqlite) enum Small {
    PutSession(McpSession),
    DeleteSession(String, jiff::Timestamp),
    ClaimWork {
        work: String,
        owner: String,
        until: jiff::Timestamp,
        now: jiff::Timestamp,
    },
    ReleaseWork {
        work: String,
        owner: String,
    },
    PutCheckpoint(String),
    FindingDelivery {
        id: String,
        attempts: u32,
        delivered_at: Option<jiff::Timestamp>,
        next_attempt_at: Option<jiff::Timestamp>,
    },
    /// `PinsWrite::pin_tool` (answers true).
    PinTool(crate::OfferedTool),
    /// `PinsWrite::accept_tool` (answers whether it was accepted).
    AcceptTool {
        server: String,
        tool: String,
        digest: String,
        by: String,
        at: jiff::Timestamp,
    },
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

/// Binds a client's `Idempotency-Key` to an intent, first writer wins; returns the
/// binding that holds.
pub(super) fn bind(
    conn: &Connection,
    b: &ClientKeyBinding,
) -> Result<ClientKeyBinding, StoreError> {
    conn.prepare_cached(
        "INSERT INTO client_keys (principal, capability, client_key, intent_key, args_digest, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
    )
    .and_then(|mut s| {
        s.execute(params![
            b.principal,
            b.capability,
            b.client_key,
            b.intent_key.as_str(),
            b.args_digest,
            millis(b.created_at)
        ])
    })
    .map_err(unavailable)?;
    let (intent_key, args_digest, created_at): (String, String, i64) = conn
        .prepare_cached("SELECT intent_key, args_digest, created_at FROM client_keys WHERE principal = ?1 AND capability = ?2 AND client_key = ?3")
        .and_then(|mut s| {
            s.query_row(params![b.principal, b.capability, b.client_key], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
        })
        .map_err(unavailable)?;
    Ok(ClientKeyBinding {
        intent_key: IntentKey::from_hex(intent_key),
        args_digest,
        created_at: jiff::Timestamp::from_millisecond(created_at).map_err(corrupt)?,
        ..b.clone()
    })
}

/// A write outside the audit chain.
pub(super) fn small(conn: &Connection, job: &Small) -> Result<bool, StoreError> {
    let run = |sql: &str, params: &[&dyn rusqlite::ToSql]| {
        conn.prepare_cached(sql)
            .and_then(|mut s| s.execute(params))
            .map_err(unavailable)
    };
    Ok(match job {
        Small::PutSession(s) => {
            let state = s.state.as_ref().map(serde_json::Value::to_string);
            run(
                "INSERT INTO mcp_sessions (id, principal, state, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO UPDATE SET principal = COALESCE(?2, principal),
                     state = COALESCE(?3, state), updated_at = ?4",
                params![s.id, s.principal, state, millis(s.updated_at)],
            )?;
            true
        }
        Small::DeleteSession(id, idle_before) => {
            run(
                "DELETE FROM mcp_sessions WHERE id = ?1 OR updated_at < ?2",
                params![id, millis(*idle_before)],
            )?;
            true
        }
        Small::ClaimWork {
            work,
            owner,
            until,
            now,
        } => {
            run(
                "INSERT INTO work_claims (work, owner, until) VALUES (?1, ?2, ?3)
                 ON CONFLICT (work) DO UPDATE SET owner = ?2, until = ?3
                 WHERE work_claims.owner = ?2 OR work_claims.until <= ?4",
                params![work, owner, millis(*until), millis(*now)],
            )? == 1
        }
        Small::PutCheckpoint(text) => {
            run(
                "INSERT INTO meta (name, value) VALUES ('audit_checkpoint', ?1)
                 ON CONFLICT (name) DO UPDATE SET value = ?1",
                params![text],
            )?;
            true
        }
        Small::FindingDelivery {
            id,
            attempts,
            delivered_at,
            next_attempt_at,
        } => {
            run(
                "UPDATE findings SET attempts = ?2, delivered_at = ?3, next_attempt_at = ?4 WHERE id = ?1",
                params![
                    id,
                    attempts,
                    delivered_at.map(millis),
                    next_attempt_at.map(millis)
                ],
            )?;
            true
        }
        Small::PinTool(t) => {
            // One statement: a new tool is pinned, the pin seen again clears what was
            // pending, another definition is pending (first seen when it first differed).
            run(
                "INSERT INTO tool_pins (server, tool, digest, definition, pinned_at, pinned_by)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'oncegate')
                 ON CONFLICT (server, tool) DO UPDATE SET
                     pending_at = CASE WHEN tool_pins.digest = ?3 THEN NULL
                         WHEN tool_pins.pending_digest = ?3 THEN tool_pins.pending_at
                         ELSE ?5 END,
                     pending_definition = CASE WHEN tool_pins.digest = ?3 THEN NULL ELSE ?4 END,
                     pending_digest = CASE WHEN tool_pins.digest = ?3 THEN NULL ELSE ?3 END",
                params![t.server, t.tool, t.digest, t.definition, millis(t.at)],
            )?;
            true
        }
        Small::AcceptTool {
            server,
            tool,
            digest,
            by,
            at,
        } => {
            run(
                "UPDATE tool_pins SET digest = pending_digest, definition = pending_definition,
                     pinned_at = ?4, pinned_by = ?5,
                     pending_digest = NULL, pending_definition = NULL, pending_at = NULL
                 WHERE server = ?1 AND tool = ?2 AND pending_digest = ?3",
                params![server, tool, digest, millis(*at), by],
            )? == 1
        }
        Small::ReleaseWork { work, owner } => {
            run(
                "DELETE FROM work_claims WHERE work = ?1 AND owner = ?2",
                params![work, owner],
            )?;
            true
        }
    })
}
