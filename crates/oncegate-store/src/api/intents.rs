//! Intents and approvals: [`IntentsRead`] / [`IntentsWrite`], their filters, and
//! [`Commit`], the one atomic write of (intent record, approval, audit event).
//!
//! Why `commit` lives here and not with the audit chain: every decision the engine
//! makes ends in one commit whose subject is an intent (or its approval), and the
//! audit record is sealed inside that commit's transaction because it explains those
//! rows. The switch, finding and reservations a commit may carry ride along for the
//! same reason: one decision, one transaction. The audit table itself is only
//! appended to through a commit; [`crate::AuditWrite`] holds what lives beside the
//! chain (the verify checkpoint).

use std::future::Future;

use oncegate_core::audit::{AuditEvent, StoredRow};
use oncegate_core::intent::{Approval, ApprovalState, IntentRecord, IntentState};
use oncegate_core::key::IntentKey;

use crate::api::finding::FindingRow;
use crate::api::limits::{LimitReconcile, Reservation};
use crate::api::page::{Listing, PageAfter};
use crate::api::shared::KillSwitchChange;
use crate::error::StoreError;

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

/// Reads of intents and approvals.
pub trait IntentsRead: Send + Sync {
    /// The latest generation of an intent. A row that does not match the audit record
    /// that wrote it, or none where the audit chain says one was written (a deleted
    /// row), is [`StoreError::Integrity`]: never `Ok(None)`, which would re-execute.
    /// The same holds for [`IntentsRead::load_generation`] and [`IntentsRead::approval`].
    fn load(
        &self,
        key: &IntentKey,
    ) -> impl Future<Output = Result<Option<IntentRecord>, StoreError>> + Send;
    /// [`IntentsRead::load`] for a call deciding whether to claim. A store may answer
    /// `Ok(None)` for a key it knows it holds nothing of without reading: the claim's
    /// insert is then the check (a row of that key, or a sealed generation above the
    /// one claimed, makes it a conflict, and the re-decision loads again). Nothing but
    /// a claim's first load may use it.
    fn load_to_claim(
        &self,
        key: &IntentKey,
    ) -> impl Future<Output = Result<Option<IntentRecord>, StoreError>> + Send {
        self.load(key)
    }
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
    /// [`IntentsRead::list_intents`]; unreadable rows as there.
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
    /// `oncegate_core::audit::verify_rows` (`audit verify`), and the rows of
    /// [`Self::stored_controls`].
    fn stored_rows(&self) -> impl Future<Output = Result<Vec<StoredRow>, StoreError>> + Send;
    /// Every kill-switch and finding row with its seal and link (those from before the
    /// chain sealed controls left out): what `audit verify --since-checkpoint` checks of
    /// the controls, without reading every intent.
    fn stored_controls(&self) -> impl Future<Output = Result<Vec<StoredRow>, StoreError>> + Send;
}

/// Writes of intents and approvals: the commit, and client-key bindings.
pub trait IntentsWrite: Send + Sync {
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
}
