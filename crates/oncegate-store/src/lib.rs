//! oncegate-store: where intents, approvals and the audit chain live.
//!
//! The [`StoreRead`] / [`StoreWrite`] traits are all a backend provides: loads and one
//! atomic compare-and-set of (intent record, approval, audit event). Every decision is
//! made by `oncegate_core::decide`; a lost race re-reads and re-decides. The SQLite
//! backend is the embedded default; PostgreSQL joins behind the same traits and the
//! same [`conformance`] suite. [`open`] turns a store URL into a [`Store`] (the one
//! place a backend is chosen); the engine (`oncegate-engine`) and everything above it
//! hold a `Store` and never name a backend type.
//!
//! Who seals the audit chain: the backend, inside the transaction of each commit. The
//! engine hands over an [`AuditEvent`]; the backend reads the head of the event's shard,
//! links the new record to it (hash of its predecessor, next sequence number), seals it
//! (SHA-256, or HMAC-SHA256 under the chain key) and writes it with the rows it
//! explains. A backend must read the head from the store inside that transaction, not
//! from memory it kept: another writer (another replica on a shared database) may have
//! appended since. SQLite has one writer per file, so it may cache heads in its writer
//! task; a shared backend locks the shard's head row (`SELECT ... FOR UPDATE`) instead.
//!
//! Why one file, for now: the traits, the commit and the row types every backend shares
//! are the store API itself, and it is one wide trait pair (intents, approvals, audit,
//! sessions, work claims, findings, switches, limits, pins). Issue 34 cuts it by table (a
//! read/write trait pair per concern, one place that decodes each row kind); this file
//! splits along that cut then, rather than along a second cut now.

use std::future::Future;
use std::path::Path;

use oncegate_core::audit::{AuditEvent, AuditRecord, StoredRow};
use oncegate_core::codes::Code;
use oncegate_core::config::{ConfigEnv, ConfigErrors, Registry};
use oncegate_core::intent::{Approval, ApprovalState, IntentRecord, IntentState};
use oncegate_core::key::IntentKey;

pub mod audit_check;
pub mod clock;
pub mod conformance;
mod controls;
mod key_since;
mod ledger;
pub use ledger::LimitLedgers;
mod listing;
pub mod memory;
mod open;
mod options;
pub mod postgres;
mod rows;
mod serve_anchor;
pub mod sqlite;
pub mod storage;

pub use memory::MemoryStore;
pub use open::{
    Location, Migrated, STORE_URL_ENV, SUPPORTED_SCHEMES, Serving, Store, location,
    migrate_registry_store, open, open_registry_store, open_registry_store_with, registry_location,
    registry_store_options, registry_store_url,
};
pub use options::{DEFAULT_POOL_SIZE, DEFAULT_STATEMENT_TIMEOUT, OpenMode, StoreOptions};
pub use postgres::PgStore;
pub use sqlite::SqliteStore;
pub use storage::{ApprovalRowV1, AuditRowV1, IntentRowV1, LeaseV1, ReasonV1};

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

/// A listing: the rows that decode, and every row that does not, by key, so one
/// unreadable row never hides the others.
#[derive(Clone, Debug)]
pub struct Listing<T> {
    /// The rows that decoded (and match their seal).
    pub items: Vec<T>,
    /// The rows that did not, in listing order.
    pub unreadable: Vec<UnreadableRow>,
    /// Where the next page starts, when rows remain past this one's limit; `None` on
    /// the last page.
    pub next: Option<PageAfter>,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            unreadable: Vec::new(),
            next: None,
        }
    }
}

/// Where a page of a listing ends: the sort position of its last row. The next page is
/// the rows strictly after it in the listing's order (keyset paging, never OFFSET: a
/// row written meanwhile neither shifts a later page nor is listed twice).
///
/// `at` is the row's sort time (an intent's `updated_at`, an approval's `created_at`, a
/// finding's `raised_at`), `id` its key or id, `generation` an intent's generation (0
/// otherwise); ties in time are ordered by id, then generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageAfter {
    /// The row's sort time.
    pub at: jiff::Timestamp,
    /// The intent key, approval id or finding id.
    pub id: String,
    /// The intent's generation; 0 for approvals and findings.
    pub generation: u32,
}

