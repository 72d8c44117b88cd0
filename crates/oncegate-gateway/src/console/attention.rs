//! "Needs attention": what a person must look at. Intents whose outcome is unknown
//! (still reconciling, or escalated to a human because reconciliation could not
//! confirm), tripped breakers (an admin resets them here), cross-run duplicates held for
//! approval, and the alerts this gateway raised recently (cross-run, breaker tripped,
//! replay storms).
//!
//! The recent alerts are kept in memory by the process that raised them
//! ([`crate::state::RecentAlerts`]):
//! the durable record of each is its audit record, the log line, the metric and the
//! webhook; this list is a view for the person at the console.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum_extra::extract::CookieJar;
use jiff::tz::TimeZone;
use maud::{Markup, html};
use oncegate_core::config::Role;
use oncegate_core::intent::{
    Alert, Approval, ApprovalReason, ApprovalState, IntentRecord, IntentState,
};
use oncegate_core::key::IntentKey;
use oncegate_engine::Doubted;
use oncegate_store::ToolPin;
use oncegate_store::{ApprovalFilter, IntentFilter, IntentsRead};

use super::access::{csrf_field, failure, html_page, posted, tz, viewer};
use super::approvals::state_badge;
use super::page::{Section, key_link, notice, or_dash, page as frame, when};
use crate::error::ApiError;
use crate::state::{AppState, Raised, Session};

fn describe(alert: &Alert) -> String {
    match alert {
        Alert::CrossRun {
            first_run,
            this_run,
        } => format!(
            "Cross-run duplicate: run {} repeated an intent of run {}",
            this_run.as_deref().unwrap_or("(none)"),
            first_run.as_deref().unwrap_or("(none)")
        ),
        Alert::BreakerTripped { ceiling } => {
            format!("Breaker tripped after {ceiling} attempts")
        }
        Alert::ReplayStorm {
            replays,
            window_seconds,
        } => format!("Replay storm: {replays} repeats within {window_seconds} s"),
        Alert::ApprovalQueueFull { pending, max } => format!(
            "Approval queue full: {pending} pending approvals (max {max}); new held calls are refused (OG-0058)"
        ),
    }
}

