//! `POST /mcp`: the capabilities as MCP tools, over Streamable HTTP (rmcp).
//!
//! Why one file: one rmcp handler and the front door that feeds it, one file until issue
//! 10 moves the shared outcome rendering below both surfaces.
//!
//! Both protocol eras are served: 2026-07-28 clients (`server/discover`, per-request
//! `_meta`, no session) and 2025-11-25 clients (`initialize`, `Mcp-Session-Id`). The
//! bearer token authenticates exactly as on the JSON API (401 with `WWW-Authenticate`
//! before any JSON-RPC is read); the principal travels to the handler in the request's
//! extensions.
//!
//! `tools/call` takes the same path as `POST /v1/calls`: the decision and the effect run
//! in their own task, so an agent that closes its stream never aborts an effect
//! half-way, and the result is recorded whatever the caller does. Every answer carries
//! `_meta["dev.oncegate/outcome"]` and, first in `content`, one plain line the model can
//! act on (several agent frameworks drop `_meta`). Applied and replayed calls return the
//! upstream's own result after that line (`content` and `structuredContent` untouched);
//! denied, refused, unknown, in-flight, pending approval and failed calls are tool
//! execution errors (`isError: true`). JSON-RPC errors are kept for malformed requests
//! and unknown tools.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use oncegate_core::codes::Code;
use oncegate_core::config::{Capability, Category, Role, UpstreamKind};
use oncegate_core::intent::{IntentState, Outcome, Status};
use oncegate_core::normalise::Normaliser;
use oncegate_core::template::Source;
use oncegate_engine::{Call, GateError};
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    ErrorData as McpError, Implementation, JsonObject, ListToolsResult, MetaObject,
    PaginatedRequestParams, ResultType, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Map, Value, json};

use crate::server::{AppState, MAX_BODY_BYTES, Principal, model_line};

pub mod sessions;

/// The `_meta` key the outcome is reported under.
pub const OUTCOME_META_KEY: &str = "dev.oncegate/outcome";
/// The request `_meta` key of the orchestrator's run id.
pub const RUN_ID_META_KEY: &str = "dev.oncegate/run_id";
/// The request `_meta` key of the orchestrator's step id.
pub const STEP_ID_META_KEY: &str = "dev.oncegate/step_id";

/// An upstream tool's schema, or when reading it last failed.
type SchemaRead = Result<Arc<JsonObject>, std::time::Instant>;

/// The MCP server: one value per session (or per stateless request), sharing the state.
#[derive(Clone)]
pub struct McpSurface {
    state: AppState,
    /// Input schemas read from MCP upstreams' own tools/list, by capability (or when the
    /// last read failed).
    upstream_schemas: Arc<Mutex<HashMap<String, SchemaRead>>>,
}

