//! [`StoreError`]: everything that can go wrong in a store, in one enum, and the
//! stable code a refusal it causes carries.

use oncegate_core::codes::Code;

/// Everything that can go wrong in a store, in one enum.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A compare-and-set lost: someone wrote first. Re-read and re-decide.
    #[error("the record changed since it was read (lost a race)")]
    Conflict,
    /// The store cannot be reached or written: consequential calls fail closed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Stored data could not be decoded.
    #[error("corrupt store data: {0}")]
    Corrupt(String),
    /// A row does not match the audit record that wrote it (edited, rolled back or
    /// deleted): the intent is refused, never re-executed (`OG-0030`).
    #[error("store integrity: {0}")]
    Integrity(String),
    /// The configured store is missing, empty or not an oncegate store (`OG-0031`).
    #[error("{0}")]
    NotInitialised(String),
    /// `oncegate init` found a store already there (`OG-0031`).
    #[error("{0}")]
    AlreadyExists(String),
    /// The decision behind a commit relied on an attempt's lease having expired, and by
    /// the store's own clock it has not (a replica whose clock runs fast). Nothing was
    /// written; the engine answers as for a live lease (`in_flight`).
    #[error("the attempt's lease is still live by the store's clock: {0}")]
    LeaseLive(String),
    /// The store is already served by another process and cannot be shared (SQLite).
    #[error("{0}")]
    Locked(String),
    /// The store is behind the anchor its server keeps outside it (restored from a
    /// backup, records deleted, the file replaced): refused until a rollback is
    /// accepted (`OG-0031`).
    #[error("{0}")]
    RolledBack(String),
    /// A reservation would take a limit's budget past its max in its window. Nothing was
    /// written (`OG-0027`).
    #[error("limit {scope} reached: {used} used of {max} in its window, this call needs {amount}")]
    LimitReached {
        /// The budget's scope (the limit, or the limit `@` principal).
        scope: String,
        /// What the window's active reservations hold.
        used: i64,
        /// The budget.
        max: i64,
        /// What this call would reserve.
        amount: i64,
    },
    /// The URL names no supported backend.
    #[error(
        "unsupported store URL `{0}`: use sqlite://PATH (a file path, relative to the config file's directory or absolute) or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE (postgresql:// too; TLS with ?sslmode=verify-full&sslrootcert=PATH)"
    )]
    UnsupportedUrl(String),
}

// A driver whose reads cannot fail (`decode::RowSource` for sqlx rows) fails as a store
// error would.
impl From<std::convert::Infallible> for StoreError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

impl StoreError {
    /// The stable code a refusal caused by this error carries.
    pub fn code(&self) -> Code {
        match self {
            StoreError::Integrity(_) => Code::StoreIntegrity,
            StoreError::NotInitialised(_)
            | StoreError::AlreadyExists(_)
            | StoreError::Locked(_)
            | StoreError::RolledBack(_) => Code::StoreNotInitialised,
            StoreError::Conflict | StoreError::LeaseLive(_) => Code::Contention,
            StoreError::LimitReached { .. } => Code::LimitReached,
            StoreError::Unavailable(_) | StoreError::Corrupt(_) | StoreError::UnsupportedUrl(_) => {
                Code::StoreUnavailable
            }
        }
    }
}