/// `GET /console/attention`.
pub(super) async fn page(State(state): State<AppState>, jar: CookieJar) -> Response {
    let session = match viewer(&state, &jar, Section::Attention) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let store = state.gate().store();
    let listing = |state: Option<IntentState>, breaker_tripped: bool| IntentFilter {
        state,
        breaker_tripped,
        limit: 200,
        ..IntentFilter::default()
    };
    let (unknown, tripped) = (
        listing(Some(IntentState::Unknown), false),
        listing(None, true),
    );
    let unknown = store.list_intents(&unknown);
    let tripped = store.list_intents(&tripped);
    // Pending only: what is held needs a person; decided ones are on the approvals page.
    // The oldest 500, like the intents: the page stays bounded under a flood.
    let pending = ApprovalFilter {
        state: Some(ApprovalState::Pending),
        limit: crate::paging::MAX_LIMIT,
        ..ApprovalFilter::default()
    };
    let approvals = store.list_approvals(&pending);
    let (unknown, tripped, approvals) = match tokio::join!(unknown, tripped, approvals) {
        (Ok(u), Ok(t), Ok(a)) => (u.items, t.items, a.items),
        (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => {
            return failure(&session, &ApiError::from(e));
        }
    };
    let escalated: Vec<_> = approvals
        .iter()
        .filter(|a| {
            a.reason == ApprovalReason::UnknownFirstAttempt && a.state == ApprovalState::Pending
        })
        .collect();
    let cross_run: Vec<_> = approvals
        .iter()
        .filter(|a| a.reason == ApprovalReason::CrossRun)
        .collect();
    // What a provider failed to prove: each stays on until an admin clears it.
    let doubts = match state.gate().doubts().await {
        Ok(d) => d,
        Err(e) => return failure(&session, &ApiError::from(e)),
    };
    // Fronted tools whose server changed their definition: held until an admin accepts.
    let held: Vec<_> = match state.gate().tool_pins().await {
        Ok(pins) => pins.into_iter().filter(|p| p.pending.is_some()).collect(),
        Err(e) => return failure(&session, &ApiError::from(e)),
    };
    let alerts = state.console_alerts().newest_first();
    let admin = session.principal.role == Role::Admin;
    let tz = tz(&state);
    let body = html! {
        (providers(&doubts, &held, tz))
        (intents(&escalated, &unknown, &tripped, admin.then_some(&session), tz))
        (lately(&cross_run, &alerts, tz))
    };
    html_page(
        StatusCode::OK,
        frame(
            "Needs attention",
            Some(&session),
            Some(Section::Attention),
            body,
        ),
    )
}

/// What providers and fronted servers need from an admin: doubts to clear, changed
/// tools to accept.
fn providers(doubts: &[Doubted], held: &[ToolPin], tz: &TimeZone) -> Markup {
    html! {
    @if !doubts.is_empty() {
        h2 { "Providers in doubt (" (doubts.len()) ")" }
        p.muted { "Cleared by an admin once fixed: " code { "oncegate doubts clear CAPABILITY DOUBT" } "." }
        ul { @for d in doubts {
            li { strong { (d.capability) } " · " code { (d.doubt.as_str()) } " · " (d.reason) " · " (when(d.set_at, tz)) }
        } }
    }
    @if !held.is_empty() {
        h2 { "Fronted tools changed, held (" (held.len()) ")" }
        p.muted { "Their MCP server changed the definition agents would read (OG-0059); read the change in the tool_changed finding, then accept it: " code { "oncegate tools accept SERVER TOOL DIGEST" } "." }
        ul { @for p in held {
            @if let Some(pending) = &p.pending {
                li { strong { (p.server) " / " (p.tool) } " · pinned " code { (p.digest) } " · offers " code { (pending.digest) } " · since " (when(pending.seen_at, tz)) }
            }
        } }
    }
    }
}

/// The intents a person must look at: escalated, still reconciling, breakers tripped
/// (with a Reset button when `admin` is the admin's session).
fn intents(
    escalated: &[&Approval],
    unknown: &[IntentRecord],
    tripped: &[IntentRecord],
    admin: Option<&Session>,
    tz: &TimeZone,
) -> Markup {
    html! {
    h2 { "Escalated: unknown outcome, a human decides (" (escalated.len()) ")" }
    @if escalated.is_empty() { p.muted { "None." } } @else {
        ul { @for a in escalated {
            li { a href={ "/console/approvals/" (a.id) } { (a.capability) " for " (a.principal) } " · asked " (when(a.created_at, tz)) " · intent " (key_link(a.key.as_str())) }
        } }
    }
    h2 { "Unknown, reconciling (" (unknown.len()) ")" }
    @if unknown.is_empty() { p.muted { "None." } } @else {
        div.table-wrap { table {
            thead { tr { th { "Key" } th { "Capability" } th { "Agent" } th { "Attempts" } th { "Why" } th { "Since" } } }
            tbody { @for r in unknown {
                tr {
                    td { (key_link(r.key.as_str())) }
                    td { (r.capability) }
                    td { (r.principal) }
                    td { (r.attempts) }
                    td { (or_dash(r.error.as_ref().map(|e| e.message.as_str()))) }
                    td { (when(r.updated_at, tz)) }
                }
            } }
        } }
    }
    h2 { "Tripped breakers (" (tripped.len()) ")" }
    @if tripped.is_empty() { p.muted { "None." } } @else {
        div.table-wrap { table {
            thead { tr { th { "Key" } th { "Capability" } th { "Agent" } th { "State" } th { "Attempts" } th { "Reset" } } }
            tbody { @for r in tripped {
                tr {
                    td { (key_link(r.key.as_str())) }
                    td { (r.capability) }
                    td { (r.principal) }
                    td { (state_badge(r.state.as_str())) }
                    td { (r.attempts) }
                    td {
                        @if let Some(session) = admin {
                            form method="post" action={ "/console/breakers/" (r.key.as_str()) "/reset" } data-once {
                                (csrf_field(session))
                                button type="submit" aria-label={ "Reset the breaker of " (r.key.as_str()) } { "Reset" }
                            }
                        } @else { span.muted { "admins reset" } }
                    }
                }
            } }
        } }
    }
    }
}

/// What happened lately: cross-run duplicates held, and this process's recent alerts.
fn lately(cross_run: &[&Approval], alerts: &[Raised], tz: &TimeZone) -> Markup {
    html! {
    h2 { "Cross-run duplicates held (" (cross_run.len()) ")" }
    @if cross_run.is_empty() { p.muted { "None." } } @else {
        ul { @for a in cross_run {
            li { a href={ "/console/approvals/" (a.id) } { (a.capability) " for " (a.principal) } " · " (state_badge(a.state.as_str())) " · " (when(a.created_at, tz)) }
        } }
    }
    h2 { "Recent alerts on this gateway (" (alerts.len()) ")" }
    p.muted { "Kept in memory since this process started; each is also in the audit chain, the log and the alert webhook." }
    @if alerts.is_empty() { p.muted { "None." } } @else {
        ul { @for a in alerts {
            li {
                (describe(&a.alert)) " · " (a.capability) " by " (a.principal) " · " (when(a.at, tz))
                @if let Some(k) = &a.key { " · " (key_link(k)) }
            }
        } }
    }
    }
}

/// `POST /console/breakers/{key}/reset` (admins).
pub(super) async fn reset_breaker(
    State(state): State<AppState>,
    jar: CookieJar,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Bytes,
) -> Response {
    let (session, _) = match posted(&state, &jar, &headers, &body, &[Role::Admin]) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let reset = state
        .gate()
        .reset_breaker(
            session.principal.who(),
            &IntentKey::from_hex(key.to_lowercase()),
        )
        .await;
    match reset {
        Ok(_) => html_page(
            StatusCode::OK,
            frame(
                "Breaker reset",
                Some(&session),
                Some(Section::Attention),
                html! {
                    (notice(true, "The breaker is reset: the attempt count starts again."))
                    p { a href={ "/console/intents/" (key) } { "The intent" } " · " a href="/console/attention" { "Needs attention" } }
                },
            ),
        ),
        Err(e) => failure(&session, &ApiError::Gate(e)),
    }
}
