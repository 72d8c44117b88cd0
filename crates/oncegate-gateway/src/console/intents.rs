//! The intents pages: a filtered list (state, capability, run and a whole business
//! reference in the store's query, at any age; an agent, a part of a reference or the
//! start of a key over the newest matching intents; a whole key by a direct load), and
//! an intent's page with its timeline from the audit chain: every claim, attempt,
//! reconciliation, approval and admin action recorded for its key, in chain order, beside
//! the stored result and effect reference. Replays are not on it: a replay answers from
//! the record and writes nothing (DESIGN: a repeat of an applied intent needs no durable
//! write), so the chain has nothing to show for it.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum_extra::extract::CookieJar;
use maud::{Markup, html};
use oncegate_core::audit::{AuditKind, AuditRecord};
use oncegate_core::intent::{IntentRecord, IntentState};
use oncegate_core::key::IntentKey;
use oncegate_core::normalise::{Folding, clean_text};
use oncegate_store::{AuditRead, IntentFilter, IntentsRead};
use serde::Deserialize;

use super::access::{capability_names, failure, html_page, tz, viewer};
use super::approvals::state_badge;
use super::page::{Section, json, key_link, notice, or_dash, page, when};
use crate::error::ApiError;
use crate::state::AppState;

/// How many intents the store is asked for before the agent, run and search filters.
const WINDOW: u32 = 500;
/// How many rows the list shows.
const SHOWN: usize = 100;
/// The most audit records an intent's timeline shows.
const TIMELINE: u32 = 500;

/// `GET /console/intents` filters (all optional; empty means any).
#[derive(Debug, Default, Deserialize)]
pub(super) struct Filters {
    #[serde(default)]
    state: String,
    #[serde(default)]
    capability: String,
    #[serde(default)]
    agent: String,
    #[serde(default)]
    run: String,
    /// A business reference, an intent key, or the start of a key.
    #[serde(default)]
    q: String,
}

const STATES: [IntentState; 7] = [
    IntentState::InFlight,
    IntentState::Applied,
    IntentState::Failed,
    IntentState::Unknown,
    IntentState::NotApplied,
    IntentState::PendingApproval,
    IntentState::Denied,
];

/// `GET /console/intents`.
pub(super) async fn list(
    State(state): State<AppState>,
    jar: CookieJar,
    query: Result<Query<Filters>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let session = match viewer(&state, &jar, Section::Intents) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let f = query.map(|Query(f)| f).unwrap_or_default();
    let wanted_state = IntentState::parse(f.state.trim());
    let capability = Some(f.capability.trim()).filter(|c| !c.is_empty());
    let store = state.gate().store();
    let run = Some(f.run.trim())
        .filter(|r| !r.is_empty())
        .map(str::to_owned);
    let agent = f.agent.trim();
    let q = f.q.trim();
    let filter = |business_ref: Option<String>| IntentFilter {
        state: wanted_state,
        capability: capability.map(str::to_owned),
        run_id: run.clone(),
        business_ref,
        limit: WINDOW,
        ..IntentFilter::default()
    };
    // The search term as a business reference is normalised as the key's (NFC, trimmed),
    // and tried as typed and lowercased (a capability may fold case); the store finds
    // it at any age. Failing that, it is a part of a reference or the start of a key,
    // looked for among the newest intents the other filters give.
    let mut searched = None;
    if !q.is_empty() {
        let cleaned = clean_text(q, Folding::default(), &mut Vec::new());
        for term in [cleaned.trim().to_owned(), cleaned.trim().to_lowercase()] {
            match store.list_intents(&filter(Some(term))).await {
                Ok(l) if !l.items.is_empty() => {
                    searched = Some(l);
                    break;
                }
                Ok(_) => {}
                Err(e) => return failure(&session, &ApiError::from(e)),
            }
        }
    }
    let by_reference = searched.is_some();
    let listed = match searched {
        Some(l) => l,
        None => match store.list_intents(&filter(None)).await {
            Ok(l) => l,
            Err(e) => return failure(&session, &ApiError::from(e)),
        },
    };
    let window_full = listed.items.len() >= WINDOW as usize;
    let needle = q.to_lowercase();
    let mut rows: Vec<IntentRecord> = listed
        .items
        .into_iter()
        .filter(|r| agent.is_empty() || r.principal == agent)
        .filter(|r| by_reference || needle.is_empty() || matches_search(r, &needle))
        .collect();
    // A whole key finds its intent however old it is.
    if rows.is_empty()
        && needle.len() == 64
        && needle.bytes().all(|b| b.is_ascii_hexdigit())
        && let Ok(Some(r)) = store.load(&IntentKey::from_hex(needle.clone())).await
    {
        rows.push(r);
    }
    let tz = tz(&state);
    let body = html! {
        (filters_form(&f, wanted_state, capability, &capability_names(&state)))
        @if window_full {
            p.muted { "Searched the newest " (WINDOW) " intents matching the state, capability and run. A whole business reference or intent key finds an intent of any age; a part of one, or an agent, is looked for among those " (WINDOW) "." }
        }
        (rows_table(&rows, tz))
        @if !listed.unreadable.is_empty() {
            (notice(false, &format!("{} intent rows could not be read (see the audit chain's Verify).", listed.unreadable.len())))
        }
    };
    html_page(
        StatusCode::OK,
        page("Intents", Some(&session), Some(Section::Intents), body),
    )
}