/// The Streamable HTTP service to nest at `/mcp`.
pub fn service(state: AppState) -> StreamableHttpService<McpSurface, LocalSessionManager> {
    let settings = &state.gate().registry().gateway;
    let mut config = StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(state.mcp_shutdown().child_token())
        .with_allowed_hosts(settings.mcp_allowed_hosts.clone());
    config = if settings.mcp_allowed_origins.is_empty() {
        // Agents and SDKs send no Origin; a browser page does. Without a list, none.
        config.enforce_origin_validation()
    } else {
        config.with_allowed_origins(settings.mcp_allowed_origins.clone())
    };
    if let Some(files) = state.mcp_session_files() {
        config.session_store = Some(Arc::new(files.clone()));
    }
    let surface = McpSurface {
        state,
        upstream_schemas: Arc::default(),
    };
    StreamableHttpService::new(
        move || Ok(surface.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// Authenticates before rmcp reads anything (401 with `WWW-Authenticate` otherwise),
/// then answers a body that is too large (413) or not JSON (400, JSON-RPC parse error)
/// itself, so nothing of such a request reaches the handler.
pub async fn authenticate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let principal = match state.authenticate(&parts.headers) {
        Ok(principal) => principal,
        Err(e) => return e.into_response(),
    };
    // A session belongs to the principal that opened it: another token cannot resume its
    // streams (and read its results), cancel its requests or end it.
    let session = parts
        .headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session
        && state.mcp_session_owner(id).await.as_deref() != Some(principal.name.as_str())
    {
        return jsonrpc_error(
            axum::http::StatusCode::NOT_FOUND,
            ErrorCode::INVALID_REQUEST,
            "session not found",
        );
    }
    let method = parts.method.clone();
    let name = principal.name.clone();
    parts.extensions.insert(principal);
    let request = if method == axum::http::Method::POST {
        match checked_body(body).await {
            Ok(body) => Request::from_parts(parts, body),
            Err(response) => return *response,
        }
    } else {
        Request::from_parts(parts, body)
    };
    let response = next.run(request).await;
    if let Some(id) = &session
        && response.status() == axum::http::StatusCode::NOT_FOUND
    {
        // rmcp ended it (idle, worker gone): forget the binding too.
        state.unbind_mcp_session(id);
    }
    match (&session, response.headers().get(SESSION_HEADER)) {
        (None, Some(id)) => {
            if let Ok(id) = id.to_str() {
                state.bind_mcp_session(id, &name).await;
            }
        }
        (Some(id), _) if method == axum::http::Method::DELETE && response.status().is_success() => {
            state.unbind_mcp_session(id);
            // rmcp answers 202; SDKs expect 200 or 204 for a terminated session.
            let mut response = response;
            if response.status() == axum::http::StatusCode::ACCEPTED {
                *response.status_mut() = axum::http::StatusCode::OK;
            }
            return response;
        }
        _ => {}
    }
    response
}

/// The `Mcp-Session-Id` header (2025-11-25 sessions).
const SESSION_HEADER: &str = "mcp-session-id";

/// Reads a POST body: too large is 413, not JSON is 400 `-32700`, not a routable
/// JSON-RPC message is 400 `-32600`/`-32602`.
async fn checked_body(body: axum::body::Body) -> Result<axum::body::Body, Box<Response>> {
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| {
            Box::new(jsonrpc_error(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::INVALID_REQUEST,
                &format!("the request body exceeds {MAX_BODY_BYTES} bytes"),
            ))
        })?;
    let message: Value = serde_json::from_slice(&bytes).map_err(|e| {
        Box::new(jsonrpc_error(
            axum::http::StatusCode::BAD_REQUEST,
            ErrorCode::PARSE_ERROR,
            &format!("parse error: {e}"),
        ))
    })?;
    if let Some((code, problem)) = jsonrpc_problem(&message) {
        return Err(Box::new(jsonrpc_error_with_id(
            axum::http::StatusCode::BAD_REQUEST,
            code,
            problem,
            message
                .get("id")
                .filter(|id| id.is_string() || id.is_i64() || id.is_u64()),
        )));
    }
    // A tool argument serde_json would round never reaches the key or the upstream.
    if message.get("method").and_then(Value::as_str) == Some("tools/call")
        && let Err(e) = oncegate_core::normalise::check_exact_numbers(&bytes)
    {
        return Err(Box::new(jsonrpc_error_with_id(
            axum::http::StatusCode::BAD_REQUEST,
            ErrorCode::INVALID_PARAMS,
            &format!("invalid params: {e}"),
            message.get("id"),
        )));
    }
    Ok(axum::body::Body::from(bytes))
}

/// Why a body is not a JSON-RPC 2.0 message rmcp can route (MCP has no batches since
/// 2025-06-18): `(code, message)`.
fn jsonrpc_problem(v: &Value) -> Option<(ErrorCode, &'static str)> {
    let invalid = Some((
        ErrorCode::INVALID_REQUEST,
        "invalid request: not a JSON-RPC 2.0 request, notification or response",
    ));
    let Some(m) = v.as_object() else {
        return invalid;
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid;
    }
    if m.get("id")
        .is_some_and(|id| !(id.is_string() || id.is_i64() || id.is_u64()))
    {
        return Some((
            ErrorCode::INVALID_REQUEST,
            "invalid request: `id` must be a string or an integer",
        ));
    }
    match m.get("method") {
        Some(Value::String(method)) => {
            // `"params": null` is sent by some clients for "no params".
            let params = m.get("params").filter(|p| !p.is_null());
            if params.is_some_and(|p| !p.is_object()) {
                return Some((
                    ErrorCode::INVALID_PARAMS,
                    "invalid params: `params` must be an object",
                ));
            }
            if method == "tools/call" {
                let p = params.and_then(Value::as_object);
                if !p.and_then(|p| p.get("name")).is_some_and(Value::is_string) {
                    return Some((
                        ErrorCode::INVALID_PARAMS,
                        "invalid params: tools/call needs the tool `name`",
                    ));
                }
                if p.and_then(|p| p.get("arguments"))
                    .is_some_and(|a| !(a.is_object() || a.is_null()))
                {
                    return Some((
                        ErrorCode::INVALID_PARAMS,
                        "invalid params: tool `arguments` must be an object",
                    ));
                }
            }
            None
        }
        Some(_) => invalid,
        None if m.contains_key("id") && (m.contains_key("result") || m.contains_key("error")) => {
            None
        }
        None => invalid,
    }
}

fn jsonrpc_error(status: axum::http::StatusCode, code: ErrorCode, message: &str) -> Response {
    jsonrpc_error_with_id(status, code, message, None)
}

fn jsonrpc_error_with_id(
    status: axum::http::StatusCode,
    code: ErrorCode,
    message: &str,
    id: Option<&Value>,
) -> Response {
    (
        status,
        axum::Json(
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code.0, "message": message}}),
        ),
    )
        .into_response()
}

