//! The capability registry: the validated model of the TOML config, its errors and its
//! defaults.
//!
//! Policy is a property of the capability, declared here, not of whoever wrote the agent.
//! Every error names the file, the line and the field, and says how to fix it. This
//! module does no I/O: the caller hands in the text and a [`ConfigEnv`] that reads policy
//! files and resolves time zones.
//!
//! This file is the public model. Reading the text is split by concern: `raw` holds the
//! TOML shapes serde reads (unknown fields refused), `locate` turns byte offsets and field
//! paths into file:line:column, and `build` validates the raw shapes into this model
//! ([`Registry::parse`]).
//!
//! Why one file, for now: it is the model *and* the assembled [`Registry`] with its
//! compiled policy, which is why `policy.rs` and this file import each other. Issue 34
//! cuts it by concern (the basic model types below, the assembled Registry above, under a
//! `tidy` test that caps files at 700 lines); it is kept whole until then so that the code
//! the reliability and security issues moved here moves once, not twice.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use jiff::SignedDuration;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::normalise::{ArgPath, Normaliser};
use crate::policy::PolicyEngine;
use crate::template::Template;

mod build;
mod connections;
mod detection;
mod identity;
mod locate;
mod raw;
mod servers;
mod telemetry;

pub use build::FrontedAs;
pub use connections::ConnectionSettings;
pub use detection::{
    DuplicateRule, Escalation, HoldOn, Limit, LimitPer, Listing, MatchOn, Measure, OverLimit,
};
pub use identity::{
    ACCEPTABLE_ALGORITHMS, DEFAULT_ALGORITHMS, IdentitySettings, IssuerConfig, JwksSource,
    RoleValues, normal_typ,
};
pub use servers::{MAX_TOOL_NAME, McpServer, Undeclared, fronted_name, is_tool_name};
pub use telemetry::{DEFAULT_SERVICE_NAME, TelemetrySettings};

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

/// How long a provider may go on processing a request after its caller gave up, on top
/// of the upstream timeout, for the default settle horizon. Providers and the proxies
/// in front of them bound a request's processing by their own deadlines, commonly 60 s
/// (load balancers' idle timeouts, serverless and web-server request limits); twice
/// that leaves room for a queued request that started late.
pub const DEFAULT_LATE_PROCESSING: SignedDuration = SignedDuration::from_secs(120);

/// How long oncegate keeps an MCP upstream's `tools/call` running after its timeout (it
/// is never cancelled earlier: cancelling could abort an effect half-way), in seconds.
pub const MCP_LATE_ANSWER_LIMIT_SECS: u64 = 600;

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

/// The retry-safety category of a capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Fetch, search, list: passes through, no claim.
    Read,
    /// Set a field, upsert by key: retried freely under an attempt cap.
    IdempotentWrite,
    /// The upstream honours an idempotency key: retried only with the same key.
    Keyed,
    /// Send email, append to a ledger: never auto-retried.
    NonIdempotent,
}

impl Category {
    /// The config spelling (`non_idempotent`), for output a user compares with the
    /// config.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Read => "read",
            Category::IdempotentWrite => "idempotent_write",
            Category::Keyed => "keyed",
            Category::NonIdempotent => "non_idempotent",
        }
    }

    /// Whether a call of this category changes the world (and so is claimed, and
    /// refused when the store is down).
    pub fn is_consequential(self) -> bool {
        !matches!(self, Category::Read)
    }
}

/// Whether the principal enters the key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyPrincipal {
    /// Tenant-wide (default): two subagents charging one order are one intent.
    #[default]
    Tenant,
    /// Each principal has its own intents.
    Principal,
}

/// The structural part of the key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The run id.
    Run,
    /// The run id and the step id: the structural key.
    Step,
    /// The calendar date in the configured time zone.
    Day,
    /// No structural part: the business reference and arguments alone (default).
    #[default]
    Global,
}

/// What happens when a repeat finds an intent whose outcome is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUnknown {
    /// Ask the upstream's authoritative record (needs `[capabilities.reconcile]`);
    /// undecidable answers escalate to a human.
    Reconcile,
    /// Ask a human, saying the first attempt's status is unknown.
    Escalate,
    /// Refuse further calls on this intent.
    Refuse,
    /// Execute again with the same key (only `idempotent_write` and `keyed`, whose
    /// upstream dedupes on the key).
    Retry,
}

impl OnUnknown {
    /// The config spelling (`reconcile`).
    pub fn as_str(self) -> &'static str {
        match self {
            OnUnknown::Reconcile => "reconcile",
            OnUnknown::Escalate => "escalate",
            OnUnknown::Refuse => "refuse",
            OnUnknown::Retry => "retry",
        }
    }
}

