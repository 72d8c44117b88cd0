//! The sandbox's routes, handlers and the one mapping of its errors to HTTP.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::{
    Extension, Json, Router,
    body::Bytes,
    extract::{ConnectInfo, Path, Query, Request, State, rejection::QueryRejection},
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{MethodRouter, get, post},
};
use jiff::Timestamp;
use serde::Deserialize;
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

use super::{
    Resource, SandboxConfig,
    conn::Severer,
    faults::{Fault, FaultKind, FaultQueue, FaultRequest},
    ledger::{Commit, EffectFilter, KeyUse, Ledger, Lookup, NewEffect},
};

const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
const SANDBOX_FAULT: HeaderName = HeaderName::from_static("sandbox-fault");
const SANDBOX_FAULT_DELAY_MS: HeaderName = HeaderName::from_static("sandbox-fault-delay-ms");

/// Longest accepted `Idempotency-Key`, as at the providers the sandbox imitates.
const MAX_KEY_LEN: usize = 255;

pub(super) fn router(config: SandboxConfig) -> Router {
    let state = Arc::new(Sandbox {
        config,
        ledger: Mutex::default(),
        faults: Mutex::default(),
    });

    let provider = Router::new()
        .route("/v1/charges", resource_routes(Resource::Charges))
        .route("/v1/refunds", resource_routes(Resource::Refunds))
        .route("/v1/emails", resource_routes(Resource::Emails))
        .route("/v1/ledger", resource_routes(Resource::Ledger))
        .route("/v1/orders/{order_id}", get(order))
        .route("/v1/effects", get(effects))
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            require_api_key,
        ));
    let admin = Router::new().route("/_sandbox/health", get(health)).route(
        "/_sandbox/faults",
        post(queue_fault).get(list_faults).delete(clear_faults),
    );

    provider
        .merge(admin)
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(state)
}

/// Shared by every request of one sandbox.
struct Sandbox {
    config: SandboxConfig,
    ledger: Mutex<Ledger>,
    faults: Mutex<FaultQueue>,
}

