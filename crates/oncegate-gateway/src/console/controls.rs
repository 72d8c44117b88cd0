//! Controls (admins): the kill switches that are on, a form to switch a capability or an
//! agent off or on again with a reason, and the audit chain's status with a Verify
//! button. A switch goes through the JSON API's own function
//! ([`crate::ops::switches::set_kill_switch`]), so it is validated, audited and reaches
//! every replica the same way.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum_extra::extract::CookieJar;
use maud::{Markup, html};
use oncegate_core::config::Role;
use oncegate_store::{AuditRead, SharedRead};

use super::access::{capability_names, csrf_field, failure, html_page, posted, tz, viewer};
use super::page::{Section, notice, page as frame, when};
use crate::error::ApiError;
use crate::state::AppState;
use crate::state::Session;

/// `GET /console/controls`.
pub(super) async fn page(State(state): State<AppState>, jar: CookieJar) -> Response {
    let session = match viewer(&state, &jar, Section::Controls) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    render(&state, &session, None).await
}

async fn render(state: &AppState, session: &Session, said: Option<Markup>) -> Response {
    let store = state.gate().store();
    let switches = match store.kill_switches().await {
        Ok(s) => s,
        Err(e) => return failure(session, &ApiError::from(e)),
    };
    let checkpoint = store.audit_checkpoint().await.ok().flatten();
    let capabilities = capability_names(state);
    let agents: Vec<&str> = state
        .gate()
        .registry()
        .principals
        .iter()
        .filter(|p| p.role == Role::Agent)
        .map(|p| p.name.as_str())
        .collect();
    let tz = tz(state);
    // Holds are kill switches too, listed on their own page.
    let switches: Vec<_> = switches
        .iter()
        .filter(|s| s.target.starts_with("capability:") || s.target.starts_with("agent:"))
        .collect();
    let body = html! {
        @if let Some(said) = said { (said) }
        h2 { "Kill switches on (" (switches.len()) ")" }
        @if switches.is_empty() { p.muted { "None: every capability and agent is on." } } @else {
            div.table-wrap { table {
                thead { tr { th { "Target" } th { "Reason" } th { "Set by" } th { "When" } th { "Switch on again" } } }
                tbody { @for s in &switches {
                    tr {
                        td { code { (s.target) } }
                        td { (s.reason) }
                        td { (s.set_by) }
                        td { (when(s.set_at, tz)) }
                        td {
                            form method="post" action="/console/controls/kill-switch" data-once {
                                (csrf_field(session))
                                input type="hidden" name="target" value=(s.target);
                                input type="hidden" name="killed" value="false";
                                label for={ "clear-" (s.target) } { "Reason (optional)" }
                                input type="text" id={ "clear-" (s.target) } name="reason";
                                div.actions { button type="submit" { "Switch on" } }
                            }
                        }
                    }
                } }
            } }
        }
        h2 { "Switch something off" }
        form.card method="post" action="/console/controls/kill-switch" data-once {
            (csrf_field(session))
            input type="hidden" name="killed" value="true";
            label for="ks-target" { "Capability or agent" }
            select id="ks-target" name="target" required {
                optgroup label="Capabilities" {
                    @for c in &capabilities { option value={ "capability:" (c) } { (c) } }
                }
                optgroup label="Agents" {
                    @for a in &agents { option value={ "agent:" (a) } { (a) } }
                }
            }
            label for="ks-reason" { "Reason" }
            input type="text" id="ks-reason" name="reason" required;
            div.actions { button.deny type="submit" { "Switch off" } }
        }
        h2 { "Audit chain" }
        section.card {
            @match &checkpoint {
                Some(c) => { p { "Last clean verification checkpoint: " code { (c) } } }
                None => { p.muted { "No verification checkpoint is recorded yet." } }
            }
            form method="post" action="/console/controls/verify" data-once {
                (csrf_field(session))
                button type="submit" { "Verify the whole chain now" }
            }
        }
    };
    html_page(
        StatusCode::OK,
        frame("Controls", Some(session), Some(Section::Controls), body),
    )
}

/// `POST /console/controls/kill-switch` (`target`, `killed` = true | false, `reason`).
pub(super) async fn kill_switch(
    State(state): State<AppState>,
    jar: CookieJar,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (session, form) = match posted(&state, &jar, &headers, &body, &[Role::Admin]) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let Some(target) = form.text("target") else {
        return render(
            &state,
            &session,
            Some(notice(false, "choose what to switch")),
        )
        .await;
    };
    let killed = form.get("killed") == Some("true");
    let reason = form.text("reason");
    if killed && reason.is_none() {
        return render(
            &state,
            &session,
            Some(notice(false, "say why it is switched off")),
        )
        .await;
    }
    match crate::ops::switches::set_kill_switch(
        &state,
        &session.principal,
        target.clone(),
        killed,
        reason,
    )
    .await
    {
        Ok(()) => {
            let line = if killed {
                format!("{target} is switched off.")
            } else {
                format!("{target} is on again.")
            };
            render(&state, &session, Some(notice(true, &line))).await
        }
        Err(e) => failure(&session, &e),
    }
}

/// `POST /console/controls/verify`: the whole chain, end to end.
pub(super) async fn verify(
    State(state): State<AppState>,
    jar: CookieJar,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (session, _) = match posted(&state, &jar, &headers, &body, &[Role::Admin]) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let report = crate::ops::audit::verify_whole(&state).await;
    let said = match report {
        Ok(r) if r.ok() => notice(
            true,
            &format!(
                "The audit chain verifies: {} records in {} shards, {} rows sealed.",
                r.records, r.shards, r.rows
            ),
        ),
        Ok(r) => {
            tracing::error!(broken_links = r.broken.len(), broken_rows = r.row_problems.len(), by = %session.principal.name, "console: the audit chain does not verify");
            let first = r
                .broken
                .first()
                .map(|b| format!("shard {} record {}: {}", b.shard, b.seq, b.problem))
                .or_else(|| {
                    r.row_problems.first().map(|p| {
                        format!("row {} generation {}: {}", p.key, p.generation, p.problem)
                    })
                })
                .unwrap_or_default();
            notice(
                false,
                &format!(
                    "The audit chain does NOT verify: {} broken links, {} rows that do not match it. First: {first}. Run `oncegate audit verify` for the whole report.",
                    r.broken.len(),
                    r.row_problems.len(),
                ),
            )
        }
        Err(e) => return failure(&session, &ApiError::from(e)),
    };
    render(&state, &session, Some(said)).await
}
