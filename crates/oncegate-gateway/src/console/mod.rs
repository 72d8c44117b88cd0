//! `/console`: the web console for the humans in the loop, served by `oncegate serve`.
//!
//! Approvers decide held calls by clicking instead of pasting `ap_...` ids; operators
//! read intents and their audit timelines, see what needs attention, and (admins) flip
//! kill switches and verify the audit chain. Every action goes through the same functions
//! as the JSON API (the front door for approvals, the engine for the rest), so a click is
//! exactly as idempotent as an API call: a second click, tab or approver gets the first
//! result. Pages are server-rendered HTML that works without JavaScript ([`page`]);
//! sign-in, sessions and CSRF are in [`session`].
//!
//! A page that needs a session redirects to the sign-in form; a POST without a session,
//! from another site, or without the session's CSRF token is a 403 that changes nothing.

mod access;
mod approvals;
mod attention;
mod controls;
mod findings;
mod intents;
mod page;
mod session;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum_extra::extract::CookieJar;
use jiff::SignedDuration;
use maud::html;
use oncegate_core::config::Role;

use crate::error::ApiError;
use crate::state::{AppState, SESSION_COOKIE, SESSION_TTL, secret};
use access::{Form, html_page, now, posted, refusal};
use page::{notice, page};
use session::SIGN_IN_COOKIE;

/// The console's routes (under `/console`).
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::to("/console/approvals") }),
        )
        .route(
            "/console/",
            get(|| async { Redirect::to("/console/approvals") }),
        )
        .route("/console/static/console.css", get(css))
        .route("/console/static/console.js", get(js))
        .route("/console/sign-in", get(sign_in_form).post(sign_in))
        .route("/console/sign-out", post(sign_out))
        .route("/console/approvals", get(approvals::queue))
        .route("/console/approvals/{id}", get(approvals::detail))
        .route("/console/approvals/{id}/decide", post(approvals::decide))
        .route("/console/intents", get(intents::list))
        .route("/console/intents/{key}", get(intents::detail))
        .route("/console/attention", get(attention::page))
        .route(
            "/console/breakers/{key}/reset",
            post(attention::reset_breaker),
        )
        .route("/console/findings", get(findings::findings))
        .route("/console/holds", get(findings::holds))
        .route("/console/holds/{id}/clear", post(findings::clear_hold))
        .route("/console/controls", get(controls::page))
        .route("/console/controls/kill-switch", post(controls::kill_switch))
        .route("/console/controls/verify", post(controls::verify))
}

/// The outermost layer of the whole router (see `router.rs`), for `/console` paths only:
/// what every console response carries (no framing, no caching, no referrer to other
/// sites, a content policy that allows only the console's own files), and the
/// framework's own refusals (405, 413, 408, a path that does not decode) as a console
/// page instead of the API's JSON error.
pub(crate) async fn outer(request: Request, next: Next) -> Response {
    if !request.uri().path().starts_with("/console") {
        return next.run(request).await;
    }
    let mut response = next.run(request).await;
    let status = response.status();
    let html = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/html"));
    if (status.is_client_error() || status.is_server_error()) && !html {
        response = refusal(status, None, status.canonical_reason().unwrap_or("refused"));
    }
    guard_headers(&mut response);
    response
}

fn guard_headers(response: &mut Response) {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Not `no-referrer`: under it a browser sends `Origin: null` with the console's own
    // form posts, and the origin check could not tell them from another site's.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
}

async fn css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        page::CSS,
    )
        .into_response()
}

async fn js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        page::JS,
    )
        .into_response()
}

async fn sign_in_form(
    State(state): State<AppState>,
    jar: CookieJar,
    headers: HeaderMap,
) -> Response {
    if state.console().find(&jar, now(&state)).is_some() {
        return Redirect::to("/console/approvals").into_response();
    }
    sign_in_page(jar, &headers, StatusCode::OK, None)
}