fn parts(ctx: &RequestContext<RoleServer>) -> Option<&axum::http::request::Parts> {
    ctx.extensions.get::<axum::http::request::Parts>()
}

fn principal(ctx: &RequestContext<RoleServer>) -> Result<Principal, McpError> {
    parts(ctx)
        .and_then(|p| p.extensions.get::<Principal>())
        .cloned()
        .ok_or_else(|| McpError::internal_error("the request was not authenticated", None))
}

/// A run or step id: the request's `_meta` first, then the HTTP header; never arguments.
/// Either must be a string of 1 to 255 visible ASCII characters (the header rule, so the
/// same id reaches the same key by either path); anything else is invalid params, never
/// dropped (a dropped id would collapse distinct steps onto one intent).
fn structural_id(
    request: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
    meta_key: &str,
    header: &str,
) -> Result<Option<String>, McpError> {
    let invalid = |message: String| {
        McpError::invalid_params(
            format!("invalid params: {message}"),
            Some(json!({"code": Code::InvalidHeader})),
        )
    };
    let from_meta = request
        .meta
        .as_ref()
        .and_then(|m| m.get(meta_key))
        .or_else(|| ctx.meta.get(meta_key));
    match from_meta {
        Some(Value::String(s)) => {
            let s = s.trim_matches([' ', '\t']);
            oncegate_core::limits::check_id(&format!("`_meta[\"{meta_key}\"]`"), s)
                .map_err(invalid)?;
            return Ok(Some(s.to_owned()));
        }
        Some(Value::Null) | None => {}
        Some(other) => {
            return Err(invalid(format!(
                "`_meta[\"{meta_key}\"]` must be a string, not {}",
                match other {
                    Value::Bool(_) => "a boolean",
                    Value::Number(_) => "a number",
                    Value::Array(_) => "an array",
                    _ => "an object",
                }
            )));
        }
    }
    match parts(ctx) {
        Some(p) => {
            crate::server::header_string(&p.headers, header).map_err(|e| invalid(e.message()))
        }
        None => Ok(None),
    }
}

