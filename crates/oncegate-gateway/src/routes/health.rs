//! Operations: `/healthz` (the process is up), `/readyz` (the store can take a write)
//! and `/metrics` (Prometheus), and the RFC 9728 metadata of `[identity]`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use oncegate_core::intent::IntentState;
use oncegate_store::{Backend, IntentFilter, IntentsRead};

use serde_json::json;

use crate::error::ApiError;
use crate::state::AppState;

#[utoipa::path(get, path = "/healthz", tag = "ops", responses((status = 200, description = "the process is up")))]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

#[utoipa::path(get, path = "/readyz", tag = "ops", responses((status = 200, description = "the store answers and can take a write now; a second line says which clock decides and how far this host's clock is from it"), (status = 503, description = "the store is unreachable, or cannot be written (e.g. another process holds its write lock)")))]
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let clock = format!(
        "clock: {}; skew {}",
        state.gate().store().clock_authority(),
        crate::clock::describe(crate::clock::skew(state.gate()))
    );
    match state.gate().store().ping().await {
        Ok(()) => (StatusCode::OK, format!("ready\n{clock}\n")).into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {e}\n{clock}\n"),
        )
            .into_response(),
    }
}

#[utoipa::path(get, path = "/metrics", tag = "ops", responses((status = 200, description = "Prometheus text format")))]
pub(crate) async fn metrics_route(State(state): State<AppState>) -> Response {
    if let Ok(open) = state
        .gate()
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
    crate::clock::skew(state.gate());
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics().render(),
    )
        .into_response()
}

/// The RFC 9728 protected resource metadata: this resource and the authorization
/// servers whose tokens it accepts (404 without `[identity]`).
#[utoipa::path(get, path = "/.well-known/oauth-protected-resource", tag = "ops", responses((status = 200, description = "RFC 9728 protected resource metadata"), (status = 404, description = "no [identity] is configured: static tokens only")))]
pub(crate) async fn protected_resource(
    State(state): State<AppState>,
) -> Result<Response, ApiError> {
    metadata(&state, "")
}

/// The same document at its path-inserted URL (`/.well-known/oauth-protected-resource/mcp`
/// for the resource `https://host/mcp`), the form clients try first.
pub(crate) async fn protected_resource_at(
    State(state): State<AppState>,
    Path(path): Path<String>,
) -> Result<Response, ApiError> {
    metadata(&state, &format!("/{}", path.trim_end_matches('/')))
}

fn metadata(state: &AppState, path: &str) -> Result<Response, ApiError> {
    let Some(identity) = state.identity() else {
        return Err(ApiError::NotFound(
            "no [identity] is configured: this gateway accepts static bearer tokens only".into(),
        ));
    };
    let s = identity.settings();
    if !path.is_empty() && path != s.resource_path() {
        return Err(ApiError::NotFound(format!(
            "no protected resource at `{path}` (this gateway's is `{}`)",
            s.resource
        )));
    }
    let mut doc = json!({
        "resource": s.resource,
        "authorization_servers": s.authorization_servers,
        "bearer_methods_supported": ["header"],
        "resource_name": s.resource_name,
    });
    if !s.scopes_supported.is_empty() {
        doc["scopes_supported"] = json!(s.scopes_supported);
    }
    Ok(([(header::CACHE_CONTROL, "max-age=300")], Json(doc)).into_response())
}
