//! [`open`]: the one place a store URL becomes a backend, and [`Store`], the backend
//! chosen at run time.
//!
//! `Store` is an enum over the backends rather than a `dyn` trait object: the traits
//! return `impl Future` (no boxing on the hot path), which makes them not object-safe,
//! and an enum keeps static dispatch with one `match` per operation. A backend is one
//! variant, one arm in `each_backend!` (the `match` every trait method forwards
//! through) and one scheme in [`open`]; nothing above this crate names a backend type.
//!
//! `ONCEGATE_STORE_URL`, when set and not empty, overrides `[store] url` for every
//! command that opens the registry's store ([`registry_store_url`]): replicas share one
//! config file and take the database (and its password) from their environment.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oncegate_core::Registry;
use oncegate_core::audit::{AuditRecord, ChainKey, StoredRow};
use oncegate_core::intent::{Approval, IntentRecord};
use oncegate_core::key::IntentKey;
use oncegate_core::redact;
use tracing::Instrument;

use crate::clock::Clock;
#[cfg(feature = "testing")]
use crate::memory::MemoryStore;
use crate::options::{OpenMode, StoreOptions};
use crate::postgres::PgStore;
use crate::sqlite::SqliteStore;
use crate::{
    AuditRead, AuditWrite, Backend, ClientKeyBinding, Commit, IntentFilter, IntentsRead,
    IntentsWrite, KillSwitch, LimitsRead, LimitsWrite, Listing, McpSession, PinsRead, PinsWrite,
    SharedRead, SharedWrite, StoreError,
};

/// The URL schemes [`open`] understands, as users write them.
pub const SUPPORTED_SCHEMES: &[&str] = &[
    "sqlite://PATH",
    "postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE",
    "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE",
];

/// The environment variable that overrides `[store] url`.
pub const STORE_URL_ENV: &str = "ONCEGATE_STORE_URL";

/// A store of any backend. Clones share the same store.
#[derive(Clone)]
pub enum Store {
    /// The embedded SQLite backend (`sqlite://PATH`).
    Sqlite(SqliteStore),
    /// PostgreSQL (`postgres://...`), shared by several gateway replicas.
    Postgres(PgStore),
    /// The in-memory backend: tests and the simulation only (it forgets everything when
    /// the process ends, so no URL opens it; the `testing` feature).
    #[cfg(feature = "testing")]
    Memory(MemoryStore),
}

impl From<SqliteStore> for Store {
    fn from(s: SqliteStore) -> Self {
        Store::Sqlite(s)
    }
}

impl From<PgStore> for Store {
    fn from(s: PgStore) -> Self {
        Store::Postgres(s)
    }
}

#[cfg(feature = "testing")]
impl From<MemoryStore> for Store {
    fn from(s: MemoryStore) -> Self {
        Store::Memory(s)
    }
}

/// Opens the store a URL names. Relative paths resolve against `base_dir` (the config
/// file's directory). `mode` says whether a missing store is created
/// ([`OpenMode`]); serving never creates one.
pub async fn open(
    url: &str,
    base_dir: &Path,
    mode: OpenMode,
    options: StoreOptions,
) -> Result<Store, StoreError> {
    match location(url, base_dir)? {
        Location::Sqlite(path) => Ok(Store::Sqlite(
            SqliteStore::open_with(&path, mode, options).await?,
        )),
        Location::Postgres(url) => Ok(Store::Postgres(PgStore::open(&url, mode, options).await?)),
    }
}

/// Opens the store a registry names (`[store] url`, relative to the config file's
/// directory), sealing with `chain_key` (the key `[audit] chain_key_env` names, which
/// the caller reads: `oncegate_engine::config::chain_key_from_env`).
pub async fn open_registry_store(
    registry: &Registry,
    mode: OpenMode,
    chain_key: Option<ChainKey>,
) -> Result<Store, StoreError> {
    open_registry_store_with(registry, mode, None, chain_key).await
}

/// How `oncegate serve` opens its store.
#[derive(Clone, Copy, Debug, Default)]
pub struct Serving {
    /// `--accept-rollback`: the store is behind its serve anchor on purpose.
    pub accept_rollback: bool,
}

