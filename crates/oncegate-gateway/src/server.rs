//! `oncegate serve`: the JSON API over the Gate.
//!
//! Why one file: one long file today; issue 10 splits it (state, errors, handlers, sweep,
//! accept loop).
//!
//! Every route authenticates with a bearer token from the registry (compared in constant
//! time); the principal comes from the token, never from the body. Errors map to HTTP in
//! one place ([`ApiError`]) and always carry a stable code.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use oncegate_core::codes::Code;
use oncegate_core::config::Role;
use oncegate_core::decide::Choice;
use oncegate_core::intent::{ApprovalState, IntentState, Outcome, Status};
use oncegate_core::key::IntentKey;
use oncegate_engine::{Call, Gate, GateError};
use oncegate_store::{IntentFilter, StoreRead};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

use crate::upstream::UpstreamExecutor;

/// The largest request body accepted.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// A principal as authenticated.
#[derive(Clone, Debug)]
pub struct Principal {
    /// The name in the registry.
    pub name: String,
    /// Its role.
    pub role: Role,
}

/// Counts the detached call tasks, so shutdown can wait for effects whose callers hung
/// up: their results must be recorded before the process exits.
#[derive(Clone, Default)]
pub struct InFlight(Arc<(std::sync::atomic::AtomicUsize, tokio::sync::Notify)>);

/// Held by one detached task.
pub struct InFlightGuard(InFlight);

impl InFlight {
    /// Registers a task.
    pub fn enter(&self) -> InFlightGuard {
        self.0.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlightGuard(self.clone())
    }

    /// Waits until no task is running, or `limit` passes; returns how many are left.
    pub async fn drain(&self, limit: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.0.1.notified();
            let left = self.0.0.load(std::sync::atomic::Ordering::SeqCst);
            if left == 0 || tokio::time::Instant::now() >= deadline {
                return left;
            }
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.0.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.0.0.1.notify_waiters();
    }
}

/// Shared state of the server.
#[derive(Clone)]
pub struct AppState {
    gate: Gate,
    tokens: Arc<Vec<(Vec<u8>, Principal)>>,
    http: reqwest::Client,
    metrics: PrometheusHandle,
    /// Calls and approvals whose effect may still be running (see [`InFlight`]).
    inflight: InFlight,
    /// Effects' MCP calls that have not ended yet (a timeout does not end them), so a
    /// reconciliation never concludes absence while one may still take effect.
    running: crate::upstream::mcp::RunningCalls,
    /// Cancelled at shutdown: ends MCP sessions and their open streams.
    mcp_shutdown: tokio_util::sync::CancellationToken,
    /// MCP session id -> the principal that opened it, and when it was last used.
    mcp_sessions:
        Arc<std::sync::Mutex<std::collections::HashMap<String, (String, std::time::Instant)>>>,
    /// 2025-11-25 sessions on disk beside the store, so they survive a restart.
    mcp_session_files: Option<crate::mcp::sessions::SessionFiles>,
}

impl AppState {
    /// Builds the state: tokens are read from the environment variables the registry
    /// names. A principal whose variable is unset cannot log in (and is reported).
    pub fn new(gate: Gate, http: reqwest::Client) -> (Self, Vec<String>) {
        let mut tokens = Vec::new();
        let mut missing = Vec::new();
        for p in &gate.registry().principals {
            match std::env::var(&p.token_env) {
                Ok(t) if !t.is_empty() => tokens.push((p.name.clone(), t)),
                _ => missing.push(format!("{} (${})", p.name, p.token_env)),
            }
        }
        (Self::with_tokens(gate, http, tokens), missing)
    }

    /// Builds the state with tokens given directly as (principal name, token), for an
    /// embedded gateway (the demo). Names not in the registry are ignored.
    pub fn with_tokens(gate: Gate, http: reqwest::Client, given: Vec<(String, String)>) -> Self {
        // Two principals sharing a token would make the login ambiguous: nobody gets it.
        let mut seen = std::collections::HashMap::new();
        for (_, t) in &given {
            *seen.entry(t.clone()).or_insert(0) += 1;
        }
        for (name, t) in &given {
            if seen.get(t).copied().unwrap_or(0) > 1 {
                tracing::error!(principal = %name, "this principal's token is shared with another principal; it cannot log in");
            }
        }
        let mcp_session_files = session_files(&gate);
        let tokens = given
            .into_iter()
            .filter(|(_, t)| seen.get(t).copied() == Some(1))
            .filter(|(_, t)| !t.is_empty())
            .filter_map(|(name, t)| {
                let p = gate.registry().principal(&name)?;
                Some((
                    t.into_bytes(),
                    Principal {
                        name: p.name.clone(),
                        role: p.role,
                    },
                ))
            })
            .collect();
        Self {
            gate,
            tokens: Arc::new(tokens),
            http,
            metrics: metrics_handle(),
            inflight: InFlight::default(),
            running: crate::upstream::mcp::RunningCalls::default(),
            mcp_shutdown: tokio_util::sync::CancellationToken::new(),
            mcp_sessions: Arc::default(),
            mcp_session_files,
        }
    }