impl PageAfter {
    /// The position of an intent record in the intent listing.
    pub fn of_intent(r: &IntentRecord) -> Self {
        Self {
            at: r.updated_at,
            id: r.key.as_str().to_owned(),
            generation: r.generation,
        }
    }

    /// The position of an approval in the approval listing.
    pub fn of_approval(a: &Approval) -> Self {
        Self {
            at: a.created_at,
            id: a.id.clone(),
            generation: 0,
        }
    }

    /// The position of a finding in the findings listing.
    pub fn of_finding(f: &FindingRow) -> Self {
        Self {
            at: f.raised_at,
            id: f.id.clone(),
            generation: 0,
        }
    }
}

/// A filter and a page of the approval listing.
#[derive(Clone, Debug, Default)]
pub struct ApprovalFilter {
    /// Only this state.
    pub state: Option<ApprovalState>,
    /// At most this many; 0 means every one (the store's own readers).
    pub limit: u32,
    /// Newest first (the console's recent decisions); oldest first otherwise (the
    /// queue, in the order calls were held).
    pub newest_first: bool,
    /// Only approvals after this position in the listing's order.
    pub after: Option<PageAfter>,
}

/// A row a listing could not return.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UnreadableRow {
    /// Intent key or approval id.
    pub key: String,
    /// The generation (intents).
    pub generation: Option<u32>,
    /// Why it cannot be returned.
    pub problem: String,
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
    /// Only intents last written at or after this time (the detection ledger's span).
    pub updated_since: Option<jiff::Timestamp>,
    /// Only this run's intents.
    pub run_id: Option<String>,
    /// Only intents with this (normalised) business reference.
    pub business_ref: Option<String>,
    /// Only intents after this position in the listing's order (the next page).
    pub after: Option<PageAfter>,
}

/// One atomic write: the intent, an approval, a kill switch, and the audit event that
/// explains them.
#[derive(Clone, Debug)]
pub struct Commit {
    /// The record to write. `version == 0` inserts a new (key, generation) and
    /// conflicts if it exists; otherwise the stored version must equal `version`.
    /// The stored version becomes `version + 1`.
    pub record: Option<IntentRecord>,
    /// The approval, with the same version rule.
    pub approval: Option<Approval>,
    /// The audit event, chained inside the same transaction. Its `at` is the engine's
    /// "now" for this decision: a backend that keeps leases by its own clock measures a
    /// new lease's length as `lease.expires_at - event.at`.
    pub event: AuditEvent,
    /// The decision replaced an in-flight attempt's lease that the engine judged
    /// expired by its own clock (a takeover, or the expiry that makes an intent
    /// `unknown`). A backend shared by replicas re-judges that by the database's clock
    /// and refuses with [`StoreError::LeaseLive`], so a replica whose clock runs fast
    /// cannot steal a live lease; a single-process backend shares the engine's clock and
    /// ignores it.
    pub takes_over: bool,
    /// A kill switch this commit sets or clears, with its audit event.
    pub kill_switch: Option<KillSwitchChange>,
    /// Reservations against limits for the record's (key, generation), checked and
    /// made inside the commit's transaction: for each one not already active for this
    /// intent, the active reservations of its scope since `since` plus `amount` must
    /// stay within `max` (unless `enforce` is off), else [`StoreError::LimitReached`]
    /// and nothing is written. One already active is kept as it is: a repeat never
    /// reserves twice. A record written in a state that says its effect did not happen
    /// (anything but in flight, unknown or applied: see [`releases`]) releases what
    /// its (key, generation) reserved, in the same transaction.
    pub reservations: Vec<Reservation>,
    /// A finding to record. One with the same id already stored is
    /// [`StoreError::Conflict`] and nothing is written: each finding is raised once.
    pub finding: Option<FindingRow>,
    /// The decision holds only before this instant (an approval's expiry or TTL, which
    /// the decision relied on): a store judges it by its own clock (the database's
    /// `now()` on PostgreSQL) and answers [`StoreError::Conflict`], writing nothing,
    /// once it has passed, so the engine decides again.
    pub valid_until: Option<jiff::Timestamp>,
    /// A budget an admin reconciles (see [`LimitReconcile`]).
    pub limit_reconcile: Option<LimitReconcile>,
}