/// What happens when the same intent arrives from another run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrossRun {
    /// Alert and go on.
    Allow,
    /// Alert and hold for a human.
    RequireApproval,
    /// Alert and refuse.
    Refuse,
}

/// What happens to a repeat after the replay window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfterWindow {
    /// A new generation, held for a human who is told it repeats an old intent.
    RequireApproval,
    /// A new generation through policy, executed if policy allows.
    Execute,
}

/// How the idempotency key reaches the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyThreading {
    /// An HTTP header (`idempotency_header`, default `Idempotency-Key`).
    Header,
    /// MCP `_meta["dev.oncegate/idempotency_key"]`.
    Meta,
    /// A tool or body argument named by `idempotency_arg`.
    Argument,
    /// Not threaded: the upstream cannot dedupe (never valid for `keyed`).
    None,
}

/// The wire an upstream speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamKind {
    /// HTTP/JSON.
    Http,
    /// A tool on an MCP server (Streamable HTTP).
    Mcp,
}

/// A declared significant argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignificantArg {
    /// Where it is read from; also its name in the key.
    pub path: ArgPath,
    /// How it is normalised.
    pub normaliser: Normaliser,
    /// Absent is allowed (and distinct from any value).
    pub optional: bool,
}

/// Which inputs make an intent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRecipe {
    /// The business boundary (order id, invoice id).
    pub business_ref: Option<ArgPath>,
    /// The significant arguments, in declaration order.
    pub significant: Vec<SignificantArg>,
    /// The structural part.
    pub scope: Scope,
    /// Every other top-level argument enters the key too, exactly (canonical JSON): the
    /// recipe of a fronted server's undeclared tool, whose arguments oncegate knows
    /// only from the upstream's schema, so that no argument is silently ignored.
    pub every_argument: bool,
}

/// An upstream call, validated; rendered by the gateway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    /// HTTP or MCP.
    pub kind: UpstreamKind,
    /// The URL template (MCP: the server's endpoint).
    pub url: Template,
    /// HTTP method (HTTP only).
    pub method: String,
    /// How long one attempt may take before its outcome is unknown.
    pub timeout: SignedDuration,
    /// Extra headers (credentials come from `{env.NAME}`).
    pub headers: BTreeMap<String, Template>,
    /// The body mapping; `None` sends the call's arguments as they are.
    pub body: Option<BodyTemplate>,
    /// JSON pointer to the effect reference in the upstream's answer.
    pub effect_ref: Option<String>,
    /// How the key is threaded.
    pub idempotency: KeyThreading,
    /// The header name for [`KeyThreading::Header`].
    pub idempotency_header: String,
    /// The argument name for [`KeyThreading::Argument`].
    pub idempotency_arg: Option<String>,
    /// The MCP tool name (MCP only).
    pub tool: Option<String>,
    /// The fronted server (`[[mcp_servers]]` alias) whose URL and headers this MCP
    /// upstream uses, declaring that server's tool.
    pub server: Option<String>,
    /// What an MCP tool result with `isError: true` means (MCP only).
    pub tool_errors: ToolErrors,
    /// A tool error whose text matches this is a refusal that did nothing: `failed`
    /// even under `tool_errors = "unknown"` (MCP only).
    pub rejected: Option<Pattern>,
}

/// A regular expression from the config, compared by its source text.
#[derive(Clone, Debug)]
pub struct Pattern(regex::Regex);

impl Pattern {
    /// Compiles `source`.
    pub fn new(source: &str) -> Result<Self, regex::Error> {
        regex::Regex::new(source).map(Pattern)
    }

    /// Whether the pattern matches anywhere in `text`.
    pub fn is_match(&self, text: &str) -> bool {
        self.0.is_match(text)
    }

    /// The source text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Pattern {}

/// How an MCP upstream's tool errors (`isError: true`) are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrors {
    /// The tool may have acted before it failed (SDKs turn any exception into a tool
    /// error): the attempt is `unknown` and reconciled.
    #[default]
    Unknown,
    /// The tool reports only refusals that did nothing: the attempt `failed`.
    Failed,
}

/// A JSON body whose string leaves are templates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyTemplate {
    /// An object.
    Object(BTreeMap<String, BodyTemplate>),
    /// An array.
    Array(Vec<BodyTemplate>),
    /// A templated string (a lone placeholder keeps the value's JSON type).
    Text(Template),
    /// A literal number, boolean.
    Literal(Value),
}

impl BodyTemplate {
    /// Collects every template in this body.
    pub fn templates<'a>(&'a self, out: &mut Vec<&'a Template>) {
        match self {
            BodyTemplate::Object(map) => map.values().for_each(|b| b.templates(out)),
            BodyTemplate::Array(items) => items.iter().for_each(|b| b.templates(out)),
            BodyTemplate::Text(t) => out.push(t),
            BodyTemplate::Literal(_) => {}
        }
    }
}