    /// The gate.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// How many principals can log in.
    pub fn principal_count(&self) -> usize {
        self.tokens.len()
    }

    /// The upstream HTTP client (shared connection pool).
    pub(crate) fn http(&self) -> reqwest::Client {
        self.http.clone()
    }

    /// Cancelled when the server shuts down.
    pub(crate) fn mcp_shutdown(&self) -> &tokio_util::sync::CancellationToken {
        &self.mcp_shutdown
    }

    /// The principal that opened an MCP session (and marks it used); after a restart,
    /// from the session files.
    pub(crate) async fn mcp_session_owner(&self, id: &str) -> Option<String> {
        {
            let mut sessions = self.mcp_sessions.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((owner, used)) = sessions.get_mut(id) {
                *used = std::time::Instant::now();
                return Some(owner.clone());
            }
        }
        let owner = self.mcp_session_files.as_ref()?.principal(id).await?;
        self.remember_mcp_session(id, &owner);
        Some(owner)
    }

    /// The session files, when sessions persist.
    pub(crate) fn mcp_session_files(&self) -> Option<&crate::mcp::sessions::SessionFiles> {
        self.mcp_session_files.as_ref()
    }

    /// Records who opened an MCP session, in memory and on disk.
    pub(crate) async fn bind_mcp_session(&self, id: &str, principal: &str) {
        self.remember_mcp_session(id, principal);
        if let Some(files) = &self.mcp_session_files
            && let Err(e) = files.set_principal(id, principal).await
        {
            tracing::warn!(error = %e, "an MCP session's owner could not be saved; it ends with this process");
        }
    }

    /// Bindings idle longer than rmcp keeps an idle session are dropped here, so the map
    /// cannot grow without bound.
    fn remember_mcp_session(&self, id: &str, principal: &str) {
        const IDLE: Duration = Duration::from_secs(15 * 60);
        let now = std::time::Instant::now();
        let mut sessions = self.mcp_sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, (_, used)| now.duration_since(*used) < IDLE);
        sessions.insert(id.to_owned(), (principal.to_owned(), now));
    }

    /// Forgets an MCP session its owner ended.
    pub(crate) fn unbind_mcp_session(&self, id: &str) {
        self.mcp_sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    pub(crate) fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, ApiError> {
        let token = bearer_token(headers)?;
        // Compare against every token in constant time; do not stop at the first match.
        let mut found = None;
        for (candidate, principal) in self.tokens.iter() {
            if bool::from(candidate.as_slice().ct_eq(token.as_bytes())) {
                found = Some(principal.clone());
            }
        }
        found.ok_or(ApiError::Unauthorized)
    }

    /// Decides and executes one call in its own task (both surfaces): a caller that
    /// hangs up (a closed MCP stream is a cancel) never cancels a claim or an effect
    /// half-way, and the result, its alerts and its metrics are recorded regardless.
    pub(crate) fn spawn_call(
        &self,
        principal: &str,
        call: Call,
        executor: Arc<UpstreamExecutor>,
    ) -> tokio::task::JoinHandle<Result<Outcome, GateError>> {
        let guard = self.inflight.enter();
        let (state, principal) = (self.clone(), principal.to_owned());
        tokio::spawn(async move {
            let _guard = guard;
            let capability = call.capability.clone();
            let outcome = state.gate.invoke_with(&principal, call, executor).await;
            if let Ok(o) = &outcome {
                state.send_alerts(o, &capability, &principal);
                record_decision(o, &capability);
            }
            outcome
        })
    }

    pub(crate) fn executor(&self, capability: &str) -> Result<Arc<UpstreamExecutor>, ApiError> {
        let cap = self
            .gate
            .registry()
            .capability(capability)
            .cloned()
            .ok_or_else(|| ApiError::Gate(GateError::UnknownCapability(capability.to_owned())))?;
        Ok(Arc::new(
            UpstreamExecutor::new(self.http.clone(), cap)
                .with_inflight(self.inflight.clone())
                .with_running(self.running.clone())
                .with_limits(self.gate.registry().gateway.limits),
        ))
    }
}

/// The token of the one `Authorization: Bearer <token>` header. The scheme is
/// case-insensitive (RFC 9110 11.1) and may be followed by several spaces; two
/// `Authorization` headers are refused (400) rather than one of them picked.
fn bearer_token(headers: &HeaderMap) -> Result<&str, ApiError> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        if headers.contains_key(header::AUTHORIZATION) {
            return Err(ApiError::Coded(
                StatusCode::BAD_REQUEST,
                Code::AmbiguousAuthorization,
                "the request carries more than one Authorization header; send exactly one".into(),
            ));
        }
        return Err(ApiError::Unauthorized);
    };
    let value = value.to_str().map_err(|_| ApiError::Unauthorized)?;
    let (scheme, token) = value.split_once(' ').ok_or(ApiError::Unauthorized)?;
    let token = token.trim_matches(' ');
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(ApiError::Unauthorized);
    }
    Ok(token)
}

