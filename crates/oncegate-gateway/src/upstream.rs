//! Upstreams: render a capability's templates, call the provider (HTTP/JSON, or a tool
//! on an MCP server, see [`mcp`]) with the intent key, and classify the answer the way
//! DESIGN.md says.
//!
//! Why one file: rendering, limits and classification share one template scope, hence one
//! file beside upstream/mcp.rs.
//!
//! Only proof that no byte left (connection refused, DNS, TLS handshake) makes an
//! attempt `not_applied` without reconciliation; a 429 is a provider's explicit "not
//! done". Anything that may have reached the provider (timeout, reset after send, 5xx)
//! is `unknown`. A 4xx is a definite failure.
//!
//! Two things are refused before anything is claimed ([`Executor::admit`]): a rendered
//! URL whose path has a `.` or `..` segment (an argument such as `customer = ".."` would
//! otherwise move the call to another resource, with the provider's credentials). And an
//! answer over `gateway.max_answer_bytes` / `max_answer_depth` is never stored whole: it
//! is read as a stream, hashed, and stored as its SHA-256, length and a short preview.

pub mod client;
pub mod mcp;
pub mod preview;

use std::sync::Arc;

use oncegate_core::config::{
    BodyTemplate, Capability, KeyThreading, Reconcile, ToolErrors, Upstream, UpstreamKind,
};
use oncegate_core::limits::{AnswerSummary, Limits, answer_over_limit, bound_answer, json_depth};
use oncegate_core::redact::Redactor;
use oncegate_core::template::{Part, Source, Template};
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_engine::{Attempt, Executor, IntentHandle, LateAnswer};
use serde_json::{Map, Value, json};
use tracing::Instrument;
use unicode_normalization::UnicodeNormalization;

use self::client::{reqwest_error_text, secrets};
use crate::inflight::InFlight;

/// Why a template could not be rendered (nothing was sent).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RenderError(String);

/// The values templates read.
struct Scope<'a> {
    intent: &'a IntentHandle,
}

