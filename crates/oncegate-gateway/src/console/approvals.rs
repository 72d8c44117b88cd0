//! The approvals pages: the pending queue first (what is held, for whom, why, until
//! when), Approve and Deny with an optional reason, and each approval's outcome.
//!
//! A decision goes through [`crate::ops::approvals::decide`], the JSON API's own
//! path: the engine decides once, so a double click, a second tab or a second approver
//! is answered with the first decision's outcome and nothing executes twice. The page a
//! decision returns shows that outcome (the effect reference, or the provider's error).

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum_extra::extract::CookieJar;
use maud::{Markup, html};
use oncegate_core::config::Role;
use oncegate_core::decide::{Choice, MAX_NOTE_CHARS};
use oncegate_core::intent::{Approval, ApprovalState, IntentRecord, Outcome, Status};
use oncegate_store::{ApprovalFilter, IntentsRead};

use super::access::{csrf_field, failure, html_page, posted, refusal, tz, viewer};
use super::page::{Section, json, key_link, notice, or_dash, page, when};
use crate::error::ApiError;
use crate::paging::{self, Listing};
use crate::state::AppState;
use crate::state::Session;
use crate::upstream::preview::RequestPreview;
use crate::wire::ApprovalDetail;

/// How many decided approvals the queue page lists under the pending ones.
const RECENT: usize = 20;

/// Pending approvals per page of the queue.
pub(super) const QUEUE_PAGE: u32 = 50;

/// How many of the newest approvals the "recently decided" list is drawn from.
const RECENT_FROM: u32 = 200;

/// `GET /console/approvals?cursor=`: a page of the queue.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct QueueQuery {
    cursor: Option<String>,
}

/// `GET /console/approvals`: the pending queue, [`QUEUE_PAGE`] at a time, oldest first.
pub(super) async fn queue(
    State(state): State<AppState>,
    jar: CookieJar,
    query: Result<Query<QueueQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let session = match viewer(&state, &jar, Section::Approvals) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let q = query.map(|Query(q)| q).unwrap_or_default();
    let after = match paging::decode(Listing::Approvals, q.cursor.as_deref()) {
        Ok(after) => after,
        Err(e) => return failure(&session, &e),
    };
    let first_page = after.is_none();
    let store = state.gate().store();
    let pending = ApprovalFilter {
        state: Some(ApprovalState::Pending),
        limit: QUEUE_PAGE,
        after,
        ..ApprovalFilter::default()
    };
    let pending = match store.list_approvals(&pending).await {
        Ok(l) => l,
        Err(e) => return failure(&session, &ApiError::from(e)),
    };
    let newest = ApprovalFilter {
        limit: RECENT_FROM,
        newest_first: true,
        ..ApprovalFilter::default()
    };
    let all = match store.list_approvals(&newest).await {
        Ok(l) => l,
        Err(e) => return failure(&session, &ApiError::from(e)),
    };
    let next_page = pending.next.as_ref().map(|n| {
        format!(
            "/console/approvals?cursor={}",
            paging::encode(Listing::Approvals, n)
        )
    });
    let mut cards = Vec::new();
    for approval in &pending.items {
        let record = store
            .load_generation(&approval.key, approval.generation)
            .await
            .ok()
            .flatten();
        let detail = record
            .as_ref()
            .map(|r| crate::ops::approvals::detail(&state, approval.clone(), r));
        cards.push(held_card(
            &state,
            &session,
            approval,
            record.as_ref(),
            detail.as_ref(),
        ));
    }
    let mut decided: Vec<&Approval> = all
        .items
        .iter()
        .filter(|a| a.state != ApprovalState::Pending)
        .collect();
    decided.sort_by_key(|a| std::cmp::Reverse(a.decided_at.unwrap_or(a.created_at)));
    let tz = tz(&state);
    let body = html! {
        h2 {
            "Pending (" (pending.items.len())
            @if next_page.is_some() { " on this page, oldest first" }
            ")"
        }
        @if pending.items.is_empty() {
            p.muted { "Nothing is waiting for a decision." }
        }
        @for card in cards { (card) }
        nav.pager aria-label="Pending approvals pages" {
            @if !first_page { a href="/console/approvals" { "First page" } " " }
            @if let Some(next) = &next_page { a rel="next" href=(next) { "Next page" } }
        }
        @if !pending.unreadable.is_empty() {
            (notice(false, &format!("{} approval rows could not be read (see the audit chain's Verify).", pending.unreadable.len())))
        }
        h2 { "Recently decided" }
        @if decided.is_empty() {
            p.muted { "No decisions yet." }
        } @else {
            div.table-wrap { table {
                thead { tr { th { "Approval" } th { "Capability" } th { "Agent" } th { "State" } th { "Decided by" } th { "When" } } }
                tbody {
                    @for a in decided.iter().take(RECENT) {
                        tr {
                            td { a href={ "/console/approvals/" (a.id) } { code { (a.id) } } }
                            td { (a.capability) }
                            td { (a.principal) }
                            td { (state_badge(a.state.as_str())) }
                            td { (or_dash(a.decided_by.as_deref())) }
                            td { (when(a.decided_at.unwrap_or(a.created_at), tz)) }
                        }
                    }
                }
            } }
        }
    };
    html_page(
        StatusCode::OK,
        page("Approvals", Some(&session), Some(Section::Approvals), body),
    )
}

