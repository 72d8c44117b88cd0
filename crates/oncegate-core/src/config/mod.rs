//! The capability registry: the TOML config, its validation and its defaults.
//!
//! Why one file: the raw TOML shapes and their validation are read field by field
//! together, so they stay one file until issue 10 cuts the registry model from its
//! loader.
//!
//! Policy is a property of the capability, declared here, not of whoever wrote the agent.
//! Every error names the file, the line and the field, and says how to fix it. This
//! module does no I/O: the caller hands in the text and a [`ConfigEnv`] that reads policy
//! files and resolves time zones.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use iso_currency::Currency;
use jiff::SignedDuration;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toml::de::{DeTable, DeValue};

use crate::normalise::{ArgPath, Folding, MoneyUnit, Normaliser};
use crate::policy::PolicyEngine;
use crate::template::{Source, Template};

/// The default store URL when `[store]` is absent.
pub const DEFAULT_STORE_URL: &str = "sqlite://oncegate.db";
/// The default listen address of `oncegate serve`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

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
}

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
}

impl Capability {
    /// The policy hash approvals are bound to ("none" without policies).
    pub fn policy_hash(&self) -> &str {
        self.policy.as_deref().map_or("none", PolicyEngine::hash)
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
    /// Where alerts (cross-run duplicates, tripped breakers) are POSTed as JSON.
    pub alert_webhook: Option<Template>,
    /// `Host` values `/mcp` accepts (DNS-rebinding guard); loopback by default.
    pub mcp_allowed_hosts: Vec<String>,
    /// Browser `Origin`s `/mcp` accepts; empty: requests carrying an Origin are not
    /// checked against a list (requests without one always pass).
    pub mcp_allowed_origins: Vec<String>,
    /// Limits on call arguments and on stored upstream answers.
    pub limits: crate::limits::Limits,
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
    /// The store URL (`sqlite://...` or `postgres://...`).
    pub store_url: String,
    /// `[audit] chain_key_env`: the environment variable holding the audit chain key
    /// (HMAC-SHA256 over every record). Read by the shell, never stored.
    pub audit_chain_key_env: Option<String>,
    /// Principals in declaration order.
    pub principals: Vec<PrincipalConfig>,
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

// ---------------------------------------------------------------------------------------
// Raw TOML model.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    gateway: Option<RawGateway>,
    store: Option<RawStore>,
    audit: Option<RawAudit>,
    #[serde(default)]
    principals: Vec<RawPrincipal>,
    #[serde(default)]
    capabilities: Vec<RawCapability>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGateway {
    tenant: Option<String>,
    time_zone: Option<String>,
    listen: Option<String>,
    read_rate_per_second: Option<u32>,
    alert_webhook: Option<String>,
    mcp_allowed_hosts: Option<Vec<String>>,
    mcp_allowed_origins: Option<Vec<String>>,
    max_argument_bytes: Option<usize>,
    max_argument_depth: Option<usize>,
    max_answer_bytes: Option<usize>,
    max_answer_depth: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    chain_key_env: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrincipal {
    name: String,
    role: Role,
    token_env: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCapability {
    name: String,
    description: Option<String>,
    category: Category,
    key_principal: Option<KeyPrincipal>,
    replay_window: Option<String>,
    attempt_ceiling: Option<u32>,
    lease: Option<String>,
    settle_horizon: Option<String>,
    approval_ttl: Option<String>,
    on_unknown: Option<OnUnknown>,
    cross_run: Option<CrossRun>,
    after_window: Option<AfterWindow>,
    dry_run: Option<bool>,
    require_client_key: Option<bool>,
    policy: Option<String>,
    key: Option<RawKey>,
    upstream: Option<RawUpstream>,
    reconcile: Option<RawReconcile>,
    input_schema: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    business_ref: Option<String>,
    scope: Option<Scope>,
    #[serde(default)]
    significant: Vec<RawSignificant>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum NormKind {
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
struct RawSignificant {
    arg: String,
    #[serde(rename = "type")]
    kind: NormKind,
    optional: Option<bool>,
    currency_arg: Option<String>,
    default_currency: Option<String>,
    unit: Option<MoneyUnit>,
    allow_negative: Option<bool>,
    case_fold: Option<bool>,
    width_fold: Option<bool>,
    values: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    kind: UpstreamKind,
    url: String,
    method: Option<String>,
    timeout: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<toml::Value>,
    effect_ref: Option<String>,
    idempotency: Option<KeyThreading>,
    idempotency_header: Option<String>,
    idempotency_arg: Option<String>,
    tool: Option<String>,
    tool_errors: Option<ToolErrors>,
    rejected: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReconcile {
    kind: UpstreamKind,
    url: Option<String>,
    method: Option<String>,
    timeout: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    found: Option<String>,
    effect_ref: Option<String>,
    result: Option<String>,
    tool: Option<String>,
    arguments: Option<toml::Value>,
}

// ---------------------------------------------------------------------------------------
// Locating fields in the source text.

/// Maps field paths and byte offsets to lines, using toml's spanned document.
struct Locator<'a> {
    file: &'a Path,
    text: &'a str,
    doc: Option<DeTable<'a>>,
}

#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Index(usize),
}

fn display_path(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

impl<'a> Locator<'a> {
    fn new(file: &'a Path, text: &'a str) -> Self {
        let doc = DeTable::parse(text).ok().map(|t| t.into_inner());
        Self { file, text, doc }
    }

    fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, column)
    }

    /// The span of the deepest existing prefix of `path` (key spans for table keys).
    fn span_of(&self, path: &[Seg]) -> Option<std::ops::Range<usize>> {
        let doc = self.doc.as_ref()?;
        let mut best = None;
        let mut table: Option<&DeTable<'_>> = Some(doc);
        let mut value: Option<&DeValue<'_>> = None;
        for seg in path {
            match seg {
                Seg::Key(k) => {
                    let t = match (table, value) {
                        (Some(t), None) => t,
                        (_, Some(DeValue::Table(t))) => t,
                        _ => break,
                    };
                    let Some((key, v)) = t
                        .iter()
                        .find(|(key, _)| key.get_ref().as_ref() == k.as_str())
                    else {
                        break;
                    };
                    best = Some(key.span());
                    value = Some(v.get_ref());
                    table = None;
                }
                Seg::Index(i) => {
                    let Some(DeValue::Array(items)) = value else {
                        break;
                    };
                    let Some(item) = items.get(*i) else { break };
                    // An array of tables has no useful span of its own for `[[x]]`;
                    // point at its first key instead.
                    best = match item.get_ref() {
                        DeValue::Table(t) => t
                            .iter()
                            .map(|(k, _)| k.span())
                            .min_by_key(|s| s.start)
                            .or(Some(item.span())),
                        _ => Some(item.span()),
                    };
                    value = Some(item.get_ref());
                }
            }
        }
        best
    }

    /// The field path whose value contains `offset`, for serde errors.
    fn path_at(&self, offset: usize) -> String {
        fn contains(value: &toml::Spanned<DeValue<'_>>, offset: usize) -> bool {
            value.span().contains(&offset)
                || match value.get_ref() {
                    DeValue::Table(t) => t
                        .iter()
                        .any(|(k, v)| k.span().contains(&offset) || contains(v, offset)),
                    DeValue::Array(items) => items.iter().any(|i| contains(i, offset)),
                    _ => false,
                }
        }
        fn walk(value: &DeValue<'_>, offset: usize, path: &mut Vec<Seg>) {
            match value {
                DeValue::Table(t) => {
                    if let Some((k, v)) = t
                        .iter()
                        .find(|(k, v)| k.span().contains(&offset) || contains(v, offset))
                    {
                        path.push(Seg::Key(k.get_ref().to_string()));
                        walk(v.get_ref(), offset, path);
                    }
                }
                DeValue::Array(items) => {
                    if let Some((i, item)) = items
                        .iter()
                        .enumerate()
                        .find(|(_, item)| contains(item, offset))
                    {
                        path.push(Seg::Index(i));
                        walk(item.get_ref(), offset, path);
                    }
                }
                _ => {}
            }
        }
        let mut path = Vec::new();
        if let Some(doc) = &self.doc {
            walk(&DeValue::Table(doc.clone()), offset, &mut path);
        }
        display_path(&path)
    }

    fn error(&self, path: &[Seg], message: impl Into<String>, help: Option<&str>) -> ConfigError {
        let (line, column) = self
            .span_of(path)
            .map_or((0, 0), |s| self.line_col(s.start));
        ConfigError {
            file: self.file.to_owned(),
            line,
            column,
            field: display_path(path),
            message: message.into(),
            help: help.map(str::to_owned),
        }
    }
}

fn help_for_serde(message: &str) -> Option<String> {
    if message.contains("unknown field `token`") {
        return Some("tokens are never written in the config: set `token_env = \"VAR\"` and put the token in that environment variable".into());
    }
    if message.contains("unknown field") {
        return Some("check the spelling against docs/configuration.md; unknown fields are refused so a typo cannot silently disable a control".into());
    }
    if message.contains("unknown variant") {
        return Some("use one of the values listed above".into());
    }
    None
}

// ---------------------------------------------------------------------------------------
// Parsing and validation.

struct Defaults {
    replay_window: SignedDuration,
    attempt_ceiling: Option<u32>,
    cross_run: CrossRun,
    after_window: AfterWindow,
}

/// The documented defaults per category (see docs/configuration.md).
fn defaults(category: Category) -> Defaults {
    match category {
        Category::Read => Defaults {
            replay_window: SignedDuration::ZERO,
            attempt_ceiling: None,
            cross_run: CrossRun::Allow,
            after_window: AfterWindow::Execute,
        },
        Category::IdempotentWrite => Defaults {
            replay_window: SignedDuration::from_mins(10),
            attempt_ceiling: Some(20),
            cross_run: CrossRun::Allow,
            after_window: AfterWindow::Execute,
        },
        Category::Keyed | Category::NonIdempotent => Defaults {
            replay_window: SignedDuration::from_hours(24),
            attempt_ceiling: Some(10),
            cross_run: CrossRun::RequireApproval,
            after_window: AfterWindow::RequireApproval,
        },
    }
}

const DEFAULT_LEASE: SignedDuration = SignedDuration::from_secs(30);
const DEFAULT_TIMEOUT: SignedDuration = SignedDuration::from_secs(10);
const DEFAULT_APPROVAL_TTL: SignedDuration = SignedDuration::from_hours(24);
/// How long a provider may go on processing a request after its caller gave up, on top
/// of the upstream timeout, for the default settle horizon. Providers and the proxies
/// in front of them bound a request's processing by their own deadlines, commonly 60 s
/// (load balancers' idle timeouts, serverless and web-server request limits); twice
/// that leaves room for a queued request that started late.
pub const DEFAULT_LATE_PROCESSING: SignedDuration = SignedDuration::from_secs(120);

/// How long oncegate keeps an MCP upstream's `tools/call` running after its timeout (it
/// is never cancelled earlier: cancelling could abort an effect half-way), in seconds.
pub const MCP_LATE_ANSWER_LIMIT_SECS: u64 = 600;

fn parse_duration(text: &str) -> Result<SignedDuration, String> {
    let d: SignedDuration = text
        .trim()
        .parse()
        .map_err(|e| format!("`{text}` is not a duration ({e})"))?;
    if d.is_negative() {
        return Err(format!("`{text}` is negative"));
    }
    Ok(d)
}

const DURATION_HELP: &str = "write durations like \"30s\", \"10m\", \"24h\" or \"1h 30m\"";

impl Registry {
    /// Parses and validates a config. `file` is used in messages and to resolve relative
    /// policy paths.
    pub fn parse(file: &Path, text: &str, env: &dyn ConfigEnv) -> Result<Registry, ConfigErrors> {
        let loc = Locator::new(file, text);
        let raw: RawConfig = match toml::from_str(text) {
            Ok(raw) => raw,
            Err(e) => {
                let offset = e.span().map_or(0, |s| s.start);
                let (line, column) = loc.line_col(offset);
                let message = e.message().to_owned();
                return Err(ConfigErrors(vec![ConfigError {
                    file: file.to_owned(),
                    line,
                    column,
                    field: loc.path_at(offset),
                    help: help_for_serde(&message),
                    message,
                }]));
            }
        };
        Builder {
            loc: &loc,
            env,
            errors: Vec::new(),
            warnings: Vec::new(),
        }
        .build(raw)
    }
}

struct Builder<'a> {
    loc: &'a Locator<'a>,
    env: &'a dyn ConfigEnv,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigWarning>,
}

fn k(s: &str) -> Seg {
    Seg::Key(s.to_owned())
}

impl Builder<'_> {
    fn err(&mut self, path: &[Seg], message: impl Into<String>, help: Option<&str>) {
        let e = self.loc.error(path, message, help);
        self.errors.push(e);
    }

    fn warn(&mut self, path: &[Seg], message: impl Into<String>) {
        let e = self.loc.error(path, message, None);
        self.warnings.push(ConfigWarning {
            location: format!("{}:{}", e.file.display(), e.line),
            field: e.field,
            message: e.message,
        });
    }

    fn duration(
        &mut self,
        path: &[Seg],
        text: Option<&str>,
        default: SignedDuration,
    ) -> SignedDuration {
        match text.map(parse_duration) {
            None => default,
            Some(Ok(d)) => d,
            Some(Err(msg)) => {
                self.err(path, msg, Some(DURATION_HELP));
                default
            }
        }
    }

    fn template(&mut self, path: &[Seg], text: &str) -> Template {
        match Template::parse(text) {
            Ok(t) => t,
            Err(msg) => {
                self.err(path, msg, None);
                Template::parse("").expect("the empty template parses")
            }
        }
    }

    fn body(&mut self, path: &mut Vec<Seg>, value: &toml::Value) -> BodyTemplate {
        match value {
            toml::Value::String(s) => BodyTemplate::Text(self.template(path, s)),
            toml::Value::Table(t) => {
                let mut out = BTreeMap::new();
                for (key, v) in t {
                    path.push(Seg::Key(key.clone()));
                    out.insert(key.clone(), self.body(path, v));
                    path.pop();
                }
                BodyTemplate::Object(out)
            }
            toml::Value::Array(items) => {
                let mut out = Vec::new();
                for (i, v) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    out.push(self.body(path, v));
                    path.pop();
                }
                BodyTemplate::Array(out)
            }
            toml::Value::Integer(i) => BodyTemplate::Literal(Value::from(*i)),
            toml::Value::Float(f) => BodyTemplate::Literal(Value::from(*f)),
            toml::Value::Boolean(b) => BodyTemplate::Literal(Value::Bool(*b)),
            toml::Value::Datetime(d) => BodyTemplate::Literal(Value::String(d.to_string())),
        }
    }

    fn build(mut self, raw: RawConfig) -> Result<Registry, ConfigErrors> {
        let gateway = self.gateway(raw.gateway);
        let audit_chain_key_env = raw.audit.and_then(|a| a.chain_key_env);
        if let Some(name) = &audit_chain_key_env
            && (name.is_empty() || name.contains('='))
        {
            self.err(
                &[k("audit"), k("chain_key_env")],
                format!("`{name}` is not an environment variable name"),
                Some("name the variable that holds the secret, e.g. ONCEGATE_AUDIT_KEY"),
            );
        }
        let store_url = raw
            .store
            .and_then(|s| s.url)
            .unwrap_or_else(|| DEFAULT_STORE_URL.to_owned());
        if !(store_url.starts_with("sqlite:")
            || store_url.starts_with("postgres://")
            || store_url.starts_with("postgresql://"))
        {
            self.err(
                &[k("store"), k("url")],
                format!("`{store_url}` is not a store URL"),
                Some("use sqlite://PATH (embedded) or postgres://USER@HOST/DB"),
            );
        }

        let mut principals = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, p) in raw.principals.into_iter().enumerate() {
            let path = [k("principals"), Seg::Index(i)];
            if !seen.insert(p.name.clone()) {
                self.err(
                    &[path[0].clone(), path[1].clone(), k("name")],
                    format!("principal `{}` is declared twice", p.name),
                    None,
                );
            }
            let valid_env = !p.token_env.is_empty()
                && p.token_env
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid_env {
                self.err(&[path[0].clone(), path[1].clone(), k("token_env")], format!("`{}` is not an environment variable name", p.token_env), Some("name the variable that holds the token, e.g. token_env = \"ONCEGATE_TOKEN_PLANNER\""));
            }
            principals.push(PrincipalConfig {
                name: p.name,
                role: p.role,
                token_env: p.token_env,
            });
        }
        if principals.is_empty() {
            self.warn(
                &[k("principals")],
                "no principals are declared: nobody can call the gateway",
            );
        }

        let mut capabilities = Vec::new();
        let mut by_name = HashMap::new();
        let mut policy_refs: Vec<(usize, String)> = Vec::new();
        for (i, rc) in raw.capabilities.into_iter().enumerate() {
            let base = vec![k("capabilities"), Seg::Index(i)];
            if by_name
                .insert(rc.name.clone(), capabilities.len())
                .is_some()
            {
                self.err(
                    &[base.clone(), vec![k("name")]].concat(),
                    format!("capability `{}` is declared twice", rc.name),
                    None,
                );
            }
            if let Some(p) = &rc.policy {
                policy_refs.push((capabilities.len(), p.clone()));
            }
            let cap = self.capability(&base, rc);
            capabilities.push(cap);
        }

        // Policies: one engine per referenced file, validated against the schema of the
        // capabilities that reference it.
        let mut files: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (idx, file) in policy_refs {
            files.entry(file).or_default().push(idx);
        }
        let dir = self
            .loc
            .file
            .parent()
            .map(Path::to_owned)
            .unwrap_or_default();
        for (file, users) in files {
            let path = vec![k("capabilities"), Seg::Index(users[0]), k("policy")];
            let text = match self.env.read_file(&dir.join(&file)) {
                Ok(t) => t,
                Err(e) => {
                    self.err(
                        &path,
                        format!(
                            "cannot read policy file `{}`: {e}",
                            dir.join(&file).display()
                        ),
                        Some("paths are relative to the config file"),
                    );
                    continue;
                }
            };
            let caps: Vec<&Capability> = users.iter().map(|&i| &capabilities[i]).collect();
            match PolicyEngine::new(&text, &caps) {
                Ok(engine) => {
                    let engine = Arc::new(engine);
                    for &i in &users {
                        capabilities[i].policy = Some(engine.clone());
                    }
                }
                Err(msg) => self.err(&path, format!("{file}: {msg}"), Some("context attributes are the capability's significant arguments (dots become `_`; money is a Long in minor units plus `<name>_currency`) and `business_ref`")),
            }
        }

        if !self.errors.is_empty() {
            return Err(ConfigErrors(self.errors));
        }
        Ok(Registry {
            source: self.loc.file.to_owned(),
            gateway,
            store_url,
            audit_chain_key_env,
            principals,
            capabilities: capabilities.into_iter().map(Arc::new).collect(),
            by_name,
            warnings: self.warnings,
        })
    }

