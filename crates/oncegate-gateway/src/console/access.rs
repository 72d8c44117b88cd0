//! Who may see a console page or post a console form (a live session, a role the
//! section is for, this site's origin and the session's CSRF token), and the pages sent
//! instead: the refusal and the engine's or store's failure.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::CookieJar;
use jiff::Timestamp;
use maud::{Markup, html};
use oncegate_core::config::Role;

use super::page::{Section, notice, page};
use super::session;
use crate::error::ApiError;
use crate::state::{AppState, Session};

/// The gate's clock.
pub(super) fn now(state: &AppState) -> Timestamp {
    state.gate().clock().now()
}

/// The registry's capability names, sorted (the pages' pickers).
pub(super) fn capability_names(state: &AppState) -> Vec<String> {
    let mut names: Vec<String> = state
        .gate()
        .registry()
        .capabilities()
        .iter()
        .map(|c| c.name.clone())
        .collect();
    names.sort();
    names
}

/// The registry's time zone (what every page shows times in).
pub(super) fn tz(state: &AppState) -> &jiff::tz::TimeZone {
    &state.gate().registry().gateway.time_zone
}

/// A page with a status.
pub(super) fn html_page(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

/// The refusal page (403 and the like): says why, changes nothing.
pub(super) fn refusal(status: StatusCode, session: Option<&Session>, why: &str) -> Response {
    html_page(
        status,
        page(
            status.canonical_reason().unwrap_or("Refused"),
            session,
            None,
            html! {
                (notice(false, why))
                p { a href="/console" { "Back to the console" } }
            },
        ),
    )
}

/// An error of the engine or the store, on a console page.
pub(super) fn failure(session: &Session, e: &ApiError) -> Response {
    let (status, code, message) = e.parts();
    refusal(
        status,
        Some(session),
        &format!("{message} [{}]", code.as_str()),
    )
}

/// The response a handler sends instead of doing its work (boxed: a `Response` is large).
pub(super) type Refused = Box<Response>;

pub(super) fn refused(status: StatusCode, session: Option<&Session>, why: &str) -> Refused {
    Box::new(refusal(status, session, why))
}

/// The session of a page view, or the response to send instead: the sign-in form for a
/// browser without one, a 403 for a role the section is not for.
pub(super) fn viewer(
    state: &AppState,
    jar: &CookieJar,
    section: Section,
) -> Result<Session, Refused> {
    let Some(session) = state.console().find(jar, now(state)) else {
        return Err(Box::new(Redirect::to("/console/sign-in").into_response()));
    };
    if !section.roles().contains(&session.principal.role) {
        return Err(refused(
            StatusCode::FORBIDDEN,
            Some(&session),
            &format!(
                "`{}` ({}) may not open this page",
                session.principal.name,
                session.principal.role.as_str()
            ),
        ));
    }
    Ok(session)
}

/// A submitted form's fields.
pub(crate) struct Form(Vec<(String, String)>);

impl Form {
    pub(super) fn parse(body: &[u8]) -> Self {
        Self(url::form_urlencoded::parse(body).into_owned().collect())
    }

    /// The first value of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `name`, trimmed, `None` when empty.
    pub(crate) fn text(&self, name: &str) -> Option<String> {
        self.get(name)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    }
}

/// The session and fields of a state-changing POST, or the 403 to send instead: it must
/// come from a console page of this site (`Origin`), in a live session whose role may
/// act, with that session's CSRF token. Nothing has been done when this refuses.
pub(super) fn posted(
    state: &AppState,
    jar: &CookieJar,
    headers: &HeaderMap,
    body: &[u8],
    roles: &[Role],
) -> Result<(Session, Form), Refused> {
    if session::foreign_origin(headers) {
        return Err(refused(
            StatusCode::FORBIDDEN,
            None,
            "this form was sent from another site; nothing was changed",
        ));
    }
    let Some(session) = state.console().find(jar, now(state)) else {
        return Err(refused(
            StatusCode::FORBIDDEN,
            None,
            "you are not signed in (or your session ended); nothing was changed",
        ));
    };
    let form = Form::parse(body);
    if !session::csrf_ok(&session, form.get("_csrf")) {
        tracing::warn!(principal = %session.principal.name, "console: a POST without this session's CSRF token was refused");
        return Err(refused(
            StatusCode::FORBIDDEN,
            Some(&session),
            "this form is not one of this session's pages (its CSRF token is missing or wrong); nothing was changed",
        ));
    }
    if !roles.contains(&session.principal.role) {
        return Err(refused(
            StatusCode::FORBIDDEN,
            Some(&session),
            &format!(
                "`{}` ({}) may not do this",
                session.principal.name,
                session.principal.role.as_str()
            ),
        ));
    }
    Ok((session, form))
}

/// The hidden CSRF field of a session's forms.
pub(super) fn csrf_field(session: &Session) -> Markup {
    html! { input type="hidden" name="_csrf" value=(session.csrf); }
}
