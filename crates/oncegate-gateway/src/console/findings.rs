//! Detection's pages: the findings the duplicate rules raised (approvers and admins), and
//! the holds they placed, which an admin clears here with a reason. Both read and write
//! through the engine's own functions, as `GET /v1/findings` and
//! `POST /v1/admin/holds/{id}/clear` do.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum_extra::extract::CookieJar;
use maud::html;
use oncegate_core::config::Role;
use serde_json::Value;

use super::access::{csrf_field, failure, html_page, posted, tz, viewer};
use super::page::{Section, json, notice, page, when};
use crate::error::ApiError;
use crate::state::AppState;

/// `GET /console/findings`.
pub(super) async fn findings(State(state): State<AppState>, jar: CookieJar) -> Response {
    let session = match viewer(&state, &jar, Section::Findings) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let findings = match state.gate().findings(100).await {
        Ok(f) => f,
        Err(e) => return failure(&session, &ApiError::from(e)),
    };
    let tz = tz(&state);
    let text = |f: &Value, name: &str| {
        f.get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let body = html! {
        p.muted { "What the duplicate rules found in the upstreams' own records, newest first." }
        @if findings.is_empty() { p.muted { "No findings." } }
        @for f in &findings {
            section.card {
                h2 { (text(f, "rule")) " " span.muted { (text(f, "capability")) } }
                dl.facts {
                    dt { "Finding" } dd { code { (text(f, "id")) } }
                    dt { "Raised" } dd {
                        @match text(f, "raised_at").parse::<jiff::Timestamp>() {
                            Ok(at) => { (when(at, tz)) }
                            Err(_) => { (text(f, "raised_at")) }
                        }
                    }
                    @if let Some(s) = f.get("summary").and_then(Value::as_str) { dt { "What" } dd { (s) } }
                }
                details { summary { "The whole finding" } (json(f)) }
            }
        }
    };
    html_page(
        StatusCode::OK,
        page("Findings", Some(&session), Some(Section::Findings), body),
    )
}

/// `GET /console/holds` (admins).
pub(super) async fn holds(State(state): State<AppState>, jar: CookieJar) -> Response {
    let session = match viewer(&state, &jar, Section::Holds) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    holds_page(&state, &session, None).await
}

async fn holds_page(
    state: &AppState,
    session: &crate::state::Session,
    said: Option<maud::Markup>,
) -> Response {
    let holds = match state.gate().holds().await {
        Ok(h) => h,
        Err(e) => return failure(session, &ApiError::from(e)),
    };
    let tz = tz(state);
    let body = html! {
        @if let Some(said) = said { (said) }
        p.muted { "A hold stops new calls of a capability that match it, until an admin clears it." }
        @if holds.is_empty() { p.muted { "No holds are on." } }
        @for h in &holds {
            section.card {
                h2 { (h.capability) " " span.muted { "where " (h.on) @if !h.value.is_empty() { " = " (h.value) } } }
                dl.facts {
                    dt { "Hold" } dd { code { (h.id) } }
                    dt { "Why" } dd { (h.reason) }
                    dt { "Placed by" } dd { (h.set_by) }
                    dt { "When" } dd { (when(h.set_at, tz)) }
                }
                form method="post" action={ "/console/holds/" (h.id) "/clear" } data-once {
                    (csrf_field(session))
                    label for={ "why-" (h.id) } { "Reason" }
                    input type="text" id={ "why-" (h.id) } name="reason" required;
                    div.actions { button type="submit" { "Clear the hold" } }
                }
            }
        }
    };
    html_page(
        StatusCode::OK,
        page("Holds", Some(session), Some(Section::Holds), body),
    )
}

/// `POST /console/holds/{id}/clear` (admins; `reason`).
pub(super) async fn clear_hold(
    State(state): State<AppState>,
    jar: CookieJar,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let (session, form) = match posted(&state, &jar, &headers, &body, &[Role::Admin]) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let reason = form
        .text("reason")
        .unwrap_or_else(|| format!("cleared by {}", session.principal.name));
    let said = match state
        .gate()
        .clear_hold(&session.principal.name, &id, &reason)
        .await
    {
        Ok(Some(_)) => {
            tracing::warn!(hold = %id, by = %session.principal.name, "hold cleared");
            notice(true, &format!("Hold {id} is cleared."))
        }
        Ok(None) => notice(false, &format!("No hold {id} is on (already cleared?).")),
        Err(e) => return failure(&session, &ApiError::from(e)),
    };
    holds_page(&state, &session, Some(said)).await
}
