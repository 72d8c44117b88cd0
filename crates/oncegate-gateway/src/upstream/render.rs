//! Rendering a capability's templates for one intent: the values they read (arguments,
//! normalised values, the key, the gateway's `{env.NAME}`), the HTTP request or MCP
//! `tools/call` an execution sends (what an approver's preview shows too), and the
//! refusal of a rendered URL whose path would move the call to another resource.

use oncegate_core::config::{BodyTemplate, Capability, KeyThreading, Upstream};
use oncegate_core::template::{Part, Source, Template};
use oncegate_engine::IntentHandle;
use serde_json::{Map, Value};
use unicode_normalization::UnicodeNormalization;

use super::client::secrets;
use super::mcp;

/// Why a template could not be rendered (nothing was sent).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RenderError(String);

/// The values templates read.
pub(super) struct Scope<'a> {
    pub(super) intent: &'a IntentHandle,
}

impl Scope<'_> {
    pub(super) fn value(&self, source: &Source) -> Result<Value, RenderError> {
        let h = self.intent;
        Ok(match source {
            Source::Arg(path) => path.lookup(&h.arguments).cloned().unwrap_or(Value::Null),
            Source::Norm { name, field } => {
                let v = h.normalised.get(name).cloned().unwrap_or(Value::Null);
                match field.as_deref() {
                    None => v,
                    // Minor units are strings in key material; providers want integers.
                    Some("minor") => match v
                        .get("minor")
                        .and_then(Value::as_str)
                        .and_then(|s| s.parse::<i64>().ok())
                    {
                        Some(n) => Value::from(n),
                        None => Value::Null,
                    },
                    Some(f) => v.get(f).cloned().unwrap_or(Value::Null),
                }
            }
            Source::Key => Value::String(h.key.clone()),
            Source::BusinessRef => h.business_ref.clone().map_or(Value::Null, Value::String),
            Source::Env(name) => Value::String(std::env::var(name).map_err(|_| {
                RenderError(format!(
                    "environment variable {name} is not set in the gateway"
                ))
            })?),
            Source::RunId => h.run_id.clone().map_or(Value::Null, Value::String),
            Source::StepId => h.step_id.clone().map_or(Value::Null, Value::String),
        })
    }

    pub(super) fn text(&self, template: &Template) -> Result<String, RenderError> {
        let mut out = String::new();
        for part in template.parts() {
            match part {
                Part::Literal(l) => out.push_str(l),
                Part::Placeholder(s) => match self.value(s)? {
                    Value::String(v) => out.push_str(&v),
                    Value::Null => {}
                    other => out.push_str(&other.to_string()),
                },
            }
        }
        Ok(out)
    }

    /// Renders a URL: values from the call are percent-encoded so an argument can never
    /// change the path or the query (`../admin`, `?x=`); the gateway's own `{env.NAME}`
    /// values (base URLs) are inserted as they are.
    pub(super) fn url(&self, template: &Template) -> Result<String, RenderError> {
        const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
            .remove(b'-')
            .remove(b'.')
            .remove(b'_')
            .remove(b'~');
        let mut out = String::new();
        for part in template.parts() {
            match part {
                Part::Literal(l) => out.push_str(l),
                Part::Placeholder(s @ Source::Env(_)) => match self.value(s)? {
                    Value::String(v) => out.push_str(&v),
                    other => out.push_str(&other.to_string()),
                },
                Part::Placeholder(s) => {
                    let raw = match self.value(s)? {
                        Value::String(v) => v,
                        Value::Null => String::new(),
                        other => other.to_string(),
                    };
                    out.extend(percent_encoding::utf8_percent_encode(&raw, COMPONENT));
                }
            }
        }
        Ok(out)
    }

    /// Renders header templates (credentials from `{env.NAME}`).
    pub(super) fn headers<'t>(
        &self,
        headers: impl IntoIterator<Item = (&'t String, &'t Template)>,
    ) -> Result<Vec<(String, String)>, RenderError> {
        headers
            .into_iter()
            .map(|(k, v)| Ok((k.clone(), self.text(v)?)))
            .collect()
    }

    pub(super) fn body(&self, body: &BodyTemplate) -> Result<Value, RenderError> {
        Ok(match body {
            BodyTemplate::Object(map) => {
                let mut out = Map::new();
                for (k, v) in map {
                    let rendered = self.body(v)?;
                    // An optional argument that is absent stays absent upstream.
                    if !rendered.is_null() {
                        out.insert(k.clone(), rendered);
                    }
                }
                Value::Object(out)
            }
            BodyTemplate::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|b| self.body(b))
                    .collect::<Result<_, _>>()?,
            ),
            BodyTemplate::Text(t) => match t.as_single() {
                Some(source) => self.value(source)?,
                None => Value::String(self.text(t)?),
            },
            BodyTemplate::Literal(v) => v.clone(),
        })
    }
}

