//! Console sign-in: who a browser is, and proof that a form came from a console page.
//! The sessions themselves are kept in [`crate::state::ConsoleSessions`].
//!
//! A person pastes their token once into the sign-in form (a POST body, never a URL);
//! it is checked exactly as a bearer token is ([`AppState::authenticate_token`]), and
//! only approvers and admins get a session. The browser then holds a random session id in
//! an HttpOnly, SameSite=Strict cookie scoped to `/console` (Secure when the request
//! came over TLS through a proxy); the token itself is never stored, shown or logged.
//! The gateway keeps only the SHA-256 of each id, so a heap dump does not hold usable
//! cookies. A session ends at its expiry ([`SESSION_TTL`], or sooner when the JWT that
//! opened it expires) or when its owner signs out.
//!
//! Every state-changing form carries the session's CSRF token (`_csrf`), compared in
//! constant time; the sign-in form carries a one-time value that must match a cookie set
//! with the form (a double submit), so another site cannot sign a browser in as someone
//! else. A POST whose `Origin` is another site is refused as well.
//!
//! Sessions live in the process that signed them in: behind a load balancer, several
//! replicas need sticky sessions (docs/guide/console.md).

use axum::http::{HeaderMap, header};
use axum_extra::extract::CookieJar;
use cookie::{Cookie, SameSite};
use jiff::SignedDuration;
use subtle::ConstantTimeEq;

use crate::state::Session;

/// The sign-in form's double-submit cookie.
pub(crate) const SIGN_IN_COOKIE: &str = "oncegate_sign_in";

/// Whether `given` is the session's CSRF token (constant time).
pub(crate) fn csrf_ok(session: &Session, given: Option<&str>) -> bool {
    given.is_some_and(|g| bool::from(g.as_bytes().ct_eq(session.csrf.as_bytes())))
}

/// Whether the sign-in form's value matches the cookie set with the form.
pub(crate) fn sign_in_ok(jar: &CookieJar, given: Option<&str>) -> bool {
    match (jar.get(SIGN_IN_COOKIE), given) {
        (Some(c), Some(g)) if !g.is_empty() => bool::from(g.as_bytes().ct_eq(c.value().as_bytes())),
        _ => false,
    }
}

/// Whether the request reached the gateway over TLS (through a proxy that says so): its
/// cookies are then `Secure`.
pub(crate) fn over_tls(headers: &HeaderMap) -> bool {
    let forwarded_proto = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    let forwarded = headers
        .get(header::FORWARDED)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split([';', ','])
                .any(|part| part.trim().eq_ignore_ascii_case("proto=https"))
        });
    forwarded_proto || forwarded
}

/// A POST from another site (its `Origin` names another host than the one it was sent
/// to, or than the `X-Forwarded-Host` a proxy that rewrites `Host` names): refused
/// whatever it carries. No `Origin`, or the opaque `null` (a browser whose privacy
/// settings strip referrers sends it with same-site form posts too), falls back on the
/// CSRF token and the SameSite=Strict cookie alone.
pub(crate) fn foreign_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    if origin == "null" {
        return false;
    }
    let Ok(o) = url::Url::parse(origin) else {
        return true;
    };
    let authority = match (o.host_str(), o.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        _ => return true,
    };
    let named = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|host| authority.eq_ignore_ascii_case(host.trim()))
    };
    !(named(header::HOST) || named(header::HeaderName::from_static("x-forwarded-host")))
}

/// A cookie as the console sets it: HttpOnly, SameSite=Strict, on `/console`.
pub(crate) fn cookie(
    name: &'static str,
    value: String,
    max_age: SignedDuration,
    secure: bool,
) -> Cookie<'static> {
    Cookie::build((name, value))
        .path("/console")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .max_age(cookie::time::Duration::seconds(max_age.as_secs()))
        .build()
}

/// Removes a console cookie.
pub(crate) fn removal(name: &'static str) -> Cookie<'static> {
    Cookie::build((name, "")).path("/console").build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{ConsoleSessions as Sessions, Principal, SESSION_COOKIE, secret};
    use axum::http::HeaderValue;
    use jiff::Timestamp;
    use oncegate_core::config::Role;

    fn principal() -> Principal {
        Principal {
            name: "alice".into(),
            role: Role::Approver,
            issuer: None,
        }
    }

    #[test]
    fn a_session_is_found_by_its_cookie_until_it_ends() {
        let sessions = Sessions::default();
        let now = Timestamp::now();
        let id = sessions.open(principal(), now + SignedDuration::from_mins(5), now);
        let jar = CookieJar::new().add(Cookie::new(SESSION_COOKIE, id.clone()));
        let s = sessions.find(&jar, now).expect("open session");
        assert_eq!(s.principal.name, "alice");
        assert!(csrf_ok(&s, Some(&s.csrf)));
        assert!(!csrf_ok(&s, Some("nope")));
        assert!(!csrf_ok(&s, None));
        let other = CookieJar::new().add(Cookie::new(SESSION_COOKIE, secret()));
        assert!(sessions.find(&other, now).is_none());
        let later = now + SignedDuration::from_mins(6);
        assert!(sessions.find(&jar, later).is_none(), "expired");
        let id = sessions.open(principal(), later, now);
        let jar = CookieJar::new().add(Cookie::new(SESSION_COOKIE, id));
        sessions.close(&jar);
        assert!(sessions.find(&jar, now).is_none(), "signed out");
    }

    #[test]
    fn nobody_pushes_out_another_principals_sessions() {
        let sessions = Sessions::default();
        let now = Timestamp::now();
        let until = now + SignedDuration::from_hours(1);
        let mut bob = principal();
        bob.name = "bob".into();
        let bobs = sessions.open(bob, until, now);
        let first = sessions.open(principal(), until, now);
        for i in 0..40 {
            sessions.open(principal(), until + SignedDuration::from_secs(i), now);
        }
        let jar = |id: &str| CookieJar::new().add(Cookie::new(SESSION_COOKIE, id.to_owned()));
        assert!(
            sessions.find(&jar(&first), now).is_none(),
            "alice's oldest went"
        );
        assert!(sessions.find(&jar(&bobs), now).is_some(), "bob's stays");
    }

    #[test]
    fn origins_of_other_sites_are_foreign() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:7878"));
        assert!(!foreign_origin(&h), "no Origin: the CSRF token decides");
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:7878"),
        );
        assert!(!foreign_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(foreign_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(!foreign_origin(&h), "opaque: the CSRF token decides");
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:9999"),
        );
        assert!(foreign_origin(&h), "another port is another origin");
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://console.example"),
        );
        assert!(foreign_origin(&h));
        h.insert(
            "x-forwarded-host",
            HeaderValue::from_static("console.example"),
        );
        assert!(!foreign_origin(&h), "the host a rewriting proxy names");
    }

    #[test]
    fn tls_is_what_the_proxy_says() {
        let mut h = HeaderMap::new();
        assert!(!over_tls(&h));
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert!(over_tls(&h));
        let mut h = HeaderMap::new();
        h.insert(
            header::FORWARDED,
            HeaderValue::from_static("for=1.2.3.4;proto=https"),
        );
        assert!(over_tls(&h));
    }
}
