//! Fronted MCP servers (`[[mcp_servers]]`): what each upstream tool is to agents.
//!
//! A server's tool list is read by [`super::watch`] (at startup, when the server says it
//! changed, and every `refresh`); [`classify`] decides each tool's fate from the
//! registry, and [`Fronted`] keeps the result for calls and `tools/list`:
//!
//! - a tool a capability declares (`upstream.server = "<alias>"`, `tool = "<name>"`) is
//!   that capability: the registry's name, key recipe, category and limits, never the
//!   upstream's hints;
//! - an undeclared tool follows the server's `undeclared` policy: `refuse` (not listed,
//!   a call is refused with the reason), `read` (listed as `<alias>_<tool>` and passed
//!   through when its annotations say read-only, else refused), `require_approval`
//!   (listed; every new intent waits for an approver, keyed on all its arguments);
//! - a tool whose `<alias>_<tool>` is not a valid MCP tool name, or is a name the
//!   registry already uses for something else, is skipped (and shown by the probe);
//! - an undeclared tool whose definition ([`definition`]) differs from the one pinned
//!   when oncegate first offered it is held ([`Verdict::Changed`], `OG-0059`) until an
//!   admin accepts it ([`super::watch`] checks the pins, `oncegate_engine`'s pins.rs keeps
//!   them).
//!
//! Until a server's list has been read once, none of its undeclared tools exist: a
//! call to one is unknown (fail closed). A failed re-read keeps the last list.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::StatusCode;
use oncegate_core::Registry;
use oncegate_core::codes::Code;
use oncegate_core::config::{Capability, FrontedAs, McpServer, Undeclared};
use oncegate_engine::{PinCheck, definition_digest};
use rmcp::model::Tool;
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::ApiError;

/// What one upstream tool is to agents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", content = "reason", rename_all = "snake_case")]
pub enum Verdict {
    /// A registry capability declares it (by this name).
    Declared,
    /// Undeclared, passed through as a read (its annotations say read-only).
    Read,
    /// Undeclared, held for an approver on every new intent.
    RequireApproval,
    /// Undeclared and refused, and why.
    Refused(String),
    /// Not offered at all, and why (an unusable name).
    Skipped(String),
    /// Held: the server changed the tool's definition since it was pinned, and why.
    Changed(String),
}

impl Verdict {
    /// Whether agents see the tool in `tools/list`.
    pub fn is_listed(&self) -> bool {
        matches!(
            self,
            Verdict::Declared | Verdict::Read | Verdict::RequireApproval
        )
    }

    /// One line for people (`check-config --probe`).
    pub fn describe(&self) -> String {
        match self {
            Verdict::Declared => "declared: the registry's capability".into(),
            Verdict::Read => "read: passed through (read-only by its annotations)".into(),
            Verdict::RequireApproval => {
                "require_approval: every new intent waits for an approver".into()
            }
            Verdict::Refused(why) => format!("refused: {why}"),
            Verdict::Skipped(why) => format!("skipped: {why}"),
            Verdict::Changed(why) => format!("changed: {why}"),
        }
    }
}

/// One upstream tool and its fate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FrontedTool {
    /// The upstream's name for it.
    pub tool: String,
    /// The name agents call it by (for a skipped tool, the name it would have had).
    pub name: String,
    /// What happens to a call.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// The digest of the definition the server offers ([`definition`]).
    pub digest: String,
    /// What its pin says (undeclared tools offered to agents; set by [`super::watch`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin: Option<PinCheck>,
}

/// A tool's definition as it is pinned: what reaches agents from the server
/// (description, input schema, annotations, and the output schema when it has one).
pub fn definition(t: &Tool) -> Value {
    let mut d = json!({
        "description": t.description,
        "input_schema": Value::Object((*t.input_schema).clone()),
        "annotations": t.annotations,
    });
    if let Some(out) = &t.output_schema {
        d["output_schema"] = Value::Object((**out).clone());
    }
    d
}

/// Each tool of `server`'s list, classified, and the capabilities its undeclared
/// listed tools are called through.
pub fn classify(
    registry: &Registry,
    server: &McpServer,
    tools: &[Tool],
) -> (Vec<FrontedTool>, Vec<Arc<Capability>>) {
    let mut out = Vec::new();
    let mut caps = Vec::new();
    for t in tools {
        let tool = t.name.to_string();
        let digest = definition_digest(&definition(t));
        let declared = registry.capabilities().iter().find(|c| {
            c.upstream.as_ref().is_some_and(|u| {
                u.server.as_deref() == Some(&server.alias) && u.tool.as_deref() == Some(&tool)
            })
        });
        if let Some(cap) = declared {
            out.push(FrontedTool {
                tool,
                name: cap.name.clone(),
                verdict: Verdict::Declared,
                digest,
                pin: None,
            });
            continue;
        }
        let Some(name) = server.offered_name(&tool) else {
            out.push(FrontedTool {
                name: if server.prefix {
                    format!("{}_{tool}", server.alias)
                } else {
                    tool.clone()
                },
                tool,
                verdict: Verdict::Skipped(
                    "not a valid MCP tool name (1 to 128 of A-Z a-z 0-9 _ - .): declare it as a capability under a name of your own".into(),
                ),
                digest,
                pin: None,
            });
            continue;
        };
        // Names under another server's prefix are that server's (an unprefixed server
        // cannot take `pay_refund` from the server aliased `pay`).
        let owner = registry.mcp_servers.iter().find(|o| {
            o.prefix && o.alias != server.alias && name.starts_with(&format!("{}_", o.alias))
        });
        if let Some(owner) = owner.filter(|_| !server.prefix) {
            out.push(FrontedTool {
                tool,
                verdict: Verdict::Skipped(format!(
                    "the name is under the prefix of server `{}`",
                    owner.alias
                )),
                name,
                digest,
                pin: None,
            });
            continue;
        }
        if registry.capability(&name).is_some() {
            out.push(FrontedTool {
                tool,
                verdict: Verdict::Skipped(format!(
                    "the registry's capability `{name}` has this name and does not declare this tool"
                )),
                name,
                digest,
                pin: None,
            });
            continue;
        }
        let read_only = t
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        let offered = match server.undeclared {
            Undeclared::Refuse => Err(format!(
                "no capability declares it, and server `{}` has undeclared = \"refuse\"",
                server.alias
            )),
            Undeclared::Read if read_only => Ok(FrontedAs::Read),
            Undeclared::Read => Err(format!(
                "no capability declares it, and server `{}` passes undeclared tools through only when their annotations say read-only",
                server.alias
            )),
            Undeclared::RequireApproval => Ok(FrontedAs::RequireApproval),
        };
        let verdict = match offered {
            Err(why) => Verdict::Refused(why),
            Ok(offered) => match server.undeclared_capability(
                &tool,
                &name,
                t.description.as_deref().map(str::to_owned),
                Value::Object((*t.input_schema).clone()),
                offered,
            ) {
                Ok(cap) => {
                    caps.push(Arc::new(cap));
                    match offered {
                        FrontedAs::Read => Verdict::Read,
                        FrontedAs::RequireApproval => Verdict::RequireApproval,
                    }
                }
                Err(e) => Verdict::Skipped(format!("cannot be offered: {e}")),
            },
        };
        out.push(FrontedTool {
            tool,
            name,
            verdict,
            digest,
            pin: None,
        });
    }
    (out, caps)
}