/// `<store>.mcp-sessions/` beside an SQLite store (none for other stores, or when the
/// directory cannot be made: sessions then live in memory only).
fn session_files(gate: &Gate) -> Option<crate::mcp::sessions::SessionFiles> {
    let db = gate.store().path()?;
    let mut name = db.file_name()?.to_owned();
    name.push(".mcp-sessions");
    match crate::mcp::sessions::SessionFiles::open(&db.with_file_name(name)) {
        Ok(files) => Some(files),
        Err(e) => {
            tracing::warn!(error = %e, "MCP sessions will not survive a restart: cannot create their directory");
            None
        }
    }
}

fn metrics_handle() -> PrometheusHandle {
    // The recorder is global to the process; tests build the app many times.
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// Everything a route can fail with, mapped to HTTP once.
#[derive(Debug)]
pub enum ApiError {
    /// No or a wrong bearer token.
    Unauthorized,
    /// Authenticated but not allowed.
    Forbidden(String),
    /// The request is malformed.
    BadRequest(String),
    /// The engine refused to decide.
    Gate(GateError),
    /// Not found.
    NotFound(String),
    /// The store is down.
    Store(String),
    /// A refusal with its own status and stable code.
    Coded(StatusCode, Code, String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = match self {
            ApiError::Unauthorized => {
                let mut r = (StatusCode::UNAUTHORIZED, Json(json!({"error": {"code": "OG-0013", "message": "missing or wrong bearer token"}}))).into_response();
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"oncegate\""),
                );
                return r;
            }
            ApiError::Forbidden(m) => (StatusCode::FORBIDDEN, Code::Forbidden.as_str(), m),
            ApiError::BadRequest(m) => {
                (StatusCode::BAD_REQUEST, Code::InvalidArguments.as_str(), m)
            }
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, Code::NotFound.as_str(), m),
            ApiError::Store(m) => (
                StatusCode::SERVICE_UNAVAILABLE,
                Code::StoreUnavailable.as_str(),
                m,
            ),
            ApiError::Coded(status, code, m) => (status, code.as_str(), m),
            ApiError::Gate(e) => {
                let status = match &e {
                    GateError::UnknownCapability(_) => StatusCode::NOT_FOUND,
                    GateError::Forbidden(_) => StatusCode::FORBIDDEN,
                    GateError::InvalidArguments(_) | GateError::Inadmissible(_) => {
                        StatusCode::UNPROCESSABLE_ENTITY
                    }
                    GateError::Limit(oncegate_core::limits::LimitError::TooLarge { .. }) => {
                        StatusCode::PAYLOAD_TOO_LARGE
                    }
                    GateError::Limit(oncegate_core::limits::LimitError::TooDeep { .. }) => {
                        StatusCode::UNPROCESSABLE_ENTITY
                    }
                    GateError::UnknownApproval(_) | GateError::UnknownIntent(_) => {
                        StatusCode::NOT_FOUND
                    }
                    GateError::ClientKeyMissing(_) => StatusCode::BAD_REQUEST,
                    GateError::ClientKeyReused(_) => StatusCode::UNPROCESSABLE_ENTITY,
                    GateError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
                    GateError::StaleClaim(_) => StatusCode::CONFLICT,
                    GateError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
                };
                (status, e.code().as_str(), e.to_string())
            }
        };
        (
            status,
            Json(json!({"error": {"code": code, "message": message}})),
        )
            .into_response()
    }
}

impl ApiError {
    /// The human-readable part.
    pub fn message(&self) -> String {
        match self {
            ApiError::Unauthorized => "missing or wrong bearer token".into(),
            ApiError::Forbidden(m)
            | ApiError::BadRequest(m)
            | ApiError::NotFound(m)
            | ApiError::Store(m)
            | ApiError::Coded(_, _, m) => m.clone(),
            ApiError::Gate(e) => e.to_string(),
        }
    }
}

impl From<oncegate_store::StoreError> for ApiError {
    fn from(e: oncegate_store::StoreError) -> Self {
        tracing::error!(error = %e, "store error");
        match e {
            oncegate_store::StoreError::Integrity(_) => {
                ApiError::Coded(StatusCode::SERVICE_UNAVAILABLE, e.code(), e.to_string())
            }
            _ => ApiError::Store(e.to_string()),
        }
    }
}

fn require(principal: &Principal, roles: &[Role]) -> Result<(), ApiError> {
    if roles.contains(&principal.role) {
        Ok(())
    } else {
        Err(ApiError::Forbidden(format!(
            "`{}` ({}) may not do this",
            principal.name,
            principal.role.as_str()
        )))
    }
}

