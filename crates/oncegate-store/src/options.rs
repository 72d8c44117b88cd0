//! How a store is opened: [`OpenMode`] (may it be created?) and [`StoreOptions`]
//! (settings every backend reads; each ignores what does not apply to it).

use std::time::Duration;

use oncegate_core::audit::ChainKey;

/// How [`crate::open`] treats what it finds at the store's location.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Serving: an existing oncegate store only. A missing file, an empty one (zero
    /// bytes, or SQLite without oncegate's schema), a PostgreSQL database without
    /// oncegate's schema, or a foreign database is refused (`OG-0031`). Pending
    /// migrations are applied to an oncegate store.
    Existing,
    /// `oncegate init`: a new store. Creates a missing or empty file (applies the
    /// schema to an empty PostgreSQL database); refuses one that already holds an
    /// oncegate store, or a foreign database.
    Create,
    /// Scratch stores (`serve --init`, the demo, `verify`, tests, `oncegate migrate` on
    /// PostgreSQL): creates a missing or empty store, opens an oncegate store, refuses a
    /// foreign database.
    CreateIfMissing,
}

/// Settings of an opened store.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// The audit chain key: records are sealed with HMAC-SHA256 under it, and keyed
    /// records can only be checked with it.
    pub chain_key: Option<ChainKey>,
    /// How many audit shards new records spread over (`[store] audit_shards`).
    /// Changing it re-shards only new records; verification walks whatever exists.
    pub audit_shards: u32,
    /// Serving: this process is the file's only writer, and says so with an exclusive
    /// lock on `<file>.lock`; a second `serve` on the same file is refused (SQLite).
    pub single_writer: bool,
    /// Serving a store that is behind its serve anchor (restored from a backup) on
    /// purpose (`oncegate serve --accept-rollback`): see the store's `serve_anchor`.
    pub accept_rollback: bool,
    /// The most connections the pool opens (`[store] pool_size`; PostgreSQL).
    pub pool_size: u32,
    /// How long one statement may run before the database cancels it (`[store]
    /// statement_timeout`; PostgreSQL, set on every connection).
    pub statement_timeout: Duration,
}

/// The default `[store] pool_size`.
pub const DEFAULT_POOL_SIZE: u32 = 10;
/// The default `[store] statement_timeout`.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            chain_key: None,
            audit_shards: oncegate_core::audit::AUDIT_SHARDS,
            single_writer: false,
            accept_rollback: false,
            pool_size: DEFAULT_POOL_SIZE,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
        }
    }
}
