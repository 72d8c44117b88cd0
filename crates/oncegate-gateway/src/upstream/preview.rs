//! What an approver sees before approving: the request a held call's execution would
//! send, rendered by the code that sends it ([`super::render::render_http`],
//! [`super::render::render_tool_call`]) for the record's own arguments and key, and never sent.
//!
//! The gateway's secrets are masked the way its errors mask them: every value an
//! `{env.NAME}` placeholder is filled with (`client::secrets`) reads `***` wherever it
//! appears, the URL's userinfo and query values read `***` (`redact::url`), and a
//! credential header (`Authorization`, `Cookie`, an API key) shows its scheme only.
//! The body and the tool arguments are otherwise shown exactly: they are what the
//! approver is asked about (a link in an email body must be read whole).

use oncegate_core::config::{Capability, UpstreamKind};
use oncegate_core::redact::{MASK, Redactor};
use oncegate_engine::IntentHandle;
use serde::Serialize;
use serde_json::{Map, Value};

use super::client::secrets;
use super::render::{render_http, render_tool_call};

/// Header names whose values are credentials whatever they were filled with.
const CREDENTIAL_HEADERS: [&str; 8] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "api-key",
    "x-auth-token",
    "x-access-token",
    "private-token",
];

/// Trace context entries: per request, added as the request is sent, not part of what
/// the approver decides.
const TRACE_ENTRIES: [&str; 3] = ["traceparent", "tracestate", "baggage"];

/// One request header as the preview shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct PreviewHeader {
    /// The header's name.
    pub name: String,
    /// Its value, secrets masked.
    pub value: String,
}

/// The request a held call's execution would send, rendered and not sent.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RequestPreview {
    /// `http`, `mcp`, or `none`: nothing is sent from this gateway (a claim-only
    /// capability, executed by its caller) or the request cannot be rendered (`note`).
    pub kind: &'static str,
    /// The HTTP method (`http`).
    pub method: Option<String>,
    /// The URL (`http`), or the MCP server's endpoint (`mcp`).
    pub url: Option<String>,
    /// The tool called on the MCP server (`mcp`).
    pub tool: Option<String>,
    /// The request's headers (the configured ones and the key's).
    pub headers: Vec<PreviewHeader>,
    /// The JSON body (`http`; none for a `GET`), or the tool's arguments (`mcp`).
    #[schema(value_type = Option<Object>)]
    pub body: Option<Value>,
    /// The `tools/call` request's `_meta` (`mcp`: the idempotency key, run and step).
    #[schema(value_type = Option<Object>)]
    pub meta: Option<Value>,
    /// Why there is no request to show (`none`).
    pub note: Option<String>,
}

impl RequestPreview {
    fn none(note: impl Into<String>) -> Self {
        Self {
            kind: "none",
            method: None,
            url: None,
            tool: None,
            headers: Vec::new(),
            body: None,
            meta: None,
            note: Some(note.into()),
        }
    }
}

/// The request `cap`'s upstream would be sent for `intent`, with the gateway's secrets
/// masked.
pub fn render(cap: &Capability, intent: &IntentHandle) -> RequestPreview {
    let Some(up) = cap.upstream.as_ref() else {
        return RequestPreview::none(format!(
            "{} has no upstream in this gateway: its caller executes it (two-phase API), with the arguments shown, after the approval",
            cap.name
        ));
    };
    let secrets = secrets(cap.templates());
    match up.kind {
        UpstreamKind::Http => match render_http(up, intent) {
            Ok(r) => RequestPreview {
                kind: "http",
                method: Some(r.method.to_string()),
                url: Some(secrets.text(&r.url)),
                tool: None,
                headers: masked_headers(&r.headers, &secrets),
                body: r.body.map(|b| masked_value(b, &secrets)),
                meta: None,
                note: None,
            },
            Err(e) => RequestPreview::none(format!(
                "the request cannot be rendered: {}",
                secrets.text(&e.to_string())
            )),
        },
        UpstreamKind::Mcp => match render_tool_call(cap, up, intent) {
            Ok(call) => {
                let meta: Map<String, Value> = call
                    .meta
                    .into_iter()
                    .filter(|(k, _)| !TRACE_ENTRIES.contains(&k.as_str()))
                    .collect();
                RequestPreview {
                    kind: "mcp",
                    method: None,
                    url: Some(secrets.text(&call.url)),
                    tool: Some(call.tool),
                    headers: masked_headers(&call.headers, &secrets),
                    body: Some(masked_value(Value::Object(call.arguments), &secrets)),
                    meta: Some(masked_value(Value::Object(meta), &secrets)),
                    note: None,
                }
            }
            Err(e) => RequestPreview::none(format!(
                "the request cannot be rendered: {}",
                secrets.text(&e.to_string())
            )),
        },
    }
}

fn masked_headers(headers: &[(String, String)], secrets: &Redactor) -> Vec<PreviewHeader> {
    headers
        .iter()
        .filter(|(name, _)| !TRACE_ENTRIES.contains(&name.to_ascii_lowercase().as_str()))
        .map(|(name, value)| {
            let value = if CREDENTIAL_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                // The scheme says what kind of credential; the credential stays here.
                match value.split_once(' ') {
                    Some((scheme, _)) if scheme.chars().all(|c| c.is_ascii_alphabetic()) => {
                        format!("{scheme} {MASK}")
                    }
                    _ => MASK.to_owned(),
                }
            } else {
                secrets.values(value)
            };
            PreviewHeader {
                name: name.clone(),
                value,
            }
        })
        .collect()
}

/// `value` with every string's secret values masked (keys and other values as they are).
fn masked_value(value: Value, secrets: &Redactor) -> Value {
    match value {
        Value::String(s) => Value::String(secrets.values(&s)),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| masked_value(v, secrets))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, masked_value(v, secrets)))
                .collect(),
        ),
        other => other,
    }
}