/// The outcome envelope on the wire.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Envelope {
    /// applied, replayed, in_flight, unknown, pending_approval, denied, refused, dry_run, failed.
    pub status: String,
    /// The intent key.
    pub intent_key: Option<String>,
    /// The generation.
    pub generation: u32,
    /// Calls seen on the intent, this one included.
    pub attempt: u32,
    /// The intent's state.
    pub state: Option<String>,
    /// The upstream's effect reference.
    pub effect_ref: Option<String>,
    /// The upstream's stored answer.
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// The approval holding the call.
    pub approval_id: Option<String>,
    /// Why, with a stable code: `{"code": "OG-0004", "message": "..."}`.
    #[schema(value_type = Option<Object>)]
    pub reason: Option<Value>,
    /// Alerts raised.
    #[schema(value_type = Vec<Object>)]
    pub alerts: Vec<Value>,
    /// One line the model can act on.
    pub message: String,
}

/// One line of text a model can act on.
pub fn model_line(o: &Outcome) -> String {
    let r = o.effect_ref.as_deref().unwrap_or("(no reference)");
    match o.status {
        // A read passes through: no intent, nothing to not repeat.
        Status::Applied if o.key.is_none() => "OK: read answered.".into(),
        Status::Applied => format!("APPLIED as {r}."),
        Status::Replayed => match o.state {
            Some(IntentState::Failed) => "ALREADY TRIED: the provider refused it (definite). Do not call again with the same arguments.".into(),
            _ => format!("ALREADY APPLIED as {r} - do not call again."),
        },
        Status::InFlight => "IN PROGRESS: another attempt is executing this - do not call again.".into(),
        Status::Unknown => "OUTCOME UNKNOWN - oncegate is reconciling; do not call again.".into(),
        Status::PendingApproval => format!("HELD FOR HUMAN APPROVAL {} - do not call again.", o.approval_id.as_deref().unwrap_or("")),
        Status::Denied => format!("DENIED: {} - do not retry.", o.reason.as_ref().map_or("", |r| r.message.as_str())),
        Status::Refused => format!("REFUSED: {} - do not retry.", o.reason.as_ref().map_or("", |r| r.message.as_str())),
        Status::DryRun => "DRY RUN: nothing was executed.".into(),
        Status::Failed => format!("FAILED: {}", o.reason.as_ref().map_or("", |r| r.message.as_str())),
    }
}

impl From<&Outcome> for Envelope {
    fn from(o: &Outcome) -> Self {
        Envelope {
            status: o.status.as_str().to_owned(),
            intent_key: o.key.as_ref().map(ToString::to_string),
            generation: o.generation,
            attempt: o.attempt,
            state: o.state.map(|s| s.as_str().to_owned()),
            effect_ref: o.effect_ref.clone(),
            result: o.result.clone(),
            approval_id: o.approval_id.clone(),
            reason: o
                .reason
                .as_ref()
                .map(|r| json!({"code": r.code, "message": r.message})),
            alerts: o
                .alerts
                .iter()
                .map(|a| serde_json::to_value(a).unwrap_or(Value::Null))
                .collect(),
            message: model_line(o),
        }
    }
}

/// The envelope and its HTTP status (the decision is counted where it is made, in the
/// call's own task).
fn envelope_response(state: &AppState, o: &Outcome, capability: &str) -> Response {
    let code = match o.status {
        Status::Applied | Status::Replayed | Status::DryRun | Status::Failed => StatusCode::OK,
        Status::InFlight | Status::Unknown | Status::PendingApproval => StatusCode::ACCEPTED,
        Status::Denied => StatusCode::FORBIDDEN,
        Status::Refused => match o.reason.as_ref().map(|r| r.code) {
            Some(Code::StoreUnavailable) => StatusCode::SERVICE_UNAVAILABLE,
            Some(Code::AttemptCeiling | Code::Contention) => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::CONFLICT,
        },
    };
    let mut envelope = Envelope::from(o);
    if state
        .gate
        .registry()
        .capability(capability)
        .and_then(|c| c.upstream.as_ref())
        .is_some_and(|u| u.kind == oncegate_core::config::UpstreamKind::Mcp)
    {
        // The provider's record, as an HTTP upstream's body would be (MCP clients get
        // the whole tool result on /mcp).
        envelope.result = envelope.result.map(crate::upstream::mcp::record_of);
    }
    (code, Json(envelope)).into_response()
}

/// Counts a decision (both surfaces).
fn record_decision(o: &Outcome, capability: &str) {
    metrics::counter!("oncegate_decisions_total", "capability" => capability.to_owned(), "outcome" => o.status.as_str()).increment(1);
    if matches!(o.status, Status::Replayed | Status::InFlight) {
        metrics::counter!("oncegate_duplicates_prevented_total", "capability" => capability.to_owned()).increment(1);
    }
}

/// `POST /v1/calls` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallBody {
    /// The capability.
    pub capability: String,
    /// Its arguments.
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    pub arguments: Value,
}

fn empty_object() -> Value {
    json!({})
}

