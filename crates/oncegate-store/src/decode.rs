//! One decoder per row kind, for every driver: a row as SQLite (through sqlx or
//! rusqlite) or PostgreSQL returns it becomes the store's row types here, and nowhere
//! else, so a column added to a table is read in one place.
//!
//! Each driver's row type is a [`RowSource`]: a handful of typed getters by column name
//! or position, and the unit its instants are stored in (SQLite: milliseconds;
//! PostgreSQL: microseconds, as `(extract(epoch from col) * 1000000)::int8`). The
//! decoders only read columns; what a row means (its seal, its body) is checked
//! elsewhere (`rows.rs`, `controls.rs`, `ledger.rs`).

use std::convert::Infallible;

use oncegate_core::audit::{AuditRecord, LedgerEntry, RowKind};
use rusqlite::types::FromSql;
use sqlx::Row;

use crate::api::finding::FindingRow;
use crate::api::pins::{PendingTool, ToolPin};
use crate::controls::{FindingRead, SwitchRead};
use crate::error::StoreError;
use crate::ledger::StoredEntry;
use crate::rows::RowData;
use crate::storage::{AuditRowV1, SwitchRowV1};

/// A column, by name or by position in the statement's select list.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Col<'a> {
    /// By name.
    Name(&'a str),
    /// By position (0-based).
    At(usize),
}

impl<'a> From<&'a str> for Col<'a> {
    fn from(name: &'a str) -> Self {
        Col::Name(name)
    }
}

impl From<usize> for Col<'_> {
    fn from(at: usize) -> Self {
        Col::At(at)
    }
}

/// The unit a backend stores instants in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Milliseconds since the epoch (SQLite).
    Millis,
    /// Microseconds since the epoch (PostgreSQL, read as `int8`).
    Micros,
}

impl Unit {
    /// The instant a stored integer names.
    pub(crate) fn instant(self, v: i64) -> Result<jiff::Timestamp, StoreError> {
        match self {
            Unit::Millis => jiff::Timestamp::from_millisecond(v),
            Unit::Micros => jiff::Timestamp::from_microsecond(v),
        }
        .map_err(corrupt)
    }

    /// A stored integer in milliseconds (what a switch's storage form keeps).
    fn millis(self, v: i64) -> i64 {
        match self {
            Unit::Millis => v,
            Unit::Micros => v.div_euclid(1000),
        }
    }
}

