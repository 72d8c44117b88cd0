//! `[[mcp_servers]]`: MCP servers fronted whole, under an alias. Their tools are listed
//! to agents as `<alias>_<tool>`; the registry's capabilities that name the server
//! (`upstream.server = "<alias>"`) declare theirs, and the server's `undeclared` policy
//! says what happens to the rest.

use std::collections::BTreeMap;

use jiff::SignedDuration;
use serde::{Deserialize, Serialize};

use crate::template::Template;

/// What happens to a fronted server's tools that no capability declares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Undeclared {
    /// Not listed; a call is refused (default): nothing unknown reaches the server.
    #[default]
    Refuse,
    /// Listed; every call waits for a human approver, then runs once (its key is the
    /// tool and all its arguments).
    RequireApproval,
    /// Tools whose upstream annotations say read-only pass through as reads; the rest
    /// are refused.
    Read,
}

impl Undeclared {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Undeclared::Refuse => "refuse",
            Undeclared::RequireApproval => "require_approval",
            Undeclared::Read => "read",
        }
    }
}

/// One fronted MCP server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServer {
    /// The prefix of its tools' names (`<alias>_<tool>`).
    pub alias: String,
    /// Its Streamable HTTP endpoint.
    pub url: Template,
    /// Headers for every request (credentials from `{env.NAME}`).
    pub headers: BTreeMap<String, Template>,
    /// How long one call may take before its outcome is unknown.
    pub timeout: SignedDuration,
    /// What happens to the tools no capability declares.
    pub undeclared: Undeclared,
    /// How long a tool list is trusted without a `list_changed` notification.
    pub refresh: SignedDuration,
    /// Whether its tools and prompts are offered as `<alias>_<name>` (the default) or
    /// under their own names (`prefix = false`).
    pub prefix: bool,
}

impl McpServer {
    /// The name agents see for the server's tool or prompt `name`, if it is a valid
    /// MCP tool name.
    pub fn offered_name(&self, name: &str) -> Option<String> {
        if self.prefix {
            fronted_name(&self.alias, name)
        } else {
            is_tool_name(name).then(|| name.to_owned())
        }
    }
}

/// The longest tool name the MCP specification allows.
pub const MAX_TOOL_NAME: usize = 128;

/// Whether `name` is a valid MCP tool name: 1 to 128 of `A-Z a-z 0-9 _ - .`.
pub fn is_tool_name(name: &str) -> bool {
    (1..=MAX_TOOL_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The name agents see for `tool` of the server `alias`, if it is a valid tool name.
pub fn fronted_name(alias: &str, tool: &str) -> Option<String> {
    let name = format!("{alias}_{tool}");
    is_tool_name(&name).then_some(name)
}