/// A state, styled by its name.
pub(super) fn state_badge(state: &str) -> Markup {
    html! { span class={ "state state-" (state) } { (state.replace('_', " ")) } }
}

/// One held call: everything an approver weighs (the JSON API's
/// [`ApprovalDetail`]: every argument it sends, the request rendered, money in its
/// currency, why it is held, the unknown-attempt warning), and the decision form. Every
/// value is agent-written or provider-written text: maud escapes each one.
fn held_card(
    state: &AppState,
    session: &Session,
    a: &Approval,
    record: Option<&IntentRecord>,
    detail: Option<&ApprovalDetail>,
) -> Markup {
    let tz = tz(state);
    let note_id = format!("note-{}", a.id);
    html! {
        section.card.held aria-labelledby={ "h-" (a.id) } data-approval=(a.id) {
            h3 id={ "h-" (a.id) } { (a.capability) " " span.muted { "for " (a.principal) } }
            @if let Some(warning) = detail.and_then(|d| d.warning.as_deref()) {
                p.notice.bad.warning role="alert" { (warning) }
            }
            dl.facts {
                dt { "Why it is held" } dd.why { (a.reason.explain()) }
                @if !a.detail.is_empty() { dt { "Detail" } dd { (a.detail) } }
                dt { "Agent" } dd { (a.principal) }
                dt { "Run" } dd { (or_dash(record.and_then(|r| r.run_id.as_deref()))) }
                dt { "Step" } dd { (or_dash(record.and_then(|r| r.step_id.as_deref()))) }
                dt { "Business reference" } dd { (or_dash(record.and_then(|r| r.business_ref.as_deref()))) }
                @if let Some(d) = detail {
                    @for m in &d.money {
                        dt { "Amount (" (m.argument) ")" } dd.money { strong { (m.amount) } }
                    }
                    dt { "Arguments sent (every one, not only the key's)" } dd.sent-arguments { (json(&d.arguments)) }
                    dt { "The request it sends" } dd.request { (request(&d.request)) }
                    dt { "Bound to" } dd {
                        code title=(d.arguments_digest) { "sha256:" (d.arguments_digest.chars().take(16).collect::<String>()) "…" }
                        @if !d.arguments_bound { " " span.state.state-void { "the held arguments changed: approving voids it" } }
                    }
                } @else {
                    dt { "Arguments" } dd { span.muted { "the intent could not be read" } }
                }
                dt { "Asked" } dd { (when(a.created_at, tz)) }
                dt { "Expires" } dd { (when(a.expires_at, tz)) }
                dt { "Intent" } dd { (key_link(a.key.as_str())) " generation " (a.generation) }
                dt { "Approval" } dd { a href={ "/console/approvals/" (a.id) } { code { (a.id) } } }
            }
            form method="post" action={ "/console/approvals/" (a.id) "/decide" } data-once {
                (csrf_field(session))
                label for=(note_id) { "Reason (optional; a deny's reason is what the agent is told)" }
                textarea id=(note_id) name="reason" maxlength=(MAX_NOTE_CHARS) {}
                div.actions {
                    button.approve type="submit" name="choice" value="approve" { "Approve" }
                    button.deny type="submit" name="choice" value="deny" { "Deny" }
                }
            }
        }
    }
}

/// The rendered request, as the upstream would receive it (secrets masked).
fn request(r: &RequestPreview) -> Markup {
    html! {
        @match r.kind {
            "http" => {
                p.request-line { code { (r.method.as_deref().unwrap_or_default()) " " (r.url.as_deref().unwrap_or_default()) } }
            }
            "mcp" => {
                p.request-line { "MCP " code { "tools/call " (r.tool.as_deref().unwrap_or_default()) } " on " code { (r.url.as_deref().unwrap_or_default()) } }
            }
            _ => {
                p.muted { (r.note.as_deref().unwrap_or("nothing is sent from this gateway")) }
            }
        }
        @if !r.headers.is_empty() {
            ul.headers {
                @for h in &r.headers { li { code { (h.name) ": " (h.value) } } }
            }
        }
        @if let Some(body) = &r.body { (json(body)) }
        @if let Some(meta) = r.meta.as_ref().filter(|m| m.as_object().is_some_and(|o| !o.is_empty())) {
            p.muted { "_meta" } (json(meta))
        }
    }
}

/// `GET /console/approvals/{id}`: where an approval stands, and its intent's outcome.
pub(super) async fn detail(
    State(state): State<AppState>,
    jar: CookieJar,
    Path(id): Path<String>,
) -> Response {
    let session = match viewer(&state, &jar, Section::Approvals) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match approval_view(&state, &session, &id, None).await {
        Ok(body) => html_page(
            StatusCode::OK,
            page("Approval", Some(&session), Some(Section::Approvals), body),
        ),
        Err(e) => failure(&session, &e),
    }
}