/// An admin's reconciliation of a budget refused because its reservations and its
/// ledger disagree. When the ledger holds (every entry linked, its head sealed by the
/// chain), the budget's reservations are rewritten from it: deleted ones come back,
/// edited ones are put right. When the ledger itself does not hold, nothing is trusted
/// unless `accept_table` says the admin accepts the reservations as found: the ledger is
/// then written again from them. Either way the commit's audit record says which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitReconcile {
    /// The budget (`name` or `name@principal`).
    pub scope: String,
    /// Accept the reservations as found when the ledger does not hold.
    pub accept_table: bool,
}

/// Whether writing `record` releases its reservations: its effect definitely did not
/// happen (failed, not applied, denied), or it waits for a human before its first
/// execution. A call held for a human after an execution whose outcome is unknown (an
/// escalated unknown first attempt) keeps its budget: that effect may have happened,
/// until a reconciliation says otherwise or the call is denied.
pub fn releases(record: &IntentRecord) -> bool {
    match record.state {
        IntentState::InFlight | IntentState::Unknown | IntentState::Applied => false,
        IntentState::PendingApproval => record.executions == 0,
        IntentState::Failed | IntentState::NotApplied | IntentState::Denied => true,
    }
}

/// A claim's reservation against one limit's budget (see [`Commit::reservations`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// The budget: the limit's name, or `name@principal`.
    pub scope: String,
    /// What the call takes (1, or minor units).
    pub amount: i64,
    /// The budget's size.
    pub max: i64,
    /// The window's start: reservations made before it no longer count.
    pub since: jiff::Timestamp,
    /// Off: reserve even over the budget (an approver let the call through).
    pub enforce: bool,
}

/// A detection finding as stored: its body is the engine's JSON; the columns are what
/// the outbox and listings query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FindingRow {
    /// Derived from what was found (rule and effects), so a rerun finds the same id.
    pub id: String,
    /// The rule that found it.
    pub rule: String,
    /// When it was raised.
    pub raised_at: jiff::Timestamp,
    /// The finding as JSON text.
    pub body: String,
    /// When the webhook took it (None: not yet, or no webhook).
    pub delivered_at: Option<jiff::Timestamp>,
    /// Deliveries tried.
    pub attempts: u32,
    /// When the next delivery is due.
    pub next_attempt_at: Option<jiff::Timestamp>,
    /// Why its stored row cannot be trusted (edited, not sealed by the audit chain), as
    /// read; None when written or when it checks.
    pub problem: Option<String>,
}

impl Commit {
    /// A commit of a record and/or an approval with its event.
    pub fn new(
        record: Option<IntentRecord>,
        approval: Option<Approval>,
        event: AuditEvent,
    ) -> Self {
        Self {
            record,
            approval,
            event,
            takes_over: false,
            kill_switch: None,
            reservations: Vec::new(),
            finding: None,
            valid_until: None,
            limit_reconcile: None,
        }
    }

    /// An audit event alone.
    pub fn event(event: AuditEvent) -> Self {
        Self::new(None, None, event)
    }

    /// Marks the commit as replacing a lease judged expired (see [`Commit::takes_over`]).
    pub fn taking_over(mut self, takes_over: bool) -> Self {
        self.takes_over = takes_over;
        self
    }

