//! `GET /v1/approvals` and `POST /v1/approvals/{id}/{approve,deny}`: held calls and
//! their human decision (approving executes the call once, through the front door; a
//! claim-only capability's call is left for its caller's next claim). `GET
//! /v1/approvals/{id}` is what an approver weighs ([`crate::ops::approvals::detail`]).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use oncegate_core::config::Role;
use oncegate_core::decide::Choice;
use oncegate_core::intent::ApprovalState;
use oncegate_store::{ApprovalFilter, IntentsRead};
use serde::Deserialize;
use serde_json::json;

use super::calls::envelope_response;
use super::{json_body, parse_state, require};
use crate::error::ApiError;
use crate::ops::approvals::{decide, detail, load};
use crate::paging::{self, Listing};
use crate::state::AppState;
use crate::trace::Parent;
use crate::wire::{ApprovalDetail, Envelope, WireApproval};

/// `GET /v1/approvals` filter and page.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ApprovalQuery {
    state: Option<String>,
    /// At most this many, oldest first (default 100, at most 500).
    limit: Option<u32>,
    /// The `next_cursor` of the page before (absent: the first page).
    cursor: Option<String>,
}

#[utoipa::path(get, path = "/v1/approvals", tag = "approvals", params(ApprovalQuery), responses((status = 200, description = "oldest first; next_cursor is null on the last page", body = super::answers::ApprovalsPage), (status = 422, description = "malformed cursor")), security(("bearer" = [])))]
pub(crate) async fn list_approvals(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<ApprovalQuery>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin, Role::Approver])?;
    let st = parse_state(
        q.state.as_deref(),
        ApprovalState::parse,
        "an approval state",
    )?;
    let after = paging::decode(Listing::Approvals, q.cursor.as_deref())?;
    let list = state
        .gate()
        .store()
        .list_approvals(&ApprovalFilter {
            state: st,
            limit: paging::limit(q.limit),
            after,
            ..ApprovalFilter::default()
        })
        .await?;
    let next_cursor = list.next.map(|n| paging::encode(Listing::Approvals, &n));
    let approvals: Vec<WireApproval> = list.items.iter().map(WireApproval::from).collect();
    Ok(Json(
        json!({"approvals": approvals, "unreadable": list.unreadable, "next_cursor": next_cursor}),
    )
    .into_response())
}

/// `POST /v1/approvals/{id}/{approve,deny}` body (optional: an empty body is none).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    /// Why, kept in the audit record; a deny's reason is what the agent's next call is
    /// told. At most 500 characters are kept.
    reason: Option<String>,
}

/// Approves or denies through the front door: the decision runs in its own task.
async fn decide_approval(
    state: AppState,
    headers: HeaderMap,
    id: String,
    choice: Choice,
    body: &[u8],
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin, Role::Approver])?;
    let body: DecisionBody = if body.iter().all(u8::is_ascii_whitespace) {
        DecisionBody::default()
    } else {
        json_body(body)?
    };
    let parent = Parent::from_headers(&headers);
    let (capability, outcome) = decide(&state, &p, id, choice, body.reason, parent).await?;
    Ok(envelope_response(&outcome, &capability))
}

#[utoipa::path(post, path = "/v1/approvals/{id}/approve", tag = "approvals", params(("id" = String, Path)), request_body(content = Option<DecisionBody>, description = "optional: why"), responses((status = 200, description = "executed once; a repeat returns the first result. For a claim-only capability: `approved`, executed by the caller's next claim of the intent", body = Envelope), (status = 403, description = "not an approver, or own call")), security(("bearer" = [])))]
pub(crate) async fn approve(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    decide_approval(state, headers, id, Choice::Approve, &body).await
}

#[utoipa::path(post, path = "/v1/approvals/{id}/deny", tag = "approvals", params(("id" = String, Path)), request_body(content = Option<DecisionBody>, description = "optional: why (the agent is told)"), responses((status = 403, description = "denied (final for this generation)", body = Envelope)), security(("bearer" = [])))]
pub(crate) async fn deny(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    decide_approval(state, headers, id, Choice::Deny, &body).await
}

#[utoipa::path(get, path = "/v1/approvals/{id}", tag = "approvals", params(("id" = String, Path)),
    responses((status = 200, description = "everything the approver weighs: every sent argument, the digest the approval is bound to, the rendered request (secrets masked), money in its currency, why it is held, the unknown-first-attempt warning", body = ApprovalDetail),
        (status = 403, description = "not an approver or admin"), (status = 404, description = "no such approval")),
    security(("bearer" = [])))]
pub(crate) async fn get_approval(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin, Role::Approver])?;
    let (approval, record) = load(&state, &id).await?;
    let record =
        record.ok_or_else(|| ApiError::NotFound(format!("the intent approval {id} holds")))?;
    Ok(Json(detail(&state, approval, &record)).into_response())
}
