//! Limits and findings: reservations against budgets and their ledgers, and detection
//! findings with their delivery outbox. [`LimitsRead`] / [`LimitsWrite`]. Reservations
//! and a new finding are written inside a commit ([`crate::Commit`]).

use std::future::Future;

use crate::api::finding::FindingRow;
use crate::api::page::PageAfter;
use crate::error::StoreError;
use crate::ledger::LimitLedgers;

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

/// A claim's reservation against one limit's budget (see [`crate::Commit::reservations`]).
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

// Here rather than beside `of_intent` in `page.rs`: a page position is below every
// listing, and a finding is one of them.
impl PageAfter {
    /// The position of a finding in the findings listing.
    pub fn of_finding(f: &FindingRow) -> Self {
        Self {
            at: f.raised_at,
            id: f.id.clone(),
            generation: 0,
        }
    }
}

/// Reads of limits and findings.
pub trait LimitsRead: Send + Sync {
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
}

/// Writes of limits and findings outside a commit: a finding's delivery.
pub trait LimitsWrite: Send + Sync {
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
