//! A commit's controls, written inside its transaction and sealed by its audit record
//! (shard, seq): the kill switch it sets or clears, the finding it raises, and the
//! reservations it makes or releases, each with its budget's ledger (crate::ledger).

use oncegate_core::audit::{LimitSeal, RowSeal};
use rusqlite::{Connection, OptionalExtension, params};

use super::time::millis;
use crate::ledger::{self, Active, Head, Sealing, StoredEntry, TableRow};
use crate::rows;
use crate::sqlite::read::{newest_control_seal, record_at, unavailable};
use crate::{FindingRow, KillSwitchChange, Reservation, StoreError};
use oncegate_core::audit::{LedgerEntry, RowKind};

/// Sets or clears a kill switch. A cleared switch keeps its row (no reason), so a row
/// that is missing is always a deletion.
pub(super) fn write_kill_switch(
    conn: &Connection,
    change: &KillSwitchChange,
    seal: &RowSeal,
    sealing: &Sealing<'_>,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO kill_switches (target, reason, set_by, set_at, audit_shard, audit_seq, row_hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (target) DO UPDATE SET reason = ?2, set_by = ?3, set_at = ?4,
             audit_shard = ?5, audit_seq = ?6, row_hash = ?7",
    )
    .and_then(|mut s| {
        s.execute(params![
            change.target,
            change.reason,
            change.actor,
            millis(change.at),
            i64::from(sealing.link.0),
            sealing.link.1 as i64,
            seal.hash,
        ])
    })
    .map(drop)
    .map_err(unavailable)
}

/// Records a finding unless one with its id exists ([`StoreError::Conflict`]); one
/// the chain raised before and that is gone is a deletion, not raised again.
pub(super) fn insert_finding(
    conn: &Connection,
    f: &FindingRow,
    seal: &RowSeal,
    sealing: &Sealing<'_>,
) -> Result<(), StoreError> {
    let rows = conn
        .prepare_cached(
            "INSERT INTO findings (id, rule, raised_at, body, delivered_at, attempts, next_attempt_at, audit_shard, audit_seq, row_hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT (id) DO NOTHING",
        )
        .and_then(|mut s| {
            s.execute(params![
                f.id,
                f.rule,
                millis(f.raised_at),
                f.body,
                f.delivered_at.map(millis),
                f.attempts,
                f.next_attempt_at.map(millis),
                i64::from(sealing.link.0),
                sealing.link.1 as i64,
                seal.hash,
            ])
        })
        .map_err(unavailable)?;
    if rows != 1 {
        return Err(StoreError::Conflict);
    }
    if newest_control_seal(conn, RowKind::Finding, &f.id)?.is_some() {
        return Err(rows::deleted(&RowKind::Finding.name(&f.id, 0)));
    }
    Ok(())
}

/// A commit's reservations for (key, generation), checked against their budgets'
/// ledgers and made inside its transaction (the writer is the file's only writer, so
/// nothing moves before the commit ends).
pub(super) fn reserve(
    conn: &Connection,
    key: &str,
    generation: u32,
    reservations: &[Reservation],
    at: jiff::Timestamp,
    sealing: &mut Sealing<'_>,
) -> Result<(), StoreError> {
    for r in reservations {
        let active: Option<i64> = conn
            .prepare_cached(
                "SELECT active FROM reservations WHERE scope = ?1 AND key = ?2 AND generation = ?3",
            )
            .and_then(|mut s| {
                s.query_row(params![r.scope, key, generation], |row| row.get(0))
                    .optional()
            })
            .map_err(unavailable)?;
        if active == Some(1) {
            continue;
        }
        let head = checked_head(conn, &r.scope, sealing)?;
        let since = millis(r.since);
        let used = ledger::window_usage(
            &r.scope,
            head.as_ref(),
            &window_entries(conn, &r.scope, since)?,
            since,
            &table_active(conn, &r.scope, since)?,
            sealing.known,
        )?;
        if r.enforce && used.saturating_add(r.amount) > r.max {
            return Err(StoreError::LimitReached {
                scope: r.scope.clone(),
                used,
                max: r.max,
                amount: r.amount,
            });
        }
        conn.prepare_cached(
            "INSERT INTO reservations (scope, key, generation, amount, reserved_at, active)
             VALUES (?1, ?2, ?3, ?4, ?5, 1)
             ON CONFLICT (scope, key, generation) DO UPDATE SET amount = ?4, reserved_at = ?5, active = 1",
        )
        .and_then(|mut s| s.execute(params![r.scope, key, generation, r.amount, millis(at)]))
        .map_err(unavailable)?;
        let entry = ledger::append(
            head.as_ref(),
            &r.scope,
            key,
            generation,
            r.amount,
            millis(at),
            true,
        );
        write_entry(conn, &entry, sealing)?;
    }
    Ok(())
}

