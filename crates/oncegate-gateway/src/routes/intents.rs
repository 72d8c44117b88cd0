//! `GET /v1/intents` and `GET /v1/intents/{key}`: the intent records (admins and
//! approvers).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use oncegate_core::config::Role;
use oncegate_core::intent::IntentState;
use oncegate_core::key::IntentKey;
use oncegate_store::{IntentFilter, StoreRead};
use serde::Deserialize;
use serde_json::json;

use super::{parse_state, require};
use crate::error::ApiError;
use crate::state::AppState;

#[utoipa::path(get, path = "/v1/intents/{key}", tag = "intents", params(("key" = String, Path, description = "intent key")), responses((status = 200, description = "the intent record (latest generation)"), (status = 404, description = "no such intent")), security(("bearer" = [])))]
pub(crate) async fn get_intent(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin, Role::Approver])?;
    match state
        .gate()
        .store()
        .load(&IntentKey::from_hex(key.clone()))
        .await?
    {
        Some(r) => Ok(Json(r).into_response()),
        None => Err(ApiError::NotFound(format!("no intent {key}"))),
    }
}

/// `GET /v1/intents` filters.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub(crate) struct IntentQuery {
    state: Option<String>,
    capability: Option<String>,
    limit: Option<u32>,
}

#[utoipa::path(get, path = "/v1/intents", tag = "intents", params(IntentQuery), responses((status = 200, description = "{\"intents\": [...]}, newest first")), security(("bearer" = [])))]
pub(crate) async fn list_intents(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<IntentQuery>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin, Role::Approver])?;
    let st = parse_state(q.state.as_deref(), IntentState::parse, "a state")?;
    let list = state
        .gate()
        .store()
        .list_intents(&IntentFilter {
            state: st,
            capability: q.capability,
            breaker_tripped: false,
            limit: q.limit.unwrap_or(100),
            oldest_first: false,
            updated_since: None,
            ..IntentFilter::default()
        })
        .await?;
    // An unreadable row is reported by key; it never fails the whole listing.
    Ok(Json(json!({"intents": list.items, "unreadable": list.unreadable})).into_response())
}
