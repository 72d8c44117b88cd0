//! The sandbox's routes, its HTTP handlers and the one mapping of its errors to HTTP.
//!
//! The MCP endpoint is mounted here too, behind the same API-key check as `/v1`; its
//! tools live in the `mcp` module.

use std::sync::Arc;

use axum::{
    Extension, Json, Router,
    body::Bytes,
    extract::{ConnectInfo, Path, Query, Request, State, rejection::QueryRejection},
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{MethodRouter, get, post},
};
use serde::Deserialize;
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

use crate::conn::Severer;
use crate::faults::{Fault, FaultKind, FaultRequest};
use crate::ledger::NewEffect;
use crate::mcp;
use crate::provider::{
    AfterCommit, EffectsParams, LookupError, LookupParams, Refusal, Sandbox, acceptable_key,
};
use crate::resource::Resource;

const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
const SANDBOX_FAULT: HeaderName = HeaderName::from_static("sandbox-fault");
const SANDBOX_FAULT_DELAY_MS: HeaderName = HeaderName::from_static("sandbox-fault-delay-ms");

pub(super) fn router(state: SharedSandbox) -> Router {
    let provider = Router::new()
        .route("/v1/charges", resource_routes(Resource::Charges))
        .route("/v1/refunds", resource_routes(Resource::Refunds))
        .route("/v1/emails", resource_routes(Resource::Emails))
        .route("/v1/ledger", resource_routes(Resource::Ledger))
        .route("/v1/orders/{order_id}", get(order))
        .route("/v1/effects", get(effects))
        .nest_service("/mcp", mcp::service(Arc::clone(&state)))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            require_api_key,
        ));
    let admin = Router::new()
        .route("/_sandbox/health", get(health))
        .route(
            "/_sandbox/faults",
            post(queue_fault).get(list_faults).delete(clear_faults),
        )
        .route(
            "/_sandbox/mcp/hidden",
            axum::routing::put(hide_tools).get(hidden_tools),
        )
        .route(
            "/_sandbox/mcp/descriptions",
            axum::routing::put(describe_tools).get(described_tools),
        );

    provider
        .merge(admin)
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(state)
}

type SharedSandbox = Arc<Sandbox>;

/// Everything the sandbox answers with other than success; the `code` is stable.
#[derive(Debug)]
enum ApiError {
    Unauthorized,
    MalformedJson,
    InvalidBody(String),
    InvalidHeader(&'static str),
    InvalidQuery(String),
    MissingLookupParameter,
    IdempotencyKeyReused,
    UnknownFaultPath(String),
    CardDeclined,
    RateLimited,
    /// `fail_before_commit`, or a commit task that died: the same to the caller.
    Internal,
    DropRequiresServe,
    NotFound,
    MethodNotAllowed,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, detail) = match self {
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized", None),
            ApiError::MalformedJson => (StatusCode::BAD_REQUEST, "malformed_json", None),
            ApiError::InvalidBody(detail) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
                Some(detail),
            ),
            ApiError::InvalidHeader(name) => (
                StatusCode::BAD_REQUEST,
                "invalid_header",
                Some(format!("invalid {name} header")),
            ),
            ApiError::InvalidQuery(detail) => {
                (StatusCode::BAD_REQUEST, "invalid_query", Some(detail))
            }
            ApiError::MissingLookupParameter => (
                StatusCode::BAD_REQUEST,
                "missing_lookup_parameter",
                Some("give idempotency_key, order_id or dedupe_ref".to_owned()),
            ),
            ApiError::IdempotencyKeyReused => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                None,
            ),
            ApiError::UnknownFaultPath(path) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "unknown_fault_path",
                Some(format!(
                    "{path:?} is not one of /v1/charges, /v1/refunds, /v1/emails, /v1/ledger"
                )),
            ),
            ApiError::CardDeclined => (StatusCode::PAYMENT_REQUIRED, "card_declined", None),
            ApiError::RateLimited => (StatusCode::TOO_MANY_REQUESTS, "rate_limited", None),
            ApiError::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error", None),
            ApiError::DropRequiresServe => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "drop_requires_serve",
                Some("drop_after_commit needs the sandbox's own serve()".to_owned()),
            ),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "not_found", None),
            ApiError::MethodNotAllowed => {
                (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", None)
            }
        };
        let body = match detail {
            Some(detail) => json!({ "error": code, "detail": detail }),
            None => json!({ "error": code }),
        };
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        match status {
            StatusCode::UNAUTHORIZED => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            StatusCode::TOO_MANY_REQUESTS => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Internal => ApiError::Internal,
            Refusal::CardDeclined => ApiError::CardDeclined,
            Refusal::RateLimited => ApiError::RateLimited,
            Refusal::KeyReused => ApiError::IdempotencyKeyReused,
        }
    }
}

