//! `GET /v1/intents` and `GET /v1/intents/{key}`: the intent records (admins and
//! approvers).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use oncegate_core::config::Role;
use oncegate_core::intent::IntentState;
use oncegate_core::key::IntentKey;
use oncegate_store::{IntentFilter, IntentsRead, PageAfter};
use serde::Deserialize;

use super::{parse_state, require};
use crate::error::ApiError;
use crate::paging::{self, Listing, Page};
use crate::state::AppState;
use crate::wire::WireIntent;

#[utoipa::path(get, path = "/v1/intents/{key}", tag = "intents", params(("key" = String, Path, description = "intent key")), responses((status = 200, description = "the intent record (latest generation)", body = Object), (status = 404, description = "no such intent")), security(("bearer" = [])))]
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
        Some(r) => Ok(Json(WireIntent::from(&r)).into_response()),
        None => Err(ApiError::NotFound(format!("no intent {key}"))),
    }
}

/// `GET /v1/intents` filters and page.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct IntentQuery {
    state: Option<String>,
    capability: Option<String>,
    /// At most this many, newest first (default 100, at most 500; a page also ends
    /// early once it holds about 2 MiB of JSON).
    limit: Option<u32>,
    /// The `next_cursor` of the page before (absent: the first page).
    cursor: Option<String>,
}

#[utoipa::path(get, path = "/v1/intents", tag = "intents", params(IntentQuery), responses((status = 200, description = "newest first; next_cursor is null on the last page", body = super::answers::IntentsPage), (status = 422, description = "malformed cursor")), security(("bearer" = [])))]
pub(crate) async fn list_intents(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<IntentQuery>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin, Role::Approver])?;
    let st = parse_state(q.state.as_deref(), IntentState::parse, "a state")?;
    let mut filter = IntentFilter {
        state: st,
        capability: q.capability,
        after: paging::decode(Listing::Intents, q.cursor.as_deref())?,
        ..IntentFilter::default()
    };
    // Read in chunks, so one listing holds a chunk and a page, never `limit` records of
    // the largest arguments at once.
    let mut page = Page::new(paging::limit(q.limit));
    let mut unreadable = Vec::new();
    let more = loop {
        filter.limit = page.room().min(paging::CHUNK);
        let chunk = state.gate().store().list_intents(&filter).await?;
        // An unreadable row is reported by key; it never fails the whole listing.
        unreadable.extend(chunk.unreadable);
        let mut stopped = false;
        for record in &chunk.items {
            if page.is_full() {
                stopped = true;
                break;
            }
            page.push(&WireIntent::from(record), PageAfter::of_intent(record))?;
        }
        // Rows left in the chunk, or beyond it in the store, make a next page.
        match chunk.next {
            _ if stopped => break true,
            None => break false,
            Some(_) if page.is_full() => break true,
            Some(next) => filter.after = Some(next),
        }
    };
    let next_cursor = page
        .next(more)
        .map(|n| paging::encode(Listing::Intents, &n));
    page.respond("intents", &unreadable, next_cursor)
}