/// A structural header (`Oncegate-Run-Id`, `Oncegate-Step-Id`, `Idempotency-Key`):
/// absent, or one value of 1 to 255 visible ASCII characters. Anything else is a 400:
/// silently dropping it would collapse distinct steps onto one intent key.
pub(crate) fn header_string(headers: &HeaderMap, name: &str) -> Result<Option<String>, ApiError> {
    let invalid =
        |message: String| ApiError::Coded(StatusCode::BAD_REQUEST, Code::InvalidHeader, message);
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let display = display_header(name);
    if values.next().is_some() {
        return Err(invalid(format!(
            "{display} is sent more than once; send it once"
        )));
    }
    let text = value.to_str().map_err(|_| {
        invalid(format!(
            "{display} contains non-ASCII bytes; only visible ASCII characters (`!` to `~`) are allowed"
        ))
    })?;
    // HTTP strips surrounding whitespace already; a proxy may not have.
    let text = text.trim_matches([' ', '\t']);
    oncegate_core::limits::check_id(display, text).map_err(invalid)?;
    Ok(Some(text.to_owned()))
}

fn display_header(name: &str) -> &'static str {
    match name {
        "oncegate-run-id" => "Oncegate-Run-Id",
        "oncegate-step-id" => "Oncegate-Step-Id",
        "idempotency-key" => "Idempotency-Key",
        _ => "a structural header",
    }
}

fn json_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("malformed request body: {e}")))
}

/// Refuses a body holding a number serde_json would round (`12.5000000000000001`, a
/// 25-digit integer): the key and the upstream would see another number than the one
/// written. `bytes` must already have parsed as JSON.
fn exact_numbers(bytes: &[u8]) -> Result<(), ApiError> {
    oncegate_core::normalise::check_exact_numbers(bytes).map_err(|e| {
        ApiError::Coded(
            StatusCode::UNPROCESSABLE_ENTITY,
            Code::InvalidArguments,
            e.0,
        )
    })
}

#[utoipa::path(post, path = "/v1/calls", tag = "calls", request_body = CallBody, params(("Oncegate-Run-Id" = Option<String>, Header, description = "the orchestrator's run id"), ("Oncegate-Step-Id" = Option<String>, Header, description = "the orchestrator's step id"), ("Idempotency-Key" = Option<String>, Header, description = "a coded orchestrator's own stable key")), responses((status = 200, description = "applied, replayed, dry_run or failed", body = Envelope), (status = 202, description = "in_flight, unknown or pending_approval", body = Envelope), (status = 403, description = "denied", body = Envelope), (status = 409, description = "refused, or the Idempotency-Key's first request is in flight", body = Envelope), (status = 429, description = "attempt ceiling or read rate cap", body = Envelope), (status = 503, description = "store unavailable (fail closed)", body = Envelope), (status = 400, description = "malformed request"), (status = 401, description = "missing or wrong token"), (status = 422, description = "arguments do not normalise, or Idempotency-Key reused")), security(("bearer" = [])))]
async fn post_call(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let principal = state.authenticate(&headers)?;
    let parsed: CallBody = json_body(&body)?;
    exact_numbers(&body)?;
    let body = parsed;
    let executor = state.executor(&body.capability)?;
    let client_key = header_string(&headers, "idempotency-key")?;
    let call = Call {
        capability: body.capability,
        arguments: body.arguments,
        run_id: header_string(&headers, "oncegate-run-id")?,
        step_id: header_string(&headers, "oncegate-step-id")?,
        client_key: client_key.clone(),
    };
    let capability = call.capability.clone();
    let task = state.spawn_call(&principal.name, call, executor);
    let outcome = task
        .await
        .map_err(|e| ApiError::Store(format!("the call task failed: {e}")))?
        .map_err(ApiError::Gate)?;
    if client_key.is_some() && outcome.status == Status::InFlight {
        // The IETF idempotency-key draft: a request whose key is still being processed is 409.
        let mut envelope = Envelope::from(&outcome);
        envelope.reason = Some(
            json!({"code": Code::ClientKeyInFlight, "message": "the first request with this Idempotency-Key is still in flight"}),
        );
        return Ok((StatusCode::CONFLICT, Json(envelope)).into_response());
    }
    Ok(envelope_response(&state, &outcome, &capability))
}

impl AppState {
    /// POSTs each alert to the configured webhook, in the background (best effort: the
    /// alert is already in the log, the metrics and the audit record).
    pub(crate) fn send_alerts(&self, outcome: &Outcome, capability: &str, principal: &str) {
        let Some(template) = &self.gate.registry().gateway.alert_webhook else {
            return;
        };
        if outcome.alerts.is_empty() {
            return;
        }
        let mut url = String::new();
        for part in template.parts() {
            match part {
                oncegate_core::template::Part::Literal(l) => url.push_str(l),
                oncegate_core::template::Part::Placeholder(
                    oncegate_core::template::Source::Env(name),
                ) => {
                    url.push_str(&std::env::var(name).unwrap_or_default());
                }
                oncegate_core::template::Part::Placeholder(_) => {}
            }
        }
        for alert in &outcome.alerts {
            let body = json!({"alert": alert, "capability": capability, "intent_key": outcome.key, "principal": principal});
            let (client, url) = (self.http.clone(), url.clone());
            tokio::spawn(async move {
                if let Err(e) = client
                    .post(&url)
                    .timeout(Duration::from_secs(5))
                    .json(&body)
                    .send()
                    .await
                {
                    tracing::warn!(error = %e, "alert webhook failed");
                }
            });
        }
    }
}