impl Scope<'_> {
    fn value(&self, source: &Source) -> Result<Value, RenderError> {
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

    fn text(&self, template: &Template) -> Result<String, RenderError> {
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
    fn url(&self, template: &Template) -> Result<String, RenderError> {
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
    fn headers<'t>(
        &self,
        headers: impl IntoIterator<Item = (&'t String, &'t Template)>,
    ) -> Result<Vec<(String, String)>, RenderError> {
        headers
            .into_iter()
            .map(|(k, v)| Ok((k.clone(), self.text(v)?)))
            .collect()
    }

    fn body(&self, body: &BodyTemplate) -> Result<Value, RenderError> {
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
fn same_for_every_call<'t>(
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
fn check_path(url: &str) -> Result<(), RenderError> {
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

fn pointer_string(body: &Value, pointer: Option<&str>) -> Option<String> {
    match body.pointer(pointer?)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// An upstream answer as read within the limits.
struct Answer {
    /// What is stored: the body, or its summary when it is over a limit.
    stored: Value,
    /// The parsed body when it was read whole (pointers such as `effect_ref` read it).
    full: Option<Value>,
}

/// Reads a body chunk by chunk: past `max_answer_bytes` only its digest, length and
/// preview are kept, so a huge answer never sits in memory or in the store.
async fn read_body(
    mut response: reqwest::Response,
    limits: &Limits,
) -> Result<Answer, reqwest::Error> {
    let mut kept = Vec::new();
    let mut over: Option<AnswerSummary> = None;
    while let Some(chunk) = response.chunk().await? {
        match over.as_mut() {
            Some(summary) => summary.update(&chunk),
            None if kept.len() + chunk.len() > limits.max_answer_bytes => {
                let mut summary = AnswerSummary::new();
                summary.update(&kept);
                summary.update(&chunk);
                kept = Vec::new();
                over = Some(summary);
            }
            None => kept.extend_from_slice(&chunk),
        }
    }
    if let Some(summary) = over {
        let reason = answer_over_limit(summary.len(), None, limits).unwrap_or_default();
        return Ok(Answer {
            stored: summary.finish(&reason),
            full: None,
        });
    }
    let text = String::from_utf8_lossy(&kept).into_owned();
    let summarise = |reason: String| {
        let mut summary = AnswerSummary::new();
        summary.update(&kept);
        summary.finish(&reason)
    };
    Ok(match serde_json::from_str::<Value>(&text) {
        Ok(body) => match answer_over_limit(kept.len(), Some(json_depth(&body)), limits) {
            Some(reason) => Answer {
                stored: summarise(reason),
                full: Some(body),
            },
            None => Answer {
                stored: body.clone(),
                full: Some(body),
            },
        },
        // serde_json stops at 128 levels: deeper than any limit.
        Err(e) if e.to_string().contains("recursion limit") => Answer {
            stored: summarise(format!(
                "the answer nests more than 128 levels deep, over the limit of {} (gateway.max_answer_depth)",
                limits.max_answer_depth
            )),
            full: None,
        },
        Err(_) => Answer {
            stored: Value::String(text),
            full: None,
        },
    })
}

/// Executes one capability's upstream (HTTP or MCP) and its reconciliation read.
pub struct UpstreamExecutor {
    client: reqwest::Client,
    cap: Arc<Capability>,
    /// Where a call left running past its timeout registers, so shutdown waits for it.
    inflight: Option<InFlight>,
    /// Where an effect's MCP call is listed until it has really ended.
    running: Option<mcp::RunningCalls>,
    /// Connected MCP clients to reuse (none: connect per call).
    sessions: Option<mcp::Sessions>,
    /// What an answer may be before only its summary is stored.
    limits: Limits,
}

impl UpstreamExecutor {
    /// An executor for `cap`, sharing `client`'s connection pool.
    pub fn new(client: reqwest::Client, cap: Arc<Capability>) -> Self {
        Self {
            client,
            cap,
            inflight: None,
            running: None,
            sessions: None,
            limits: Limits::default(),
        }
    }

    /// Stores answers within `limits` (the registry's `[gateway]` limits).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Registers MCP calls left running past their timeout with `inflight`.
    pub fn with_inflight(mut self, inflight: InFlight) -> Self {
        self.inflight = Some(inflight);
        self
    }

    /// Lists effects' MCP calls in `running` until they have really ended (shared by
    /// every executor of a gateway, see [`Executor::attempt_running`]).
    pub fn with_running(mut self, running: mcp::RunningCalls) -> Self {
        self.running = Some(running);
        self
    }

    /// Sends MCP calls through the connected clients in `sessions` (shared by every
    /// executor of a gateway) instead of connecting per call.
    pub fn with_sessions(mut self, sessions: mcp::Sessions) -> Self {
        self.sessions = Some(sessions);
        self
    }

    fn request(
        &self,
        up: &Upstream,
        intent: &IntentHandle,
    ) -> Result<reqwest::RequestBuilder, RenderError> {
        let rendered = render_http(up, intent)?;
        let mut req = self
            .client
            .request(rendered.method, rendered.url)
            .timeout(up.timeout.unsigned_abs());
        for (name, value) in &rendered.headers {
            req = req.header(name, value);
        }
        for (name, value) in crate::trace::outgoing() {
            req = req.header(name, value);
        }
        if let Some(body) = &rendered.body {
            req = req.json(body);
        }
        Ok(req)
    }
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

/// Classifies a transport error: only a failure to connect proves nothing was sent.
fn classify_error(e: &reqwest::Error) -> EffectResult {
    // Never echo the URL: it may carry credentials from the gateway's environment.
    let e = reqwest_error_text(e);
    if e.connect || e.builder {
        EffectResult::NotSent {
            message: format!("nothing was sent to the upstream: {}", e.text),
        }
    } else if e.timeout {
        EffectResult::Unknown {
            message: "the upstream did not answer before the timeout".into(),
        }
    } else {
        EffectResult::Unknown {
            message: format!(
                "the connection failed after the request was sent: {}",
                e.text
            ),
        }
    }
}

impl Executor for UpstreamExecutor {
    /// A capability without an upstream is claim-only: its callers execute it.
    fn executes(&self) -> bool {
        self.cap.upstream.is_some()
    }

    async fn execute(&self, intent: IntentHandle) -> EffectResult {
        self.execute_attempt(intent).await.result
    }

    fn attempt_running(&self, intent: &IntentHandle) -> bool {
        self.running
            .as_ref()
            .is_some_and(|r| r.is_running(&intent.key))
    }

    async fn execute_attempt(&self, intent: IntentHandle) -> Attempt {
        let Some(up) = self.cap.upstream.as_ref() else {
            return Attempt::ended(EffectResult::NotSent {
                message: format!("capability {} has no upstream", self.cap.name),
            });
        };
        let span = crate::trace::upstream_span(&self.cap, up.kind);
        let attempt = self.attempt(up, intent).instrument(span.clone()).await;
        crate::trace::record_effect(&span, &attempt.result);
        self.redacted(attempt)
    }
    fn admit(&self, intent: &IntentHandle) -> Result<(), String> {
        let scope = Scope { intent };
        let http_up = self
            .cap
            .upstream
            .as_ref()
            .filter(|u| u.kind == UpstreamKind::Http)
            .map(|u| &u.url);
        let http_rec = self
            .cap
            .reconcile
            .as_ref()
            .filter(|r| r.kind == UpstreamKind::Http)
            .map(|r| &r.url);
        for template in http_up.into_iter().chain(http_rec) {
            // A template that cannot be rendered (an unset variable) is reported by the
            // execution itself, as nothing sent.
            if let Ok(url) = scope.url(template) {
                check_path(&url).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    async fn reconcile(&self, intent: IntentHandle) -> ReconcileResult {
        let Some(rec) = self.cap.reconcile.as_ref() else {
            return ReconcileResult::Undecidable {
                message: "no reconciliation read is declared".into(),
            };
        };
        let span = crate::trace::reconcile_span(&self.cap, rec.kind);
        let read = async {
            match rec.kind {
                UpstreamKind::Http => self.reconcile_read(rec, &intent).await,
                UpstreamKind::Mcp => self.reconcile_mcp(rec, &intent).await,
            }
        }
        .instrument(span.clone())
        .await;
        let answer = match read {
            Ok(r) => r,
            Err(message) => ReconcileResult::Undecidable {
                message: self.secrets().text(&message),
            },
        };
        crate::trace::record_reconcile(&span, &answer);
        answer
    }
}

impl UpstreamExecutor {
    /// What this capability's requests are filled with from the environment: no
    /// message of its results may show it (read when a result is an error).
    fn secrets(&self) -> Redactor {
        secrets(self.cap.templates())
    }

    /// `attempt` with the messages of its result and of its late answer redacted (the
    /// provider's answer itself is stored as it came).
    fn redacted(&self, attempt: Attempt) -> Attempt {
        let Attempt { result, late } = attempt;
        let secrets = self.secrets();
        let result = redact_result(result, &secrets);
        let late = late.map(|late| LateAnswer {
            answer: Box::pin(async move { redact_result(late.answer.await, &secrets) }),
            hold: late.hold,
        });
        Attempt { result, late }
    }

    /// One upstream call (HTTP or MCP), inside its trace span.
    async fn attempt(&self, up: &Upstream, intent: IntentHandle) -> Attempt {
        let started = std::time::Instant::now();
        if up.kind == UpstreamKind::Mcp {
            let attempt = self.execute_mcp(up, &intent).await;
            metrics::histogram!("oncegate_upstream_seconds", "capability" => self.cap.name.clone())
                .record(started.elapsed().as_secs_f64());
            return attempt;
        }
        // An HTTP request ends with its timeout (reqwest drops it): no late answer.
        let req = match self.request(up, &intent) {
            Ok(r) => r,
            Err(e) => {
                return Attempt::ended(EffectResult::NotSent {
                    message: e.to_string(),
                });
            }
        };
        let result = match req.send().await {
            Err(e) => classify_error(&e),
            Ok(response) => {
                let status = response.status();
                match read_body(response, &self.limits).await {
                    Err(e) => classify_error(&e),
                    Ok(body) if status.is_success() => EffectResult::Applied {
                        effect_ref: body
                            .full
                            .as_ref()
                            .and_then(|full| pointer_string(full, up.effect_ref.as_deref())),
                        result: body.stored,
                    },
                    Ok(_) if status.as_u16() == 429 => EffectResult::NotSent {
                        message: "the upstream rate-limited the call (429): nothing was done"
                            .into(),
                    },
                    // "Still processing this key", "locked", "too early", "request timeout":
                    // the provider may yet do it, so these are unknown, not refusals.
                    Ok(_) if matches!(status.as_u16(), 408 | 409 | 423 | 425) => {
                        EffectResult::Unknown {
                            message: format!(
                                "the upstream answered {status}: it may still take effect"
                            ),
                        }
                    }
                    Ok(_) if status.is_redirection() => EffectResult::Unknown {
                        message: format!(
                            "the upstream redirected ({status}); redirects are not followed for effects"
                        ),
                    },
                    Ok(body) if status.is_client_error() => EffectResult::Failed {
                        message: format!("the upstream refused the call ({status})"),
                        result: body.stored,
                    },
                    Ok(_) => EffectResult::Unknown {
                        message: format!("the upstream answered {status}"),
                    },
                }
            }
        };
        metrics::histogram!("oncegate_upstream_seconds", "capability" => self.cap.name.clone())
            .record(started.elapsed().as_secs_f64());
        Attempt::ended(result)
    }

    async fn reconcile_read(
        &self,
        rec: &Reconcile,
        intent: &IntentHandle,
    ) -> Result<ReconcileResult, String> {
        let scope = Scope { intent };
        let url = scope.url(&rec.url).map_err(|e| e.to_string())?;
        check_path(&url).map_err(|e| e.to_string())?;
        let method =
            reqwest::Method::from_bytes(rec.method.as_bytes()).map_err(|e| e.to_string())?;
        let mut req = self
            .client
            .request(method, url)
            .timeout(rec.timeout.unsigned_abs());
        for (name, value) in &rec.headers {
            req = req.header(name, scope.text(value).map_err(|e| e.to_string())?);
        }
        if let Some(up) = &self.cap.upstream {
            // The read authenticates like the write (same provider credentials).
            for (name, value) in &up.headers {
                if !rec.headers.contains_key(name) {
                    req = req.header(name, scope.text(value).map_err(|e| e.to_string())?);
                }
            }
        }
        for (name, value) in crate::trace::outgoing() {
            req = req.header(name, value);
        }
        let response = req.send().await.map_err(|e| {
            format!(
                "reconciliation read failed: {}",
                reqwest_error_text(&e).text
            )
        })?;
        let status = response.status();
        let body = read_body(response, &self.limits).await.map_err(|e| {
            format!(
                "reconciliation read failed: {}",
                reqwest_error_text(&e).text
            )
        })?;
        if status.as_u16() == 404 && rec.found.is_none() {
            return Ok(ReconcileResult::NotFound);
        }
        if !status.is_success() {
            return Err(format!("reconciliation read answered {status}"));
        }
        let Some(full) = body.full else {
            return Err(format!(
                "the reconciliation answer could not be judged: {}",
                body.stored
                    .get(oncegate_core::limits::TRUNCATED_KEY)
                    .and_then(|t| t.get("reason"))
                    .and_then(Value::as_str)
                    .unwrap_or("it is not JSON")
            ));
        };
        Ok(match judge(rec, full)? {
            ReconcileResult::Found { effect_ref, result } => ReconcileResult::Found {
                effect_ref,
                result: bound_answer(result, &self.limits),
            },
            other => other,
        })
    }

    /// Where the intent key reaches the upstream in the request this executor sends
    /// for `intent` (empty: nowhere). It renders the body the way [`Executor::execute`]
    /// does, so an `argument` key that a non-object body or a `GET` (no body) would
    /// silently drop is found (`oncegate verify`'s check of a `keyed` capability).
    pub fn key_placement(&self, intent: &IntentHandle) -> Result<Vec<String>, String> {
        let up = self
            .cap
            .upstream
            .as_ref()
            .ok_or_else(|| format!("capability {} has no upstream", self.cap.name))?;
        let scope = Scope { intent };
        let body = match &up.body {
            Some(b) => scope.body(b).map_err(|e| e.to_string())?,
            None => intent.arguments.clone(),
        };
        let mut at = Vec::new();
        match (up.kind, up.idempotency) {
            (UpstreamKind::Http, KeyThreading::Header) => {
                at.push(format!("the {} header", up.idempotency_header));
            }
            (UpstreamKind::Mcp, t) if t != KeyThreading::None => {
                at.push(format!("_meta[\"{}\"]", mcp::IDEMPOTENCY_META_KEY));
            }
            _ => {}
        }
        let body_sent = up.kind == UpstreamKind::Mcp || !up.method.eq_ignore_ascii_case("GET");
        let argument = up.kind == UpstreamKind::Mcp || up.idempotency == KeyThreading::Argument;
        if let Some(arg) = &up.idempotency_arg
            && argument
            && body_sent
            && body.is_object()
        {
            at.push(format!("the `{arg}` argument"));
        }
        Ok(at)
    }

    /// The upstream tool's own input schema (MCP upstreams).
    pub async fn upstream_tool_schema(&self, up: &Upstream) -> Result<Map<String, Value>, String> {
        let nobody = self.nobody();
        let scope = Scope { intent: &nobody };
        let call = mcp::ToolCall {
            url: scope.url(&up.url).map_err(|e| e.to_string())?,
            headers: scope.headers(&up.headers).map_err(|e| e.to_string())?,
            tool: up.tool.clone().unwrap_or_default(),
            arguments: Map::new(),
            meta: Map::new(),
            timeout: up.timeout.unsigned_abs(),
            poolable: false,
            progress: None,
            secrets: self.secrets(),
        };
        mcp::tool_schema(self.client.clone(), call).await
    }

    /// A URL template rendered outside any call (`check-config --probe`): the gateway's
    /// own `{env.NAME}` values are filled in, the call's values are left empty.
    pub fn render_url_outside_a_call(&self, url: &Template) -> Result<String, String> {
        let nobody = self.nobody();
        Scope { intent: &nobody }
            .url(url)
            .map_err(|e| e.to_string())
    }

    fn nobody(&self) -> IntentHandle {
        nobody(&self.cap.name)
    }

    async fn execute_mcp(&self, up: &Upstream, intent: &IntentHandle) -> Attempt {
        let call = match render_tool_call(&self.cap, up, intent) {
            Ok(c) => c,
            Err(e) => {
                return Attempt::ended(EffectResult::NotSent {
                    message: e.to_string(),
                });
            }
        };
        let read = self.cap.category == oncegate_core::Category::Read;
        // Only effects hold shutdown and count as running; a read left running changes
        // nothing.
        let hold = if read { None } else { self.inflight.as_ref() };
        let running = match (&self.running, read) {
            (Some(r), false) => Some(r.enter(&intent.key)),
            _ => None,
        };
        let (end, late) = mcp::call_tool(
            self.client.clone(),
            call,
            self.sessions.as_ref(),
            hold,
            running,
        )
        .await;
        let limits = self.limits;
        let result = effect_of(up, read, &limits, end);
        let late = late.map(|rx| {
            let up = up.clone();
            let answer = async move {
                match rx.await {
                    Ok(end) => effect_of(&up, read, &limits, end),
                    Err(_) => EffectResult::Unknown {
                        message: "the late answer of the upstream call was lost".into(),
                    },
                }
            };
            LateAnswer {
                answer: Box::pin(answer),
                hold: self
                    .inflight
                    .as_ref()
                    .map(|i| Box::new(i.enter()) as Box<dyn std::any::Any + Send>),
            }
        });
        Attempt { result, late }
    }
}

/// `result` with its message passed through `secrets`: a client library's error names
/// the URL it failed on, and the URL and headers were rendered with the gateway's
/// credentials.
fn redact_result(result: EffectResult, secrets: &Redactor) -> EffectResult {
    match result {
        EffectResult::Failed { result, message } => EffectResult::Failed {
            result,
            message: secrets.text(&message),
        },
        EffectResult::Unknown { message } => EffectResult::Unknown {
            message: secrets.text(&message),
        },
        EffectResult::NotSent { message } => EffectResult::NotSent {
            message: secrets.text(&message),
        },
        applied @ EffectResult::Applied { .. } => applied,
    }
}

/// Classifies how an effect's (or a read's) `tools/call` ended.
fn effect_of(up: &Upstream, read: bool, limits: &Limits, end: mcp::CallEnd) -> EffectResult {
    match end {
        mcp::CallEnd::Result(r) => {
            let structured = mcp::structured(&r);
            let stored = bound_tool_result(serde_json::to_value(&r).unwrap_or(Value::Null), limits);
            if r.is_error == Some(true) {
                let said = mcp::first_text(&r);
                // The registry's `rejected` pattern names the errors that prove the
                // tool refused before doing anything.
                let rejected = up
                    .rejected
                    .as_ref()
                    .is_some_and(|p| p.is_match(&mcp::all_text(&r)));
                match up.tool_errors {
                    // A read has no effect to be unsure about.
                    _ if read => EffectResult::Failed {
                        message: format!("the tool reported an error: {said}"),
                        result: stored,
                    },
                    _ if rejected => EffectResult::Failed {
                        message: format!("the tool rejected the call: {said}"),
                        result: stored,
                    },
                    ToolErrors::Failed => EffectResult::Failed {
                        message: format!("the tool reported an error: {said}"),
                        result: stored,
                    },
                    // SDKs turn any exception into a tool error, including one
                    // raised after the effect: it may have happened.
                    ToolErrors::Unknown => EffectResult::Unknown {
                        message: format!(
                            "the tool reported an error, which may have come after its effect: {said}"
                        ),
                    },
                }
            } else {
                EffectResult::Applied {
                    effect_ref: pointer_string(&structured, up.effect_ref.as_deref()),
                    result: stored,
                }
            }
        }
        mcp::CallEnd::NotSent(message) => EffectResult::NotSent { message },
        mcp::CallEnd::Rejected(message) => EffectResult::Failed {
            result: Value::Null,
            message,
        },
        mcp::CallEnd::Unknown(message) => EffectResult::Unknown { message },
    }
}

/// A stored tool result within the limits: itself, or its summary shaped as a tool
/// result (so replays and `record_of` read it like any other).
fn bound_tool_result(stored: Value, limits: &Limits) -> Value {
    let bounded = bound_answer(stored, limits);
    if bounded.get(oncegate_core::limits::TRUNCATED_KEY).is_some() {
        mcp::as_tool_result(&bounded)
    } else {
        bounded
    }
}

impl UpstreamExecutor {
    /// The reconciliation read as a read-only tool on the MCP server.
    async fn reconcile_mcp(
        &self,
        rec: &Reconcile,
        intent: &IntentHandle,
    ) -> Result<ReconcileResult, String> {
        let scope = Scope { intent };
        let arguments = match &rec.arguments {
            Some(b) => scope.body(b).map_err(|e| e.to_string())?,
            None => json!({ "idempotency_key": intent.key }),
        };
        let Value::Object(arguments) = arguments else {
            return Err("MCP tool arguments must be an object".into());
        };
        let mut headers = rec.headers.clone();
        if let Some(up) = &self.cap.upstream {
            // The read authenticates like the write (same provider credentials).
            for (name, value) in &up.headers {
                headers.entry(name.clone()).or_insert_with(|| value.clone());
            }
        }
        let url = scope.url(&rec.url).map_err(|e| e.to_string())?;
        check_path(&url).map_err(|e| e.to_string())?;
        let call = mcp::ToolCall {
            url,
            headers: scope.headers(&headers).map_err(|e| e.to_string())?,
            tool: rec.tool.clone().unwrap_or_default(),
            arguments,
            meta: crate::trace::outgoing()
                .into_iter()
                .map(|(name, value)| (name, Value::String(value)))
                .collect(),
            timeout: rec.timeout.unsigned_abs(),
            poolable: same_for_every_call(&rec.url, headers.values()),
            progress: None,
            secrets: self.secrets(),
        };
        match mcp::call_tool(
            self.client.clone(),
            call,
            self.sessions.as_ref(),
            None,
            None,
        )
        .await
        .0
        {
            mcp::CallEnd::Result(r) if r.is_error == Some(true) => Err(format!(
                "the reconciliation tool reported an error: {}",
                mcp::first_text(&r)
            )),
            mcp::CallEnd::Result(r) => Ok(match judge(rec, mcp::structured(&r))? {
                // Stored as a tool result, so a reconciled replay reads like the original.
                ReconcileResult::Found { effect_ref, result } => ReconcileResult::Found {
                    effect_ref,
                    result: mcp::as_tool_result(&bound_answer(result, &self.limits)),
                },
                other => other,
            }),
            mcp::CallEnd::NotSent(m) | mcp::CallEnd::Rejected(m) | mcp::CallEnd::Unknown(m) => {
                Err(format!("reconciliation read failed: {m}"))
            }
        }
    }
}

/// Reads a reconciliation answer with the registry's `found`, `effect_ref` and `result`
/// pointers.
fn judge(rec: &Reconcile, body: Value) -> Result<ReconcileResult, String> {
    let found = match rec.found.as_deref() {
        None => true,
        Some(p) => match body.pointer(p) {
            Some(Value::Bool(b)) => *b,
            other => {
                return Err(format!(
                    "`{p}` is not a boolean in the reconciliation answer ({other:?})"
                ));
            }
        },
    };
    Ok(if found {
        let effect_ref = pointer_string(&body, rec.effect_ref.as_deref());
        let result = match rec.result.as_deref() {
            Some(p) => body.pointer(p).cloned().unwrap_or(body),
            None => body,
        };
        ReconcileResult::Found { effect_ref, result }
    } else {
        ReconcileResult::NotFound
    })
}

/// An intent that is no intent: only the gateway's own values ({env.NAME}) make sense
/// outside a call.
fn nobody(capability: &str) -> IntentHandle {
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
