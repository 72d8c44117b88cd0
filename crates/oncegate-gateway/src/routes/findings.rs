//! Detection and limits for admins: findings, holds and doubts about providers (listed
//! and cleared), and what is left of every limit's budget.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use oncegate_core::config::Role;
use oncegate_engine::Doubt;
use serde::Deserialize;
use serde_json::json;

use super::{optional_json_body, require};
use crate::error::ApiError;
use crate::paging::{self, Listing};
use crate::state::AppState;
use crate::wire::{
    WireDoubt, WireDoubts, WireFindingsPage, WireHold, WireHolds, WireLimit, WireLimits,
};

/// `GET /v1/findings` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FindingsQuery {
    /// At most this many, newest first (default 100, at most 500).
    limit: Option<u32>,
    /// The `next_cursor` of the page before (absent: the first page).
    cursor: Option<String>,
}

#[utoipa::path(get, path = "/v1/findings", tag = "detection", params(FindingsQuery), responses((status = 200, description = "newest first; next_cursor is null on the last page", body = super::answers::FindingsPage), (status = 422, description = "malformed cursor")), security(("bearer" = [])))]
pub(crate) async fn list_findings(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<FindingsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin, Role::Approver])?;
    let Query(query) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let after = paging::decode(Listing::Findings, query.cursor.as_deref())?;
    let (findings, next) = state
        .gate()
        .findings_page(paging::limit(query.limit), after.as_ref())
        .await?;
    let next_cursor = next.map(|n| paging::encode(Listing::Findings, &n));
    Ok(Json(WireFindingsPage {
        findings,
        next_cursor,
    })
    .into_response())
}

#[utoipa::path(get, path = "/v1/admin/holds", tag = "detection", responses((status = 200, description = "the holds that are on", body = super::answers::Holds)), security(("bearer" = [])))]
pub(crate) async fn list_holds(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin])?;
    let holds = state.gate().holds().await?;
    let holds = holds.iter().map(WireHold::from).collect();
    Ok(Json(WireHolds { holds }).into_response())
}

/// `POST /v1/admin/holds/{id}/clear` body (optional).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClearBody {
    /// Why it is cleared (kept in the audit chain).
    reason: Option<String>,
}

#[utoipa::path(post, path = "/v1/admin/holds/{id}/clear", tag = "detection", params(("id" = String, Path)), request_body = ClearBody, responses((status = 200, description = "the hold cleared", body = super::answers::Cleared), (status = 404, description = "no such hold is on")), security(("bearer" = [])))]
pub(crate) async fn clear_hold(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin])?;
    let body: ClearBody = optional_json_body(&body)?;
    let reason = body
        .reason
        .unwrap_or_else(|| format!("cleared by {}", p.name));
    match state.gate().clear_hold(&p.name, &id, &reason).await? {
        Some(hold) => {
            tracing::warn!(hold = %id, by = %p.name, "hold cleared");
            let cleared = WireHold::from(&hold);
            Ok(Json(json!({"cleared": cleared, "reason": reason})).into_response())
        }
        None => Err(ApiError::NotFound(format!("no hold `{id}` is on"))),
    }
}

#[utoipa::path(get, path = "/v1/admin/doubts", tag = "detection", responses((status = 200, description = "the doubts about providers that are on: a reconciliation read that could not find an applied effect, idempotency keys not honoured", body = super::answers::Doubts)), security(("bearer" = [])))]
pub(crate) async fn list_doubts(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin])?;
    let doubts = state.gate().doubts().await?;
    let doubts = doubts.iter().map(WireDoubt::from).collect();
    Ok(Json(WireDoubts { doubts }).into_response())
}

#[utoipa::path(post, path = "/v1/admin/doubts/{capability}/{doubt}/clear", tag = "detection", params(("capability" = String, Path), ("doubt" = String, Path, description = "`reconciliation_unproven` or `keys_ignored`")), request_body = ClearBody, responses((status = 200, description = "the doubt cleared: the capability's reads (or keys) are trusted again", body = super::answers::Cleared), (status = 404, description = "no such doubt is on")), security(("bearer" = [])))]
pub(crate) async fn clear_doubt(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((capability, doubt)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin])?;
    let Some(kind) = Doubt::parse(&doubt) else {
        return Err(ApiError::NotFound(format!(
            "`{doubt}` is not a doubt: `reconciliation_unproven` or `keys_ignored`"
        )));
    };
    let body: ClearBody = optional_json_body(&body)?;
    let reason = body
        .reason
        .unwrap_or_else(|| format!("cleared by {}", p.name));
    match state
        .gate()
        .clear_doubt(p.who(), &capability, kind, &reason)
        .await
        .map_err(ApiError::Gate)?
    {
        Some(cleared) => {
            let cleared = WireDoubt::from(&cleared);
            Ok(Json(json!({"cleared": cleared, "reason": reason})).into_response())
        }
        None => Err(ApiError::NotFound(format!(
            "no `{doubt}` doubt is on for `{capability}`"
        ))),
    }
}

/// `POST /v1/admin/limits/{scope}/reconcile` body (optional).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReconcileBody {
    /// When the budget's ledger itself does not hold: accept its reservations as found
    /// (the ledger is written again from them). Without it such a budget stays refused.
    #[serde(default)]
    accept_table: bool,
    /// Why (kept in the audit chain).
    reason: Option<String>,
}

#[utoipa::path(post, path = "/v1/admin/limits/{scope}/reconcile", tag = "detection", params(("scope" = String, Path, description = "the budget: a limit's name, or name@principal")), request_body = ReconcileBody, responses((status = 200, description = "the budget reconciled (its audit record says how)", body = super::answers::Reconciled), (status = 503, description = "OG-0030: the budget's ledger does not hold and accept_table was not given")), security(("bearer" = [])))]
pub(crate) async fn reconcile_limit(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(scope): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin])?;
    let body: ReconcileBody = optional_json_body(&body)?;
    let reason = body
        .reason
        .unwrap_or_else(|| format!("reconciled by {}", p.name));
    state
        .gate()
        .reconcile_limit(&p.name, &scope, body.accept_table, &reason)
        .await?;
    tracing::warn!(limit = %scope, by = %p.name, accept_table = body.accept_table, "limit reconciled");
    Ok(
        Json(json!({"reconciled": scope, "accept_table": body.accept_table, "reason": reason}))
            .into_response(),
    )
}

#[utoipa::path(get, path = "/v1/limits", tag = "detection", responses((status = 200, description = "every limit's budget: max, used and remaining in its window", body = super::answers::Limits)), security(("bearer" = [])))]
pub(crate) async fn list_limits(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin])?;
    let limits = state.gate().limits_status().await?;
    crate::detection_scheduler::gauge_limits(&limits);
    let limits = limits.iter().map(WireLimit::from).collect();
    Ok(Json(WireLimits { limits }).into_response())
}
