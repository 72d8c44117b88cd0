//! How a capability reaches its provider: the upstream call it executes, the
//! reconciliation read that asks whether an intent already took effect, and how the
//! intent key travels with them. Validated shapes only; the gateway renders them.

use std::collections::BTreeMap;

use jiff::SignedDuration;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::template::Template;

/// How long oncegate keeps an MCP upstream's `tools/call` running after its timeout (it
/// is never cancelled earlier: cancelling could abort an effect half-way), in seconds.
pub const MCP_LATE_ANSWER_LIMIT_SECS: u64 = 600;

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
