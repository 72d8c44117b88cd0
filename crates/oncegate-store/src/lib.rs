//! oncegate-store: where intents, approvals and the audit chain live.
//!
//! The [`StoreRead`] / [`StoreWrite`] traits are all a backend provides: loads and one
//! atomic compare-and-set of (intent record, approval, audit event). Every decision is
//! made by `oncegate_core::decide`; a lost race re-reads and re-decides. The SQLite
//! backend is the embedded default; PostgreSQL joins behind the same traits and the
//! same [`conformance`] suite. [`Gate`] is the in-process engine a Rust agent runtime
//! (and the gateway) drives.

use std::future::Future;
use std::path::Path;

use oncegate_core::audit::{AuditEvent, AuditRecord};
use oncegate_core::config::{ConfigEnv, ConfigErrors, Registry};
use oncegate_core::intent::{Approval, ApprovalState, IntentRecord, IntentState};
use oncegate_core::key::IntentKey;

pub mod clock;
pub mod conformance;
pub mod gate;
pub mod memory;
pub mod process;
pub mod sqlite;

pub use clock::{Clock, ManualClock, SystemClock, TokioClock};
pub use gate::{Call, Executor, Gate, GateError, IntentHandle};
pub use memory::MemoryStore;
pub use process::Process;
pub use sqlite::SqliteStore;

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
    /// The URL names no supported backend.
    #[error(
        "unsupported store URL `{0}`: use sqlite://PATH (PostgreSQL arrives with the replicas issue)"
    )]
    UnsupportedUrl(String),
}

/// A filter for listing intents.
#[derive(Clone, Debug, Default)]
pub struct IntentFilter {
    /// Only this state.
    pub state: Option<IntentState>,
    /// Only this capability.
    pub capability: Option<String>,
    /// Only intents whose breaker is tripped.
    pub breaker_tripped: bool,
    /// At most this many; 0 means 100.
    pub limit: u32,
    /// Oldest first (the sweep, so no intent starves behind newer ones); newest first
    /// otherwise.
    pub oldest_first: bool,
}

/// One atomic write: the intent, an approval, and the audit event that explains them.
#[derive(Clone, Debug)]
pub struct Commit {
    /// The record to write. `version == 0` inserts a new (key, generation) and
    /// conflicts if it exists; otherwise the stored version must equal `version`.
    /// The stored version becomes `version + 1`.
    pub record: Option<IntentRecord>,
    /// The approval, with the same version rule.
    pub approval: Option<Approval>,
    /// The audit event, chained inside the same transaction.
    pub event: AuditEvent,
}

/// A coded orchestrator's own `Idempotency-Key`, bound to the intent it first named.
/// Scoped to (principal, capability).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientKeyBinding {
    /// The principal that sent it.
    pub principal: String,
    /// The capability it was sent for.
    pub capability: String,
    /// The client's key.
    pub client_key: String,
    /// The intent it names.
    pub intent_key: IntentKey,
    /// The digest of the significant arguments it was first sent with.
    pub args_digest: String,
    /// When it was first seen.
    pub created_at: jiff::Timestamp,
}

/// Reads.
pub trait StoreRead: Send + Sync {
    /// The latest generation of an intent.
    fn load(
        &self,
        key: &IntentKey,
    ) -> impl Future<Output = Result<Option<IntentRecord>, StoreError>> + Send;
    /// One generation of an intent.
    fn load_generation(
        &self,
        key: &IntentKey,
        generation: u32,
    ) -> impl Future<Output = Result<Option<IntentRecord>, StoreError>> + Send;
    /// An intent with the same cross-run key issued by another run (live or applied).
    fn find_other_run(
        &self,
        cross_key: &IntentKey,
        run_id: Option<&str>,
    ) -> impl Future<Output = Result<Option<IntentRecord>, StoreError>> + Send;
    /// Intents, newest first.
    fn list_intents(
        &self,
        filter: &IntentFilter,
    ) -> impl Future<Output = Result<Vec<IntentRecord>, StoreError>> + Send;
    /// One approval.
    fn approval(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Approval>, StoreError>> + Send;
    /// Approvals, oldest first.
    fn list_approvals(
        &self,
        state: Option<ApprovalState>,
    ) -> impl Future<Output = Result<Vec<Approval>, StoreError>> + Send;
    /// Audit records after a global position, in order, with their positions.
    fn audit_after(
        &self,
        after: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<(i64, AuditRecord)>, StoreError>> + Send;
    /// One shard's records in sequence order.
    fn audit_shard(
        &self,
        shard: u32,
    ) -> impl Future<Output = Result<Vec<AuditRecord>, StoreError>> + Send;
    /// The shards that have records.
    fn audit_shards(&self) -> impl Future<Output = Result<Vec<u32>, StoreError>> + Send;
    /// Cheap liveness check (readiness).
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Writes.
pub trait StoreWrite: Send + Sync {
    /// Applies one commit atomically, or returns [`StoreError::Conflict`] having changed
    /// nothing.
    fn commit(&self, commit: Commit) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Binds a client key to an intent unless it is already bound; returns the binding
    /// that holds (the first one).
    fn bind_client_key(
        &self,
        binding: ClientKeyBinding,
    ) -> impl Future<Output = Result<ClientKeyBinding, StoreError>> + Send;
}

/// A full store.
pub trait Store: StoreRead + StoreWrite + Clone + 'static {}
impl<T: StoreRead + StoreWrite + Clone + 'static> Store for T {}

/// The file-system side of config loading: policy files and the system tz database.
struct FsEnv;

impl ConfigEnv for FsEnv {
    fn read_file(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn time_zone(&self, name: &str) -> Option<jiff::tz::TimeZone> {
        jiff::tz::TimeZone::get(name).ok()
    }
}

/// Reads and validates a registry file (the I/O half of `Registry::parse`).
pub fn load_registry(path: &Path) -> Result<Registry, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![oncegate_core::config::ConfigError {
            file: path.to_owned(),
            line: 0,
            column: 0,
            field: String::new(),
            message: format!("cannot read the config file: {e}"),
            help: Some("pass --config PATH to an existing file".into()),
        }])
    })?;
    Registry::parse(path, &text, &FsEnv)
}

/// Resolves a `sqlite://` URL relative to the config file's directory.
pub fn resolve_sqlite_path(url: &str, config_dir: &Path) -> Option<std::path::PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = Path::new(rest);
    Some(if path.is_absolute() {
        path.to_owned()
    } else {
        config_dir.join(path)
    })
}