/// Releases what (key, generation) reserved (its effect definitely did not happen), an
/// entry in each budget's ledger.
pub(super) fn release(
    conn: &Connection,
    key: &str,
    generation: u32,
    at: jiff::Timestamp,
    sealing: &mut Sealing<'_>,
) -> Result<(), StoreError> {
    let scopes: Vec<String> = conn
        .prepare_cached(
            "UPDATE reservations SET active = 0 WHERE key = ?1 AND generation = ?2 AND active = 1
             RETURNING scope",
        )
        .and_then(|mut s| {
            s.query_map(params![key, generation], |row| row.get(0))?
                .collect::<Result<_, _>>()
        })
        .map_err(unavailable)?;
    for scope in scopes {
        let head = checked_head(conn, &scope, sealing)?;
        let entry = ledger::append(head.as_ref(), &scope, key, generation, 0, millis(at), false);
        write_entry(conn, &entry, sealing)?;
    }
    Ok(())
}

/// The budget's head, checked against the audit record that sealed it; a budget with
/// reservations from before ledgers existed gets its ledger first (adopted as found).
fn checked_head(
    conn: &Connection,
    scope: &str,
    sealing: &mut Sealing<'_>,
) -> Result<Option<Head>, StoreError> {
    match read_head(conn, scope)? {
        Some(head) => {
            // This commit's own earlier entry is sealed by the record it is writing.
            if head.link != sealing.link {
                ledger::check_head(scope, &head, record_at(conn, head.link)?, sealing.key)?;
            }
            Ok(Some(head))
        }
        None => adopt_legacy(conn, scope, sealing),
    }
}

fn read_head(conn: &Connection, scope: &str) -> Result<Option<Head>, StoreError> {
    conn.prepare_cached(
        "SELECT seq, chain, audit_shard, audit_seq FROM limit_heads WHERE scope = ?1",
    )
    .and_then(|mut s| {
        s.query_row(params![scope], |row| {
            Ok(Head {
                seq: row.get::<_, i64>(0)? as u64,
                chain: row.get(1)?,
                link: (row.get::<_, i64>(2)? as u32, row.get::<_, i64>(3)? as u64),
            })
        })
        .optional()
    })
    .map_err(unavailable)
}

/// A budget whose reservations all predate ledgers (and that has no ledger entries):
/// its ledger is written from the reservations as found, sealed by this commit.
fn adopt_legacy(
    conn: &Connection,
    scope: &str,
    sealing: &mut Sealing<'_>,
) -> Result<Option<Head>, StoreError> {
    let Some(before) = sealing.legacy_before else {
        return Ok(None);
    };
    let rows = table_rows(conn, scope)?;
    if !all_entries(conn, scope)?.is_empty()
        || rows.is_empty()
        || rows.iter().any(|r| r.3 >= before)
    {
        return Ok(None);
    }
    let head = write_from_table(conn, scope, &rows, sealing)?;
    tracing::warn!(limit = %scope, "wrote the ledger of a limit whose reservations predate ledgers, as found");
    Ok(head)
}

/// Writes a budget's ledger from its reservations as found; returns its head.
fn write_from_table(
    conn: &Connection,
    scope: &str,
    rows: &[TableRow],
    sealing: &mut Sealing<'_>,
) -> Result<Option<Head>, StoreError> {
    let mut head = None;
    for entry in ledger::from_table(scope, rows) {
        write_entry(conn, &entry, sealing)?;
        head = Some(Head {
            seq: entry.entry.seq,
            chain: entry.chain,
            link: sealing.link,
        });
    }
    Ok(head)
}

/// Every reservation of a budget (active or not), oldest first: (key, generation,
/// amount, reserved_at, active).
fn table_rows(conn: &Connection, scope: &str) -> Result<Vec<TableRow>, StoreError> {
    conn.prepare_cached(
        "SELECT key, generation, amount, reserved_at, active FROM reservations
         WHERE scope = ?1 ORDER BY reserved_at, key, generation",
    )
    .and_then(|mut s| {
        s.query_map(params![scope], |row| {
            Ok((
                row.get(0)?,
                row.get::<_, i64>(1)? as u32,
                row.get(2)?,
                row.get(3)?,
                row.get::<_, i64>(4)? == 1,
            ))
        })?
        .collect::<Result<_, _>>()
    })
    .map_err(unavailable)
}

/// A budget's whole ledger, oldest first.
fn all_entries(conn: &Connection, scope: &str) -> Result<Vec<StoredEntry>, StoreError> {
    conn.prepare_cached(
        "SELECT seq, key, generation, amount, at, reserve, chain FROM limit_ledger
         WHERE scope = ?1 ORDER BY seq",
    )
    .and_then(|mut s| {
        s.query_map(params![scope], |row| entry_of(scope, row))?
            .collect::<Result<_, _>>()
    })
    .map_err(unavailable)
}

fn entry_of(scope: &str, row: &rusqlite::Row<'_>) -> rusqlite::Result<StoredEntry> {
    crate::decode::ledger_entry(scope, row)
}

