//! Admin controls: resetting an intent's tripped breaker and switching capabilities or
//! agents off.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use oncegate_core::config::Role;
use oncegate_core::key::IntentKey;
use serde::Deserialize;

use super::{json_body, require};
use crate::error::ApiError;
use crate::ops::switches::set_kill_switch;
use crate::state::AppState;
use crate::wire::{Envelope, WireKillSwitches};

#[utoipa::path(post, path = "/v1/admin/breakers/{key}/reset", tag = "admin", params(("key" = String, Path)), responses((status = 200, body = Envelope)), security(("bearer" = [])))]
pub(crate) async fn reset_breaker(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin])?;
    let outcome = state
        .gate()
        .reset_breaker(p.who(), &IntentKey::from_hex(key))
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
    /// Why (default: who switched it); when switching on again, why it is cleared (kept
    /// in the audit record).
    reason: Option<String>,
}

#[utoipa::path(put, path = "/v1/admin/kill-switches/{target}", tag = "admin", params(("target" = String, Path, description = "a capability name, or capability:NAME / agent:NAME")), request_body = KillBody, responses((status = 200, description = "the kill switches now on", body = super::answers::KillSwitches)), security(("bearer" = [])))]
pub(crate) async fn kill_switch(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(target): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin])?;
    let body: KillBody = json_body(&body)?;
    set_kill_switch(&state, &p, target, body.killed, body.reason).await?;
    // The switches every replica on the store now honours (read back from the store).
    let switches = state.gate().kill_switches().await?;
    Ok(Json(WireKillSwitches {
        kill_switches: switches,
    })
    .into_response())
}