/// The filter form, showing the filters `f` as given (`wanted_state` and `capability`
/// as understood), with the registry's `capabilities` to pick from.
fn filters_form(
    f: &Filters,
    wanted_state: Option<IntentState>,
    capability: Option<&str>,
    capabilities: &[String],
) -> Markup {
    html! {
    form.card.filters method="get" action="/console/intents" role="search" {
        div {
            label for="f-state" { "State" }
            select id="f-state" name="state" {
                option value="" { "any" }
                @for s in STATES {
                    option value=(s.as_str()) selected[Some(s) == wanted_state] { (s.as_str().replace('_', " ")) }
                }
            }
        }
        div {
            label for="f-capability" { "Capability" }
            select id="f-capability" name="capability" {
                option value="" { "any" }
                @for c in capabilities {
                    option value=(c) selected[Some(c.as_str()) == capability] { (c) }
                }
            }
        }
        div { label for="f-agent" { "Agent" } input type="text" id="f-agent" name="agent" value=(f.agent); }
        div { label for="f-run" { "Run" } input type="text" id="f-run" name="run" value=(f.run); }
        div { label for="f-q" { "Business reference or key" } input type="search" id="f-q" name="q" value=(f.q); }
        div.actions { button type="submit" { "Filter" } }
    }
    }
}

/// The intents found, at most [`SHOWN`] of them, newest first.
fn rows_table(rows: &[IntentRecord], tz: &jiff::tz::TimeZone) -> Markup {
    html! {
    @if rows.is_empty() {
        p.muted { "No intent matches." }
    } @else {
        div.table-wrap { table {
            thead { tr { th { "Key" } th { "Capability" } th { "State" } th { "Agent" } th { "Run" } th { "Business reference" } th { "Attempts" } th { "Effect" } th { "Updated" } } }
            tbody {
                @for r in rows.iter().take(SHOWN) {
                    tr {
                        td { (key_link(r.key.as_str())) @if r.generation > 1 { " (gen " (r.generation) ")" } }
                        td { (r.capability) }
                        td { (state_badge(r.state.as_str())) @if r.breaker_tripped { " " span.state.state-failed { "breaker tripped" } } }
                        td { (r.principal) }
                        td { (or_dash(r.run_id.as_deref())) }
                        td { (or_dash(r.business_ref.as_deref())) }
                        td { (r.attempts) }
                        td { (or_dash(r.effect_ref.as_deref())) }
                        td { (when(r.updated_at, tz)) }
                    }
                }
            }
        } }
        @if rows.len() > SHOWN { p.muted { "Showing " (SHOWN) " of " (rows.len()) "; narrow the filters to see the rest." } }
    }
    }
}

/// A search term against an intent: its business reference (normalised the same way on
/// both sides: lowercase, exact or as a substring), or its key's start.
fn matches_search(r: &IntentRecord, q: &str) -> bool {
    r.key.as_str().starts_with(q)
        || r.business_ref
            .as_deref()
            .is_some_and(|b| b.to_lowercase().contains(q))
}

/// `GET /console/intents/{key}`.
pub(super) async fn detail(
    State(state): State<AppState>,
    jar: CookieJar,
    Path(key): Path<String>,
) -> Response {
    let session = match viewer(&state, &jar, Section::Intents) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match intent_view(&state, &key).await {
        Ok(body) => html_page(
            StatusCode::OK,
            page("Intent", Some(&session), Some(Section::Intents), body),
        ),
        Err(e) => failure(&session, &e),
    }
}