/// `POST /console/approvals/{id}/decide` (`choice` = approve | deny, `reason`).
pub(super) async fn decide(
    State(state): State<AppState>,
    jar: CookieJar,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let (session, form) = match posted(
        &state,
        &jar,
        &headers,
        &body,
        &[Role::Admin, Role::Approver],
    ) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let choice = match form.get("choice") {
        Some("approve") => Choice::Approve,
        Some("deny") => Choice::Deny,
        _ => {
            return refusal(
                StatusCode::BAD_REQUEST,
                Some(&session),
                "choose Approve or Deny",
            );
        }
    };
    let decided = crate::ops::approvals::decide(
        &state,
        &session.principal,
        id.clone(),
        choice,
        form.text("reason"),
        crate::trace::Parent::from_headers(&headers),
    )
    .await;
    let outcome = match decided {
        Ok((_, outcome)) => outcome,
        Err(e) => return failure(&session, &e),
    };
    match approval_view(&state, &session, &id, Some(&outcome)).await {
        Ok(body) => html_page(
            StatusCode::OK,
            page("Approval", Some(&session), Some(Section::Approvals), body),
        ),
        Err(e) => failure(&session, &e),
    }
}

/// What a decision's answer says, in a sentence.
fn outcome_line(o: &Outcome) -> (bool, String) {
    let reason = o
        .reason
        .as_ref()
        .map(|r| format!("{} [{}]", r.message, r.code.as_str()));
    match o.status {
        Status::Applied | Status::Replayed => (
            true,
            format!(
                "Executed once: effect {}.",
                o.effect_ref
                    .as_deref()
                    .unwrap_or("(the provider gave no reference)")
            ),
        ),
        Status::Approved => (
            true,
            "Approved: the caller's next claim executes it.".to_owned(),
        ),
        Status::Failed => (
            false,
            format!(
                "It failed (definite: nothing took effect): {}",
                reason.unwrap_or_else(|| "no reason given".into())
            ),
        ),
        Status::Denied => (
            true,
            format!("Denied. {}", reason.unwrap_or_default())
                .trim()
                .to_owned(),
        ),
        Status::InFlight => (
            true,
            "Approved; the call is still executing. Reload for its result.".to_owned(),
        ),
        Status::Unknown => (
            false,
            format!(
                "Approved, but whether it took effect is not known yet; oncegate is reconciling it. {}",
                reason.unwrap_or_default()
            ),
        ),
        _ => (
            false,
            format!(
                "{}: {}",
                o.status.as_str(),
                reason.unwrap_or_else(|| "no reason given".into())
            ),
        ),
    }
}

/// An approval's page body: the answer to this decision (if one was just made), then
/// the approval and its intent as stored.
async fn approval_view(
    state: &AppState,
    session: &Session,
    id: &str,
    answered: Option<&Outcome>,
) -> Result<Markup, ApiError> {
    let store = state.gate().store();
    let approval = store
        .approval(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no approval {id}")))?;
    let record = store
        .load_generation(&approval.key, approval.generation)
        .await?;
    let tz = tz(state);
    Ok(html! {
        @if let Some(o) = answered {
            @let (ok, line) = outcome_line(o);
            (notice(ok, &line))
        }
        section.card {
            h2 { (approval.capability) " " span.muted { "for " (approval.principal) } }
            dl.facts {
                dt { "Approval" } dd { code { (approval.id) } }
                dt { "State" } dd { (state_badge(approval.state.as_str())) }
                dt { "Decided by" } dd { (or_dash(approval.decided_by.as_deref())) }
                @if let Some(at) = approval.decided_at { dt { "Decided" } dd { (when(at, tz)) } }
                dt { "Why it was held" } dd { (approval.reason.explain()) }
                @if !approval.detail.is_empty() { dt { "Detail" } dd { (approval.detail) } }
                dt { "Asked" } dd { (when(approval.created_at, tz)) }
                dt { "Expires" } dd { (when(approval.expires_at, tz)) }
                dt { "Intent" } dd { (key_link(approval.key.as_str())) " generation " (approval.generation) }
            }
        }
        @if let Some(r) = &record {
            section.card {
                h2 { "The intent now" }
                dl.facts {
                    dt { "State" } dd { (state_badge(r.state.as_str())) }
                    dt { "Effect reference" } dd { (or_dash(r.effect_ref.as_deref())) }
                    @if let Some(e) = &r.error { dt { "Reason" } dd { (e.message) " [" (e.code.as_str()) "]" } }
                    dt { "Executions" } dd { (r.executions) }
                    @if let Some(result) = &r.result { dt { "Provider's answer" } dd { (json(result)) } }
                }
            }
        }
        @if approval.state == ApprovalState::Pending && answered.is_none() {
            @let detail = record.as_ref().map(|r| crate::ops::approvals::detail(state, approval.clone(), r));
            (held_card(state, session, &approval, record.as_ref(), detail.as_ref()))
        }
        p { a href="/console/approvals" { "Back to the queue" } }
    })
}
