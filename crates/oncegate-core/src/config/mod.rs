//! The capability registry: the validated model of the TOML config, its errors and its
//! defaults.
//!
//! Policy is a property of the capability, declared here, not of whoever wrote the agent.
//! Every error names the file, the line and the field, and says how to fix it. This
//! module does no I/O: the caller hands in the text and a [`ConfigEnv`] that reads policy
//! files and resolves time zones.
//!
//! This file only names the parts; they are layered so that no import runs back up.
//! At the bottom the model: `upstream` (how a capability reaches its provider),
//! `detection` (duplicate rules, listings, limits), `capability` (the capability and
//! its key recipe, holding its compiled policy as data), `settings` (principals, store
//! and gateway settings), `identity`, `servers`, `connections`, `telemetry`, and `error`
//! (located errors and warnings). Key derivation (`crate::key`) and policy evaluation
//! (`crate::policy`) sit above the model. Above them, `registry` is the assembled
//! [`Registry`], and reading the text is `raw` (the TOML shapes serde reads, unknown
//! fields refused), `locate` (byte offsets and field paths to file:line:column) and
//! `build` (the raw shapes validated into the model, policies compiled:
//! [`Registry::parse`]).

mod build;
mod capability;
mod connections;
mod detection;
mod error;
mod identity;
mod locate;
mod raw;
mod registry;
mod servers;
mod settings;
mod telemetry;
mod upstream;

pub use build::FrontedAs;
pub use capability::{
    AfterWindow, Capability, Category, CrossRun, DEFAULT_LATE_PROCESSING, KeyPrincipal, KeyRecipe,
    OnUnknown, Scope, SignificantArg,
};
pub use connections::ConnectionSettings;
pub use detection::{
    DuplicateRule, Escalation, HoldOn, Limit, LimitPer, Listing, MatchOn, Measure, OverLimit,
};
pub use error::{ConfigError, ConfigErrors, ConfigWarning};
pub use identity::{
    ACCEPTABLE_ALGORITHMS, DEFAULT_ALGORITHMS, IdentitySettings, IssuerConfig, JwksSource,
    RoleValues, normal_typ,
};
pub use registry::{ConfigEnv, Registry};
pub use servers::{MAX_TOOL_NAME, McpServer, Undeclared, fronted_name, is_tool_name};
pub use settings::{
    AUDIT_SHARDS, DEFAULT_LISTEN, DEFAULT_MCP_SESSIONS_PER_PRINCIPAL,
    DEFAULT_PENDING_APPROVALS_PER_AGENT, DEFAULT_STORE_URL, GatewaySettings, MAX_BUDGET,
    PrincipalConfig, Role, StoreSettings,
};
pub use telemetry::{DEFAULT_SERVICE_NAME, TelemetrySettings};
pub use upstream::{
    BodyTemplate, DEFAULT_READ_BACK, DEFAULT_READ_BACK_EVERY, KeyThreading,
    MCP_LATE_ANSWER_LIMIT_SECS, Pattern, ReadBack, Reconcile, ToolErrors, Upstream, UpstreamKind,
};