/// A row of one driver: typed getters, each failing with the driver's own error (so a
/// decoder runs inside rusqlite's `query_row` callback as well as after a sqlx fetch).
/// sqlx rows never fail here: a column of the wrong type panics, as `sqlx::Row::get`
/// always did (a schema the migrations did not write), so their error is
/// [`Infallible`].
pub(crate) trait RowSource {
    /// What a getter fails with.
    type Error;
    /// The unit this backend's instants are stored in.
    const UNIT: Unit;
    /// A text column.
    fn text(&self, col: Col<'_>) -> Result<String, Self::Error>;
    /// A nullable text column.
    fn opt_text(&self, col: Col<'_>) -> Result<Option<String>, Self::Error>;
    /// An integer column.
    fn int(&self, col: Col<'_>) -> Result<i64, Self::Error>;
    /// A nullable integer column.
    fn opt_int(&self, col: Col<'_>) -> Result<Option<i64>, Self::Error>;
    /// A boolean column.
    fn flag(&self, col: Col<'_>) -> Result<bool, Self::Error>;
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

fn link(shard: Option<i64>, seq: Option<i64>) -> Option<(u32, u64)> {
    Some((shard? as u32, seq? as u64))
}

/// An intent or approval row with its seal columns (`key` or `id`, `generation`,
/// `version`, `body`, `audit_shard`, `audit_seq`, `row_hash`, by name).
pub(crate) fn row_data<R: RowSource>(row: &R, kind: RowKind) -> Result<RowData, R::Error> {
    Ok(RowData {
        id: match kind {
            RowKind::Intent => row.text("key".into())?,
            _ => row.text("id".into())?,
        },
        generation: row.int("generation".into())? as u32,
        version: row.int("version".into())?,
        body: row.text("body".into())?,
        row_hash: row.opt_text("row_hash".into())?,
        link: link(
            row.opt_int("audit_shard".into())?,
            row.opt_int("audit_seq".into())?,
        ),
    })
}

/// An audit record's columns as stored, before its body is parsed.
pub(crate) struct AuditColumns {
    pub(crate) shard: i64,
    pub(crate) seq: i64,
    pub(crate) prev_hash: String,
    pub(crate) hash: String,
    pub(crate) body: String,
}

impl AuditColumns {
    /// The record the columns hold.
    pub(crate) fn parse(&self) -> Result<AuditRecord, StoreError> {
        AuditRowV1::from_columns(
            self.shard as u32,
            self.seq as u64,
            self.prev_hash.clone(),
            self.hash.clone(),
            &self.body,
        )
        .map(AuditRecord::from)
        .map_err(corrupt)
    }
}

/// An audit record's columns (`shard`, `seq`, `prev_hash`, `hash`, `body`, by name).
pub(crate) fn audit_columns<R: RowSource>(row: &R) -> Result<AuditColumns, R::Error> {
    Ok(AuditColumns {
        shard: row.int("shard".into())?,
        seq: row.int("seq".into())?,
        prev_hash: row.text("prev_hash".into())?,
        hash: row.text("hash".into())?,
        body: row.text("body".into())?,
    })
}

/// An audit record (columns as [`audit_columns`]), parsed.
pub(crate) fn audit_record<R: RowSource>(row: &R) -> Result<AuditRecord, StoreError>
where
    StoreError: From<R::Error>,
{
    audit_columns(row)?.parse()
}

/// A kill switch row: `target, reason, set_by, set_at, audit_shard, audit_seq,
/// row_hash`, by position.
pub(crate) fn switch<R: RowSource>(r: &R) -> Result<SwitchRead, R::Error> {
    Ok(SwitchRead {
        row: SwitchRowV1 {
            target: r.text(0.into())?,
            reason: r.opt_text(1.into())?,
            set_by: r.text(2.into())?,
            set_at_ms: R::UNIT.millis(r.int(3.into())?),
        },
        row_hash: r.opt_text(6.into())?,
        link: link(r.opt_int(4.into())?, r.opt_int(5.into())?),
    })
}

/// A finding row: `id, rule, raised_at, body, delivered_at, attempts, next_attempt_at,
/// audit_shard, audit_seq, row_hash`, by position.
pub(crate) fn finding<R: RowSource>(r: &R) -> Result<FindingRead, StoreError>
where
    StoreError: From<R::Error>,
{
    let at = |v: Option<i64>| v.map(|v| R::UNIT.instant(v)).transpose();
    Ok(FindingRead {
        finding: FindingRow {
            id: r.text(0.into())?,
            rule: r.text(1.into())?,
            raised_at: R::UNIT.instant(r.int(2.into())?)?,
            body: r.text(3.into())?,
            delivered_at: at(r.opt_int(4.into())?)?,
            attempts: u32::try_from(r.int(5.into())?).unwrap_or(u32::MAX),
            next_attempt_at: at(r.opt_int(6.into())?)?,
            problem: None,
        },
        row_hash: r.opt_text(9.into())?,
        link: link(r.opt_int(7.into())?, r.opt_int(8.into())?),
    })
}

/// A tool pin: `server, tool, digest, definition, pinned_at, pinned_by,
/// pending_digest, pending_definition, pending_at`, by position.
pub(crate) fn tool_pin<R: RowSource>(r: &R) -> Result<ToolPin, StoreError>
where
    StoreError: From<R::Error>,
{
    let pending = match (
        r.opt_text(6.into())?,
        r.opt_text(7.into())?,
        r.opt_int(8.into())?,
    ) {
        (Some(digest), Some(definition), Some(seen_at)) => Some(PendingTool {
            digest,
            definition,
            seen_at: R::UNIT.instant(seen_at)?,
        }),
        (None, None, None) => None,
        _ => return Err(corrupt("a tool pin's pending definition is half written")),
    };
    Ok(ToolPin {
        server: r.text(0.into())?,
        tool: r.text(1.into())?,
        digest: r.text(2.into())?,
        definition: r.text(3.into())?,
        pinned_at: R::UNIT.instant(r.int(4.into())?)?,
        pinned_by: r.text(5.into())?,
        pending,
    })
}

/// A ledger entry of budget `scope`: `seq, key, generation, amount, at, reserve,
/// chain`, by position.
pub(crate) fn ledger_entry<R: RowSource>(scope: &str, row: &R) -> Result<StoredEntry, R::Error> {
    Ok(StoredEntry {
        entry: LedgerEntry {
            scope: scope.to_owned(),
            seq: row.int(0.into())? as u64,
            key: row.text(1.into())?,
            generation: row.int(2.into())? as u32,
            amount: row.int(3.into())?,
            at: row.int(4.into())?,
            reserve: row.flag(5.into())?,
        },
        chain: row.text(6.into())?,
    })
}

// sqlx: `Row::get` by name or position, as every sqlx read did before.
fn sqlx_get<'r, R, T>(row: &'r R, col: Col<'_>) -> T
where
    R: Row,
    T: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'n> &'n str: sqlx::ColumnIndex<R>,
    usize: sqlx::ColumnIndex<R>,
{
    match col {
        Col::Name(name) => row.get(name),
        Col::At(at) => row.get(at),
    }
}

impl RowSource for sqlx::sqlite::SqliteRow {
    type Error = Infallible;
    const UNIT: Unit = Unit::Millis;
    fn text(&self, col: Col<'_>) -> Result<String, Infallible> {
        Ok(sqlx_get(self, col))
    }
    fn opt_text(&self, col: Col<'_>) -> Result<Option<String>, Infallible> {
        Ok(sqlx_get(self, col))
    }
    fn int(&self, col: Col<'_>) -> Result<i64, Infallible> {
        Ok(sqlx_get(self, col))
    }
    fn opt_int(&self, col: Col<'_>) -> Result<Option<i64>, Infallible> {
        Ok(sqlx_get(self, col))
    }
    fn flag(&self, col: Col<'_>) -> Result<bool, Infallible> {
        Ok(sqlx_get(self, col))
    }
}

impl RowSource for sqlx::postgres::PgRow {
    type Error = Infallible;
    const UNIT: Unit = Unit::Micros;
    fn text(&self, col: Col<'_>) -> Result<String, Infallible> {
        Ok(sqlx_get(self, col))
    }
    fn opt_text(&self, col: Col<'_>) -> Result<Option<String>, Infallible> {
        Ok(sqlx_get(self, col))
    }
    fn int(&self, col: Col<'_>) -> Result<i64, Infallible> {
        Ok(sqlx_get(self, col))
    }
    fn opt_int(&self, col: Col<'_>) -> Result<Option<i64>, Infallible> {
        Ok(sqlx_get(self, col))
    }
    fn flag(&self, col: Col<'_>) -> Result<bool, Infallible> {
        Ok(sqlx_get(self, col))
    }
}

// rusqlite: `Row::get`, whose errors the reader threads map (`read_failed`).
fn rusqlite_get<T: FromSql>(row: &rusqlite::Row<'_>, col: Col<'_>) -> rusqlite::Result<T> {
    match col {
        Col::Name(name) => row.get(name),
        Col::At(at) => row.get(at),
    }
}

impl RowSource for rusqlite::Row<'_> {
    type Error = rusqlite::Error;
    const UNIT: Unit = Unit::Millis;
    fn text(&self, col: Col<'_>) -> rusqlite::Result<String> {
        rusqlite_get(self, col)
    }
    fn opt_text(&self, col: Col<'_>) -> rusqlite::Result<Option<String>> {
        rusqlite_get(self, col)
    }
    fn int(&self, col: Col<'_>) -> rusqlite::Result<i64> {
        rusqlite_get(self, col)
    }
    fn opt_int(&self, col: Col<'_>) -> rusqlite::Result<Option<i64>> {
        rusqlite_get(self, col)
    }
    fn flag(&self, col: Col<'_>) -> rusqlite::Result<bool> {
        rusqlite_get(self, col)
    }
}