#[utoipa::path(get, path = "/v1/intents/{key}", tag = "intents", params(("key" = String, Path, description = "intent key")), responses((status = 200, description = "the intent record (latest generation)"), (status = 404, description = "no such intent")), security(("bearer" = [])))]
async fn get_intent(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers)?;
    require(&p, &[Role::Admin, Role::Approver])?;
    match state
        .gate
        .store()
        .load(&IntentKey::from_hex(key.clone()))
        .await?
    {
        Some(r) => Ok(Json(r).into_response()),
        None => Err(ApiError::NotFound(format!("no intent {key}"))),
    }
}

/// Parses an optional `?state=` filter, refusing unknown spellings with a 400.
fn parse_state<T>(
    raw: Option<&str>,
    parse: fn(&str) -> Option<T>,
    what: &str,
) -> Result<Option<T>, ApiError> {
    raw.map(|s| parse(s).ok_or_else(|| ApiError::BadRequest(format!("`{s}` is not {what}"))))
        .transpose()
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
struct IntentQuery {
    state: Option<String>,
    capability: Option<String>,
    limit: Option<u32>,
}

#[utoipa::path(get, path = "/v1/intents", tag = "intents", params(IntentQuery), responses((status = 200, description = "{\"intents\": [...]}, newest first")), security(("bearer" = [])))]
async fn list_intents(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<IntentQuery>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers)?;
    require(&p, &[Role::Admin, Role::Approver])?;
    let st = parse_state(q.state.as_deref(), IntentState::parse, "a state")?;
    let list = state
        .gate
        .store()
        .list_intents(&IntentFilter {
            state: st,
            capability: q.capability,
            breaker_tripped: false,
            limit: q.limit.unwrap_or(100),
            oldest_first: false,
        })
        .await?;
    // An unreadable row is reported by key; it never fails the whole listing.
    Ok(Json(json!({"intents": list.items, "unreadable": list.unreadable})).into_response())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
struct ApprovalQuery {
    state: Option<String>,
}

#[utoipa::path(get, path = "/v1/approvals", tag = "approvals", params(ApprovalQuery), responses((status = 200, description = "{\"approvals\": [...]}")), security(("bearer" = [])))]
async fn list_approvals(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<ApprovalQuery>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers)?;
    require(&p, &[Role::Admin, Role::Approver])?;
    let st = parse_state(
        q.state.as_deref(),
        ApprovalState::parse,
        "an approval state",
    )?;
    let list = state.gate.store().list_approvals(st).await?;
    Ok(Json(json!({"approvals": list.items, "unreadable": list.unreadable})).into_response())
}

async fn decide_approval(
    state: AppState,
    headers: HeaderMap,
    id: String,
    choice: Choice,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers)?;
    require(&p, &[Role::Admin, Role::Approver])?;
    let approval = state
        .gate
        .store()
        .approval(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no approval {id}")))?;
    let executor = state.executor(&approval.capability)?;
    let gate = state.gate.clone();
    let guard = state.inflight.enter();
    let counted = (state.clone(), approval.capability.clone());
    let task = tokio::spawn(async move {
        let _guard = guard;
        let outcome = gate.decide_approval(&p.name, &id, choice, executor).await;
        if let Ok(o) = &outcome {
            // In the task, so an approver who hangs up does not lose them.
            counted.0.send_alerts(o, &counted.1, &p.name);
            record_decision(o, &counted.1);
        }
        outcome
    });
    let outcome = task
        .await
        .map_err(|e| ApiError::Store(format!("the approval task failed: {e}")))?
        .map_err(ApiError::Gate)?;
    Ok(envelope_response(&state, &outcome, &approval.capability))
}

#[utoipa::path(post, path = "/v1/approvals/{id}/approve", tag = "approvals", params(("id" = String, Path)), responses((status = 200, description = "executed once; a repeat returns the first result", body = Envelope), (status = 403, description = "not an approver, or own call")), security(("bearer" = [])))]
async fn approve(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    decide_approval(state, headers, id, Choice::Approve).await
}

#[utoipa::path(post, path = "/v1/approvals/{id}/deny", tag = "approvals", params(("id" = String, Path)), responses((status = 403, description = "denied (final for this generation)", body = Envelope)), security(("bearer" = [])))]
async fn deny(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    decide_approval(state, headers, id, Choice::Deny).await
}

/// `POST /v1/keys/derive` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeriveBody {
    capability: String,
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    arguments: Value,
    run_id: Option<String>,
    step_id: Option<String>,
}

