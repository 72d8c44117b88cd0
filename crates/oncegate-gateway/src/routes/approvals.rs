//! `GET /v1/approvals` and `POST /v1/approvals/{id}/{approve,deny}`: held calls and
//! their human decision (approving executes the call once, through the front door; a
//! claim-only capability's call is left for its caller's next claim). `GET
//! /v1/approvals/{id}`, what an approver weighs, is [`detail`].

pub(crate) mod detail;

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use oncegate_core::config::{Capability, Role};
use oncegate_core::decide::Choice;
use oncegate_core::intent::{ApprovalState, Outcome};
use oncegate_store::{ApprovalFilter, IntentsRead};
use serde::Deserialize;
use serde_json::json;

use super::calls::envelope_response;
use super::{json_body, parse_state, require};
use crate::error::ApiError;
use crate::front::Door;
use crate::paging::{self, Listing};
use crate::state::{AppState, Principal};
use crate::trace::Parent;
use crate::wire::Envelope;

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
    Ok(Json(
        json!({"approvals": list.items, "unreadable": list.unreadable, "next_cursor": next_cursor}),
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

/// Decides approval `id` as `principal` (an approver or admin), through the front door:
/// the JSON API's routes and the console's buttons both end here.
pub(crate) async fn decide(
    state: &AppState,
    principal: &Principal,
    id: String,
    choice: Choice,
    note: Option<String>,
    parent: Parent,
) -> Result<(Arc<Capability>, Outcome), ApiError> {
    let approval = state
        .gate()
        .store()
        .approval(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no approval {id}")))?;
    // A fronted tool its server stopped listing can still be denied (nothing runs);
    // approving it waits until the server lists it again.
    let door = match (choice, state.gate().find_capability(&approval.capability)) {
        (Choice::Approve, None) | (_, Some(_)) => Door::open(state, &approval.capability)?,
        (Choice::Deny, None) => Door::settling(state, &approval.capability)?,
    };
    let door = door.traced(parent);
    let capability = Arc::clone(door.capability());
    // The held call's run and step, for the decision's span (the engine reads the record
    // again under its own rules).
    let held = state
        .gate()
        .store()
        .load_generation(&approval.key, approval.generation)
        .await?;
    let ids = held.as_ref().map_or((None, None), |r| {
        (r.run_id.as_deref(), r.step_id.as_deref())
    });
    let outcome = door.decide(principal, id, choice, note, ids).await?;
    Ok((capability, outcome))
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