impl From<LookupError> for ApiError {
    fn from(error: LookupError) -> Self {
        match error {
            LookupError::NoCriterion => ApiError::MissingLookupParameter,
            LookupError::DedupeRefNotEmails => {
                ApiError::InvalidQuery("dedupe_ref applies to emails only".to_owned())
            }
        }
    }
}

/// `/v1` and `/mcp` alike need `Authorization: Bearer <api_key>` when one is configured.
async fn require_api_key(
    State(sandbox): State<SharedSandbox>,
    request: Request,
    next: Next,
) -> Response {
    let Some(expected) = sandbox.config.api_key.as_deref() else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    // Constant-time, like any provider worth imitating.
    match presented {
        Some(token) if bool::from(token.as_bytes().ct_eq(expected.as_bytes())) => {
            next.run(request).await
        }
        _ => ApiError::Unauthorized.into_response(),
    }
}

/// `POST` creates, `GET` looks up, for one resource.
fn resource_routes(resource: Resource) -> MethodRouter<SharedSandbox> {
    post(
        move |sandbox: State<SharedSandbox>,
              severer: Option<Extension<ConnectInfo<Severer>>>,
              headers: HeaderMap,
              body: Bytes| create(resource, sandbox, severer, headers, body),
    )
    .get(
        move |sandbox: State<SharedSandbox>, query: Result<Query<LookupParams>, QueryRejection>| {
            lookup(resource, sandbox, query)
        },
    )
}

async fn create(
    resource: Resource,
    State(sandbox): State<SharedSandbox>,
    severer: Option<Extension<ConnectInfo<Severer>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let request: Value = serde_json::from_slice(&body).map_err(|_| ApiError::MalformedJson)?;
    let effect = NewEffect::parse(resource, request)
        .map_err(|e| ApiError::InvalidBody(e.0))?
        .traced(
            headers.get("traceparent").and_then(|v| v.to_str().ok()),
            headers.get("tracestate").and_then(|v| v.to_str().ok()),
        );
    let created = sandbox.create(effect, key, header_fault(&headers)?).await?;

    match created.after_commit {
        AfterCommit::Answer => {}
        AfterCommit::Stall(delay) => tokio::time::sleep(delay).await,
        AfterCommit::Drop => {
            let Some(Extension(ConnectInfo(severer))) = severer else {
                return Err(ApiError::DropRequiresServe);
            };
            severer.sever();
            // Never reaches the caller: the connection fails on hyper's first write.
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
    }

    let mut response = Json(created.object).into_response();
    if created.replayed {
        response
            .headers_mut()
            .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// The `Idempotency-Key` header, if sent; an empty or unreadable one is an error rather
/// than silently no key, since that would turn a retry into a second effect.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(key) if acceptable_key(key) => Ok(Some(key.to_owned())),
        _ => Err(ApiError::InvalidHeader("Idempotency-Key")),
    }
}

/// A fault asked for by the request itself, for manual poking with curl.
fn header_fault(headers: &HeaderMap) -> Result<Option<Fault>, ApiError> {
    let Some(name) = headers.get(SANDBOX_FAULT) else {
        return Ok(None);
    };
    let kind = name
        .to_str()
        .ok()
        .and_then(FaultKind::parse)
        .ok_or(ApiError::InvalidHeader("Sandbox-Fault"))?;
    let delay_ms = match headers.get(SANDBOX_FAULT_DELAY_MS) {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|text| text.parse::<u64>().ok())
                .ok_or(ApiError::InvalidHeader("Sandbox-Fault-Delay-Ms"))?,
        ),
    };
    Ok(Some(Fault::new(kind, delay_ms)))
}

