//! Building a capability's upstream call and its reconciliation read ("did this intent
//! already take effect?"): templates, timeouts, how the key reaches the provider, and the
//! fields that apply to one wire (HTTP or MCP) only.

use std::collections::BTreeMap;

use super::builder::{Builder, DEFAULT_TIMEOUT, DURATION_HELP, k};
use crate::config::locate::Seg;
use crate::config::raw::{RawReconcile, RawUpstream};
use crate::config::{
    Category, DEFAULT_READ_BACK, DEFAULT_READ_BACK_EVERY, KeyThreading, McpServer, Pattern,
    ReadBack, Reconcile, ToolErrors, Upstream, UpstreamKind,
};
use crate::template::Template;

/// The field path `rest` under `base`.
fn under(base: &[Seg], rest: &[&str]) -> Vec<Seg> {
    [base, &rest.iter().map(|s| k(s)).collect::<Vec<_>>()].concat()
}

impl Builder<'_> {
    pub(super) fn upstream(
        &mut self,
        base: &[Seg],
        category: Category,
        mut raw: RawUpstream,
    ) -> Upstream {
        let at = |rest: &[&str]| under(base, rest);
        let server = self.fronted_server(base, &raw);
        let url = self.upstream_url(base, &raw, server.as_ref());
        let default_timeout = server.as_ref().map_or(DEFAULT_TIMEOUT, |s| s.timeout);
        let timeout = self.duration(&at(&["timeout"]), raw.timeout.as_deref(), default_timeout);
        if timeout.is_zero() {
            self.err(
                &at(&["timeout"]),
                "a zero timeout makes every call unknown",
                Some(DURATION_HELP),
            );
        }
        let mut headers = server
            .as_ref()
            .map(|s| s.headers.clone())
            .unwrap_or_default();
        // The capability's own headers override the server's by name, in any case
        // (HTTP header names are case-insensitive).
        let own = self.headers(base, std::mem::take(&mut raw.headers));
        headers.retain(|name, _| !own.keys().any(|o| o.eq_ignore_ascii_case(name)));
        headers.extend(own);
        let body = raw.body.as_ref().map(|b| {
            let mut p = at(&["body"]);
            self.body(&mut p, b)
        });
        let idempotency = self.idempotency(base, &raw);
        self.check_wire_fields(base, &raw, category, body.is_some());
        let rejected = self.rejected(base, &raw);
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
            server: server.map(|s| s.alias),
            tool_errors: raw.tool_errors.unwrap_or_default(),
            rejected,
        }
    }

    /// The `[[mcp_servers]]` entry an MCP upstream's `server` names. A fronted server's
    /// capability takes its URL, headers and timeout from the server; its own headers
    /// add to (and override) the server's.
    fn fronted_server(&mut self, base: &[Seg], raw: &RawUpstream) -> Option<McpServer> {
        let alias = raw.server.as_deref()?;
        let at = under(base, &["server"]);
        if raw.kind != UpstreamKind::Mcp {
            self.err(
                &at,
                "`server` names an MCP server: it applies to kind = \"mcp\" only",
                None,
            );
            return None;
        }
        let found = self.servers.iter().find(|s| s.alias == alias).cloned();
        if found.is_none() {
            let known: Vec<&str> = self.servers.iter().map(|s| s.alias.as_str()).collect();
            let help = if known.is_empty() {
                "declare it first: [[mcp_servers]] alias = \"...\" url = \"...\"".to_owned()
            } else {
                format!("the declared servers are {}", known.join(", "))
            };
            self.err(
                &at,
                format!("no [[mcp_servers]] has alias `{alias}`"),
                Some(&help),
            );
        }
        found
    }

    /// The upstream's URL: its own, or its fronted server's, never both.
    fn upstream_url(
        &mut self,
        base: &[Seg],
        raw: &RawUpstream,
        server: Option<&McpServer>,
    ) -> Template {
        let at = under(base, &["url"]);
        match (&raw.url, server) {
            (Some(u), None) => self.template(&at, u),
            (Some(_), Some(_)) => {
                self.err(
                    &at,
                    "a capability of a fronted server uses the server's url",
                    Some("drop `url`, or drop `server`"),
                );
                Template::parse("").expect("the empty template parses")
            }
            (None, Some(s)) => s.url.clone(),
            (None, None) => {
                if raw.server.is_none() {
                    self.err(
                        &at,
                        "an upstream needs a url (or, for MCP, the `server` it belongs to)",
                        None,
                    );
                }
                Template::parse("").expect("the empty template parses")
            }
        }
    }

    /// How the key reaches the upstream: as declared, or the wire's default (a header
    /// for HTTP, `_meta` for MCP; an argument when `idempotency_arg` is named).
    fn idempotency(&mut self, base: &[Seg], raw: &RawUpstream) -> KeyThreading {
        let at = |rest: &[&str]| under(base, rest);
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
        idempotency
    }

    /// The fields that apply to one wire only: `tool` and `tool_errors` are MCP's; an
    /// unmapped MCP body is worth a warning.
    fn check_wire_fields(
        &mut self,
        base: &[Seg],
        raw: &RawUpstream,
        category: Category,
        has_body: bool,
    ) {
        let at = |rest: &[&str]| under(base, rest);
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
        // A read claims nothing and sends no key: the model's arguments are all it takes.
        if raw.kind == UpstreamKind::Mcp
            && category != Category::Read
            && !has_body
            && raw.idempotency_arg.is_none()
        {
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
    }

    /// `rejected`: the tool errors that are refusals which did nothing (MCP, under
    /// `tool_errors = "unknown"` only).
    fn rejected(&mut self, base: &[Seg], raw: &RawUpstream) -> Option<Pattern> {
        let source = raw.rejected.as_deref()?;
        let at = under(base, &["rejected"]);
        if raw.kind == UpstreamKind::Http {
            self.err(
                &at,
                "`rejected` applies to MCP upstreams only (an HTTP 4xx is already a definite failure)",
                None,
            );
            return None;
        }
        if raw.tool_errors == Some(ToolErrors::Failed) {
            self.err(
                &at,
                "with tool_errors = \"failed\" every tool error is already a failure",
                Some("drop `rejected`, or drop tool_errors to treat only matching errors as refusals"),
            );
            return None;
        }
        match Pattern::new(source) {
            Ok(p) => Some(p),
            Err(e) => {
                self.err(
                    &at,
                    format!("`{source}` is not a regular expression: {e}"),
                    Some("a Rust regex searched anywhere in the tool error's text, e.g. \"^(card declined|invalid amount)\""),
                );
                None
            }
        }
    }

    pub(super) fn reconcile(
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
        let read_back = ReadBack {
            count: raw.read_back.unwrap_or(DEFAULT_READ_BACK),
            every: self.duration(
                &at(&["read_back_every"]),
                raw.read_back_every.as_deref(),
                DEFAULT_READ_BACK_EVERY,
            ),
        };
        if read_back.count > 0 && !read_back.every.is_positive() {
            self.err(
                &at(&["read_back_every"]),
                "a zero interval would read back without pause",
                Some("use e.g. \"10m\", or read_back = 0 to never read back"),
            );
        }
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
            read_back,
        }
    }

    pub(super) fn headers(
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

    pub(super) fn check_pointer(&mut self, path: &[Seg], pointer: Option<&str>) {
        if let Some(p) = pointer
            && !p.is_empty()
            && !p.starts_with('/')
        {
            let help = "JSON pointers start with `/`, e.g. \"/id\" or \"/charge/id\"";
            self.err(path, format!("`{p}` is not a JSON pointer"), Some(help));
        }
    }
}