/// Whether an upstream's URL and headers render the same for every call: their templates
/// read nothing but the gateway's own `{env.NAME}` values. Decided from the templates, not
/// from a rendered value (an `{arg.*}` that happens to be empty is still per call).
pub(super) fn same_for_every_call<'t>(
    url: &'t Template,
    headers: impl IntoIterator<Item = &'t Template>,
) -> bool {
    std::iter::once(url)
        .chain(headers)
        .flat_map(Template::sources)
        .all(|s| matches!(s, Source::Env(_)))
}

/// Refuses a rendered URL whose path has a `.` or `..` segment, in any spelling a server
/// might decode it to: percent-escapes are decoded repeatedly (a value `%2e%2e` renders
/// as `%252e%252e`, which a server that decodes twice reads as `..`). A segment that
/// decodes to a `/` or `\` (`%2F`, `%5C`: a server that decodes before routing reads two
/// segments), or that holds a character some server normalises to a dot or a slash
/// (`‥` U+2025, `．` U+FF0E, `／` U+FF0F, `∕` U+2215, ...; see [`LOOK_ALIKES`]), is
/// refused too: no business identifier needs one. Only the path is checked: the query is
/// data.
pub(super) fn check_path(url: &str) -> Result<(), RenderError> {
    let rest = url.find("://").map_or(url, |i| &url[i + 3..]);
    let Some(start) = rest.find('/') else {
        return Ok(());
    };
    let path = rest[start..].split(['?', '#']).next().unwrap_or_default();
    for segment in path.split('/') {
        let mut text = segment.to_owned();
        for _ in 0..5 {
            if let Some(problem) = segment_problem(&text) {
                let read = if text == segment {
                    String::new()
                } else {
                    format!(" (read as `{text}`)")
                };
                return Err(RenderError(format!(
                    "an argument makes the upstream path segment `{segment}`{read}, which {problem}; `.` and `..`, an encoded `/` or `\\`, and characters a server may read as a dot or a slash are not allowed in a path segment"
                )));
            }
            let decoded = percent_encoding::percent_decode_str(&text)
                .decode_utf8_lossy()
                .into_owned();
            if decoded == text {
                break;
            }
            text = decoded;
        }
    }
    Ok(())
}

/// Characters that read as a dot or a slash to a server that normalises Unicode (NFKC
/// maps most of them; `∕` and `⁄` are slashes to some URL parsers and file systems).
pub const LOOK_ALIKES: [char; 16] = [
    '\u{2024}', // ONE DOT LEADER
    '\u{2025}', // TWO DOT LEADER
    '\u{2026}', // HORIZONTAL ELLIPSIS
    '\u{FE52}', // SMALL FULL STOP
    '\u{FF0E}', // FULLWIDTH FULL STOP
    '\u{3002}', // IDEOGRAPHIC FULL STOP
    '\u{FF61}', // HALFWIDTH IDEOGRAPHIC FULL STOP
    '\u{FF0F}', // FULLWIDTH SOLIDUS
    '\u{2215}', // DIVISION SLASH
    '\u{2044}', // FRACTION SLASH
    '\u{29F8}', // BIG SOLIDUS
    '\u{FE68}', // SMALL REVERSE SOLIDUS
    '\u{FF3C}', // FULLWIDTH REVERSE SOLIDUS
    '\u{2216}', // SET MINUS
    '\u{29F5}', // REVERSE SOLIDUS OPERATOR
    '\u{29F9}', // BIG REVERSE SOLIDUS
];

/// Why one (partly decoded) path segment would move the call, if it would.
fn segment_problem(text: &str) -> Option<&'static str> {
    if text == "." || text == ".." {
        return Some("would send the call to another path");
    }
    if text.contains(['/', '\\']) {
        return Some("a server that decodes before routing reads as more than one segment");
    }
    if text.contains(LOOK_ALIKES) {
        return Some("holds a character a server may read as a dot or a slash");
    }
    // Any other compatibility character NFKC turns into a dot or a slash (`℀` is `a/c`,
    // `⒈` is `1.`): a server that normalises would see another segment or a traversal.
    let marks = |t: &str| t.matches(['.', '/', '\\']).count();
    let normalised: String = text.nfkc().collect();
    if marks(&normalised) > marks(text) {
        return Some("holds a character that normalises (NFKC) to a dot or a slash");
    }
    None
}

/// An HTTP upstream's request for one intent, rendered and not sent: what
/// [`Executor::execute`] sends (the trace context headers are added as it sends), and
/// what an approver's preview shows ([`preview`]).
pub(crate) struct HttpRequest {
    pub(crate) method: reqwest::Method,
    pub(crate) url: String,
    /// The configured headers, then the key's header when the key is threaded in one.
    pub(crate) headers: Vec<(String, String)>,
    /// The JSON body (none for a `GET`).
    pub(crate) body: Option<Value>,
}