/// The last tool list read from one server.
#[derive(Clone, Debug, Default)]
struct View {
    tools: Vec<FrontedTool>,
    /// Whether a list was ever read.
    read: bool,
    /// Why the last read failed (cleared by a success).
    error: Option<String>,
}

/// The fronted servers' classified tool lists, shared by the gateway.
#[derive(Clone)]
pub struct Fronted {
    views: Arc<Mutex<HashMap<String, View>>>,
    /// The aliases, longest first: a name is matched to the most specific alias.
    aliases: Arc<Vec<String>>,
    /// Told when what a fronted server offers changed: agents' `/mcp` sessions and
    /// subscriptions hear `notifications/tools/list_changed`.
    changed: tokio::sync::broadcast::Sender<()>,
}

impl Fronted {
    /// The (empty) lists of the registry's servers.
    pub fn new(registry: &Registry) -> Self {
        let mut aliases: Vec<String> = registry
            .mcp_servers
            .iter()
            .map(|s| s.alias.clone())
            .collect();
        aliases.sort_by_key(|a| std::cmp::Reverse(a.len()));
        Self {
            views: Arc::default(),
            aliases: Arc::new(aliases),
            changed: tokio::sync::broadcast::channel(16).0,
        }
    }

    /// Records a list read from `alias`; a list that differs from the last one read is
    /// announced to [`Fronted::changes`] (and `true` is returned).
    pub fn set(&self, alias: &str, tools: Vec<FrontedTool>) -> bool {
        let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        let before = views.insert(
            alias.to_owned(),
            View {
                tools: tools.clone(),
                read: true,
                error: None,
            },
        );
        let changed = before.is_none_or(|b| !b.read || b.tools != tools);
        if changed {
            // No listener yet is fine: nobody has seen a list to be told about.
            let _ = self.changed.send(());
        }
        changed
    }

    /// Changes of what the fronted servers offer, from now on.
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<()> {
        self.changed.subscribe()
    }

    /// Records that reading `alias`'s list failed (its last list, if any, stays).
    pub fn failed(&self, alias: &str, error: String) {
        let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        views.entry(alias.to_owned()).or_default().error = Some(error);
    }

    /// The classified tools of `alias`, if its list was read.
    pub fn tools(&self, alias: &str) -> Option<Vec<FrontedTool>> {
        let views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        views.get(alias).filter(|v| v.read).map(|v| v.tools.clone())
    }

    /// Why a call to `name`, which no capability answers to, is refused: a fronted
    /// server's tool its policy refuses or that was skipped, or a tool of a server whose
    /// list has not been read (`None`: nothing fronted has this name).
    pub fn refusal(&self, name: &str) -> Option<ApiError> {
        // A listed name first (servers with `prefix = false` offer their own names).
        {
            let views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
            let found = views
                .values()
                .flat_map(|v| v.tools.iter())
                .find(|t| t.name == name);
            if let Some(tool) = found {
                return match &tool.verdict {
                    Verdict::Refused(why) | Verdict::Skipped(why) => Some(ApiError::Coded(
                        StatusCode::FORBIDDEN,
                        Code::PolicyDenied,
                        format!("{name} is refused: {why}"),
                    )),
                    Verdict::Changed(why) => Some(ApiError::Coded(
                        StatusCode::CONFLICT,
                        Code::ToolChanged,
                        format!("{name} is held: {why}"),
                    )),
                    _ => None,
                };
            }
        }
        let alias = self.aliases.iter().find(|a| {
            name.len() > a.len() + 1
                && name.starts_with(a.as_str())
                && name.as_bytes()[a.len()] == b'_'
        })?;
        let views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        let view = views.get(alias);
        if !view.is_some_and(|v| v.read) {
            let why = view
                .and_then(|v| v.error.clone())
                .unwrap_or_else(|| "it is being read".into());
            return Some(ApiError::Coded(
                StatusCode::NOT_FOUND,
                Code::UnknownCapability,
                format!(
                    "no capability {name}: the tool list of MCP server `{alias}` has not been read yet ({why}); nothing of it is callable until it is"
                ),
            ));
        }
        None
    }
}