/// Opens the registry's store as [`open_registry_store`] does. `serving`: this process
/// is the store's server (`oncegate serve`), so a single-process backend (SQLite) takes
/// its exclusive lock ([`StoreOptions::single_writer`]) and a second server is refused
/// with [`StoreError::Locked`], and the store is checked against its serve anchor
/// ([`StoreError::RolledBack`]); CLI commands that read or write beside a server pass
/// `None`.
pub async fn open_registry_store_with(
    registry: &Registry,
    mode: OpenMode,
    serving: Option<Serving>,
    chain_key: Option<ChainKey>,
) -> Result<Store, StoreError> {
    let options = StoreOptions {
        single_writer: serving.is_some(),
        accept_rollback: serving.is_some_and(|s| s.accept_rollback),
        ..registry_store_options(registry, chain_key)
    };
    open(
        &registry_store_url(registry),
        &registry_dir(registry),
        mode,
        options,
    )
    .await
}

/// What [`migrate_registry_store`] did: the store, open, and the migrations it applied.
pub struct Migrated {
    /// The migrated store.
    pub store: Store,
    /// The migrations applied (version, description), oldest first; empty when the
    /// store was already up to date.
    pub applied: Vec<(i64, String)>,
}

/// `oncegate migrate`: applies the pending migrations to the registry's store. A SQLite
/// store must exist (a missing file may be a lost volume: `oncegate init` creates one);
/// an empty PostgreSQL database gets the whole schema. Migrations are additive, so this
/// is safe while replicas of the previous version serve.
pub async fn migrate_registry_store(
    registry: &Registry,
    chain_key: Option<ChainKey>,
) -> Result<Migrated, StoreError> {
    let (pending, mode) = match registry_location(registry)? {
        Location::Sqlite(path) => (
            crate::sqlite::pending_migrations(&path).await?,
            OpenMode::Existing,
        ),
        Location::Postgres(url) => (
            crate::postgres::pending_at(&url).await?,
            OpenMode::CreateIfMissing,
        ),
    };
    let store = open_registry_store(registry, mode, chain_key).await?;
    Ok(Migrated {
        store,
        applied: pending,
    })
}

/// The store settings a registry names (`[store]`), with `chain_key`. `single_writer`
/// is left off: serving sets it.
pub fn registry_store_options(registry: &Registry, chain_key: Option<ChainKey>) -> StoreOptions {
    StoreOptions {
        chain_key,
        audit_shards: registry.store.audit_shards,
        single_writer: false,
        accept_rollback: false,
        pool_size: registry.store.pool_size,
        statement_timeout: registry.store.statement_timeout,
    }
}

/// The store URL in force: `ONCEGATE_STORE_URL` when set and not empty, else the
/// registry's `[store] url`.
pub fn registry_store_url(registry: &Registry) -> String {
    match std::env::var(STORE_URL_ENV) {
        Ok(url) if !url.trim().is_empty() => url.trim().to_owned(),
        _ => registry.store_url.clone(),
    }
}

/// Where the registry's store URL points (see [`location`]).
pub fn registry_location(registry: &Registry) -> Result<Location, StoreError> {
    location(&registry_store_url(registry), &registry_dir(registry))
}

fn registry_dir(registry: &Registry) -> PathBuf {
    registry
        .source
        .parent()
        .map(Path::to_owned)
        .unwrap_or_default()
}

/// Where a URL points, without opening anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// A PostgreSQL database: the URL as written (it may carry a password; `Display`
    /// shows its userinfo and query values as `***`).
    Postgres(String),
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            Location::Postgres(url) => write!(f, "{}", redact::url(url)),
        }
    }
}

