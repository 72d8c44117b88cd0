//! The PostgreSQL backend's small helpers: error mapping and timestamp forms. Below the
//! store's opening (`mod.rs`) and every table's module, which all use them.

use crate::StoreError;

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