/// The reconciliation read: "did this intent already take effect?"
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconcile {
    /// HTTP GET or a read-only MCP tool.
    pub kind: UpstreamKind,
    /// The URL template.
    pub url: Template,
    /// HTTP method (default GET).
    pub method: String,
    /// Timeout of the read.
    pub timeout: SignedDuration,
    /// Extra headers.
    pub headers: BTreeMap<String, Template>,
    /// JSON pointer to a boolean "found"; absent: HTTP 200 is found and 404 is absent.
    pub found: Option<String>,
    /// JSON pointer to the effect reference when found.
    pub effect_ref: Option<String>,
    /// JSON pointer to the effect's record in the answer, stored as the result so a
    /// reconciled replay looks like the original answer (default: the whole answer).
    pub result: Option<String>,
    /// The MCP tool name.
    pub tool: Option<String>,
    /// The MCP tool arguments.
    pub arguments: Option<BodyTemplate>,
    /// How the read itself is proven: the sweep reads back at most `count` recently
    /// applied intents every `every` (one replica per interval); a read that does not
    /// find one marks the capability's "not found" unproven.
    pub read_back: ReadBack,
}

/// The bounded rate at which the sweep reads back applied intents (reads only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadBack {
    /// Intents read back per interval (0: never).
    pub count: u32,
    /// The interval.
    pub every: SignedDuration,
}

/// The default `read_back`: intents read back per interval.
pub const DEFAULT_READ_BACK: u32 = 3;
/// The default `read_back_every`.
pub const DEFAULT_READ_BACK_EVERY: SignedDuration = SignedDuration::from_mins(10);

/// A capability: a tool as agents see it, with its policy.
#[derive(Clone, Debug)]
pub struct Capability {
    /// The tool name agents call.
    pub name: String,
    /// Shown to agents in tools/list.
    pub description: Option<String>,
    /// The retry-safety category.
    pub category: Category,
    /// Whether the principal enters the key.
    pub key_principal: KeyPrincipal,
    /// The key recipe.
    pub key: KeyRecipe,
    /// A repeat inside this window replays.
    pub replay_window: SignedDuration,
    /// Calls per key and generation before the breaker trips (`None`: no ceiling).
    pub attempt_ceiling: Option<u32>,
    /// How long an in-flight claim is trusted.
    pub lease: SignedDuration,
    /// How long after an attempt's own request ended (timed out, lost its connection,
    /// or its lease expired) the upstream may still carry it out. Until then a
    /// reconciliation read's "not found" is not proof of absence: the intent stays
    /// `unknown` (a `keyed` or `idempotent_write` repeat may still re-execute with the
    /// same key, whose dedupe is the proof).
    pub settle_horizon: SignedDuration,
    /// How long an approval request stays open.
    pub approval_ttl: SignedDuration,
    /// What a repeat of an unknown intent does.
    pub on_unknown: OnUnknown,
    /// What the same intent from another run does.
    pub cross_run: CrossRun,
    /// What a repeat after the window does.
    pub after_window: AfterWindow,
    /// Never execute: answer `dry_run`.
    pub dry_run: bool,
    /// Coded orchestrators must send their own `Idempotency-Key` (400 without one).
    pub require_client_key: bool,
    /// The upstream, if the gateway executes it.
    pub upstream: Option<Upstream>,
    /// The reconciliation read.
    pub reconcile: Option<Reconcile>,
    /// The Cedar policies governing this capability (shared by reference).
    pub policy: Option<Arc<PolicyEngine>>,
    /// The policy file, as written in the config.
    pub policy_file: Option<String>,
    /// The JSON Schema of the tool's arguments shown to agents (`None`: the gateway
    /// derives one from the key recipe, or takes an MCP upstream's own).
    pub input_schema: Option<Value>,
    /// The duplicate rule the detection job runs over its applied effects.
    pub duplicates: Option<DuplicateRule>,
    /// The upstream's own listing of its effects (bypass detection).
    pub listing: Option<Listing>,
    /// Spend and action limits, reserved atomically with each claim.
    pub limits: Vec<Limit>,
    /// `traced_arguments`: the arguments whose values the decision's trace span may
    /// carry (none by default: arguments hold customers' data).
    pub traced_arguments: Vec<ArgPath>,
}

impl Capability {
    /// Executed by its callers through the two-phase API, never by the gateway: no
    /// upstream, and not a dry run (which executes nothing anyway).
    pub fn is_claim_only(&self) -> bool {
        self.upstream.is_none() && !self.dry_run
    }

    /// The policy hash approvals are bound to ("none" without policies).
    pub fn policy_hash(&self) -> &str {
        self.policy.as_deref().map_or("none", PolicyEngine::hash)
    }