    fn gateway(&mut self, raw: Option<RawGateway>) -> GatewaySettings {
        let raw = raw.unwrap_or(RawGateway {
            tenant: None,
            time_zone: None,
            listen: None,
            read_rate_per_second: None,
            alert_webhook: None,
            mcp_allowed_hosts: None,
            mcp_allowed_origins: None,
            max_argument_bytes: None,
            max_argument_depth: None,
            max_answer_bytes: None,
            max_answer_depth: None,
        });
        let limits = self.limits(&raw);
        let tenant = raw.tenant.unwrap_or_else(|| "default".to_owned());
        let tz_name = raw.time_zone.unwrap_or_else(|| "UTC".to_owned());
        let time_zone = match self.env.time_zone(&tz_name) {
            Some(tz) => tz,
            None => {
                self.err(
                    &[k("gateway"), k("time_zone")],
                    format!("`{tz_name}` is not a known time zone"),
                    Some("use an IANA name such as \"UTC\" or \"Europe/Paris\""),
                );
                TimeZone::UTC
            }
        };
        let listen_text = raw.listen.unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
        let listen: SocketAddr = match listen_text.parse() {
            Ok(addr) => addr,
            Err(_) => {
                self.err(
                    &[k("gateway"), k("listen")],
                    format!("`{listen_text}` is not an address"),
                    Some("write HOST:PORT, e.g. \"127.0.0.1:7878\""),
                );
                DEFAULT_LISTEN
                    .parse()
                    .expect("the default listen address parses")
            }
        };
        let read_rate_per_second = raw.read_rate_per_second.unwrap_or(50);
        if read_rate_per_second == 0 {
            self.err(
                &[k("gateway"), k("read_rate_per_second")],
                "a read rate of 0 refuses every read",
                Some("use at least 1 (default 50)"),
            );
        }
        let alert_webhook = raw.alert_webhook.map(|url| {
            if !(url.starts_with("http://")
                || url.starts_with("https://")
                || url.starts_with("{env."))
            {
                self.err(
                    &[k("gateway"), k("alert_webhook")],
                    format!("`{url}` is not an http(s) URL"),
                    Some("e.g. \"https://hooks.example.com/oncegate\" or \"{env.ALERT_WEBHOOK}\""),
                );
            }
            self.template(&[k("gateway"), k("alert_webhook")], &url)
        });
        let mcp_allowed_hosts = match raw.mcp_allowed_hosts {
            Some(hosts) => {
                if hosts.is_empty() || hosts.iter().any(|h| h.trim().is_empty() || h.contains('/'))
                {
                    self.err(
                        &[k("gateway"), k("mcp_allowed_hosts")],
                        "list at least one allowed host, each a hostname or host:port (an empty list would turn the Host check off)",
                        Some("e.g. [\"gateway.internal\", \"gateway.internal:7878\"]"),
                    );
                }
                hosts
            }
            None => {
                if !listen.ip().is_loopback() {
                    self.warn(
                        &[k("gateway"), k("listen")],
                        "the gateway listens beyond loopback but /mcp accepts only loopback Host headers; set gateway.mcp_allowed_hosts",
                    );
                }
                vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
            }
        };
        let mcp_allowed_origins = raw.mcp_allowed_origins.unwrap_or_default();
        if mcp_allowed_origins
            .iter()
            .any(|o| o != "null" && !o.contains("://"))
        {
            self.err(
                &[k("gateway"), k("mcp_allowed_origins")],
                "an allowed origin names its scheme",
                Some("e.g. [\"https://console.example.com:443\", \"http://localhost:*\"]"),
            );
        }
        GatewaySettings {
            tenant,
            time_zone,
            time_zone_name: tz_name,
            listen,
            read_rate_per_second,
            alert_webhook,
            mcp_allowed_hosts,
            mcp_allowed_origins,
            limits,
        }
    }