/// Parses a store URL (relative paths against `base_dir`); an unknown scheme is
/// [`StoreError::UnsupportedUrl`], naming the supported ones.
pub fn location(url: &str, base_dir: &Path) -> Result<Location, StoreError> {
    if let Some(rest) = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))
    {
        if rest.is_empty() || rest.starts_with(['/', '?']) {
            return Err(StoreError::UnsupportedUrl(redact::url(url)));
        }
        return Ok(Location::Postgres(url.to_owned()));
    }
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .filter(|rest| !rest.is_empty())
        .ok_or_else(|| StoreError::UnsupportedUrl(redact::url(url)))?;
    let path = Path::new(rest);
    Ok(Location::Sqlite(if path.is_absolute() {
        path.to_owned()
    } else {
        base_dir.join(path)
    }))
}

impl Store {
    /// The store's clock: the one time authority of every decision on this store (the
    /// database's `now()` as this process reads it, the embedded store's boot-clock
    /// timeline; a memory store's own clock, else the system's). See [`crate::clock`].
    pub fn clock(&self) -> Arc<dyn Clock> {
        match self {
            Store::Sqlite(s) => s.clock(),
            Store::Postgres(s) => s.clock(),
            #[cfg(feature = "testing")]
            Store::Memory(s) => s
                .clock()
                .unwrap_or_else(|| Arc::new(crate::clock::SystemClock)),
        }
    }

    /// Where the store's timeline resumed over a gap of unknown length (SQLite after a
    /// reboot), which the engine judges what ran across it by; `None` for a store whose
    /// time never had a gap (PostgreSQL's `now()`, a memory store).
    pub fn resumption(&self) -> Option<crate::clock::Resumption> {
        match self {
            Store::Sqlite(s) => s.resumption(),
            Store::Postgres(_) => None,
            #[cfg(feature = "testing")]
            Store::Memory(_) => None,
        }
    }

    /// When a rollback of the store to an earlier state was accepted (`oncegate serve
    /// --accept-rollback`), if ever: intents it may have forgotten are read before they
    /// execute (see [`crate::serve_anchor`]).
    pub fn rollback_accepted_at(&self) -> Option<jiff::Timestamp> {
        match self {
            Store::Sqlite(s) => s.rollback_accepted_at(),
            Store::Postgres(s) => s.rollback_accepted_at(),
            #[cfg(feature = "testing")]
            Store::Memory(_) => None,
        }
    }

    /// Who keeps the store's time, for people (`/readyz`, logs).
    pub fn clock_authority(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => crate::sqlite::clock::AUTHORITY,
            Store::Postgres(_) => crate::postgres::CLOCK_AUTHORITY,
            #[cfg(feature = "testing")]
            Store::Memory(s) if s.clock().is_some() => "the memory store's own clock",
            #[cfg(feature = "testing")]
            Store::Memory(_) => "this host's clock (a memory store without a clock)",
        }
    }

    /// The backend's name, as trace spans carry it.
    pub fn backend(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => "sqlite",
            Store::Postgres(_) => "postgres",
            #[cfg(feature = "testing")]
            Store::Memory(_) => "memory",
        }
    }

    /// The store's identity, written once when its schema was created (`memory` for
    /// the in-memory backend).
    pub fn store_id(&self) -> &str {
        match self {
            Store::Sqlite(s) => s.store_id(),
            Store::Postgres(s) => s.store_id(),
            #[cfg(feature = "testing")]
            Store::Memory(_) => "memory",
        }
    }

    /// The chain key this store seals with, if any.
    pub fn chain_key(&self) -> Option<&ChainKey> {
        match self {
            Store::Sqlite(s) => s.chain_key(),
            Store::Postgres(s) => s.chain_key(),
            #[cfg(feature = "testing")]
            Store::Memory(_) => None,
        }
    }

    /// Where the store lives, for people (a SQLite store's file path, a PostgreSQL
    /// URL without its password).
    pub fn describe(&self) -> String {
        match self {
            Store::Sqlite(s) => s.path().display().to_string(),
            Store::Postgres(s) => s.describe().to_owned(),
            #[cfg(feature = "testing")]
            Store::Memory(_) => "memory".into(),
        }
    }

    /// The database file, for a backend that has one (state kept beside it, such as MCP
    /// sessions today, goes there).
    pub fn path(&self) -> Option<&Path> {
        match self {
            Store::Sqlite(s) => Some(s.path()),
            Store::Postgres(_) => None,
            #[cfg(feature = "testing")]
            Store::Memory(_) => None,
        }
    }

    /// Releases the backend's connections (a clone still held keeps working where the
    /// backend allows).
    pub async fn close(&self) {
        match self {
            Store::Sqlite(s) => s.close().await,
            Store::Postgres(s) => s.close().await,
            #[cfg(feature = "testing")]
            Store::Memory(_) => {}
        }
    }
}