impl Sandbox {
    // A handler that panicked under a lock cannot leave the ledger half-written (every
    // mutation is a single push/insert), so a poisoned lock is still safe to use.
    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn faults(&self) -> MutexGuard<'_, FaultQueue> {
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }
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
        move |sandbox: State<SharedSandbox>, query: Result<Query<LookupQuery>, QueryRejection>| {
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
    let effect = NewEffect::parse(resource, request).map_err(|e| ApiError::InvalidBody(e.0))?;

    // Only a request that would otherwise succeed uses up a queued fault, so a test's
    // fault is not eaten by some malformed call.
    let fault = match header_fault(&headers)? {
        Some(fault) => Some(fault),
        None => sandbox.faults().take(resource),
    };
    if let Some(fault) = fault {
        tracing::debug!(
            %resource,
            fault = fault.kind.as_str(),
            delay_ms = u64::try_from(fault.delay.as_millis()).unwrap_or(u64::MAX),
            "sandbox fault applied"
        );
    }
    let kind = fault.map(|f| f.kind);
    match kind {
        Some(FaultKind::FailBeforeCommit) => return Err(ApiError::Internal),
        Some(FaultKind::Decline) => return Err(ApiError::CardDeclined),
        Some(FaultKind::RateLimit) => return Err(ApiError::RateLimited),
        _ => {}
    }

    // The commit runs on its own task: a provider finishes a request whose caller hung
    // up, and a slow request that commits after the caller's timeout is exactly the
    // ambiguity the gateway has to survive.
    let slow = fault.filter(|f| f.kind == FaultKind::Slow).map(|f| f.delay);
    let honoured = !sandbox.config.ignore_idempotency_key.contains(&resource);
    let commit = tokio::spawn({
        let sandbox = Arc::clone(&sandbox);
        async move {
            if let Some(delay) = slow {
                tokio::time::sleep(delay).await;
            }
            let key = KeyUse {
                key: key.as_deref(),
                honoured,
            };
            sandbox.ledger().commit(effect, key, Timestamp::now())
        }
    })
    .await
    .map_err(|_| ApiError::Internal)?;

    let (object, replayed) = match commit {
        Commit::Created(object) => (object, false),
        Commit::Replayed(object) => (object, true),
        Commit::KeyReused => return Err(ApiError::IdempotencyKeyReused),
    };
    match fault {
        Some(Fault {
            kind: FaultKind::StallAfterCommit,
            delay,
        }) => tokio::time::sleep(delay).await,
        Some(Fault {
            kind: FaultKind::DropAfterCommit,
            ..
        }) => {
            let Some(Extension(ConnectInfo(severer))) = severer else {
                return Err(ApiError::DropRequiresServe);
            };
            severer.sever();
            // Never reaches the caller: the connection fails on hyper's first write.
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        _ => {}
    }

    let mut response = Json(object).into_response();
    if replayed {
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
        Ok(key) if !key.is_empty() && key.len() <= MAX_KEY_LEN => Ok(Some(key.to_owned())),
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LookupQuery {
    idempotency_key: Option<String>,
    order_id: Option<String>,
    dedupe_ref: Option<String>,
}

async fn lookup(
    resource: Resource,
    State(sandbox): State<SharedSandbox>,
    query: Result<Query<LookupQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::InvalidQuery(e.body_text()))?;
    if query.dedupe_ref.is_some() && resource != Resource::Emails {
        return Err(ApiError::InvalidQuery(
            "dedupe_ref applies to emails only".to_owned(),
        ));
    }
    let lookup = Lookup {
        idempotency_key: query.idempotency_key.as_deref(),
        order_id: query.order_id.as_deref(),
        dedupe_ref: query.dedupe_ref.as_deref(),
    };
    if lookup.idempotency_key.is_none() && lookup.order_id.is_none() && lookup.dedupe_ref.is_none()
    {
        return Err(ApiError::MissingLookupParameter);
    }
    let found = sandbox.ledger().find(resource, &lookup).cloned();
    Ok(Json(match found {
        Some(object) => json!({ "found": true, resource.lookup_field(): object }),
        None => json!({ "found": false }),
    }))
}

async fn order(State(sandbox): State<SharedSandbox>, Path(order_id): Path<String>) -> Json<Value> {
    // The sandbox has no order catalogue: any order exists, with whatever was done to it.
    let ledger = sandbox.ledger();
    Json(json!({
        "order_id": order_id,
        "charges": ledger.for_order(Resource::Charges, &order_id),
        "refunds": ledger.for_order(Resource::Refunds, &order_id),
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EffectsQuery {
    kind: Option<String>,
    order_id: Option<String>,
    idempotency_key: Option<String>,
}

async fn effects(
    State(sandbox): State<SharedSandbox>,
    query: Result<Query<EffectsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    // Unknown parameters are refused: a misspelt filter would otherwise count everything.
    let Query(query) = query.map_err(|e| ApiError::InvalidQuery(e.body_text()))?;
    let resource = match query.kind.as_deref() {
        None => None,
        Some(kind) => Some(
            Resource::ALL
                .into_iter()
                .find(|r| r.effect_kind() == kind)
                .ok_or_else(|| {
                    ApiError::InvalidQuery(format!(
                        "kind {kind:?} is not one of charge, refund, email, ledger"
                    ))
                })?,
        ),
    };
    let filter = EffectFilter {
        resource,
        order_id: query.order_id.as_deref(),
        idempotency_key: query.idempotency_key.as_deref(),
    };
    let effects = sandbox.ledger().effects(&filter);
    Ok(Json(json!({ "effects": effects })))
}

async fn health() -> Json<Value> {
    Json(json!({ "status": "ok" }))
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