#[utoipa::path(post, path = "/v1/keys/derive", tag = "keys", request_body = DeriveBody, responses((status = 200, description = "which inputs entered the key and why"), (status = 422, description = "arguments do not normalise")), security(("bearer" = [])))]
async fn derive_key(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers)?;
    let parsed: DeriveBody = json_body(&body)?;
    exact_numbers(&body)?;
    let body = parsed;
    let mut call = Call::new(body.capability, body.arguments);
    call.run_id = body.run_id;
    call.step_id = body.step_id;
    let derived = state
        .gate
        .derive_key(&p.name, &call)
        .map_err(ApiError::Gate)?;
    Ok(Json(derived.explanation).into_response())
}

#[utoipa::path(get, path = "/v1/audit/verify", tag = "audit", responses((status = 200, description = "every shard verified"), (status = 409, description = "the first broken link")), security(("bearer" = [])))]
async fn audit_verify(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers)?;
    require(&p, &[Role::Admin])?;
    let store = state.gate.store();
    let report =
        oncegate_store::audit_check::verify_audit(store, store.chain_key(), store.store_id(), &[])
            .await?;
    if !report.ok() {
        return Ok((
            StatusCode::CONFLICT,
            Json(json!({
                "ok": false,
                // The first broken link, as before; every problem below it.
                "broken": report.broken.first(),
                "broken_links": report.broken,
                "broken_rows": report.row_problems,
            })),
        )
            .into_response());
    }
    Ok(Json(json!({"ok": true, "records": report.records, "shards": report.shards, "rows": report.rows})).into_response())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
struct AuditQuery {
    after: Option<i64>,
    limit: Option<u32>,
}

#[utoipa::path(get, path = "/v1/audit", tag = "audit", params(AuditQuery), responses((status = 200, description = "JSON lines: {position, record}", content_type = "application/x-ndjson")), security(("bearer" = [])))]
async fn audit_export(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<AuditQuery>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers)?;
    require(&p, &[Role::Admin])?;
    let page = state
        .gate
        .store()
        .audit_after(q.after.unwrap_or(0), q.limit.unwrap_or(1000).min(10_000))
        .await?;
    let mut out = String::new();
    for (pos, record) in page {
        out.push_str(&json!({"position": pos, "record": record}).to_string());
        out.push('\n');
    }
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], out).into_response())
}

#[utoipa::path(post, path = "/v1/admin/breakers/{key}/reset", tag = "admin", params(("key" = String, Path)), responses((status = 200, body = Envelope)), security(("bearer" = [])))]
async fn reset_breaker(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers)?;
    require(&p, &[Role::Admin])?;
    let outcome = state
        .gate
        .reset_breaker(&p.name, &IntentKey::from_hex(key))
        .await
        .map_err(ApiError::Gate)?;
    Ok(Json(Envelope::from(&outcome)).into_response())
}

/// `PUT /v1/admin/kill-switches/{target}` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KillBody {
    /// `true` switches the capability off.
    killed: bool,
    reason: Option<String>,
}

#[utoipa::path(put, path = "/v1/admin/kill-switches/{target}", tag = "admin", params(("target" = String, Path, description = "a capability name, or capability:NAME / agent:NAME")), request_body = KillBody, responses((status = 200, description = "the kill switches now on")), security(("bearer" = [])))]
async fn kill_switch(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(target): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers)?;
    require(&p, &[Role::Admin])?;
    let body: KillBody = json_body(&body)?;
    let target = if target.contains(':') {
        target
    } else {
        format!("capability:{target}")
    };
    let registry = state.gate.registry();
    let known = match target.split_once(':') {
        Some(("capability", name)) => registry.capability(name).is_some(),
        Some(("agent", name)) => registry.principal(name).is_some(),
        _ => false,
    };
    if !known {
        return Err(ApiError::NotFound(format!(
            "`{target}` names no capability or principal (use NAME, capability:NAME or agent:NAME)"
        )));
    }
    let reason = body
        .killed
        .then(|| body.reason.unwrap_or_else(|| format!("by {}", p.name)));
    tracing::warn!(target = %target, killed = body.killed, by = %p.name, "kill switch");
    state.gate.set_kill_switch(&p.name, &target, reason).await?;
    Ok(Json(json!({"kill_switches": state.gate.kill_switches()})).into_response())
}

#[utoipa::path(get, path = "/healthz", tag = "ops", responses((status = 200, description = "the process is up")))]
async fn healthz() -> &'static str {
    "ok"
}

#[utoipa::path(get, path = "/readyz", tag = "ops", responses((status = 200, description = "the store answers and can take a write now"), (status = 503, description = "the store is unreachable, or cannot be written (e.g. another process holds its write lock)")))]
async fn readyz(State(state): State<AppState>) -> Response {
    match state.gate.store().ping().await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}")).into_response(),
    }
}