/// The sign-in form with a fresh double-submit value (in the form and in a cookie).
fn sign_in_page(
    jar: CookieJar,
    headers: &HeaderMap,
    status: StatusCode,
    problem: Option<&str>,
) -> Response {
    let value = secret();
    let jar = jar.add(session::cookie(
        SIGN_IN_COOKIE,
        value.clone(),
        SignedDuration::from_mins(30),
        session::over_tls(headers),
    ));
    let body = html! {
        @if let Some(p) = problem { (notice(false, p)) }
        form.card method="post" action="/console/sign-in" {
            p { "Approvers and admins sign in with their oncegate token (the one the API takes as a bearer token). It is checked once and never stored; the browser keeps a session cookie for up to "
                (SESSION_TTL.as_hours()) " hours." }
            input type="hidden" name="_sign_in" value=(value);
            label for="token" { "Token" }
            input type="password" id="token" name="token" autocomplete="off" required;
            div.actions { button type="submit" { "Sign in" } }
        }
    };
    (jar, html_page(status, page("Sign in", None, None, body))).into_response()
}

async fn sign_in(
    State(state): State<AppState>,
    jar: CookieJar,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if session::foreign_origin(&headers) {
        return refusal(
            StatusCode::FORBIDDEN,
            None,
            "this form was sent from another site",
        );
    }
    let form = Form::parse(&body);
    if !session::sign_in_ok(&jar, form.get("_sign_in")) {
        return sign_in_page(
            jar,
            &headers,
            StatusCode::FORBIDDEN,
            Some("this sign-in form has expired or did not come from this console; try again"),
        );
    }
    let token = form.get("token").map(str::trim).unwrap_or_default();
    if token.is_empty() {
        return sign_in_page(
            jar,
            &headers,
            StatusCode::BAD_REQUEST,
            Some("paste your token"),
        );
    }
    let (principal, token_expires) = match state.authenticate_token(token).await {
        Ok(found) => found,
        // The identity provider's keys are out of reach, or this address has failed
        // too often: say so, with the code, rather than "not accepted".
        Err(
            e
            @ ApiError::Coded(StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS, ..),
        ) => {
            let (status, code, message) = e.parts();
            return sign_in_page(
                jar,
                &headers,
                status,
                Some(&format!("{message} [{}]", code.as_str())),
            );
        }
        Err(_) => {
            tracing::info!("console: a sign-in with a token that is not accepted");
            return sign_in_page(
                jar,
                &headers,
                StatusCode::UNAUTHORIZED,
                Some("that token is not accepted"),
            );
        }
    };
    if principal.role == Role::Agent {
        tracing::warn!(principal = %principal.name, "console: an agent's token cannot sign in");
        return sign_in_page(
            jar,
            &headers,
            StatusCode::FORBIDDEN,
            Some("agents cannot sign in to the console; it is for approvers and admins"),
        );
    }
    let now = now(&state);
    let expires = match token_expires {
        Some(t) if t < now + SESSION_TTL => t,
        _ => now + SESSION_TTL,
    };
    let lifetime = expires.duration_since(now);
    tracing::info!(principal = %principal.name, role = principal.role.as_str(), "console: signed in");
    // A browser signing in anew (another person at the same desk) ends its old session.
    state.console().close(&jar);
    let id = state.console().open(principal, expires, now);
    let secure = session::over_tls(&headers);
    let jar = jar
        .remove(session::removal(SIGN_IN_COOKIE))
        .add(session::cookie(SESSION_COOKIE, id, lifetime, secure));
    (jar, Redirect::to("/console/approvals")).into_response()
}

async fn sign_out(
    State(state): State<AppState>,
    jar: CookieJar,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let roles = [Role::Admin, Role::Approver];
    let session = match posted(&state, &jar, &headers, &body, &roles) {
        Ok((session, _)) => session,
        Err(refused) => return *refused,
    };
    state.console().close(&jar);
    tracing::info!(principal = %session.principal.name, "console: signed out");
    let jar = jar.remove(session::removal(SESSION_COOKIE));
    let body = html! {
        (notice(true, "You are signed out."))
        p { a href="/console/sign-in" { "Sign in again" } }
    };
    (
        jar,
        html_page(StatusCode::OK, page("Signed out", None, None, body)),
    )
        .into_response()
}