/// Forwards one call to the backend `$store` holds, bound to `$s`: the one `match` over
/// the backends, so each trait method of [`Store`] below is a line.
macro_rules! each_backend {
    ($store:expr, $s:ident => $call:expr) => {
        match $store {
            Store::Sqlite($s) => $call,
            Store::Postgres($s) => $call,
            #[cfg(feature = "testing")]
            Store::Memory($s) => $call,
        }
    };
}

impl IntentsRead for Store {
    async fn load(&self, key: &IntentKey) -> Result<Option<IntentRecord>, StoreError> {
        each_backend!(self, s => s.load(key).await)
    }

    async fn load_to_claim(&self, key: &IntentKey) -> Result<Option<IntentRecord>, StoreError> {
        each_backend!(self, s => s.load_to_claim(key).await)
    }

    async fn load_generation(
        &self,
        key: &IntentKey,
        generation: u32,
    ) -> Result<Option<IntentRecord>, StoreError> {
        each_backend!(self, s => s.load_generation(key, generation).await)
    }

    async fn find_other_run(
        &self,
        cross_key: &IntentKey,
        run_id: Option<&str>,
    ) -> Result<Option<IntentRecord>, StoreError> {
        each_backend!(self, s => s.find_other_run(cross_key, run_id).await)
    }

    async fn list_intents(
        &self,
        filter: &IntentFilter,
    ) -> Result<Listing<IntentRecord>, StoreError> {
        each_backend!(self, s => s.list_intents(filter).await)
    }

    async fn approval(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        each_backend!(self, s => s.approval(id).await)
    }

    async fn list_approvals(
        &self,
        filter: &crate::ApprovalFilter,
    ) -> Result<Listing<Approval>, StoreError> {
        each_backend!(self, s => s.list_approvals(filter).await)
    }

    async fn pending_approvals_of(
        &self,
        principal: &str,
        now: jiff::Timestamp,
    ) -> Result<u32, StoreError> {
        each_backend!(self, s => s.pending_approvals_of(principal, now).await)
    }

    async fn stored_rows(&self) -> Result<Vec<StoredRow>, StoreError> {
        each_backend!(self, s => s.stored_rows().await)
    }

    async fn stored_controls(&self) -> Result<Vec<StoredRow>, StoreError> {
        each_backend!(self, s => s.stored_controls().await)
    }
}

impl IntentsWrite for Store {
    /// Every commit of every backend passes here: its trace span (a child of the
    /// decision that made it) is opened once, for all of them.
    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let span = tracing::info_span!(
            "oncegate.store.commit",
            oncegate.store = self.backend(),
            oncegate.audit_kind = commit.event.kind.as_str(),
            otel.status_code = tracing::field::Empty,
        );
        let committed = async { each_backend!(self, s => s.commit(commit).await) }
            .instrument(span.clone())
            .await;
        if committed.is_err() {
            span.record("otel.status_code", "ERROR");
        }
        committed
    }

    async fn bind_client_key(
        &self,
        binding: ClientKeyBinding,
    ) -> Result<ClientKeyBinding, StoreError> {
        each_backend!(self, s => s.bind_client_key(binding).await)
    }
}

impl AuditRead for Store {
    async fn audit_after(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, AuditRecord)>, StoreError> {
        each_backend!(self, s => s.audit_after(after, limit).await)
    }

    async fn audit_shard(&self, shard: u32) -> Result<Vec<AuditRecord>, StoreError> {
        each_backend!(self, s => s.audit_shard(shard).await)
    }

    async fn audit_shard_after(
        &self,
        shard: u32,
        after: u64,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        each_backend!(self, s => s.audit_shard_after(shard, after, limit).await)
    }

