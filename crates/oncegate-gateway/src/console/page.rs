//! The console's frame and the pieces every page shares: the navigation (one place, so
//! a new section slots in as one entry), the signed-in bar with its sign-out form, times
//! in the registry's time zone, JSON as text, and the notices a page shows after an
//! action. Everything is server-rendered with maud, which escapes every interpolation;
//! the stylesheet and the one small script are compiled into the binary and served from
//! `/console/static/` (no CDN: the console works on an air-gapped host).

use jiff::Timestamp;
use jiff::tz::TimeZone;
use maud::{DOCTYPE, Markup, html};
use oncegate_core::config::Role;
use serde_json::Value;

use crate::state::Session;

/// The stylesheet (`/console/static/console.css`).
pub(crate) const CSS: &str = include_str!("console.css");
/// Progressive enhancement only (`/console/static/console.js`): every page works
/// without it.
pub(crate) const JS: &str = include_str!("console.js");

/// A section of the console, in navigation order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Section {
    Approvals,
    Intents,
    Attention,
    Findings,
    Holds,
    Controls,
}

impl Section {
    const ALL: [Section; 6] = [
        Section::Approvals,
        Section::Intents,
        Section::Attention,
        Section::Findings,
        Section::Holds,
        Section::Controls,
    ];

    fn label(self) -> &'static str {
        match self {
            Section::Approvals => "Approvals",
            Section::Intents => "Intents",
            Section::Attention => "Needs attention",
            Section::Findings => "Findings",
            Section::Holds => "Holds",
            Section::Controls => "Controls",
        }
    }

    fn href(self) -> &'static str {
        match self {
            Section::Approvals => "/console/approvals",
            Section::Intents => "/console/intents",
            Section::Attention => "/console/attention",
            Section::Findings => "/console/findings",
            Section::Holds => "/console/holds",
            Section::Controls => "/console/controls",
        }
    }

    /// Who sees it in the navigation (and may open it).
    pub(crate) fn roles(self) -> &'static [Role] {
        match self {
            Section::Holds | Section::Controls => &[Role::Admin],
            _ => &[Role::Admin, Role::Approver],
        }
    }
}

/// A whole page: `session` is `None` on the sign-in page.
pub(crate) fn page(
    title: &str,
    session: Option<&Session>,
    current: Option<Section>,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · oncegate" }
                link rel="stylesheet" href="/console/static/console.css";
                script src="/console/static/console.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/console" { "oncegate" }
                    @if let Some(s) = session {
                        nav aria-label="Console" {
                            ul {
                                @for section in Section::ALL {
                                    @if section.roles().contains(&s.principal.role) {
                                        li {
                                            @if Some(section) == current {
                                                a href=(section.href()) aria-current="page" { (section.label()) }
                                            } @else {
                                                a href=(section.href()) { (section.label()) }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                        form.who method="post" action="/console/sign-out" {
                            span { "Signed in as " strong { (s.principal.name) } " (" (s.principal.role.as_str()) ")" }
                            input type="hidden" name="_csrf" value=(s.csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main id="main" {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// A time in the registry's zone, machine-readable too.
pub(crate) fn when(at: Timestamp, tz: &TimeZone) -> Markup {
    let zoned = at.to_zoned(tz.clone());
    html! {
        time datetime=(at.to_string()) { (zoned.strftime("%Y-%m-%d %H:%M:%S %Z").to_string()) }
    }
}

/// JSON as indented text.
pub(crate) fn json(value: &Value) -> Markup {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    html! { pre.json { code { (text) } } }
}

/// A notice after an action: `ok` picks its colour and role.
pub(crate) fn notice(ok: bool, text: &str) -> Markup {
    html! {
        @if ok {
            p.notice.ok role="status" { (text) }
        } @else {
            p.notice.bad role="alert" { (text) }
        }
    }
}

/// An intent key, shortened for a table, linked to its page.
pub(crate) fn key_link(key: &str) -> Markup {
    let short: String = key.chars().take(12).collect();
    html! { a href={ "/console/intents/" (key) } title=(key) { code { (short) "…" } } }
}

/// An optional value, or a dash.
pub(crate) fn or_dash(value: Option<&str>) -> Markup {
    html! {
        @match value {
            Some(v) if !v.is_empty() => { (v) }
            _ => { span.muted { "—" } }
        }
    }
}
