//! `GET /v1/audit/verify` (the hash chain checked end to end) and `GET /v1/audit` (the
//! records as JSON lines): admins only.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use oncegate_core::config::Role;
use oncegate_store::AuditRead;
use serde::Deserialize;
use serde_json::json;

use super::require;
use crate::error::ApiError;
use crate::ops::audit::verify_whole;
use crate::state::AppState;

#[utoipa::path(get, path = "/v1/audit/verify", tag = "audit", responses((status = 200, description = "every shard verified", body = super::answers::Verified), (status = 409, description = "the first broken link")), security(("bearer" = [])))]
pub(crate) async fn audit_verify(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin])?;
    let report = verify_whole(&state).await?;
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

/// `GET /v1/audit` page.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct AuditQuery {
    after: Option<i64>,
    limit: Option<u32>,
}

#[utoipa::path(get, path = "/v1/audit", tag = "audit", params(AuditQuery), responses((status = 200, description = "JSON lines: {position, record}", content_type = "application/x-ndjson")), security(("bearer" = [])))]
pub(crate) async fn audit_export(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<AuditQuery>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin])?;
    let page = state
        .gate()
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