async fn lookup(
    resource: Resource,
    State(sandbox): State<SharedSandbox>,
    query: Result<Query<LookupParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(params) = query.map_err(|e| ApiError::InvalidQuery(e.body_text()))?;
    Ok(Json(sandbox.lookup(resource, &params)?))
}

async fn order(State(sandbox): State<SharedSandbox>, Path(order_id): Path<String>) -> Json<Value> {
    Json(sandbox.order(&order_id))
}

async fn effects(
    State(sandbox): State<SharedSandbox>,
    query: Result<Query<EffectsParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    // Unknown parameters are refused: a misspelt filter would otherwise count everything.
    let Query(params) = query.map_err(|e| ApiError::InvalidQuery(e.body_text()))?;
    let listing = sandbox
        .effects(&params)
        .map_err(|e| ApiError::InvalidQuery(e.0))?;
    Ok(Json(listing))
}

async fn health() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// The body of `PUT /_sandbox/mcp/hidden`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HideRequest {
    tools: Vec<String>,
}

async fn hide_tools(
    State(sandbox): State<SharedSandbox>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: Value = serde_json::from_slice(&body).map_err(|_| ApiError::MalformedJson)?;
    let request =
        HideRequest::deserialize(&request).map_err(|e| ApiError::InvalidBody(e.to_string()))?;
    let hidden: std::collections::BTreeSet<String> = request.tools.into_iter().collect();
    *sandbox.hidden() = hidden.clone();
    // Nobody listening is fine.
    let _ = sandbox.tools_changed.send(());
    tracing::info!(?hidden, "sandbox MCP tools hidden");
    Ok(Json(json!({ "hidden": hidden })))
}

/// The body of `PUT /_sandbox/mcp/descriptions`: tool name -> its new description.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DescribeRequest {
    tools: std::collections::BTreeMap<String, String>,
}

async fn describe_tools(
    State(sandbox): State<SharedSandbox>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: Value = serde_json::from_slice(&body).map_err(|_| ApiError::MalformedJson)?;
    let request =
        DescribeRequest::deserialize(&request).map_err(|e| ApiError::InvalidBody(e.to_string()))?;
    *sandbox.descriptions() = request.tools.clone();
    // Nobody listening is fine.
    let _ = sandbox.tools_changed.send(());
    tracing::info!(tools = ?request.tools.keys(), "sandbox MCP tool descriptions replaced");
    Ok(Json(json!({ "descriptions": request.tools })))
}

async fn described_tools(State(sandbox): State<SharedSandbox>) -> Json<Value> {
    Json(json!({ "descriptions": *sandbox.descriptions() }))
}

async fn hidden_tools(State(sandbox): State<SharedSandbox>) -> Json<Value> {
    Json(json!({ "hidden": *sandbox.hidden() }))
}

async fn queue_fault(
    State(sandbox): State<SharedSandbox>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request: Value = serde_json::from_slice(&body).map_err(|_| ApiError::MalformedJson)?;
    let request =
        FaultRequest::deserialize(&request).map_err(|e| ApiError::InvalidBody(e.to_string()))?;
    let resource = Resource::ALL
        .into_iter()
        .find(|r| r.path() == request.path)
        .ok_or(ApiError::UnknownFaultPath(request.path))?;
    if request.times == 0 {
        return Err(ApiError::InvalidBody("times must be at least 1".to_owned()));
    }
    let fault = Fault::new(request.fault, request.delay_ms);
    let mut faults = sandbox.faults();
    let queued = faults.push(resource, fault, request.times);
    tracing::info!(
        path = queued.path,
        fault = queued.fault.as_str(),
        times = queued.times,
        delay_ms = queued.delay_ms,
        "sandbox fault queued"
    );
    Ok(Json(
        json!({ "queued": queued, "pending": faults.pending() }),
    ))
}

async fn list_faults(State(sandbox): State<SharedSandbox>) -> Json<Value> {
    Json(json!({ "pending": sandbox.faults().pending() }))
}

async fn clear_faults(State(sandbox): State<SharedSandbox>) -> Json<Value> {
    let cleared = sandbox.faults().clear();
    Json(json!({ "cleared": cleared }))
}
