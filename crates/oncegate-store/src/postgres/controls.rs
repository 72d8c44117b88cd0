//! A commit's controls on PostgreSQL, as on SQLite (`sqlite/writer/controls.rs`): the
//! kill switch, the finding and the reservations, each sealed by the commit's audit
//! record, the reservations with their budgets' ledgers (crate::ledger). Instants in a
//! ledger are microseconds of the database's clock.

use futures::TryStreamExt;
use oncegate_core::audit::{AuditRecord, LedgerEntry, LimitSeal, RowKind, RowSeal};
use sqlx::{PgConnection, Row};

use super::{db_error, from_micros, ts};
use crate::ledger::{self, Active, Head, Sealing, StoredEntry, TableRow};
use crate::rows;
use crate::{FindingRow, KillSwitchChange, Reservation, StoreError};

/// Sets or clears a kill switch; a cleared one keeps its row.
pub(super) async fn write_kill_switch(
    conn: &mut PgConnection,
    change: &KillSwitchChange,
    seal: &RowSeal,
    sealing: &Sealing<'_>,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO kill_switches (target, reason, set_by, set_at, audit_shard, audit_seq, row_hash)
         VALUES ($1, $2, $3, $4::timestamptz, $5, $6, $7)
         ON CONFLICT (target) DO UPDATE SET reason = EXCLUDED.reason, set_by = EXCLUDED.set_by,
             set_at = EXCLUDED.set_at, audit_shard = EXCLUDED.audit_shard,
             audit_seq = EXCLUDED.audit_seq, row_hash = EXCLUDED.row_hash",
    )
    .bind(&change.target)
    .bind(&change.reason)
    .bind(&change.actor)
    .bind(ts(change.at))
    .bind(i64::from(sealing.link.0))
    .bind(sealing.link.1 as i64)
    .bind(&seal.hash)
    .execute(&mut *conn)
    .await
    .map_err(db_error)?;
    Ok(())
}

/// Records a finding unless its id is taken (`Conflict`); one the chain raised before
/// and that is gone is a deletion.
pub(super) async fn insert_finding(
    conn: &mut PgConnection,
    f: &FindingRow,
    seal: &RowSeal,
    sealing: &Sealing<'_>,
) -> Result<(), StoreError> {
    let done = sqlx::query(
        "INSERT INTO findings (id, rule, raised_at, body, delivered_at, attempts, next_attempt_at, audit_shard, audit_seq, row_hash)
         VALUES ($1, $2, $3::timestamptz, $4, $5::timestamptz, $6, $7::timestamptz, $8, $9, $10) ON CONFLICT (id) DO NOTHING",
    )
    .bind(&f.id)
    .bind(&f.rule)
    .bind(ts(f.raised_at))
    .bind(&f.body)
    .bind(f.delivered_at.map(ts))
    .bind(i64::from(f.attempts))
    .bind(f.next_attempt_at.map(ts))
    .bind(i64::from(sealing.link.0))
    .bind(sealing.link.1 as i64)
    .bind(&seal.hash)
    .execute(&mut *conn)
    .await
    .map_err(db_error)?;
    if done.rows_affected() != 1 {
        return Err(StoreError::Conflict);
    }
    if super::read::newest_control_seal(conn, RowKind::Finding, &f.id)
        .await?
        .is_some()
    {
        return Err(rows::deleted(&RowKind::Finding.name(&f.id, 0)));
    }
    Ok(())
}

/// Locks a budget's row (FOR UPDATE: replicas reserving against it take turns) and
/// returns its head, checked against the audit record that sealed it.
async fn locked_head(
    conn: &mut PgConnection,
    scope: &str,
    sealing: &mut Sealing<'_>,
) -> Result<Option<Head>, StoreError> {
    match lock_scope(conn, scope).await? {
        Some(head) => {
            if head.link != sealing.link {
                let record = record_at(conn, head.link).await?;
                ledger::check_head(scope, &head, record, sealing.key)?;
            }
            Ok(Some(head))
        }
        None => adopt_legacy(conn, scope, sealing).await,
    }
}

