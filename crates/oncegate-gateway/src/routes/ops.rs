//! Operations: `/healthz` (the process is up), `/readyz` (the store can take a write)
//! and `/metrics` (Prometheus).

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use oncegate_core::intent::IntentState;
use oncegate_store::{IntentFilter, StoreRead};

use crate::state::AppState;

#[utoipa::path(get, path = "/healthz", tag = "ops", responses((status = 200, description = "the process is up")))]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

#[utoipa::path(get, path = "/readyz", tag = "ops", responses((status = 200, description = "the store answers and can take a write now"), (status = 503, description = "the store is unreachable, or cannot be written (e.g. another process holds its write lock)")))]
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    match state.gate().store().ping().await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}")).into_response(),
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
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics().render(),
    )
        .into_response()
}
