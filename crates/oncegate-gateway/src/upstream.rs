//! Upstreams: render a capability's templates, call the provider (HTTP/JSON, or a tool
//! on an MCP server, see [`mcp`]) with the intent key, and classify the answer the way
//! DESIGN.md says.
//!
//! Only proof that no byte left (connection refused, DNS, TLS handshake) makes an
//! attempt `not_applied` without reconciliation; a 429 is a provider's explicit "not
//! done". Anything that may have reached the provider (timeout, reset after send, 5xx)
//! is `unknown`. A 4xx is a definite failure.

pub mod mcp;

use std::sync::Arc;

use oncegate_core::config::{
    BodyTemplate, Capability, KeyThreading, Reconcile, ToolErrors, Upstream, UpstreamKind,
};
use oncegate_core::template::{Part, Source, Template};
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_store::{Attempt, Executor, IntentHandle, LateAnswer};
use serde_json::{Map, Value, json};

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

fn pointer_string(body: &Value, pointer: Option<&str>) -> Option<String> {
    match body.pointer(pointer?)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

async fn read_body(response: reqwest::Response) -> Result<Value, reqwest::Error> {
    let text = response.text().await?;
    Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Executes one capability's upstream (HTTP or MCP) and its reconciliation read.
pub struct UpstreamExecutor {
    client: reqwest::Client,
    cap: Arc<Capability>,
    /// Where a call left running past its timeout registers, so shutdown waits for it.
    inflight: Option<crate::server::InFlight>,
    /// Where an effect's MCP call is listed until it has really ended.
    running: Option<mcp::RunningCalls>,
}

impl UpstreamExecutor {
    /// An executor for `cap`, sharing `client`'s connection pool.
    pub fn new(client: reqwest::Client, cap: Arc<Capability>) -> Self {
        Self {
            client,
            cap,
            inflight: None,
            running: None,
        }
    }

    /// Registers MCP calls left running past their timeout with `inflight`.
    pub fn with_inflight(mut self, inflight: crate::server::InFlight) -> Self {
        self.inflight = Some(inflight);
        self
    }

    /// Lists effects' MCP calls in `running` until they have really ended (shared by
    /// every executor of a gateway, see [`Executor::attempt_running`]).
    pub fn with_running(mut self, running: mcp::RunningCalls) -> Self {
        self.running = Some(running);
        self
    }

    fn request(
        &self,
        up: &Upstream,
        intent: &IntentHandle,
    ) -> Result<reqwest::RequestBuilder, RenderError> {
        let scope = Scope { intent };
        let url = scope.url(&up.url)?;
        let method = reqwest::Method::from_bytes(up.method.as_bytes())
            .map_err(|e| RenderError(e.to_string()))?;
        let mut req = self
            .client
            .request(method.clone(), url)
            .timeout(up.timeout.unsigned_abs());
        for (name, value) in &up.headers {
            req = req.header(name, scope.text(value)?);
        }
        let mut body = match &up.body {
            Some(b) => scope.body(b)?,
            None => intent.arguments.clone(),
        };
        match up.idempotency {
            KeyThreading::Header => req = req.header(&up.idempotency_header, &intent.key),
            KeyThreading::Argument => {
                if let (Some(arg), Value::Object(map)) = (&up.idempotency_arg, &mut body) {
                    map.insert(arg.clone(), Value::String(intent.key.clone()));
                }
            }
            KeyThreading::Meta | KeyThreading::None => {}
        }
        if method != reqwest::Method::GET {
            req = req.json(&body);
        }
        Ok(req)
    }
}

struct ErrorText {
    connect: bool,
    builder: bool,
    timeout: bool,
    text: String,
}

fn reqwest_error_text(e: &reqwest::Error) -> ErrorText {
    let (connect, builder, timeout) = (e.is_connect(), e.is_builder(), e.is_timeout());
    let mut text = String::new();
    let mut source: Option<&dyn std::error::Error> = Some(e);
    // The error chain without reqwest's own "for url (...)" wrapper.
    while let Some(err) = source {
        if !std::ptr::addr_eq(err, e as &dyn std::error::Error) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&err.to_string());
        }
        source = err.source();
    }
    if text.is_empty() {
        text = if connect {
            "connection failed"
        } else if builder {
            "the request could not be built"
        } else {
            "transport error"
        }
        .to_owned();
    }
    ErrorText {
        connect,
        builder,
        timeout,
        text,
    }
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
                match read_body(response).await {
                    Err(e) => classify_error(&e),
                    Ok(body) if status.is_success() => EffectResult::Applied {
                        effect_ref: pointer_string(&body, up.effect_ref.as_deref()),
                        result: body,
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
                        result: body,
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

    async fn reconcile(&self, intent: IntentHandle) -> ReconcileResult {
        let Some(rec) = self.cap.reconcile.as_ref() else {
            return ReconcileResult::Undecidable {
                message: "no reconciliation read is declared".into(),
            };
        };
        let read = match rec.kind {
            UpstreamKind::Http => self.reconcile_read(rec, &intent).await,
            UpstreamKind::Mcp => self.reconcile_mcp(rec, &intent).await,
        };
        match read {
            Ok(r) => r,
            Err(message) => ReconcileResult::Undecidable { message },
        }
    }
}

impl UpstreamExecutor {
    async fn reconcile_read(
        &self,
        rec: &Reconcile,
        intent: &IntentHandle,
    ) -> Result<ReconcileResult, String> {
        let scope = Scope { intent };
        let url = scope.url(&rec.url).map_err(|e| e.to_string())?;
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
        let response = req.send().await.map_err(|e| {
            format!(
                "reconciliation read failed: {}",
                reqwest_error_text(&e).text
            )
        })?;
        let status = response.status();
        let body = read_body(response).await.map_err(|e| {
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
        judge(rec, body)
    }

    /// Renders the tool arguments (the body mapping, or the call's own arguments) and
    /// threads the key: always in `_meta`, and in the tool's key argument if declared.
    fn tool_call(
        &self,
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
        Ok(mcp::ToolCall {
            url: scope.text(&up.url)?,
            headers: scope.headers(&up.headers)?,
            tool: up.tool.clone().unwrap_or_default(),
            arguments,
            meta,
            timeout: up.timeout.unsigned_abs(),
        })
    }

    /// Where the intent key reaches the upstream in the request this executor sends
    /// for `intent` (empty: nowhere). It renders the body the way [`Executor::execute`]
    /// does, so an `argument` key that a non-object body or a `GET` (no body) would
    /// silently drop is found (`oncegate verify`'s check of a `keyed` capability).
    pub(crate) fn key_placement(&self, intent: &IntentHandle) -> Result<Vec<String>, String> {
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
            url: scope.text(&up.url).map_err(|e| e.to_string())?,
            headers: scope.headers(&up.headers).map_err(|e| e.to_string())?,
            tool: up.tool.clone().unwrap_or_default(),
            arguments: Map::new(),
            meta: Map::new(),
            timeout: up.timeout.unsigned_abs(),
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

    /// An intent that is no intent: only the gateway's own values ({env.NAME}) make
    /// sense outside a call.
    fn nobody(&self) -> IntentHandle {
        IntentHandle {
            key: String::new(),
            intent_key: oncegate_core::key::IntentKey::from_hex(String::new()),
            generation: 0,
            capability: self.cap.name.clone(),
            arguments: Value::Null,
            normalised: Value::Null,
            business_ref: None,
            run_id: None,
            step_id: None,
        }
    }

    async fn execute_mcp(&self, up: &Upstream, intent: &IntentHandle) -> Attempt {
        let call = match self.tool_call(up, intent) {
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
        let (end, late) = mcp::call_tool(self.client.clone(), call, hold, running).await;
        let result = effect_of(up, read, end);
        let late = late.map(|rx| {
            let up = up.clone();
            let answer = async move {
                match rx.await {
                    Ok(end) => effect_of(&up, read, end),
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

/// Classifies how an effect's (or a read's) `tools/call` ended.
fn effect_of(up: &Upstream, read: bool, end: mcp::CallEnd) -> EffectResult {
    match end {
        mcp::CallEnd::Result(r) => {
            let structured = mcp::structured(&r);
            let stored = serde_json::to_value(&r).unwrap_or(Value::Null);
            if r.is_error == Some(true) {
                let said = mcp::first_text(&r);
                match up.tool_errors {
                    // A read has no effect to be unsure about.
                    _ if read => EffectResult::Failed {
                        message: format!("the tool reported an error: {said}"),
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
        let call = mcp::ToolCall {
            url: scope.text(&rec.url).map_err(|e| e.to_string())?,
            headers: scope.headers(&headers).map_err(|e| e.to_string())?,
            tool: rec.tool.clone().unwrap_or_default(),
            arguments,
            meta: Map::new(),
            timeout: rec.timeout.unsigned_abs(),
        };
        match mcp::call_tool(self.client.clone(), call, None, None)
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
                    result: mcp::as_tool_result(&result),
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