/// Locks a budget's row (created if new) and reads its head as stored, unchecked.
async fn lock_scope(conn: &mut PgConnection, scope: &str) -> Result<Option<Head>, StoreError> {
    sqlx::query("INSERT INTO limit_scopes (scope) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(scope)
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    let row = sqlx::query(
        "SELECT seq, chain, audit_shard, audit_seq FROM limit_scopes WHERE scope = $1 FOR UPDATE",
    )
    .bind(scope)
    .fetch_one(&mut *conn)
    .await
    .map_err(db_error)?;
    Ok(head_of(&row))
}

async fn record_at(
    conn: &mut PgConnection,
    (shard, seq): (u32, u64),
) -> Result<Option<AuditRecord>, StoreError> {
    let row = sqlx::query(
        "SELECT shard, seq, prev_hash, hash, body FROM audit WHERE shard = $1 AND seq = $2",
    )
    .bind(i64::from(shard))
    .bind(seq as i64)
    .fetch_optional(&mut *conn)
    .await
    .map_err(db_error)?;
    row.as_ref().map(super::read::audit_row).transpose()
}

/// One reservation inside a commit's transaction, checked against its budget's ledger.
/// READ COMMITTED reads each statement's own snapshot, so after the lock the window's
/// entries include every commit that took the lock before.
pub(super) async fn reserve(
    conn: &mut PgConnection,
    key: &str,
    generation: u32,
    r: &Reservation,
    at: jiff::Timestamp,
    sealing: &mut Sealing<'_>,
) -> Result<(), StoreError> {
    let head = locked_head(conn, &r.scope, sealing).await?;
    let active: Option<bool> = sqlx::query(
        "SELECT active FROM reservations WHERE scope = $1 AND key = $2 AND generation = $3",
    )
    .bind(&r.scope)
    .bind(key)
    .bind(i64::from(generation))
    .fetch_optional(&mut *conn)
    .await
    .map_err(db_error)?
    .map(|row| row.get(0));
    if active == Some(true) {
        return Ok(());
    }
    // The database keeps microseconds: the window starts at one, for both reads.
    let since = (r.since.as_nanosecond() / 1000) as i64;
    let entries = window_entries(conn, &r.scope, since).await?;
    let table: Vec<Active> = sqlx::query(
        "SELECT key, generation, amount FROM reservations
         WHERE scope = $1 AND active AND reserved_at >= $2::timestamptz",
    )
    .bind(&r.scope)
    .bind(ts(from_micros(since)?))
    .fetch_all(&mut *conn)
    .await
    .map_err(db_error)?
    .iter()
    .map(|row| Active {
        key: row.get(0),
        generation: row.get::<i64, _>(1) as u32,
        amount: row.get(2),
    })
    .collect();
    let used = ledger::window_usage(
        &r.scope,
        head.as_ref(),
        &entries,
        since,
        &table,
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
    sqlx::query(
        "INSERT INTO reservations (scope, key, generation, amount, reserved_at, active)
         VALUES ($1, $2, $3, $4, $5::timestamptz, true)
         ON CONFLICT (scope, key, generation) DO UPDATE
             SET amount = EXCLUDED.amount, reserved_at = EXCLUDED.reserved_at, active = true",
    )
    .bind(&r.scope)
    .bind(key)
    .bind(i64::from(generation))
    .bind(r.amount)
    .bind(ts(at))
    .execute(&mut *conn)
    .await
    .map_err(db_error)?;
    let entry = ledger::append(
        head.as_ref(),
        &r.scope,
        key,
        generation,
        r.amount,
        at.as_microsecond(),
        true,
    );
    write_entry(conn, &entry, sealing).await
}

/// Releases what (key, generation) reserved, an entry in each budget's ledger.
pub(super) async fn release(
    conn: &mut PgConnection,
    key: &str,
    generation: u32,
    at: jiff::Timestamp,
    sealing: &mut Sealing<'_>,
) -> Result<(), StoreError> {
    let mut scopes: Vec<String> = sqlx::query_scalar(
        "SELECT scope FROM reservations WHERE key = $1 AND generation = $2 AND active",
    )
    .bind(key)
    .bind(i64::from(generation))
    .fetch_all(&mut *conn)
    .await
    .map_err(db_error)?;
    // Budgets are locked in one order by every commit (no deadlock between two).
    scopes.sort();
    for scope in scopes {
        let head = locked_head(conn, &scope, sealing).await?;
        let released = sqlx::query(
            "UPDATE reservations SET active = false WHERE scope = $1 AND key = $2 AND generation = $3 AND active",
        )
        .bind(&scope)
        .bind(key)
        .bind(i64::from(generation))
        .execute(&mut *conn)
        .await
        .map_err(db_error)?
        .rows_affected();
        if released == 1 {
            let entry = ledger::append(
                head.as_ref(),
                &scope,
                key,
                generation,
                0,
                at.as_microsecond(),
                false,
            );
            write_entry(conn, &entry, sealing).await?;
        }
    }
    Ok(())
}

/// A budget whose reservations all predate ledgers gets its ledger from them, as found.
async fn adopt_legacy(
    conn: &mut PgConnection,
    scope: &str,
    sealing: &mut Sealing<'_>,
) -> Result<Option<Head>, StoreError> {
    let Some(before) = sealing.legacy_before else {
        return Ok(None);
    };
    let has_entries = sqlx::query("SELECT 1 FROM limit_ledger WHERE scope = $1 LIMIT 1")
        .bind(scope)
        .fetch_optional(&mut *conn)
        .await
        .map_err(db_error)?
        .is_some();
    let rows = table_rows(conn, scope).await?;
    if has_entries || rows.is_empty() || rows.iter().any(|r| r.3 >= before) {
        return Ok(None);
    }
    let head = write_from_table(conn, scope, &rows, sealing).await?;
    tracing::warn!(limit = %scope, "wrote the ledger of a limit whose reservations predate ledgers, as found");
    Ok(head)
}

async fn write_from_table(
    conn: &mut PgConnection,
    scope: &str,
    rows: &[TableRow],
    sealing: &mut Sealing<'_>,
) -> Result<Option<Head>, StoreError> {
    let mut head = None;
    for entry in ledger::from_table(scope, rows) {
        write_entry(conn, &entry, sealing).await?;
        head = Some(Head {
            seq: entry.entry.seq,
            chain: entry.chain,
            link: sealing.link,
        });
    }
    Ok(head)
}

/// Every reservation of a budget, oldest first: (key, generation, amount, reserved_at
/// in µs, active).
async fn table_rows(conn: &mut PgConnection, scope: &str) -> Result<Vec<TableRow>, StoreError> {
    Ok(sqlx::query(
        "SELECT key, generation, amount, (extract(epoch from reserved_at) * 1000000)::int8, active
         FROM reservations WHERE scope = $1 ORDER BY reserved_at, key, generation",
    )
    .bind(scope)
    .fetch_all(&mut *conn)
    .await
    .map_err(db_error)?
    .iter()
    .map(|r| {
        (
            r.get(0),
            r.get::<i64, _>(1) as u32,
            r.get(2),
            r.get(3),
            r.get(4),
        )
    })
    .collect())
}

fn entry_of(scope: &str, row: &sqlx::postgres::PgRow) -> StoredEntry {
    let Ok(entry) = crate::decode::ledger_entry(scope, row);
    entry
}

/// An admin's reconciliation of a budget ([`crate::LimitReconcile`]), as on SQLite.
pub(super) async fn reconcile(
    conn: &mut PgConnection,
    r: &crate::LimitReconcile,
    sealing: &mut Sealing<'_>,
) -> Result<(), StoreError> {
    let scope = r.scope.as_str();
    // Locked like any reservation against it.
    let head = lock_scope(conn, scope).await?;
    let entries: Vec<StoredEntry> = sqlx::query(
        "SELECT seq, key, generation, amount, at, reserve, chain FROM limit_ledger
         WHERE scope = $1 ORDER BY seq",
    )
    .bind(scope)
    .fetch_all(&mut *conn)
    .await
    .map_err(db_error)?
    .iter()
    .map(|row| entry_of(scope, row))
    .collect();
    let problem = match &head {
        Some(h) => {
            let record = record_at(conn, h.link).await?;
            ledger::check_head(scope, h, record, sealing.key)
                .err()
                .map(|e| e.to_string())
        }
        None => None,
    }
    .or_else(|| ledger::check_whole(head.as_ref(), &entries));
    let outcome = match problem {
        None => {
            let state = ledger::replay(&entries);
            sqlx::query("DELETE FROM reservations WHERE scope = $1")
                .bind(scope)
                .execute(&mut *conn)
                .await
                .map_err(db_error)?;
            for ((key, generation), (active, amount, at)) in &state {
                sqlx::query(
                    "INSERT INTO reservations (scope, key, generation, amount, reserved_at, active)
                     VALUES ($1, $2, $3, $4, $5::timestamptz, $6)",
                )
                .bind(scope)
                .bind(key)
                .bind(i64::from(*generation))
                .bind(amount)
                .bind(ts(from_micros(*at)?))
                .bind(active)
                .execute(&mut *conn)
                .await
                .map_err(db_error)?;
            }
            if let Some(h) = &head {
                sqlx::query(
                    "UPDATE limit_scopes SET audit_shard = $2, audit_seq = $3 WHERE scope = $1",
                )
                .bind(scope)
                .bind(i64::from(sealing.link.0))
                .bind(sealing.link.1 as i64)
                .execute(&mut *conn)
                .await
                .map_err(db_error)?;
                sealing.moved(LimitSeal {
                    scope: scope.to_owned(),
                    seq: h.seq,
                    chain: h.chain.clone(),
                });
            }
            serde_json::json!({"limit": scope, "outcome": "reservations restored from the ledger", "reservations": state.len()})
        }
        Some(problem) if r.accept_table => {
            sqlx::query("DELETE FROM limit_ledger WHERE scope = $1")
                .bind(scope)
                .execute(&mut *conn)
                .await
                .map_err(db_error)?;
            sqlx::query(
                "UPDATE limit_scopes SET seq = 0, chain = NULL, audit_shard = NULL, audit_seq = NULL WHERE scope = $1",
            )
            .bind(scope)
            .execute(&mut *conn)
            .await
            .map_err(db_error)?;
            let rows = table_rows(conn, scope).await?;
            write_from_table(conn, scope, &rows, sealing).await?;
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

fn head_of(row: &sqlx::postgres::PgRow) -> Option<Head> {
    match (
        row.get::<Option<String>, _>(1),
        row.get::<Option<i64>, _>(2),
        row.get::<Option<i64>, _>(3),
    ) {
        (Some(chain), Some(shard), Some(seq)) if row.get::<i64, _>(0) > 0 => Some(Head {
            seq: row.get::<i64, _>(0) as u64,
            chain,
            link: (shard as u32, seq as u64),
        }),
        _ => None,
    }
}

async fn write_entry(
    conn: &mut PgConnection,
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
    sqlx::query(
        "INSERT INTO limit_ledger (scope, seq, key, generation, amount, at, reserve, chain)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(scope)
    .bind(*seq as i64)
    .bind(key)
    .bind(i64::from(*generation))
    .bind(amount)
    .bind(at)
    .bind(reserve)
    .bind(&e.chain)
    .execute(&mut *conn)
    .await
    .map_err(db_error)?;
    sqlx::query(
        "UPDATE limit_scopes SET seq = $2, chain = $3, audit_shard = $4, audit_seq = $5 WHERE scope = $1",
    )
    .bind(scope)
    .bind(*seq as i64)
    .bind(&e.chain)
    .bind(i64::from(sealing.link.0))
    .bind(sealing.link.1 as i64)
    .execute(&mut *conn)
    .await
    .map_err(db_error)?;
    sealing.moved(LimitSeal {
        scope: scope.clone(),
        seq: *seq,
        chain: e.chain.clone(),
    });
    Ok(())
}

/// The budget's entries from the two before the window up to its head, newest first.
async fn window_entries(
    conn: &mut PgConnection,
    scope: &str,
    since: i64,
) -> Result<Vec<StoredEntry>, StoreError> {
    let mut rows = sqlx::query(
        "SELECT seq, key, generation, amount, at, reserve, chain FROM limit_ledger
         WHERE scope = $1 ORDER BY seq DESC",
    )
    .bind(scope)
    .fetch(&mut *conn);
    let mut entries = Vec::new();
    let mut before = 0;
    while let Some(row) = rows.try_next().await.map_err(db_error)? {
        let entry = entry_of(scope, &row);
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