    /// Makes the commit hold only before `until` by the store's clock (see
    /// [`Commit::valid_until`]).
    pub fn valid_until(mut self, until: Option<jiff::Timestamp>) -> Self {
        self.valid_until = until;
        self
    }
}

/// A kill switch being set (`reason` Some) or cleared (None). `target` is
/// `capability:NAME` or `agent:NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillSwitchChange {
    /// What it switches off.
    pub target: String,
    /// Why (Some: on), or None: off again.
    pub reason: Option<String>,
    /// Who set it.
    pub actor: String,
    /// When.
    pub at: jiff::Timestamp,
}

/// A kill switch that is on.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct KillSwitch {
    /// `capability:NAME` or `agent:NAME`.
    pub target: String,
    /// Why it was switched off.
    pub reason: String,
    /// Who set it.
    pub set_by: String,
    /// When.
    pub set_at: jiff::Timestamp,
    /// Why its stored row cannot be trusted (edited, deleted, not sealed by the audit
    /// chain): such a switch is on, whatever its row says (fail closed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// A 2025-11-25 MCP session as the store keeps it, so a request that reaches another
/// replica (or this one after a restart) carries on.
#[derive(Clone, Debug, PartialEq)]
pub struct McpSession {
    /// rmcp's session id.
    pub id: String,
    /// The principal that opened it (the session binding `/mcp` enforces).
    pub principal: Option<String>,
    /// rmcp's `SessionState` as JSON (the client's `initialize` parameters).
    pub state: Option<serde_json::Value>,
    /// When it was last written.
    pub updated_at: jiff::Timestamp,
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
    /// The latest generation of an intent. A row that does not match the audit record
    /// that wrote it, or none where the audit chain says one was written (a deleted
    /// row), is [`StoreError::Integrity`]: never `Ok(None)`, which would re-execute.
    /// The same holds for [`StoreRead::load_generation`] and [`StoreRead::approval`].
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
    /// Intents, newest first (by `updated_at`, then key, then generation), one page of
    /// at most the filter's limit with [`Listing::next`] when more remain. A row that
    /// does not decode (or does not match its seal) is reported in
    /// [`Listing::unreadable`] by key, never fails the listing.
    fn list_intents(
        &self,
        filter: &IntentFilter,
    ) -> impl Future<Output = Result<Listing<IntentRecord>, StoreError>> + Send;
    /// One approval.
    fn approval(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Approval>, StoreError>> + Send;
    /// Approvals, oldest first (by `created_at`, then id; newest first when the filter
    /// says so), paged as in
    /// [`StoreRead::list_intents`]; unreadable rows as there.
    fn list_approvals(
        &self,
        filter: &ApprovalFilter,
    ) -> impl Future<Output = Result<Listing<Approval>, StoreError>> + Send;
    /// How many approvals of `principal`'s calls are pending and not expired at `now`
    /// (the `pending_approvals_per_agent` budget; counted from the rows as stored, no
    /// seal check: a budget, not a decision about any one call).
    fn pending_approvals_of(
        &self,
        principal: &str,
        now: jiff::Timestamp,
    ) -> impl Future<Output = Result<u32, StoreError>> + Send;
    /// Every intent and approval row with its seal and link, for
    /// `oncegate_core::audit::verify_rows` (`audit verify`).
    fn stored_rows(&self) -> impl Future<Output = Result<Vec<StoredRow>, StoreError>> + Send;
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
    /// Up to `limit` records of one shard after sequence number `after`, in order.
    fn audit_shard_after(
        &self,
        shard: u32,
        after: u64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<AuditRecord>, StoreError>> + Send;
    /// The shards that have records.
    fn audit_shards(&self) -> impl Future<Output = Result<Vec<u32>, StoreError>> + Send;
    /// The newest `limit` audit records naming intent `key` (every generation), in the
    /// order they were chained: the intent's timeline.
    fn audit_of_intent(
        &self,
        key: &IntentKey,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<AuditRecord>, StoreError>> + Send;
    /// Where the last clean `audit verify` ended (`audit_check::Checkpoint` as JSON).
    fn audit_checkpoint(&self) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;
    /// The kill switches that are on, by target.
    fn kill_switches(&self) -> impl Future<Output = Result<Vec<KillSwitch>, StoreError>> + Send;
    /// Every budget's ledger, its head and its reservations, for `audit verify`.
    fn ledgers(&self) -> impl Future<Output = Result<LimitLedgers, StoreError>> + Send;
    /// What a limit's scope holds in active reservations made at or after `since`.
    fn limit_used(
        &self,
        scope: &str,
        since: jiff::Timestamp,
    ) -> impl Future<Output = Result<i64, StoreError>> + Send;
    /// Findings, newest first (by `raised_at`, then id, both descending), at most
    /// `limit`, after `after` when given (the next page).
    fn findings(
        &self,
        limit: u32,
        after: Option<&PageAfter>,
    ) -> impl Future<Output = Result<Vec<FindingRow>, StoreError>> + Send;
    /// Findings not yet delivered whose next delivery is due at `now`, oldest first.
    fn findings_due(
        &self,
        now: jiff::Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<FindingRow>, StoreError>> + Send;
    /// A stored MCP session.
    fn mcp_session(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<McpSession>, StoreError>> + Send;
    /// Readiness: the store answers reads and can take a write now (a held write lock
    /// is not ready). Answers within about a second; never waits out a busy timeout.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Writes.
pub trait StoreWrite: Send + Sync {
    /// Applies one commit atomically, or returns [`StoreError::Conflict`] having changed
    /// nothing.
    ///
    /// The backend seals the audit chain here: inside the commit's transaction it reads
    /// the head of the event's shard (`AuditEvent::shard`) from the store, links and
    /// seals the new record after it (`oncegate_core::audit::seal_with`), writes it with
    /// the rows and their row seals, and moves the head. A backend shared by several
    /// writers must take the head under a row lock in that same transaction, so that a
    /// record another replica appended is the one it links to; only a backend that is
    /// the file's single writer (SQLite's writer task) may keep heads in memory.
    fn commit(&self, commit: Commit) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Binds a client key to an intent unless it is already bound; returns the binding
    /// that holds (the first one).
    fn bind_client_key(
        &self,
        binding: ClientKeyBinding,
    ) -> impl Future<Output = Result<ClientKeyBinding, StoreError>> + Send;
    /// Writes an MCP session's principal and/or state (a `None` keeps what is stored)
    /// and its `updated_at`; creates the session if it is new.
    fn put_mcp_session(
        &self,
        session: McpSession,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Forgets an MCP session, and every session not written since `idle_before`.
    fn delete_mcp_session(
        &self,
        id: &str,
        idle_before: jiff::Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Claims a piece of background work (e.g. `reconcile:<key>:<generation>`) for
    /// `owner` for `ttl`: true if it was free, expired, or already `owner`'s. Several
    /// replicas sweeping the same store so reconcile each intent one at a time. A shared
    /// backend judges expiry by the database's clock; single-process backends by `now`.
    fn claim_work(
        &self,
        work: &str,
        owner: &str,
        now: jiff::Timestamp,
        ttl: jiff::SignedDuration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Gives back work `owner` claimed (no-op if it is someone else's now).
    /// Replaces the `audit verify` checkpoint (outside the audit chain: it only saves
    /// the next verify a walk, and every checkpointed head is checked again).
    fn put_audit_checkpoint(
        &self,
        checkpoint: String,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    fn release_work(
        &self,
        work: &str,
        owner: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Records a delivery attempt of a finding: delivered (`delivered_at` Some), or
    /// due again at `next_attempt_at`.
    fn finding_delivery(
        &self,
        id: &str,
        attempts: u32,
        delivered_at: Option<jiff::Timestamp>,
        next_attempt_at: Option<jiff::Timestamp>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The definition a fronted MCP server offered for one of its tools, as oncegate pinned
/// it the first time it offered the tool to agents, and a later different one it has
/// seen since (held until an admin accepts it). Definitions are the gateway's canonical
/// JSON (description, input schema, annotations, output schema); the store compares
/// digests only.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ToolPin {
    /// The server's alias (`[[mcp_servers]] alias`).
    pub server: String,
    /// The server's own name for the tool.
    pub tool: String,
    /// The digest of the pinned definition (`sha256:<hex>` of its canonical JSON).
    pub digest: String,
    /// The pinned definition (canonical JSON text).
    pub definition: String,
    /// When it was pinned (first offered, or accepted).
    pub pinned_at: jiff::Timestamp,
    /// Who pinned it: `oncegate` when first offered, else the admin who accepted it.
    pub pinned_by: String,
    /// A different definition the server offers now, held until accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingTool>,
}

/// A changed definition, seen and held.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PendingTool {
    /// Its digest: what an admin names to accept it.
    pub digest: String,
    /// The definition (canonical JSON text).
    pub definition: String,
    /// When it was first seen.
    pub seen_at: jiff::Timestamp,
}

/// A definition a server offers now, for [`ToolPins::pin_tool`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfferedTool {
    /// The server's alias.
    pub server: String,
    /// The server's name for the tool.
    pub tool: String,
    /// The digest of `definition`.
    pub digest: String,
    /// The definition (canonical JSON text).
    pub definition: String,
    /// When it was read.
    pub at: jiff::Timestamp,
}

/// Pinned tool definitions of fronted MCP servers, shared by every replica on the
/// store: a pin one writes is the pin all honour. Kept outside the audit chain (the
/// engine audits a change and an acceptance with their own events).
pub trait ToolPins: Send + Sync {
    /// Every pin, by server and tool.
    fn tool_pins(&self) -> impl Future<Output = Result<Vec<ToolPin>, StoreError>> + Send;
    /// Records what a server offers for a tool now, in one atomic step: a tool without a
    /// pin is pinned to it; a definition equal to the pin clears any pending one; a
    /// different one becomes the pending definition (its `seen_at` kept while it stays
    /// the same). Answers the pin as it stands after.
    fn pin_tool(
        &self,
        offered: OfferedTool,
    ) -> impl Future<Output = Result<ToolPin, StoreError>> + Send;
    /// An admin accepts the pending definition whose digest is `digest`: it becomes the
    /// pin (pinned at `at` by `by`). False, and nothing written, when the tool's
    /// pending definition is not that one (none, another, or no such pin).
    fn accept_tool(
        &self,
        server: &str,
        tool: &str,
        digest: &str,
        by: &str,
        at: jiff::Timestamp,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// A backend: both halves, cheap to clone (clones share the store). [`Store`] is the
/// run-time choice among them.
pub trait Backend: StoreRead + StoreWrite + ToolPins + Clone + 'static {}
impl<T: StoreRead + StoreWrite + ToolPins + Clone + 'static> Backend for T {}

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

/// The audit chain key named by `[audit] chain_key_env`, read from the environment.
/// A named variable that is unset or empty is an error: records would otherwise be
/// written unkeyed without anyone noticing.
pub fn chain_key_from_env(
    registry: &Registry,
) -> Result<Option<oncegate_core::audit::ChainKey>, StoreError> {
    let Some(name) = &registry.audit_chain_key_env else {
        return Ok(None);
    };
    let secret = std::env::var(name).unwrap_or_default();
    oncegate_core::audit::ChainKey::new(secret.as_bytes())
        .map(Some)
        .ok_or_else(|| {
            StoreError::NotInitialised(format!(
                "`[audit] chain_key_env` names `{name}`, which is not set (or empty): set it to the audit chain key, or remove the setting"
            ))
        })
}