    fn capability(&mut self, base: &[Seg], rc: RawCapability) -> Capability {
        let at = |rest: &[&str]| -> Vec<Seg> {
            let mut p = base.to_vec();
            p.extend(rest.iter().map(|s| k(s)));
            p
        };
        let d = defaults(rc.category);
        if rc.name.is_empty()
            || !rc
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            self.err(
                &at(&["name"]),
                format!("`{}` is not a valid tool name", rc.name),
                Some("use letters, digits, `_` and `-`"),
            );
        }
        let key = self.key(&at(&["key"]), rc.key);
        let replay_window = self.duration(
            &at(&["replay_window"]),
            rc.replay_window.as_deref(),
            d.replay_window,
        );
        let lease = self.duration(&at(&["lease"]), rc.lease.as_deref(), DEFAULT_LEASE);
        let settle_horizon_raw = rc
            .settle_horizon
            .as_deref()
            .map(|text| self.duration(&at(&["settle_horizon"]), Some(text), SignedDuration::ZERO));
        let approval_ttl = self.duration(
            &at(&["approval_ttl"]),
            rc.approval_ttl.as_deref(),
            DEFAULT_APPROVAL_TTL,
        );
        if lease.is_zero() {
            self.err(
                &at(&["lease"]),
                "a zero lease would let every repeat take over a live call",
                Some("use a lease longer than the upstream timeout"),
            );
        }
        if rc.attempt_ceiling == Some(0) {
            self.err(
                &at(&["attempt_ceiling"]),
                "an attempt ceiling of 0 refuses every call",
                Some("use at least 1, or remove the field for the category default"),
            );
        }
        let upstream = rc
            .upstream
            .map(|u| self.upstream(&at(&["upstream"]), rc.category, u));
        let reconcile = rc
            .reconcile
            .map(|r| self.reconcile(&at(&["reconcile"]), upstream.as_ref(), r));
        let input_schema = self.input_schema(base, rc.input_schema.as_ref());
        let known: BTreeSet<String> = key
            .significant
            .iter()
            .map(|s| s.path.as_str().to_owned())
            .collect();
        if let Some(up) = &upstream {
            let mut templates = vec![&up.url];
            templates.extend(up.headers.values());
            if let Some(b) = &up.body {
                b.templates(&mut templates);
            }
            for t in templates {
                self.check_norm_refs(&at(&["upstream"]), t, &known);
            }
        }
        if let Some(r) = &reconcile {
            let mut templates = vec![&r.url];
            templates.extend(r.headers.values());
            if let Some(b) = &r.arguments {
                b.templates(&mut templates);
            }
            for t in templates {
                self.check_norm_refs(&at(&["reconcile"]), t, &known);
            }
        }

