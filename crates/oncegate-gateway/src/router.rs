//! The router: every route of the JSON API, `/mcp`, and the layers around them (body
//! limit, request timeout, framework rejections as JSON errors).

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post, put};
use oncegate_core::codes::Code;
use serde_json::json;

use crate::error::ApiError;
use crate::openapi::openapi_json;
use crate::routes::{admin, approvals, audit, calls, claims, findings, health, intents, tools};
use crate::state::{AppState, MAX_BODY_BYTES};

/// The router.
pub fn app(state: AppState) -> Router {
    routes(state, post(calls::post_call))
}

/// The null gateway's router (`oncegate bench` only, see [`crate::null`]): every route
/// and layer of [`app`], with `POST /v1/calls` forwarding without a decision.
pub fn null_app(state: AppState) -> Router {
    routes(state, post(crate::null::post_call))
}

fn routes(state: AppState, calls: MethodRouter<AppState>) -> Router {
    Router::new()
        .merge(crate::mcp::router(state.clone()))
        .merge(crate::console::router())
        .route("/v1/openapi.json", get(openapi_json))
        .route("/v1/calls", calls)
        .route("/v1/intents", get(intents::list_intents))
        .route("/v1/intents/claim", post(claims::post_claim))
        .route("/v1/intents/{key}", get(intents::get_intent))
        .route("/v1/intents/{key}/complete", post(claims::complete))
        .route("/v1/intents/{key}/heartbeat", post(claims::heartbeat))
        .route("/v1/approvals", get(approvals::list_approvals))
        .route("/v1/approvals/{id}", get(approvals::get_approval))
        .route("/v1/approvals/{id}/approve", post(approvals::approve))
        .route("/v1/approvals/{id}/deny", post(approvals::deny))
        .route("/v1/keys/derive", post(calls::derive_key))
        .route("/v1/audit/verify", get(audit::audit_verify))
        .route("/v1/audit", get(audit::audit_export))
        .route("/v1/admin/breakers/{key}/reset", post(admin::reset_breaker))
        .route("/v1/admin/kill-switches/{target}", put(admin::kill_switch))
        .route("/v1/admin/holds", get(findings::list_holds))
        .route("/v1/admin/holds/{id}/clear", post(findings::clear_hold))
        .route("/v1/admin/doubts", get(findings::list_doubts))
        .route(
            "/v1/admin/doubts/{capability}/{doubt}/clear",
            post(findings::clear_doubt),
        )
        .route("/v1/admin/tools", get(tools::list_tools))
        .route(
            "/v1/admin/tools/{server}/{tool}/accept",
            post(tools::accept_tool),
        )
        .route("/v1/findings", get(findings::list_findings))
        .route("/v1/limits", get(findings::list_limits))
        .route(
            "/v1/admin/limits/{scope}/reconcile",
            post(findings::reconcile_limit),
        )
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics_route))
        .route(
            "/.well-known/oauth-protected-resource",
            get(health::protected_resource),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*path}",
            get(health::protected_resource_at),
        )
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(120),
        ))
        .layer(axum::middleware::map_response(json_errors))
        .layer(axum::middleware::map_response_with_state(
            state.clone(),
            challenge,
        ))
        .layer(axum::middleware::from_fn(crate::console::outer))
        .layer(axum::middleware::from_fn(crate::throttle::with_peer))
        .with_state(state)
}

/// On every 401, names where the protected resource metadata is (RFC 9728 §5.1, as the
/// MCP authorization spec asks), so a client can find the authorization server.
async fn challenge(State(state): State<AppState>, mut response: Response) -> Response {
    if response.status() != StatusCode::UNAUTHORIZED {
        return response;
    }
    let Some(identity) = state.identity() else {
        return response;
    };
    let current = response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("Bearer realm=\"oncegate\"")
        .to_owned();
    let value = format!(
        "{current}, resource_metadata=\"{}\"",
        identity.settings().metadata_url()
    );
    if let Ok(v) = HeaderValue::from_str(&value) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    response
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
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
                // The console's own pages say what went wrong in HTML.
                || v.as_bytes().starts_with(b"text/html")
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