/// What the category promises, as MCP hints (from the registry, never from upstream).
fn annotations(cap: &Capability) -> ToolAnnotations {
    let (read_only, destructive, idempotent) = match cap.category {
        Category::Read => (true, false, true),
        Category::IdempotentWrite => (false, true, true),
        // The upstream dedupes the intent key, inside the replay window or not.
        Category::Keyed => (false, true, true),
        // oncegate replays repeats inside the window, but after it the provider, which
        // cannot dedupe, would act again: not idempotent in MCP's sense.
        Category::NonIdempotent => (false, true, false),
    };
    let mut a = ToolAnnotations::new()
        .read_only(read_only)
        .destructive(destructive)
        .idempotent(idempotent);
    a.open_world_hint = Some(true);
    a
}

fn arg_schema(normaliser: &Normaliser) -> Value {
    match normaliser {
        Normaliser::Money { .. } => json!({
            "type": ["string", "number", "object"],
            "description": "an amount: \"12.50\", 12.5, \"USD 12.50\", {\"minor\": 1250} or {\"amount\": \"12.50\", \"currency\": \"USD\"}"
        }),
        Normaliser::Email => json!({"type": "string", "format": "email"}),
        Normaliser::Text { .. } => json!({"type": "string"}),
        Normaliser::Integer => json!({"type": ["integer", "string"]}),
        Normaliser::Decimal => json!({"type": ["number", "string"]}),
        Normaliser::Enum { values } => json!({"type": "string", "enum": values}),
        Normaliser::Set => json!({"type": "array"}),
        Normaliser::Id { .. } => json!({"type": ["string", "integer"]}),
    }
}

/// A schema built from the key recipe and the templates: what the gateway reads.
pub fn derived_schema(cap: &Capability) -> JsonObject {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut add = |root: &str, nested: bool, schema: Value, is_required: bool| {
        if !properties.contains_key(root) {
            let schema = if nested {
                json!({"type": "object"})
            } else {
                schema
            };
            properties.insert(root.to_owned(), schema);
        }
        if is_required && !required.contains(&Value::from(root)) {
            required.push(Value::from(root));
        }
    };
    if let Some(path) = &cap.key.business_ref {
        let nested = path.as_str().contains('.');
        add(
            path.root(),
            nested,
            json!({"type": ["string", "integer"], "description": "the business reference: one intent per value"}),
            true,
        );
    }
    for arg in &cap.key.significant {
        let nested = arg.path.as_str().contains('.');
        add(
            arg.path.root(),
            nested,
            arg_schema(&arg.normaliser),
            !arg.optional,
        );
        if let Normaliser::Money {
            currency_arg: Some(c),
            default_currency,
            ..
        } = &arg.normaliser
        {
            add(
                c.root(),
                c.as_str().contains('.'),
                json!({"type": "string", "description": "ISO 4217 currency code"}),
                default_currency.is_none() && !arg.optional,
            );
        }
    }
    // Arguments only passed through to the provider (a memo, a body): optional.
    let mut templates = Vec::new();
    if let Some(up) = &cap.upstream {
        templates.push(&up.url);
        if let Some(body) = &up.body {
            body.templates(&mut templates);
        }
    }
    for t in templates {
        for part in t.parts() {
            if let oncegate_core::template::Part::Placeholder(Source::Arg(path)) = part {
                add(
                    path.root(),
                    path.as_str().contains('.'),
                    json!({"description": "passed to the provider as given; not part of the intent"}),
                    false,
                );
            }
        }
    }
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), Value::Array(required));
    }
    schema
}

impl McpSurface {
    /// The capabilities this principal may call (approvers call none).
    fn callable(&self, principal: &Principal) -> Vec<Arc<Capability>> {
        if !matches!(principal.role, Role::Agent | Role::Admin) {
            return Vec::new();
        }
        self.state
            .gate()
            .registry()
            .capabilities()
            .iter()
            .filter(|c| (c.upstream.is_some() || c.dry_run) && !c.require_client_key)
            .cloned()
            .collect()
    }

