//! Gateway-wide settings: who may call (principals and their roles), the store and the
//! gateway process's own limits, with their defaults.

use std::net::SocketAddr;

use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use super::connections::ConnectionSettings;
use crate::limits::Limits;
use crate::template::Template;

/// The default store URL when `[store]` is absent.
pub const DEFAULT_STORE_URL: &str = "sqlite://oncegate.db";
/// The default listen address of `oncegate serve`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// `[gateway] mcp_sessions_per_principal` when absent: live MCP sessions one principal
/// holds on one gateway process before its least recently used one is ended.
pub const DEFAULT_MCP_SESSIONS_PER_PRINCIPAL: u32 = 64;

/// `[gateway] pending_approvals_per_agent` when absent: pending approvals one agent may
/// have before a new held call of its is refused (OG-0058).
pub const DEFAULT_PENDING_APPROVALS_PER_AGENT: u32 = 100;

/// The most a per-principal budget may be.
pub const MAX_BUDGET: u32 = 1_000_000;

/// The default number of audit shards (`[store] audit_shards`). Changing it re-shards
/// only new records; verification walks whatever shards exist. Defined with the store
/// settings it is the default of, below the audit chain that shards by it.
pub const AUDIT_SHARDS: u32 = 16;

/// What a principal may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Calls capabilities.
    Agent,
    /// Decides approvals.
    Approver,
    /// Resets breakers, flips kill switches, reads everything.
    Admin,
}

impl Role {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Approver => "approver",
            Role::Admin => "admin",
        }
    }
}

/// A principal: who calls, from authentication only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrincipalConfig {
    /// The agent id.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// The environment variable holding its bearer token.
    pub token_env: String,
}

/// `[store]` settings beyond its URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreSettings {
    /// `pool_size`: the most database connections one gateway opens (PostgreSQL;
    /// default 10).
    pub pool_size: u32,
    /// `statement_timeout`: how long one statement may run before the database cancels
    /// it (PostgreSQL; default 5s).
    pub statement_timeout: std::time::Duration,
    /// `audit_shards`: how many hash chains new audit records spread over (default 16).
    pub audit_shards: u32,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            pool_size: 10,
            statement_timeout: std::time::Duration::from_secs(5),
            audit_shards: AUDIT_SHARDS,
        }
    }
}

/// Gateway-wide settings.
#[derive(Clone, Debug)]
pub struct GatewaySettings {
    /// The tenant every key is scoped to.
    pub tenant: String,
    /// The time zone of `day` scopes.
    pub time_zone: TimeZone,
    /// The time zone's name as configured.
    pub time_zone_name: String,
    /// Where `oncegate serve` listens.
    pub listen: SocketAddr,
    /// Per-principal cap on calls to `read` capabilities (burst of the same size).
    pub read_rate_per_second: u32,
    /// Failed authentications allowed per client address and per presented principal
    /// per minute (also the burst); 0: not throttled.
    pub auth_failures_per_minute: u32,
    /// Where alerts (cross-run duplicates, tripped breakers) are POSTed as JSON.
    pub alert_webhook: Option<Template>,
    /// The environment variable holding the secret findings sent to the webhook are
    /// signed with (HMAC-SHA256, `Oncegate-Signature`).
    pub alert_webhook_secret_env: Option<String>,
    /// `Host` values `/mcp` accepts (DNS-rebinding guard); loopback by default.
    pub mcp_allowed_hosts: Vec<String>,
    /// Browser `Origin`s `/mcp` accepts; empty: requests carrying an Origin are not
    /// checked against a list (requests without one always pass).
    pub mcp_allowed_origins: Vec<String>,
    /// Limits on call arguments and on stored upstream answers.
    pub limits: Limits,
    /// `[gateway.connections]`: connection caps and timeouts.
    pub connections: ConnectionSettings,
    /// Live MCP sessions one principal holds on one process; opening one more ends its
    /// least recently used session (never refuses the new one).
    pub mcp_sessions_per_principal: u32,
    /// Pending approvals one agent may have; a new held call beyond is refused
    /// (OG-0058).
    pub pending_approvals_per_agent: u32,
}
