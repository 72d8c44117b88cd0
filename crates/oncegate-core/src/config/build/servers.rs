//! Building `[[mcp_servers]]`: aliases that make valid tool-name prefixes, once each;
//! and the capability an undeclared tool of a fronted server is called through.

use std::collections::BTreeSet;
use std::sync::Arc;

use jiff::SignedDuration;
use serde_json::Value;

use super::builder::{Builder, DEFAULT_TIMEOUT, DURATION_HELP, k};
use super::capability::{DEFAULT_APPROVAL_TTL, DEFAULT_LEASE, defaults};
use crate::config::locate::Seg;
use crate::config::raw::RawMcpServer;
use crate::config::{
    Capability, Category, DEFAULT_LATE_PROCESSING, KeyPrincipal, KeyRecipe, KeyThreading,
    MCP_LATE_ANSWER_LIMIT_SECS, McpServer, OnUnknown, Scope, ToolErrors, Upstream, UpstreamKind,
};
use crate::policy::PolicyEngine;

/// How long a fronted server's tool list is trusted without a change notification.
const DEFAULT_REFRESH: SignedDuration = SignedDuration::from_secs(300);

impl Builder<'_> {
    pub(super) fn mcp_servers(&mut self, raw: Vec<RawMcpServer>) -> Vec<McpServer> {
        let mut seen = BTreeSet::new();
        let mut servers = Vec::new();
        for (i, rs) in raw.into_iter().enumerate() {
            let at = |field: &str| vec![k("mcp_servers"), Seg::Index(i), k(field)];
            // The alias and `_` prefix every tool name: it must leave room for one.
            let alias_ok = !rs.alias.is_empty()
                && rs.alias.len() < crate::config::MAX_TOOL_NAME - 1
                && rs
                    .alias
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-');
            if !alias_ok {
                self.err(
                    &at("alias"),
                    format!("`{}` is not a usable alias", rs.alias),
                    Some("letters, digits and `-` (tools are listed as <alias>_<tool>), e.g. alias = \"payments\""),
                );
            }
            if !seen.insert(rs.alias.clone()) {
                self.err(
                    &at("alias"),
                    format!("MCP server `{}` is declared twice", rs.alias),
                    None,
                );
            }
            let url = self.template(&at("url"), &rs.url);
            let headers = self.headers(&[k("mcp_servers"), Seg::Index(i)], rs.headers);
            let timeout = self.duration(&at("timeout"), rs.timeout.as_deref(), DEFAULT_TIMEOUT);
            if timeout.is_zero() {
                self.err(
                    &at("timeout"),
                    "a zero timeout makes every call unknown",
                    Some(DURATION_HELP),
                );
            }
            let refresh = self.duration(&at("refresh"), rs.refresh.as_deref(), DEFAULT_REFRESH);
            if refresh.is_zero() {
                self.err(
                    &at("refresh"),
                    "a zero refresh would list the server's tools on every request",
                    Some("e.g. refresh = \"5m\" (a list_changed notification refreshes sooner)"),
                );
            }
            let prefix = rs.prefix.unwrap_or(true);
            if !prefix && let Some(other) = servers.iter().find(|s: &&McpServer| !s.prefix) {
                // Two servers offering their own names could both offer one name.
                self.err(
                    &at("prefix"),
                    format!(
                        "server `{}` already offers its tools under their own names; only one server may",
                        other.alias
                    ),
                    Some("keep prefix = false on one server; the others are listed as <alias>_<tool>"),
                );
            }
            servers.push(McpServer {
                alias: rs.alias,
                url,
                headers,
                timeout,
                undeclared: rs.undeclared.unwrap_or_default(),
                refresh,
                prefix,
            });
        }
        servers
    }
}

/// How a fronted server's undeclared tool is offered to agents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontedAs {
    /// A read: passes through (the upstream's annotations say read-only).
    Read,
    /// Held for a human approver on every new intent; its key is every argument.
    RequireApproval,
}

impl McpServer {
    /// The capability an undeclared `tool` of this server is called through, named
    /// `name` (`<alias>_<tool>`), with the upstream's own description and input schema.
    /// Everything a declared capability would configure takes its category's default;
    /// the key is the tool and all its arguments, exactly (no drift folded: oncegate
    /// knows nothing of their meaning). A `RequireApproval` tool carries one policy,
    /// `undeclared:<alias>`, that holds every call for an approver.
    pub fn undeclared_capability(
        &self,
        tool: &str,
        name: &str,
        description: Option<String>,
        input_schema: Value,
        offered: FrontedAs,
    ) -> Result<Capability, String> {
        let category = match offered {
            FrontedAs::Read => Category::Read,
            FrontedAs::RequireApproval => Category::NonIdempotent,
        };
        let d = defaults(category);
        let upstream = Upstream {
            kind: UpstreamKind::Mcp,
            url: self.url.clone(),
            method: "POST".to_owned(),
            timeout: self.timeout,
            headers: self.headers.clone(),
            body: None,
            effect_ref: None,
            // The key reaches the tool in `_meta`, where a server that knows it dedupes.
            idempotency: KeyThreading::Meta,
            idempotency_header: "Idempotency-Key".to_owned(),
            idempotency_arg: None,
            tool: Some(tool.to_owned()),
            server: Some(self.alias.clone()),
            tool_errors: ToolErrors::default(),
            rejected: None,
        };
        let mut cap = Capability {
            name: name.to_owned(),
            description,
            category,
            key_principal: KeyPrincipal::default(),
            key: KeyRecipe {
                business_ref: None,
                significant: Vec::new(),
                scope: Scope::Global,
                every_argument: true,
            },
            replay_window: d.replay_window,
            attempt_ceiling: d.attempt_ceiling,
            lease: DEFAULT_LEASE.max(self.timeout + SignedDuration::from_secs(5)),
            settle_horizon: self.timeout
                + SignedDuration::from_secs(MCP_LATE_ANSWER_LIMIT_SECS as i64)
                + DEFAULT_LATE_PROCESSING,
            approval_ttl: DEFAULT_APPROVAL_TTL,
            on_unknown: match category {
                Category::Read => OnUnknown::Retry,
                _ => OnUnknown::Escalate,
            },
            cross_run: d.cross_run,
            after_window: d.after_window,
            dry_run: false,
            require_client_key: false,
            long_running: false,
            upstream: Some(upstream),
            reconcile: None,
            policy: None,
            policy_file: None,
            input_schema: Some(input_schema),
            duplicates: None,
            listing: None,
            limits: Vec::new(),
            traced_arguments: Vec::new(),
        };
        if offered == FrontedAs::RequireApproval {
            let text = format!(
                "@id(\"undeclared:{alias}\")\n@oncegate(\"require_approval\")\npermit (principal, action == Action::{name:?}, resource);\n",
                alias = self.alias,
            );
            cap.policy = Some(Arc::new(PolicyEngine::new(&text, &[&cap])?));
        }
        Ok(cap)
    }
}
