//! The serve anchor on a SQLite file (see [`crate::serve_anchor`]): checked when
//! `serve` opens the file, rewritten after every commit of its writer.

use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, params};

use super::read::unavailable;
use super::writer::load_heads;
use crate::StoreError;
use crate::serve_anchor::{ANCHORED, AnchorFile, ROLLBACK_ACCEPTED_AT, behind, refusal};

/// Checks the store against `anchor` before anything is served: a store behind it is
/// refused, unless `accept` (then the acceptance is recorded at `now`). Either way the
/// anchor then names the store's heads as they are.
pub(super) fn check(
    conn: &Connection,
    anchor: &AnchorFile,
    accept: bool,
    now: Timestamp,
    shown: &str,
) -> Result<(), StoreError> {
    let anchored = meta(conn, ANCHORED)?.is_some();
    let problems = behind(anchor.read(), anchored, |shard, seq| {
        conn.query_row(
            "SELECT hash FROM audit WHERE shard = ?1 AND seq = ?2",
            params![i64::from(shard), seq as i64],
            |r| r.get::<_, String>(0),
        )
        .optional()
        .map_err(unavailable)
    })?;
    if !problems.is_empty() {
        if !accept {
            return Err(refusal(shown, anchor.path(), &problems));
        }
        tracing::warn!(
            alert = "rollback_accepted",
            store = shown,
            at = %now,
            problems = ?problems,
            "serving a store that is behind its anchor (--accept-rollback): intents it does not know, or knows only as not applied, are read from the provider or held for approval before anything executes, until their replay window has passed"
        );
        conn.execute(
            "INSERT INTO meta (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            params![ROLLBACK_ACCEPTED_AT, now.to_string()],
        )
        .map_err(unavailable)?;
    } else if accept {
        tracing::info!(
            store = shown,
            "--accept-rollback: the store holds every head its anchor names; nothing to accept"
        );
    }
    anchor.write(&load_heads(conn)?).map_err(|e| {
        unavailable(format!(
            "cannot write the serve anchor {}: {e}",
            anchor.path().display()
        ))
    })?;
    if !anchored {
        conn.execute(
            "INSERT INTO meta (name, value) VALUES (?1, 'yes') ON CONFLICT (name) DO NOTHING",
            params![ANCHORED],
        )
        .map_err(unavailable)?;
    }
    Ok(())
}

/// When a rollback of this store was last accepted, if ever.
pub(super) fn rollback_accepted_at(conn: &Connection) -> Result<Option<Timestamp>, StoreError> {
    Ok(meta(conn, ROLLBACK_ACCEPTED_AT)?.and_then(|v| v.parse().ok()))
}

fn meta(conn: &Connection, name: &str) -> Result<Option<String>, StoreError> {
    conn.query_row(
        "SELECT value FROM meta WHERE name = ?1",
        params![name],
        |r| r.get(0),
    )
    .optional()
    .map_err(unavailable)
}