async fn intent_view(state: &AppState, key: &str) -> Result<Markup, ApiError> {
    let key = IntentKey::from_hex(key.to_lowercase());
    let store = state.gate().store();
    let record = store
        .load(&key)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no intent {}", key.as_str())))?;
    let timeline = store.audit_of_intent(&key, TIMELINE).await?;
    let tz = tz(state);
    let r = &record;
    Ok(html! {
        section.card {
            h2 { (r.capability) " " span.muted { "by " (r.principal) } }
            dl.facts {
                dt { "Key" } dd { code { (r.key.as_str()) } }
                dt { "Generation" } dd { (r.generation) }
                dt { "State" } dd { (state_badge(r.state.as_str())) @if r.breaker_tripped { " " span.state.state-failed { "breaker tripped" } } }
                dt { "Effect reference" } dd { (or_dash(r.effect_ref.as_deref())) }
                @if let Some(e) = &r.error { dt { "Reason" } dd { (e.message) " [" (e.code.as_str()) "]" } }
                dt { "Run" } dd { (or_dash(r.run_id.as_deref())) }
                dt { "Step" } dd { (or_dash(r.step_id.as_deref())) }
                dt { "Business reference" } dd { (or_dash(r.business_ref.as_deref())) }
                dt { "Attempts" } dd { (r.attempts) " (executions " (r.executions) ")" }
                @if let Some(id) = &r.approval_id { dt { "Approval" } dd { a href={ "/console/approvals/" (id) } { code { (id) } } } }
                dt { "First seen" } dd { (when(r.created_at, tz)) }
                dt { "Updated" } dd { (when(r.updated_at, tz)) }
                dt { "Arguments (normalised)" } dd { (json(&r.normalised)) }
                dt { "Stored result" } dd { @if let Some(result) = &r.result { (json(result)) } @else { span.muted { "none" } } }
            }
        }
        h2 { "Timeline" }
        p.muted { "From the audit chain, oldest first. Replays answer from the record above and write nothing, so they are not listed." }
        @if timeline.is_empty() {
            p.muted { "The audit chain holds no record for this key." }
        } @else {
            ol.timeline {
                @for rec in &timeline { (event_item(rec, tz)) }
            }
            @if timeline.len() as u32 >= TIMELINE { p.muted { "The first " (TIMELINE) " records are shown." } }
        }
    })
}

/// What an audit record says happened, in words.
fn event_title(rec: &AuditRecord) -> String {
    let e = &rec.event;
    let detail = &e.detail;
    let states = match (e.from, e.to) {
        (Some(f), Some(t)) if f != t => format!(": {} → {}", f.as_str(), t.as_str()),
        (None, Some(t)) => format!(": {}", t.as_str()),
        _ => String::new(),
    };
    match e.kind {
        AuditKind::Call => match e.to {
            Some(IntentState::InFlight) => format!("Claimed for an attempt{states}"),
            Some(IntentState::PendingApproval) => format!("Held for approval{states}"),
            _ => format!("Call decided{states}"),
        },
        AuditKind::Effect => format!("Attempt recorded{states}"),
        AuditKind::Reconcile => format!("Reconciliation read{states}"),
        AuditKind::Approval => {
            let choice = detail
                .get("choice")
                .and_then(|v| v.as_str())
                .map(|c| format!(" ({c})"))
                .unwrap_or_default();
            if detail.get("repeat").is_some() {
                "Approval repeated: answered with the first decision".to_owned()
            } else {
                format!("Approval decided{choice}{states}")
            }
        }
        AuditKind::Admin => format!("Admin action{states}"),
    }
}

fn event_item(rec: &AuditRecord, tz: &jiff::tz::TimeZone) -> Markup {
    let e = &rec.event;
    let note = e.detail.get("note").and_then(|v| v.as_str());
    let effect = e.detail.get("effect_ref").and_then(|v| v.as_str());
    html! {
        li {
            strong { (event_title(rec)) }
            div.muted {
                (when(e.at, tz)) " · by " (e.actor)
                " · generation " (e.generation)
                @if let Some(s) = e.status { " · answered " (s.as_str()) }
                @if let Some(c) = e.code { " · " (c.as_str()) }
            }
            @if let Some(n) = note { div { "Reason: " (n) } }
            @if let Some(r) = effect { div { "Effect: " code { (r) } } }
            details {
                summary { "Record " (rec.shard) ":" (rec.seq) }
                (json(&e.detail))
                div.muted { "hash " code { (rec.hash) } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_matches_a_reference_or_the_start_of_a_key() {
        let mut r = oncegate_store::conformance::sample_record("ab12cd", 1);
        r.business_ref = Some("ORDER-77".into());
        assert!(matches_search(&r, "order-77"));
        assert!(matches_search(&r, "der-7"));
        assert!(matches_search(&r, "ab12"));
        assert!(!matches_search(&r, "12cd"));
        assert!(!matches_search(&r, "order-78"));
    }
}