    /// The input schema: the registry's, else an MCP upstream's own (when arguments pass
    /// through unmapped; the key argument is the gateway's, so it is removed), else one
    /// derived from the key recipe.
    async fn input_schema(&self, cap: &Arc<Capability>) -> Arc<JsonObject> {
        /// How long a failed read of an upstream's schema is not retried: `tools/list`
        /// must not wait out an unreachable upstream's timeout on every call.
        const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(60);
        if let Some(Value::Object(s)) = &cap.input_schema {
            return Arc::new(s.clone());
        }
        if let Some(up) = cap
            .upstream
            .as_ref()
            .filter(|u| u.kind == UpstreamKind::Mcp && u.body.is_none())
        {
            let cached = self
                .upstream_schemas
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&cap.name)
                .cloned();
            let fetched = match cached {
                Some(Ok(schema)) => return schema,
                Some(Err(failed)) if failed.elapsed() < RETRY_AFTER => None,
                _ => Some(
                    crate::upstream::UpstreamExecutor::new(self.state.http(), cap.clone())
                        .upstream_tool_schema(up)
                        .await,
                ),
            };
            if let Some(fetched) = fetched {
                let entry = match fetched {
                    Ok(mut schema) => {
                        if let Some(arg) = &up.idempotency_arg {
                            strip_property(&mut schema, arg);
                        }
                        Ok(Arc::new(schema))
                    }
                    Err(e) => {
                        tracing::warn!(capability = %cap.name, error = %e, "could not read the MCP upstream's tool schema; showing the derived one");
                        Err(std::time::Instant::now())
                    }
                };
                self.upstream_schemas
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(cap.name.clone(), entry.clone());
                if let Ok(schema) = entry {
                    return schema;
                }
            }
        }
        Arc::new(derived_schema(cap))
    }

    async fn tool(&self, cap: &Arc<Capability>) -> Tool {
        let description = cap
            .description
            .clone()
            .unwrap_or_else(|| format!("{} (through oncegate)", cap.name));
        let mut tool = Tool::new(cap.name.clone(), description, self.input_schema(cap).await)
            .with_annotations(annotations(cap));
        let mut meta = MetaObject::new();
        meta.insert("dev.oncegate/category".into(), json!(cap.category));
        tool.meta = Some(meta);
        tool
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let principal = principal(&ctx)?;
        let name = request.name.to_string();
        let Some(cap) = self.state.gate().registry().capability(&name).cloned() else {
            return Err(McpError::invalid_params(
                format!("unknown tool `{name}`"),
                None,
            ));
        };
        let call = Call {
            capability: name.clone(),
            arguments: Value::Object(request.arguments.clone().unwrap_or_default()),
            run_id: structural_id(&request, &ctx, RUN_ID_META_KEY, "oncegate-run-id")?,
            step_id: structural_id(&request, &ctx, STEP_ID_META_KEY, "oncegate-step-id")?,
            client_key: None,
        };
        if cap.require_client_key {
            // A coded orchestrator's own key has no place in MCP: use /v1/calls.
            return Ok(refusal(
                Code::ClientKeyMissing,
                &format!(
                    "{name} requires a client Idempotency-Key and is only callable on POST /v1/calls"
                ),
            ));
        }
        let executor = self
            .state
            .executor(&name)
            .map_err(|_| McpError::invalid_params(format!("unknown tool `{name}`"), None))?;
        let task = self.state.spawn_call(&principal.name, call, executor);
        let outcome = match task.await {
            Ok(Ok(o)) => o,
            Ok(Err(GateError::UnknownCapability(n))) => {
                return Err(McpError::invalid_params(
                    format!("unknown tool `{n}`"),
                    None,
                ));
            }
            Ok(Err(e)) => return Ok(refusal(e.code(), &e.to_string())),
            Err(e) => {
                return Ok(refusal(
                    Code::StoreUnavailable,
                    &format!("the call task failed: {e}"),
                ));
            }
        };
        Ok(tool_result(&outcome, &cap))
    }
}

fn strip_property(schema: &mut JsonObject, name: &str) {
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        props.remove(name);
    }
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        required.retain(|r| r.as_str() != Some(name));
    }
}

