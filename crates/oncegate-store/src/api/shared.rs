//! State every replica decides with, beside intents: kill switches (and holds), MCP
//! sessions and work claims. [`SharedRead`] / [`SharedWrite`]. A switch is set or
//! cleared inside a commit ([`crate::Commit::kill_switch`]), with its audit event.

use std::future::Future;

use crate::error::StoreError;

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

/// Reads of shared state.
pub trait SharedRead: Send + Sync {
    /// The kill switches that are on, by target.
    fn kill_switches(&self) -> impl Future<Output = Result<Vec<KillSwitch>, StoreError>> + Send;
    /// A stored MCP session.
    fn mcp_session(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<McpSession>, StoreError>> + Send;
}

/// Writes of shared state outside the audit chain.
pub trait SharedWrite: Send + Sync {
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
    fn release_work(
        &self,
        work: &str,
        owner: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}
