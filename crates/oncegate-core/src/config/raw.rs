//! The raw TOML shapes serde reads, before any validation.
//!
//! Every table refuses unknown fields (`deny_unknown_fields`), so a misspelt control is an
//! error, never silently off. `build` turns these shapes into the validated model.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{
    AfterWindow, Category, CrossRun, Escalation, KeyPrincipal, KeyThreading, LimitPer, OnUnknown,
    OverLimit, Role, Scope, ToolErrors, Undeclared, UpstreamKind,
};
use crate::normalise::MoneyUnit;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) gateway: Option<RawGateway>,
    pub(super) store: Option<RawStore>,
    pub(super) audit: Option<RawAudit>,
    #[serde(default)]
    pub(super) principals: Vec<RawPrincipal>,
    #[serde(default)]
    pub(super) capabilities: Vec<RawCapability>,
    pub(super) identity: Option<RawIdentity>,
    #[serde(default)]
    pub(super) mcp_servers: Vec<RawMcpServer>,
    pub(super) telemetry: Option<RawTelemetry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    pub(super) otlp_endpoint: Option<String>,
    pub(super) service_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcpServer {
    pub(super) alias: String,
    pub(super) url: String,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) timeout: Option<String>,
    pub(super) undeclared: Option<Undeclared>,
    pub(super) refresh: Option<String>,
    pub(super) prefix: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIdentity {
    pub(super) resource: Option<String>,
    pub(super) resource_name: Option<String>,
    pub(super) authorization_servers: Option<Vec<String>>,
    pub(super) scopes_supported: Option<Vec<String>>,
    #[serde(default)]
    pub(super) issuers: Vec<RawIssuer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIssuer {
    pub(super) issuer: String,
    pub(super) jwks_url: Option<String>,
    pub(super) jwks_file: Option<String>,
    pub(super) algorithms: Option<Vec<String>>,
    pub(super) audience: Option<Vec<String>>,
    pub(super) clock_skew: Option<String>,
    pub(super) principal_claim: Option<String>,
    pub(super) principal_prefix: Option<String>,
    pub(super) role_claim: Option<String>,
    pub(super) roles: Option<RawRoles>,
    pub(super) default_role: Option<Role>,
    pub(super) jwks_max_age: Option<String>,
    pub(super) jwks_min_refetch: Option<String>,
    pub(super) token_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoles {
    pub(super) agent: Option<Vec<String>>,
    pub(super) approver: Option<Vec<String>>,
    pub(super) admin: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGateway {
    pub(super) tenant: Option<String>,
    pub(super) time_zone: Option<String>,
    pub(super) listen: Option<String>,
    pub(super) read_rate_per_second: Option<u32>,
    pub(super) auth_failures_per_minute: Option<u32>,
    pub(super) alert_webhook: Option<String>,
    pub(super) alert_webhook_secret_env: Option<String>,
    pub(super) mcp_allowed_hosts: Option<Vec<String>>,
    pub(super) mcp_allowed_origins: Option<Vec<String>>,
    pub(super) max_argument_bytes: Option<usize>,
    pub(super) max_argument_depth: Option<usize>,
    pub(super) max_answer_bytes: Option<usize>,
    pub(super) max_answer_depth: Option<usize>,
    pub(super) connections: Option<RawConnections>,
    pub(super) mcp_sessions_per_principal: Option<i64>,
    pub(super) pending_approvals_per_agent: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConnections {
    pub(super) max: Option<usize>,
    pub(super) per_address: Option<usize>,
    pub(super) first_byte_timeout: Option<String>,
    pub(super) idle_timeout: Option<String>,
    pub(super) http2_keep_alive: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    pub(super) url: Option<String>,
    pub(super) pool_size: Option<i64>,
    pub(super) statement_timeout: Option<String>,
    pub(super) audit_shards: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    pub(super) chain_key_env: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrincipal {
    pub(super) name: String,
    pub(super) role: Role,
    pub(super) token_env: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCapability {
    pub(super) name: String,
    pub(super) description: Option<String>,
    pub(super) category: Category,
    pub(super) key_principal: Option<KeyPrincipal>,
    pub(super) replay_window: Option<String>,
    pub(super) attempt_ceiling: Option<u32>,
    pub(super) lease: Option<String>,
    pub(super) settle_horizon: Option<String>,
    pub(super) approval_ttl: Option<String>,
    pub(super) on_unknown: Option<OnUnknown>,
    pub(super) cross_run: Option<CrossRun>,
    pub(super) after_window: Option<AfterWindow>,
    pub(super) dry_run: Option<bool>,
    pub(super) require_client_key: Option<bool>,
    pub(super) long_running: Option<bool>,
    pub(super) policy: Option<String>,
    pub(super) key: Option<RawKey>,
    pub(super) upstream: Option<RawUpstream>,
    pub(super) reconcile: Option<RawReconcile>,
    pub(super) input_schema: Option<toml::Value>,
    pub(super) duplicates: Option<RawDuplicates>,
    pub(super) listing: Option<RawListing>,
    #[serde(default)]
    pub(super) limits: Vec<RawLimit>,
    pub(super) traced_arguments: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDuplicates {
    pub(super) on: Vec<String>,
    pub(super) within: String,
    pub(super) every: Option<String>,
    pub(super) escalation: Option<Escalation>,
    pub(super) hold: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawListing {
    pub(super) kind: UpstreamKind,
    pub(super) url: Option<String>,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) tool: Option<String>,
    pub(super) timeout: Option<String>,
    pub(super) since_param: Option<String>,
    pub(super) cursor_param: Option<String>,
    pub(super) limit_param: Option<String>,
    pub(super) page_size: Option<u32>,
    #[serde(default)]
    pub(super) params: BTreeMap<String, String>,
    pub(super) items: Option<String>,
    pub(super) next: Option<String>,
    pub(super) effect_ref: String,
    pub(super) key: Option<String>,
    pub(super) at: Option<String>,
    pub(super) arguments: toml::Value,
}

/// A limit's `max`: a count (integer) or an amount (text, `"5000.00"`).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawMax {
    Count(i64),
    Amount(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimit {
    pub(super) name: Option<String>,
    pub(super) argument: Option<String>,
    pub(super) max: RawMax,
    pub(super) currency: Option<String>,
    pub(super) window: String,
    pub(super) per: Option<LimitPer>,
    pub(super) over: Option<OverLimit>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKey {
    pub(super) business_ref: Option<String>,
    pub(super) scope: Option<Scope>,
    #[serde(default)]
    pub(super) significant: Vec<RawSignificant>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(super) enum NormKind {
    Money,
    Email,
    Text,
    Integer,
    Decimal,
    Enum,
    Set,
    Id,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSignificant {
    pub(super) arg: String,
    #[serde(rename = "type")]
    pub(super) kind: NormKind,
    pub(super) optional: Option<bool>,
    pub(super) currency_arg: Option<String>,
    pub(super) default_currency: Option<String>,
    pub(super) unit: Option<MoneyUnit>,
    pub(super) allow_negative: Option<bool>,
    pub(super) case_fold: Option<bool>,
    pub(super) width_fold: Option<bool>,
    pub(super) values: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstream {
    pub(super) kind: UpstreamKind,
    pub(super) url: Option<String>,
    pub(super) server: Option<String>,
    pub(super) method: Option<String>,
    pub(super) timeout: Option<String>,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) body: Option<toml::Value>,
    pub(super) effect_ref: Option<String>,
    pub(super) idempotency: Option<KeyThreading>,
    pub(super) idempotency_header: Option<String>,
    pub(super) idempotency_arg: Option<String>,
    pub(super) tool: Option<String>,
    pub(super) tool_errors: Option<ToolErrors>,
    pub(super) rejected: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReconcile {
    pub(super) kind: UpstreamKind,
    pub(super) url: Option<String>,
    pub(super) method: Option<String>,
    pub(super) timeout: Option<String>,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) found: Option<String>,
    pub(super) effect_ref: Option<String>,
    pub(super) result: Option<String>,
    pub(super) tool: Option<String>,
    pub(super) arguments: Option<toml::Value>,
    pub(super) read_back: Option<u32>,
    pub(super) read_back_every: Option<String>,
}