        if rc.category == Category::NonIdempotent
            && key.business_ref.is_none()
            && key.significant.is_empty()
        {
            self.err(&at(&["key"]), format!("`{}` is non_idempotent but has no key recipe: every call would be a new intent", rc.name), Some("declare [capabilities.key] with a business_ref (order id, message id) and/or significant arguments"));
        }
        if rc.category == Category::NonIdempotent
            && key.business_ref.is_none()
            && !key.significant.is_empty()
            && key
                .significant
                .iter()
                .all(|s| matches!(s.normaliser, Normaliser::Text { .. }))
        {
            // A re-plan rewords free text ("Your receipt" / "Here is your receipt"), so a
            // key made of it alone turns every re-plan into a new email.
            self.err(
                &at(&["key", "significant"]),
                format!("`{}` is non_idempotent and keyed on free text alone: a re-plan that rewords the text is a new intent, and the effect happens again", rc.name),
                Some("declare a business_ref (order id, message id), or a significant argument that is not free text (an id, an email, an enum)"),
            );
        }
        if let Some(up) = &upstream {
            if rc.category == Category::Keyed && up.idempotency == KeyThreading::None {
                self.err(&at(&["upstream", "idempotency"]), format!("`{}` is keyed but its upstream does not receive the key", rc.name), Some("set idempotency = \"header\" (HTTP), \"meta\" or \"argument\" (MCP), or make the capability non_idempotent"));
            }
            if lease <= up.timeout {
                self.warn(&at(&["lease"]), format!("the lease ({lease:#}) is not longer than the upstream timeout ({:#}): a repeat may see a live call as unknown", up.timeout));
            }
            if let Some(h) = settle_horizon_raw
                && h < up.timeout
                && rc.category == Category::NonIdempotent
            {
                self.warn(&at(&["settle_horizon"]), format!("the settle horizon ({h:#}) is shorter than the upstream timeout ({:#}): a request the provider finishes late may land after oncegate concluded it never happened, and execute a second time", up.timeout));
            }
        } else if rc.category.is_consequential() {
            self.warn(
                &at(&["upstream"]),
                format!(
                    "`{}` has no upstream: only in-process callers (Gate::invoke) can execute it",
                    rc.name
                ),
            );
        }