#[utoipa::path(get, path = "/metrics", tag = "ops", responses((status = 200, description = "Prometheus text format")))]
async fn metrics_route(State(state): State<AppState>) -> Response {
    if let Ok(open) = state
        .gate
        .store()
        .list_intents(&IntentFilter {
            state: Some(IntentState::Unknown),
            limit: 10_000,
            ..Default::default()
        })
        .await
    {
        metrics::gauge!("oncegate_unknown_intents_open").set(open.items.len() as f64);
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}

/// The OpenAPI document, generated from the handlers above.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "oncegate", description = "One intent, at most one effect: the JSON API for orchestrators without MCP."),
    paths(post_call, list_intents, get_intent, list_approvals, approve, deny, derive_key, audit_verify, audit_export, reset_breaker, kill_switch, healthz, readyz, metrics_route),
    components(schemas(CallBody, Envelope, DeriveBody, KillBody)),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(<ApiDoc as utoipa::OpenApi>::openapi())
}

/// Turns the framework's plain-text rejections (413 body too large, 408 timeout, 405
/// method) into the same JSON error shape, with a stable code, as every other error.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| {
            v.as_bytes().starts_with(b"application/json")
                || v.as_bytes().starts_with(b"text/plain; version")
        });
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        return response; // readyz answers in text on purpose
    }
    let bytes = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .unwrap_or_default();
    let message = String::from_utf8_lossy(&bytes).trim().to_owned();
    let message = if message.is_empty() {
        status.canonical_reason().unwrap_or("rejected").to_owned()
    } else {
        message
    };
    (
        status,
        Json(json!({"error": {"code": Code::RequestRejected, "message": message}})),
    )
        .into_response()
}

/// The router.
pub fn app(state: AppState) -> Router {
    let mcp = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::mcp::authenticate,
        ))
        .service(crate::mcp::service(state.clone()));
    Router::new()
        .nest_service("/mcp", mcp)
        .route("/v1/openapi.json", get(openapi_json))
        .route("/v1/calls", post(post_call))
        .route("/v1/intents", get(list_intents))
        .route("/v1/intents/{key}", get(get_intent))
        .route("/v1/approvals", get(list_approvals))
        .route("/v1/approvals/{id}/approve", post(approve))
        .route("/v1/approvals/{id}/deny", post(deny))
        .route("/v1/keys/derive", post(derive_key))
        .route("/v1/audit/verify", get(audit_verify))
        .route("/v1/audit", get(audit_export))
        .route("/v1/admin/breakers/{key}/reset", post(reset_breaker))
        .route("/v1/admin/kill-switches/{target}", put(kill_switch))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_route))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(120),
        ))
        .layer(axum::middleware::map_response(json_errors))
        .with_state(state)
}

/// Periodically reconciles unknown intents (and claims whose lease expired) against
/// their upstreams. Runs until the process ends.
pub async fn sweep(state: AppState, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        for st in [IntentState::Unknown, IntentState::InFlight] {
            let Ok(list) = state
                .gate
                .store()
                .list_intents(&IntentFilter {
                    state: Some(st),
                    limit: 500,
                    oldest_first: true,
                    ..Default::default()
                })
                .await
            else {
                continue;
            };
            for record in list.items {
                let Ok(executor) = state.executor(&record.capability) else {
                    continue;
                };
                match state.gate.sweep_one(&record, executor).await {
                    Ok(Some(o)) => {
                        tracing::info!(key = %record.key, status = o.status.as_str(), "sweep reconciled an intent")
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(key = %record.key, error = %e, "sweep could not record")
                    }
                }
            }
        }
    }
}

/// How long a client may take to send its request headers (slowloris guard).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves until `shutdown` resolves, then stops accepting and lets running requests
/// (and the effects they started) finish and be recorded.
///
/// hyper is driven directly (rather than through `axum::serve`) for its per-connection
/// header read timeout.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    sweep_every: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::server::graceful::GracefulShutdown;
    use hyper_util::service::TowerToHyperService;

    let sweeper = tokio::spawn(sweep(state.clone(), sweep_every));
    let inflight = state.inflight.clone();
    let state_shutdown = state.mcp_shutdown.clone();
    let router = app(state);
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: back off, keep serving.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let service = TowerToHyperService::new(router.clone());
                let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
                let watched = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(e) = watched.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    // MCP sessions hold streams open; end them so the connections can close.
    state_shutdown.cancel();
    graceful.shutdown().await;
    // Callers that hung up left their effects running: record them before exiting.
    let left = inflight.drain(Duration::from_secs(60)).await;
    if left > 0 {
        tracing::error!(
            left,
            "exiting with effects still running; their intents read unknown after the lease and are reconciled"
        );
    }
    sweeper.abort();
    Ok(())
}

/// A reqwest client for upstreams: rustls with ring, a connect timeout.
pub fn http_client() -> reqwest::Client {
    install_crypto();
    reqwest::Client::builder()
        // A redirect would re-send an effect elsewhere (or as a GET): never follow one.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .expect("a client with these settings always builds")
}

/// Installs ring as rustls's crypto provider, once per process.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