    /// The templates this capability sends: its upstream's URL, headers and body, its
    /// reconciliation read's and its listing's URLs, headers and arguments.
    pub fn templates(&self) -> Vec<&Template> {
        let mut out = Vec::new();
        if let Some(up) = &self.upstream {
            out.push(&up.url);
            out.extend(up.headers.values());
            if let Some(body) = &up.body {
                body.templates(&mut out);
            }
        }
        if let Some(rec) = &self.reconcile {
            out.push(&rec.url);
            out.extend(rec.headers.values());
            if let Some(arguments) = &rec.arguments {
                arguments.templates(&mut out);
            }
        }
        if let Some(listing) = &self.listing {
            out.push(&listing.url);
            out.extend(listing.headers.values());
        }
        out
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
            audit_shards: crate::audit::AUDIT_SHARDS,
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
    pub limits: crate::limits::Limits,
    /// `[gateway.connections]`: connection caps and timeouts.
    pub connections: ConnectionSettings,
    /// Live MCP sessions one principal holds on one process; opening one more ends its
    /// least recently used session (never refuses the new one).
    pub mcp_sessions_per_principal: u32,
    /// Pending approvals one agent may have; a new held call beyond is refused
    /// (OG-0058).
    pub pending_approvals_per_agent: u32,
}

/// A config problem that is not an error but that a careful reader wants to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigWarning {
    /// `file:line`.
    pub location: String,
    /// The field.
    pub field: String,
    /// What is odd.
    pub message: String,
}

/// The validated registry.
#[derive(Clone, Debug)]
pub struct Registry {
    /// The config file.
    pub source: PathBuf,
    /// Gateway settings.
    pub gateway: GatewaySettings,
    /// The store URL (`sqlite://...` or `postgres://...`; `ONCEGATE_STORE_URL`
    /// overrides it when the store is opened).
    pub store_url: String,
    /// The rest of `[store]`.
    pub store: StoreSettings,
    /// `[audit] chain_key_env`: the environment variable holding the audit chain key
    /// (HMAC-SHA256 over every record). Read by the shell, never stored.
    pub audit_chain_key_env: Option<String>,
    /// Principals in declaration order.
    pub principals: Vec<PrincipalConfig>,
    /// `[identity]`: issuers whose JWT access tokens name principals (none: static
    /// tokens only).
    pub identity: Option<IdentitySettings>,
    /// `[[mcp_servers]]`: MCP servers fronted whole, in declaration order.
    pub mcp_servers: Vec<McpServer>,
    /// `[telemetry]`: where traces are exported (none: nowhere).
    pub telemetry: TelemetrySettings,
    capabilities: Vec<Arc<Capability>>,
    by_name: HashMap<String, usize>,
    /// Things `check-config` prints but that do not stop the gateway.
    pub warnings: Vec<ConfigWarning>,
}

impl Registry {
    /// A capability by name.
    pub fn capability(&self, name: &str) -> Option<&Arc<Capability>> {
        self.by_name.get(name).map(|&i| &self.capabilities[i])
    }

    /// All capabilities, in declaration order.
    pub fn capabilities(&self) -> &[Arc<Capability>] {
        &self.capabilities
    }

    /// A principal by name.
    pub fn principal(&self, name: &str) -> Option<&PrincipalConfig> {
        self.principals.iter().find(|p| p.name == name)
    }

    /// The first principal with the agent role.
    pub fn first_agent(&self) -> Option<&PrincipalConfig> {
        self.principals.iter().find(|p| p.role == Role::Agent)
    }

    /// Every template whose rendering leaves the gateway: the capabilities' (see
    /// [`Capability::templates`]), the fronted servers' URLs and headers, the alert
    /// webhook's URL. What their `{env.NAME}` values are is what no error may show
    /// ([`crate::redact::Redactor`]).
    pub fn templates(&self) -> Vec<&Template> {
        let mut out: Vec<&Template> = self
            .capabilities
            .iter()
            .flat_map(|c| c.templates())
            .collect();
        for server in &self.mcp_servers {
            out.push(&server.url);
            out.extend(server.headers.values());
        }
        out.extend(self.gateway.alert_webhook.as_ref());
        out
    }
}

/// What the config parser needs from the outside world.
pub trait ConfigEnv {
    /// Reads a file referenced by the config (a policy file), resolved by the caller.
    fn read_file(&self, path: &Path) -> std::io::Result<String>;
    /// Resolves an IANA time zone name.
    fn time_zone(&self, name: &str) -> Option<TimeZone>;
}

/// One config error, located.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line (0 when unknown).
    pub line: usize,
    /// 1-based column (0 when unknown).
    pub column: usize,
    /// The field path, e.g. `capabilities[2].key.business_ref`.
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: `{}`: {}",
            self.file.display(),
            self.line,
            self.column,
            self.field,
            self.message
        )?;
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

/// Every error found in one config file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}