        let on_unknown = match rc.on_unknown {
            Some(v) => v,
            None => match (rc.category, reconcile.is_some()) {
                (_, true) => OnUnknown::Reconcile,
                (Category::Read | Category::IdempotentWrite | Category::Keyed, false) => {
                    OnUnknown::Retry
                }
                (Category::NonIdempotent, false) => OnUnknown::Escalate,
            },
        };
        if on_unknown == OnUnknown::Retry && rc.category == Category::NonIdempotent {
            self.err(&at(&["on_unknown"]), "a non_idempotent capability cannot retry an unknown outcome: that is how customers are charged twice", Some("use \"reconcile\" (with a [capabilities.reconcile] read), \"escalate\" or \"refuse\""));
        }
        if on_unknown == OnUnknown::Reconcile && reconcile.is_none() {
            self.warn(&at(&["on_unknown"]), "on_unknown = \"reconcile\" without a [capabilities.reconcile] read: every unknown outcome escalates to a human");
        }
        Capability {
            name: rc.name,
            description: rc.description,
            category: rc.category,
            key_principal: rc.key_principal.unwrap_or_default(),
            key,
            replay_window,
            attempt_ceiling: rc.attempt_ceiling.or(d.attempt_ceiling),
            lease,
            // The default: the upstream's timeout again plus the time a provider may
            // still work on a request its caller gave up on. An MCP call keeps running
            // after its timeout (up to MCP_LATE_ANSWER_LIMIT_SECS) in the process that
            // made it, which another replica cannot see: the horizon covers it too.
            settle_horizon: settle_horizon_raw.unwrap_or_else(|| {
                let still_running = match upstream.as_ref().map(|u| u.kind) {
                    Some(UpstreamKind::Mcp) => {
                        SignedDuration::from_secs(MCP_LATE_ANSWER_LIMIT_SECS as i64)
                    }
                    _ => SignedDuration::ZERO,
                };
                upstream.as_ref().map_or(DEFAULT_TIMEOUT, |u| u.timeout)
                    + still_running
                    + DEFAULT_LATE_PROCESSING
            }),
            approval_ttl,
            on_unknown,
            cross_run: rc.cross_run.unwrap_or(d.cross_run),
            after_window: rc.after_window.unwrap_or(d.after_window),
            dry_run: rc.dry_run.unwrap_or(false),
            require_client_key: rc.require_client_key.unwrap_or(false),
            upstream,
            reconcile,
            policy: None,
            policy_file: rc.policy,
            input_schema,
        }
    }

    /// An agent-facing JSON Schema written in TOML: a table whose `type` is "object".
    fn input_schema(&mut self, base: &[Seg], raw: Option<&toml::Value>) -> Option<Value> {
        let raw = raw?;
        let at = [base, &[k("input_schema")]].concat();
        let value = match serde_json::to_value(raw) {
            Ok(v) => v,
            Err(e) => {
                self.err(&at, format!("not expressible as JSON: {e}"), None);
                return None;
            }
        };
        if value.get("type").and_then(Value::as_str) != Some("object") {
            self.err(
                &at,
                "a tool's input schema must be a JSON Schema object",
                Some("input_schema = { type = \"object\", properties = { order_id = { type = \"string\" } }, required = [\"order_id\"] }"),
            );
            return None;
        }
        Some(value)
    }

    fn key(&mut self, base: &[Seg], raw: Option<RawKey>) -> KeyRecipe {
        let Some(raw) = raw else {
            return KeyRecipe {
                business_ref: None,
                significant: Vec::new(),
                scope: Scope::Global,
            };
        };
        let at = |rest: &[Seg]| [base, rest].concat();
        let business_ref = raw.business_ref.and_then(|p| match ArgPath::parse(&p) {
            Ok(p) => Some(p),
            Err(msg) => {
                self.err(&at(&[k("business_ref")]), msg, None);
                None
            }
        });
        let mut significant = Vec::new();
        let mut names = BTreeSet::new();
        for (i, s) in raw.significant.into_iter().enumerate() {
            let here = at(&[k("significant"), Seg::Index(i)]);
            let field = |f: &str| [here.clone(), vec![k(f)]].concat();
            let path = match ArgPath::parse(&s.arg) {
                Ok(p) => p,
                Err(msg) => {
                    self.err(&field("arg"), msg, None);
                    continue;
                }
            };
            if !names.insert(path.clone()) {
                self.err(&field("arg"), format!("`{path}` is declared twice"), None);
            }
            let misplaced = |name: &str, set: bool, allowed: &[NormKind]| {
                (set && !allowed.contains(&s.kind)).then(|| name.to_owned())
            };
            for bad in [
                misplaced("currency_arg", s.currency_arg.is_some(), &[NormKind::Money]),
                misplaced(
                    "default_currency",
                    s.default_currency.is_some(),
                    &[NormKind::Money],
                ),
                misplaced("unit", s.unit.is_some(), &[NormKind::Money]),
                misplaced(
                    "allow_negative",
                    s.allow_negative.is_some(),
                    &[NormKind::Money],
                ),
                misplaced(
                    "case_fold",
                    s.case_fold.is_some(),
                    &[NormKind::Text, NormKind::Id],
                ),
                misplaced("width_fold", s.width_fold.is_some(), &[NormKind::Id]),
                misplaced("values", s.values.is_some(), &[NormKind::Enum]),
            ]
            .into_iter()
            .flatten()
            {
                self.err(
                    &field(&bad),
                    format!("`{bad}` does not apply to this normaliser"),
                    Some("see docs/configuration.md for each normaliser's options"),
                );
            }
            let normaliser = match s.kind {
                NormKind::Money => {
                    let currency_arg =
                        s.currency_arg
                            .as_deref()
                            .and_then(|c| match ArgPath::parse(c) {
                                Ok(p) => Some(p),
                                Err(msg) => {
                                    self.err(&field("currency_arg"), msg, None);
                                    None
                                }
                            });
                    let default_currency = s.default_currency.as_deref().and_then(|c| {
                        let found = Currency::from_code(&c.trim().to_ascii_uppercase());
                        if found.is_none() {
                            self.err(
                                &field("default_currency"),
                                format!("`{c}` is not an ISO 4217 currency code"),
                                Some("e.g. \"USD\", \"EUR\", \"JPY\""),
                            );
                        }
                        found
                    });
                    Normaliser::Money {
                        currency_arg,
                        default_currency,
                        unit: s.unit.unwrap_or_default(),
                        allow_negative: s.allow_negative.unwrap_or(false),
                    }
                }
                NormKind::Email => Normaliser::Email,
                NormKind::Text => Normaliser::Text {
                    case_fold: s.case_fold.unwrap_or(false),
                },
                NormKind::Integer => Normaliser::Integer,
                NormKind::Decimal => Normaliser::Decimal,
                NormKind::Enum => {
                    let values = s.values.clone().unwrap_or_default();
                    if values.is_empty() {
                        self.err(
                            &field("type"),
                            "an enum needs `values`",
                            Some("values = [\"standard\", \"express\"]"),
                        );
                    }
                    Normaliser::Enum { values }
                }
                NormKind::Set => Normaliser::Set,
                NormKind::Id => Normaliser::Id {
                    folding: Folding {
                        case: s.case_fold.unwrap_or(false),
                        width: s.width_fold.unwrap_or(false),
                    },
                },
            };
            significant.push(SignificantArg {
                path,
                normaliser,
                optional: s.optional.unwrap_or(false),
            });
        }
        KeyRecipe {
            business_ref,
            significant,
            scope: raw.scope.unwrap_or_default(),
        }
    }

    fn headers(
        &mut self,
        base: &[Seg],
        raw: BTreeMap<String, String>,
    ) -> BTreeMap<String, Template> {
        raw.into_iter()
            .map(|(name, value)| {
                let t = self.template(
                    &[base, &[k("headers"), Seg::Key(name.clone())]].concat(),
                    &value,
                );
                (name, t)
            })
            .collect()
    }

    fn check_pointer(&mut self, path: &[Seg], pointer: Option<&str>) {
        if let Some(p) = pointer
            && !p.is_empty()
            && !p.starts_with('/')
        {
            let help = "JSON pointers start with `/`, e.g. \"/id\" or \"/charge/id\"";
            self.err(path, format!("`{p}` is not a JSON pointer"), Some(help));
        }
    }

    fn check_norm_refs(&mut self, path: &[Seg], template: &Template, known: &BTreeSet<String>) {
        for source in template.sources() {
            if let Source::Norm { name, .. } = source
                && !known.contains(name)
            {
                self.err(
                    path,
                    format!("`{{norm.{name}}}` names no significant argument"),
                    Some("declare it under [[capabilities.key.significant]] or use {arg.PATH}"),
                );
            }
        }
    }

    fn limits(&mut self, raw: &RawGateway) -> crate::limits::Limits {
        use crate::limits::{Limits, MAX_CONFIGURABLE_DEPTH};
        let defaults = Limits::default();
        // Arguments arrive inside a request body, which is refused over 256 KiB anyway.
        const BODY_LIMIT: usize = 256 * 1024;
        let mut field = |name: &str, value: Option<usize>, default: usize, max: usize| {
            let v = value.unwrap_or(default);
            if v == 0 || v > max {
                self.err(
                    &[k("gateway"), k(name)],
                    format!("{name} = {v} is out of range"),
                    Some(&format!("use 1 to {max} (default {default})")),
                );
                return default;
            }
            v
        };
        Limits {
            max_argument_bytes: field(
                "max_argument_bytes",
                raw.max_argument_bytes,
                defaults.max_argument_bytes,
                BODY_LIMIT,
            ),
            max_argument_depth: field(
                "max_argument_depth",
                raw.max_argument_depth,
                defaults.max_argument_depth,
                MAX_CONFIGURABLE_DEPTH,
            ),
            max_answer_bytes: field(
                "max_answer_bytes",
                raw.max_answer_bytes,
                defaults.max_answer_bytes,
                64 * 1024 * 1024,
            ),
            max_answer_depth: field(
                "max_answer_depth",
                raw.max_answer_depth,
                defaults.max_answer_depth,
                MAX_CONFIGURABLE_DEPTH,
            ),
        }
    }

    fn upstream(&mut self, base: &[Seg], category: Category, raw: RawUpstream) -> Upstream {
        let at = |rest: &[&str]| -> Vec<Seg> {
            [base, &rest.iter().map(|s| k(s)).collect::<Vec<_>>()].concat()
        };
        let url = self.template(&at(&["url"]), &raw.url);
        let timeout = self.duration(&at(&["timeout"]), raw.timeout.as_deref(), DEFAULT_TIMEOUT);
        if timeout.is_zero() {
            self.err(
                &at(&["timeout"]),
                "a zero timeout makes every call unknown",
                Some(DURATION_HELP),
            );
        }
        let headers = self.headers(base, raw.headers);
        let body = raw.body.as_ref().map(|b| {
            let mut p = at(&["body"]);
            self.body(&mut p, b)
        });
        let default_threading = match raw.kind {
            UpstreamKind::Http => KeyThreading::Header,
            UpstreamKind::Mcp => KeyThreading::Meta,
        };
        let idempotency = raw.idempotency.unwrap_or(if raw.idempotency_arg.is_some() {
            KeyThreading::Argument
        } else {
            default_threading
        });
        match (raw.kind, idempotency) {
            (UpstreamKind::Http, KeyThreading::Meta) => self.err(&at(&["idempotency"]), "HTTP upstreams have no _meta", Some("use \"header\" or \"argument\"")),
            (UpstreamKind::Mcp, KeyThreading::Header) => self.err(&at(&["idempotency"]), "MCP tools take the key in _meta or an argument", Some("use \"meta\" or \"argument\"")),
            (_, KeyThreading::Argument) if raw.idempotency_arg.is_none() => self.err(&at(&["idempotency_arg"]), "idempotency = \"argument\" needs idempotency_arg", Some("name the argument that carries the key, e.g. idempotency_arg = \"idempotency_key\"")),
            _ => {}
        }
        if raw.kind == UpstreamKind::Mcp && raw.tool.is_none() {
            self.err(
                &at(&["tool"]),
                "an MCP upstream needs the tool to call",
                Some("tool = \"charge\""),
            );
        }
        if raw.kind == UpstreamKind::Http && raw.tool.is_some() {
            self.err(&at(&["tool"]), "`tool` applies to MCP upstreams only", None);
        }
        if raw.kind == UpstreamKind::Mcp && body.is_none() && raw.idempotency_arg.is_none() {
            self.warn(
                &at(&["body"]),
                "the agent's arguments reach this MCP tool unmapped: if the tool takes its own idempotency-key argument, name it in idempotency_arg, or the model's value reaches the tool",
            );
        }
        if raw.kind == UpstreamKind::Http && raw.tool_errors.is_some() {
            self.err(
                &at(&["tool_errors"]),
                "`tool_errors` applies to MCP upstreams only",
                None,
            );
        }
        let rejected = raw.rejected.as_deref().and_then(|source| {
            if raw.kind == UpstreamKind::Http {
                self.err(
                    &at(&["rejected"]),
                    "`rejected` applies to MCP upstreams only (an HTTP 4xx is already a definite failure)",
                    None,
                );
                return None;
            }
            if raw.tool_errors == Some(ToolErrors::Failed) {
                self.err(
                    &at(&["rejected"]),
                    "with tool_errors = \"failed\" every tool error is already a failure",
                    Some("drop `rejected`, or drop tool_errors to treat only matching errors as refusals"),
                );
                return None;
            }
            match Pattern::new(source) {
                Ok(p) => Some(p),
                Err(e) => {
                    self.err(
                        &at(&["rejected"]),
                        format!("`{source}` is not a regular expression: {e}"),
                        Some("a Rust regex searched anywhere in the tool error's text, e.g. \"^(card declined|invalid amount)\""),
                    );
                    None
                }
            }
        });
        self.check_pointer(&at(&["effect_ref"]), raw.effect_ref.as_deref());
        let method = raw
            .method
            .unwrap_or_else(|| "POST".to_owned())
            .to_ascii_uppercase();
        if !["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&method.as_str()) {
            self.err(
                &at(&["method"]),
                format!("`{method}` is not a supported method"),
                Some("GET, POST, PUT, PATCH or DELETE"),
            );
        }
        let _ = category;
        Upstream {
            kind: raw.kind,
            url,
            method,
            timeout,
            headers,
            body,
            effect_ref: raw.effect_ref,
            idempotency,
            idempotency_header: raw
                .idempotency_header
                .unwrap_or_else(|| "Idempotency-Key".to_owned()),
            idempotency_arg: raw.idempotency_arg,
            tool: raw.tool,
            tool_errors: raw.tool_errors.unwrap_or_default(),
            rejected,
        }
    }

    fn reconcile(
        &mut self,
        base: &[Seg],
        upstream: Option<&Upstream>,
        raw: RawReconcile,
    ) -> Reconcile {
        let at = |rest: &[&str]| -> Vec<Seg> {
            [base, &rest.iter().map(|s| k(s)).collect::<Vec<_>>()].concat()
        };
        let url = match (&raw.url, upstream) {
            (Some(u), _) => self.template(&at(&["url"]), u),
            (None, Some(up)) if raw.kind == UpstreamKind::Mcp => up.url.clone(),
            (None, _) => {
                self.err(
                    &at(&["url"]),
                    "a reconciliation read needs a url",
                    Some("e.g. url = \"{env.PROVIDER_URL}/charges?idempotency_key={key}\""),
                );
                Template::parse("").expect("the empty template parses")
            }
        };
        if raw.kind == UpstreamKind::Mcp && raw.tool.is_none() {
            self.err(
                &at(&["tool"]),
                "an MCP reconciliation needs the read-only tool to call",
                None,
            );
        }
        if raw.kind == UpstreamKind::Mcp && raw.found.is_none() {
            // HTTP has 404 for "absent"; a tool result has no status to read.
            self.err(
                &at(&["found"]),
                "an MCP reconciliation needs `found`: a tool answers absence in its result, not with a status",
                Some("found = \"/found\" (a JSON pointer to a boolean in the tool's structuredContent)"),
            );
        }
        self.check_pointer(&at(&["found"]), raw.found.as_deref());
        self.check_pointer(&at(&["result"]), raw.result.as_deref());
        self.check_pointer(&at(&["effect_ref"]), raw.effect_ref.as_deref());
        let timeout = self.duration(&at(&["timeout"]), raw.timeout.as_deref(), DEFAULT_TIMEOUT);
        let headers = self.headers(base, raw.headers);
        let arguments = raw.arguments.as_ref().map(|b| {
            let mut p = at(&["arguments"]);
            self.body(&mut p, b)
        });
        Reconcile {
            kind: raw.kind,
            url,
            method: raw
                .method
                .unwrap_or_else(|| "GET".to_owned())
                .to_ascii_uppercase(),
            timeout,
            headers,
            found: raw.found,
            effect_ref: raw.effect_ref,
            result: raw.result,
            tool: raw.tool,
            arguments,
        }
    }
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
