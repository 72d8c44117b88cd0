//! How the writer stores a timestamp: milliseconds since the epoch. Below the writer and
//! its job modules, which all write timestamps.

/// A timestamp as the SQLite store writes it.
pub(super) fn millis(t: jiff::Timestamp) -> i64 {
    t.as_millisecond()
}