/// An admin's reconciliation of a budget ([`crate::LimitReconcile`]).
pub(super) fn reconcile(
    conn: &Connection,
    r: &crate::LimitReconcile,
    sealing: &mut Sealing<'_>,
) -> Result<(), StoreError> {
    let scope = r.scope.as_str();
    let head = read_head(conn, scope)?;
    let entries = all_entries(conn, scope)?;
    let problem = match &head {
        Some(h) => ledger::check_head(scope, h, record_at(conn, h.link)?, sealing.key)
            .err()
            .map(|e| e.to_string()),
        None => None,
    }
    .or_else(|| ledger::check_whole(head.as_ref(), &entries));
    let outcome = match problem {
        None => {
            let state = ledger::replay(&entries);
            run(
                conn,
                "DELETE FROM reservations WHERE scope = ?1",
                params![scope],
            )?;
            for ((key, generation), (active, amount, at)) in &state {
                run(
                    conn,
                    "INSERT INTO reservations (scope, key, generation, amount, reserved_at, active)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![scope, key, generation, amount, at, active],
                )?;
            }
            if let Some(h) = &head {
                run(
                    conn,
                    "UPDATE limit_heads SET audit_shard = ?2, audit_seq = ?3 WHERE scope = ?1",
                    params![scope, i64::from(sealing.link.0), sealing.link.1 as i64],
                )?;
                sealing.moved(LimitSeal {
                    scope: scope.to_owned(),
                    seq: h.seq,
                    chain: h.chain.clone(),
                });
            }
            serde_json::json!({"limit": scope, "outcome": "reservations restored from the ledger", "reservations": state.len()})
        }
        Some(problem) if r.accept_table => {
            run(
                conn,
                "DELETE FROM limit_ledger WHERE scope = ?1",
                params![scope],
            )?;
            run(
                conn,
                "DELETE FROM limit_heads WHERE scope = ?1",
                params![scope],
            )?;
            let rows = table_rows(conn, scope)?;
            write_from_table(conn, scope, &rows, sealing)?;
            serde_json::json!({"limit": scope, "outcome": "ledger written again from the reservations as found, accepted by the admin", "ledger_problem": problem, "reservations": rows.len()})
        }
        Some(problem) => {
            return Err(StoreError::Integrity(format!(
                "limit {scope}: {problem}; its ledger does not hold, so its reservations cannot be restored from it (reconcile with accept_table to accept the reservations as found)"
            )));
        }
    };
    sealing.reconciled = Some(outcome);
    Ok(())
}

fn run(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute(params))
        .map(drop)
        .map_err(unavailable)
}

fn write_entry(
    conn: &Connection,
    e: &StoredEntry,
    sealing: &mut Sealing<'_>,
) -> Result<(), StoreError> {
    let LedgerEntry {
        scope,
        seq,
        key,
        generation,
        amount,
        at,
        reserve,
    } = &e.entry;
    conn.prepare_cached(
        "INSERT INTO limit_ledger (scope, seq, key, generation, amount, at, reserve, chain)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .and_then(|mut s| {
        s.execute(params![
            scope,
            *seq as i64,
            key,
            i64::from(*generation),
            amount,
            at,
            reserve,
            e.chain
        ])
    })
    .map_err(unavailable)?;
    conn.prepare_cached(
        "INSERT INTO limit_heads (scope, seq, chain, audit_shard, audit_seq) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (scope) DO UPDATE SET seq = ?2, chain = ?3, audit_shard = ?4, audit_seq = ?5",
    )
    .and_then(|mut s| {
        s.execute(params![
            scope,
            *seq as i64,
            e.chain,
            i64::from(sealing.link.0),
            sealing.link.1 as i64
        ])
    })
    .map_err(unavailable)?;
    sealing.moved(LimitSeal {
        scope: scope.clone(),
        seq: *seq,
        chain: e.chain.clone(),
    });
    Ok(())
}

/// The budget's entries from the two before the window up to its head, newest first
/// (read backwards from the head, stopping there).
fn window_entries(
    conn: &Connection,
    scope: &str,
    since: i64,
) -> Result<Vec<StoredEntry>, StoreError> {
    let mut statement = conn
        .prepare_cached(
            "SELECT seq, key, generation, amount, at, reserve, chain FROM limit_ledger
             WHERE scope = ?1 ORDER BY seq DESC",
        )
        .map_err(unavailable)?;
    let mut rows = statement.query(params![scope]).map_err(unavailable)?;
    let mut entries = Vec::new();
    let mut before = 0;
    while let Some(row) = rows.next().map_err(unavailable)? {
        let entry = entry_of(scope, row).map_err(unavailable)?;
        let outside = entry.entry.at < since;
        entries.push(entry);
        if outside {
            before += 1;
            if before == 2 {
                break;
            }
        }
    }
    Ok(entries)
}

/// The active reservations in the window, as the table holds them.
fn table_active(conn: &Connection, scope: &str, since: i64) -> Result<Vec<Active>, StoreError> {
    conn.prepare_cached(
        "SELECT key, generation, amount FROM reservations
         WHERE scope = ?1 AND active = 1 AND reserved_at >= ?2",
    )
    .and_then(|mut s| {
        s.query_map(params![scope, since], |row| {
            Ok(Active {
                key: row.get(0)?,
                generation: row.get::<_, i64>(1)? as u32,
                amount: row.get(2)?,
            })
        })?
        .collect::<Result<_, _>>()
    })
    .map_err(unavailable)
}
