//! The PostgreSQL backend's small helpers: error mapping, timestamp forms, and the
//! decoders of a row and its seal read by position out of one joined statement. Below
//! the store's opening (`mod.rs`) and every table's module, which all use them.

use oncegate_core::audit::AuditRecord;
use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::StoreError;
use crate::decode::AuditColumns;
use crate::rows::RowData;

pub(crate) fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

pub(crate) fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

/// Maps a database error: a lost race is a conflict, everything else unavailable.
pub(crate) fn db_error(e: sqlx::Error) -> StoreError {
    if let sqlx::Error::Database(db) = &e {
        // 40001 serialization_failure, 40P01 deadlock_detected: the transaction lost a
        // race and changed nothing. 23505: a concurrent insert of the same key won.
        if matches!(db.code().as_deref(), Some("40001" | "40P01" | "23505")) {
            return StoreError::Conflict;
        }
    }
    unavailable(e)
}

/// A timestamp as a bind parameter (`$n::timestamptz`): RFC 3339 text, which PostgreSQL
/// reads to the microsecond.
pub(crate) fn ts(t: jiff::Timestamp) -> String {
    t.to_string()
}

/// A timestamp read as `(extract(epoch from col) * 1000000)::int8`.
pub(crate) fn from_micros(us: i64) -> Result<jiff::Timestamp, StoreError> {
    jiff::Timestamp::from_microsecond(us).map_err(corrupt)
}

/// The row at `base` (`key`/`id`, `generation`, `version`, `body`, `audit_shard`,
/// `audit_seq`, `row_hash`), if there was one.
pub(crate) fn row_at(read: &PgRow, base: usize) -> Option<RowData> {
    let id: Option<String> = read.get(base);
    Some(RowData {
        id: id?,
        generation: read.get::<i64, _>(base + 1) as u32,
        version: read.get(base + 2),
        body: read.get(base + 3),
        link: read
            .get::<Option<i64>, _>(base + 4)
            .zip(read.get::<Option<i64>, _>(base + 5))
            .map(|(shard, seq)| (shard as u32, seq as u64)),
        row_hash: read.get(base + 6),
    })
}

/// The audit record at `base` (`shard`, `seq`, `prev_hash`, `hash`, `body`), if any.
pub(crate) fn seal_at(read: &PgRow, base: usize) -> Result<Option<AuditRecord>, StoreError> {
    let Some(shard) = read.get::<Option<i64>, _>(base) else {
        return Ok(None);
    };
    AuditColumns {
        shard,
        seq: read.get(base + 1),
        prev_hash: read.get(base + 2),
        hash: read.get(base + 3),
        body: read.get(base + 4),
    }
    .parse()
    .map(Some)
}