/// Renders an HTTP upstream's request for `intent`: URL (its path checked), method,
/// headers, body, and the key threaded as the upstream declares.
pub(crate) fn render_http(
    up: &Upstream,
    intent: &IntentHandle,
) -> Result<HttpRequest, RenderError> {
    let scope = Scope { intent };
    let url = scope.url(&up.url)?;
    check_path(&url)?;
    let method = reqwest::Method::from_bytes(up.method.as_bytes())
        .map_err(|e| RenderError(e.to_string()))?;
    let mut headers = scope.headers(&up.headers)?;
    let mut body = match &up.body {
        Some(b) => scope.body(b)?,
        None => intent.arguments.clone(),
    };
    match up.idempotency {
        KeyThreading::Header => headers.push((up.idempotency_header.clone(), intent.key.clone())),
        KeyThreading::Argument => {
            if let (Some(arg), Value::Object(map)) = (&up.idempotency_arg, &mut body) {
                map.insert(arg.clone(), Value::String(intent.key.clone()));
            }
        }
        KeyThreading::Meta | KeyThreading::None => {}
    }
    let body = (method != reqwest::Method::GET).then_some(body);
    Ok(HttpRequest {
        method,
        url,
        headers,
        body,
    })
}

/// Renders an MCP upstream's `tools/call` for `intent`: the tool arguments (the body
/// mapping, or the call's own arguments) with the key threaded (always in `_meta`, and
/// in the tool's key argument if declared), the server's URL and headers. What
/// [`Executor::execute`] sends, and what an approver's preview shows ([`preview`]).
pub(crate) fn render_tool_call(
    cap: &Capability,
    up: &Upstream,
    intent: &IntentHandle,
) -> Result<mcp::ToolCall, RenderError> {
    let scope = Scope { intent };
    let arguments = match &up.body {
        Some(b) => scope.body(b)?,
        None => intent.arguments.clone(),
    };
    let Value::Object(mut arguments) = arguments else {
        return Err(RenderError("MCP tool arguments must be an object".into()));
    };
    let mut meta = Map::new();
    if up.idempotency != KeyThreading::None {
        meta.insert(
            mcp::IDEMPOTENCY_META_KEY.into(),
            Value::String(intent.key.clone()),
        );
    }
    if let Some(arg) = &up.idempotency_arg {
        arguments.insert(arg.clone(), Value::String(intent.key.clone()));
    }
    for (name, value) in [
        ("dev.oncegate/run_id", &intent.run_id),
        ("dev.oncegate/step_id", &intent.step_id),
    ] {
        if let Some(v) = value {
            meta.insert(name.into(), Value::String(v.clone()));
        }
    }
    // W3C trace context travels in `_meta` (MCP SEP-414).
    for (name, value) in crate::trace::outgoing() {
        meta.insert(name, Value::String(value));
    }
    // Percent-encoded like an HTTP upstream's URL: an argument cannot change the
    // endpoint's path or query.
    let url = scope.url(&up.url)?;
    check_path(&url)?;
    Ok(mcp::ToolCall {
        url,
        headers: scope.headers(&up.headers)?,
        tool: up.tool.clone().unwrap_or_default(),
        arguments,
        meta,
        timeout: up.timeout.unsigned_abs(),
        poolable: same_for_every_call(&up.url, up.headers.values()),
        // The upstream's progress reaches the agents waiting on this intent.
        progress: Some(intent.intent_key.as_str().to_owned()),
        secrets: secrets(cap.templates()),
    })
}

/// An intent that is no intent: only the gateway's own values ({env.NAME}) make sense
/// outside a call.
pub(super) fn nobody(capability: &str) -> IntentHandle {
    IntentHandle {
        key: String::new(),
        intent_key: oncegate_core::key::IntentKey::from_hex(String::new()),
        generation: 0,
        capability: capability.to_owned(),
        arguments: Value::Null,
        normalised: Value::Null,
        business_ref: None,
        run_id: None,
        step_id: None,
    }
}

/// The request that reads a fronted MCP server (its tool list, its change
/// notifications): its URL and headers with the gateway's own values filled in.
pub fn server_request(server: &oncegate_core::config::McpServer) -> Result<mcp::ToolCall, String> {
    let nobody = nobody("");
    let scope = Scope { intent: &nobody };
    Ok(mcp::ToolCall {
        url: scope.url(&server.url).map_err(|e| e.to_string())?,
        headers: scope.headers(&server.headers).map_err(|e| e.to_string())?,
        tool: String::new(),
        arguments: Map::new(),
        meta: Map::new(),
        timeout: server.timeout.unsigned_abs(),
        poolable: false,
        progress: None,
        secrets: secrets(std::iter::once(&server.url).chain(server.headers.values())),
    })
}