/// A call the gateway refused before deciding (bad arguments, forbidden, store down).
fn refusal(code: Code, message: &str) -> CallToolResult {
    let (status, line) = match code {
        Code::Forbidden => ("denied", format!("DENIED: {message} - do not retry.")),
        Code::InvalidArguments | Code::ArgumentsTooLarge | Code::ArgumentsTooDeep => (
            "refused",
            format!(
                "INVALID ARGUMENTS: {message} - nothing was done; fix the arguments and call again."
            ),
        ),
        Code::RateLimited => (
            "refused",
            format!("RATE LIMITED: {message} - nothing was done; wait before reading again."),
        ),
        _ => ("refused", format!("REFUSED: {message} - do not retry.")),
    };
    let mut result = CallToolResult::error(vec![ContentBlock::text(line)]);
    let mut meta = MetaObject::new();
    meta.insert(
        OUTCOME_META_KEY.into(),
        json!({"status": status, "intentKey": null, "attempt": 0, "generation": 0, "state": null,
               "effectRef": null, "approvalId": null, "code": code, "alerts": []}),
    );
    result.meta = Some(meta);
    result
}

/// The answer to one decided call.
pub fn tool_result(o: &Outcome, cap: &Capability) -> CallToolResult {
    let line = ContentBlock::text(model_line(o));
    let upstream_is_mcp = cap
        .upstream
        .as_ref()
        .is_some_and(|u| u.kind == UpstreamKind::Mcp);
    // The upstream's own answer, as a tool result.
    let upstream = o.result.as_ref().map(|r| {
        let shaped = upstream_is_mcp && r.get("content").is_some_and(Value::is_array);
        match shaped.then(|| serde_json::from_value::<CallToolResult>(r.clone())) {
            Some(Ok(mut t)) => {
                t.is_error = None;
                // Stored results may predate 2026-07-28; rmcp clears this for older peers.
                t.result_type = Some(ResultType::COMPLETE);
                // The protocol's own keys describe the upstream's server, not oncegate.
                if let Some(meta) = t.meta.as_mut() {
                    meta.retain(|k, _| !k.starts_with("io.modelcontextprotocol/"));
                }
                t
            }
            _ => {
                let mut t = CallToolResult::success(vec![ContentBlock::text(r.to_string())]);
                t.structured_content = r.is_object().then(|| r.clone());
                t
            }
        }
    });
    let success = match o.status {
        Status::Applied | Status::DryRun => true,
        Status::Replayed => o.state != Some(IntentState::Failed),
        _ => false,
    };
    let mut result = match (success, upstream) {
        (true, Some(mut up)) => {
            up.content.insert(0, line);
            up
        }
        (true, None) => CallToolResult::success(vec![line]),
        (false, up) => {
            let mut content = vec![line];
            // A definite refusal by the provider: show the model what it said.
            if matches!(o.status, Status::Failed | Status::Replayed)
                && let Some(up) = up
            {
                content.extend(up.content);
            }
            CallToolResult::error(content)
        }
    };
    let mut meta = result.meta.take().unwrap_or_default();
    meta.insert(
        OUTCOME_META_KEY.into(),
        json!({
            "status": o.status.as_str(),
            "intentKey": o.key.as_ref().map(ToString::to_string),
            "attempt": o.attempt,
            "generation": o.generation,
            "state": o.state.map(|s| s.as_str()),
            "effectRef": o.effect_ref,
            "approvalId": o.approval_id,
            "code": o.reason.as_ref().map(|r| r.code),
            "alerts": o.alerts,
        }),
    );
    result.meta = Some(meta);
    result
}

impl ServerHandler for McpSurface {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("oncegate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Every tool goes through oncegate: calling a tool twice for one intent has the effect of calling it once. \
                 Read the first line of each result and follow it; a result that says \"do not call again\" means exactly that.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let principal = principal(&ctx)?;
        let mut tools = Vec::new();
        for cap in self.callable(&principal) {
            tools.push(self.tool(&cap).await);
        }
        Ok(ListToolsResult {
            tools,
            ..Default::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, ctx).await.map(CallToolResponse::from)
    }
}