    async fn audit_checkpoint(&self) -> Result<Option<String>, StoreError> {
        each_backend!(self, s => s.audit_checkpoint().await)
    }

    async fn audit_shards(&self) -> Result<Vec<u32>, StoreError> {
        each_backend!(self, s => s.audit_shards().await)
    }

    async fn audit_of_intent(
        &self,
        key: &IntentKey,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        each_backend!(self, s => s.audit_of_intent(key, limit).await)
    }
}

impl AuditWrite for Store {
    async fn put_audit_checkpoint(&self, checkpoint: String) -> Result<(), StoreError> {
        each_backend!(self, s => s.put_audit_checkpoint(checkpoint).await)
    }
}

impl SharedRead for Store {
    async fn kill_switches(&self) -> Result<Vec<KillSwitch>, StoreError> {
        each_backend!(self, s => s.kill_switches().await)
    }

    async fn mcp_session(&self, id: &str) -> Result<Option<McpSession>, StoreError> {
        each_backend!(self, s => s.mcp_session(id).await)
    }
}

impl SharedWrite for Store {
    async fn put_mcp_session(&self, session: McpSession) -> Result<(), StoreError> {
        each_backend!(self, s => s.put_mcp_session(session).await)
    }

    async fn delete_mcp_session(
        &self,
        id: &str,
        idle_before: jiff::Timestamp,
    ) -> Result<(), StoreError> {
        each_backend!(self, s => s.delete_mcp_session(id, idle_before).await)
    }

    async fn claim_work(
        &self,
        work: &str,
        owner: &str,
        now: jiff::Timestamp,
        ttl: jiff::SignedDuration,
    ) -> Result<bool, StoreError> {
        each_backend!(self, s => s.claim_work(work, owner, now, ttl).await)
    }

    async fn release_work(&self, work: &str, owner: &str) -> Result<(), StoreError> {
        each_backend!(self, s => s.release_work(work, owner).await)
    }
}

impl LimitsRead for Store {
    async fn limit_used(&self, scope: &str, since: jiff::Timestamp) -> Result<i64, StoreError> {
        each_backend!(self, s => s.limit_used(scope, since).await)
    }

    async fn findings(
        &self,
        limit: u32,
        after: Option<&crate::PageAfter>,
    ) -> Result<Vec<crate::FindingRow>, StoreError> {
        each_backend!(self, s => s.findings(limit, after).await)
    }

    async fn findings_due(
        &self,
        now: jiff::Timestamp,
        limit: u32,
    ) -> Result<Vec<crate::FindingRow>, StoreError> {
        each_backend!(self, s => s.findings_due(now, limit).await)
    }

    async fn ledgers(&self) -> Result<crate::LimitLedgers, StoreError> {
        each_backend!(self, s => s.ledgers().await)
    }
}

impl LimitsWrite for Store {
    async fn finding_delivery(
        &self,
        id: &str,
        attempts: u32,
        delivered_at: Option<jiff::Timestamp>,
        next_attempt_at: Option<jiff::Timestamp>,
    ) -> Result<(), StoreError> {
        each_backend!(self, s => s.finding_delivery(id, attempts, delivered_at, next_attempt_at) .await)
    }
}

impl PinsRead for Store {
    async fn tool_pins(&self) -> Result<Vec<crate::ToolPin>, StoreError> {
        each_backend!(self, s => s.tool_pins().await)
    }
}

impl PinsWrite for Store {
    async fn pin_tool(&self, offered: crate::OfferedTool) -> Result<crate::ToolPin, StoreError> {
        each_backend!(self, s => s.pin_tool(offered).await)
    }

    async fn accept_tool(
        &self,
        server: &str,
        tool: &str,
        digest: &str,
        by: &str,
        at: jiff::Timestamp,
    ) -> Result<bool, StoreError> {
        each_backend!(self, s => s.accept_tool(server, tool, digest, by, at).await)
    }
}

impl Backend for Store {
    async fn ping(&self) -> Result<(), StoreError> {
        each_backend!(self, s => s.ping().await)
    }
}
