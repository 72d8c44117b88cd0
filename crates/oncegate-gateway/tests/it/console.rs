//! The console's guards over plain HTTP, through the real router on a socket, against
//! the sandbox: every state-changing form refuses a POST without the session's CSRF
//! token (and a wrong role) and changes nothing; sign-in refuses agents, forged forms
//! and wrong tokens without echoing them; cookies carry their attributes; pages carry
//! their security headers; malformed input is a page, never a panic. The browser test
//! (`oncegate-cli`'s tests/it/console.rs) covers the clicking.

use std::path::Path;

use reqwest::redirect::Policy;
use serde_json::{Value, json};

use crate::support::{effects, start_gateway, start_sandbox};

fn registry(sandbox: &str) -> String {
    format!(
        r#"
[store]
url = "sqlite://gw.db"

[[principals]]
name = "agent"
role = "agent"
token_env = "UNUSED_A"

[[principals]]
name = "alice"
role = "approver"
token_env = "UNUSED_B"

[[principals]]
name = "admin"
role = "admin"
token_env = "UNUSED_C"

[[capabilities]]
name = "refund"
category = "keyed"
policy = "p.cedar"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "http"
url = "{sandbox}/v1/refunds"
effect_ref = "/id"
body = {{ order_id = "{{arg.order_id}}", amount_minor = 1250, currency = "USD" }}
"#
    )
}

const POLICY: &str = r#"
@id("every-refund")
@oncegate("require_approval")
permit (principal, action == Action::"refund", resource);
"#;

pub(crate) async fn gateway(dir: &Path) -> (String, String) {
    let sandbox = start_sandbox().await;
    std::fs::write(dir.join("p.cedar"), POLICY).unwrap();
    let tokens = [
        ("agent", "tok-agent"),
        ("alice", "tok-alice"),
        ("admin", "tok-admin"),
    ];
    let url = start_gateway(dir, &registry(&sandbox), &tokens).await;
    (url, sandbox)
}

pub(crate) fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// The `name=value` of the cookie `name` a response sets, and the whole header.
fn set_cookie(r: &reqwest::Response, name: &str) -> Option<(String, String)> {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| (v.split(';').next().unwrap().to_owned(), v.to_owned()))
}

/// The value of the hidden input `name` in `page`.
fn hidden(page: &str, name: &str) -> String {
    let at = page
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no {name} in {page}"));
    let rest = &page[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_owned()
}

/// Signs in with `token`: the sign-in response.
async fn sign_in_as(gw: &str, token: &str, extra: &[(&str, &str)]) -> reqwest::Response {
    let form = http()
        .get(format!("{gw}/console/sign-in"))
        .send()
        .await
        .unwrap();
    let (pre, _) = set_cookie(&form, "oncegate_sign_in").expect("the sign-in cookie");
    let page = form.text().await.unwrap();
    let value = hidden(&page, "_sign_in");
    let mut req = http()
        .post(format!("{gw}/console/sign-in"))
        .header("Cookie", pre)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("_sign_in={value}&token={token}"));
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// A signed-in session: its cookie and CSRF token.
pub(crate) async fn session(gw: &str, token: &str) -> (String, String) {
    let r = sign_in_as(gw, token, &[]).await;
    assert_eq!(r.status().as_u16(), 303);
    let (cookie, _) = set_cookie(&r, "oncegate_console").expect("a session cookie");
    let page = http()
        .get(format!("{gw}/console/approvals"))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    (cookie.clone(), hidden(&page, "_csrf"))
}

async fn post(gw: &str, path: &str, cookie: &str, body: &str) -> (u16, String) {
    let r = http()
        .post(format!("{gw}{path}"))
        .header("Cookie", cookie)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

pub(crate) async fn held(gw: &str, order: &str) -> String {
    let v: Value = http()
        .post(format!("{gw}/v1/calls"))
        .bearer_auth("tok-agent")
        .json(&json!({"capability": "refund", "arguments": {"order_id": order}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["status"], "pending_approval", "{v}");
    v["approval_id"].as_str().unwrap().to_owned()
}

async fn approval_state(gw: &str, id: &str) -> String {
    let v: Value = http()
        .get(format!("{gw}/v1/approvals"))
        .bearer_auth("tok-admin")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .unwrap()["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The console's controls page, as the admin `cookie` sees it.
async fn controls(gw: &str, cookie: &str) -> String {
    http()
        .get(format!("{gw}/console/controls"))
        .header("Cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn every_console_form_refuses_a_post_without_the_sessions_csrf_token() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, sandbox) = gateway(dir.path()).await;
    let id = held(&gw, "C-1").await;
    let (cookie, csrf) = session(&gw, "tok-admin").await;
    let key = "ab".repeat(32);
    let forms = [
        (
            format!("/console/approvals/{id}/decide"),
            "choice=approve".to_owned(),
        ),
        (format!("/console/breakers/{key}/reset"), String::new()),
        (
            "/console/holds/h_0000000000000000/clear".to_owned(),
            "reason=x".to_owned(),
        ),
        (
            "/console/controls/kill-switch".to_owned(),
            "target=capability:refund&killed=true&reason=x".to_owned(),
        ),
        ("/console/controls/verify".to_owned(), String::new()),
        ("/console/sign-out".to_owned(), String::new()),
    ];
    for (path, body) in &forms {
        for forged in [body.clone(), format!("{body}&_csrf=00{}", &csrf[2..])] {
            let (status, page) = post(&gw, path, &cookie, &forged).await;
            assert_eq!(status, 403, "{path} {forged}: {page}");
            assert!(page.contains("nothing was changed"), "{page}");
        }
        // Without a session at all.
        let (status, _) = post(&gw, path, "", &format!("{body}&_csrf={csrf}")).await;
        assert_eq!(status, 403, "{path} without a session");
        // From another site's page, with everything else right.
        let r = http()
            .post(format!("{gw}{path}"))
            .header("Cookie", &cookie)
            .header("Origin", "https://evil.example")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!("{body}&_csrf={csrf}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 403, "{path} from another site");
    }
    assert_eq!(approval_state(&gw, &id).await, "pending");
    assert!(effects(&sandbox).await.is_empty());
    assert!(
        controls(&gw, &cookie)
            .await
            .contains("Kill switches on (0)")
    );
    // The session survived every forgery, and its own token works.
    let (status, page) = post(
        &gw,
        "/console/controls/kill-switch",
        &cookie,
        &format!("_csrf={csrf}&target=capability:refund&killed=true&reason=incident"),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("capability:refund is switched off"), "{page}");
}

#[tokio::test]
async fn approvers_decide_but_cannot_use_the_admins_forms() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, sandbox) = gateway(dir.path()).await;
    let (cookie, csrf) = session(&gw, "tok-alice").await;
    let (status, _) = post(
        &gw,
        "/console/controls/kill-switch",
        &cookie,
        &format!("_csrf={csrf}&target=capability:refund&killed=true&reason=x"),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = post(
        &gw,
        "/console/controls/verify",
        &cookie,
        &format!("_csrf={csrf}"),
    )
    .await;
    assert_eq!(status, 403);
    for page in ["/console/controls", "/console/holds"] {
        let r = http()
            .get(format!("{gw}{page}"))
            .header("Cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 403, "{page}");
    }
    let id = held(&gw, "C-2").await;
    let (status, page) = post(
        &gw,
        &format!("/console/approvals/{id}/decide"),
        &cookie,
        &format!("_csrf={csrf}&choice=deny&reason=not+this+one%0Aplease"),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Denied"), "{page}");
    // The agent is told the reason (its newline made a space).
    let told: Value = http()
        .post(format!("{gw}/v1/calls"))
        .bearer_auth("tok-agent")
        .json(&json!({"capability": "refund", "arguments": {"order_id": "C-2"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(told["status"], "denied");
    assert_eq!(
        told["reason"]["message"],
        "denied by alice: not this one please"
    );
    // The JSON API takes the same reason.
    let id = held(&gw, "C-3").await;
    let r = http()
        .post(format!("{gw}/v1/approvals/{id}/deny"))
        .bearer_auth("tok-alice")
        .json(&json!({"reason": "duplicate of C-2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "denied", "{body}");
    let r = http()
        .post(format!("{gw}/v1/approvals/{id}/deny"))
        .bearer_auth("tok-alice")
        .json(&json!({"why": "unknown field"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(effects(&sandbox).await.is_empty());
}

#[tokio::test]
async fn sign_in_refuses_agents_and_forged_forms_and_never_shows_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _sandbox) = gateway(dir.path()).await;
    // An agent's token.
    let r = sign_in_as(&gw, "tok-agent", &[]).await;
    assert_eq!(r.status().as_u16(), 403);
    assert!(set_cookie(&r, "oncegate_console").is_none());
    let page = r.text().await.unwrap();
    assert!(page.contains("agents cannot sign in"));
    assert!(!page.contains("tok-agent"), "the token is never shown");
    // A wrong token.
    let r = sign_in_as(&gw, "tok-wrong-secret", &[]).await;
    assert_eq!(r.status().as_u16(), 401);
    assert!(set_cookie(&r, "oncegate_console").is_none());
    assert!(!r.text().await.unwrap().contains("tok-wrong-secret"));
    // A sign-in form posted without its cookie (another site's form).
    let r = http()
        .post(format!("{gw}/console/sign-in"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("_sign_in=abc&token=tok-alice")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert!(set_cookie(&r, "oncegate_console").is_none());
    // A good one: the cookie's attributes; Secure behind a TLS proxy.
    let r = sign_in_as(&gw, "tok-alice", &[]).await;
    let (_, header) = set_cookie(&r, "oncegate_console").unwrap();
    for attr in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=28800",
    ] {
        assert!(header.contains(attr), "{header}");
    }
    assert!(!header.contains("Secure"), "{header}");
    let r = sign_in_as(&gw, "tok-alice", &[("X-Forwarded-Proto", "https")]).await;
    let (cookie, header) = set_cookie(&r, "oncegate_console").unwrap();
    assert!(header.contains("Secure"), "{header}");
    // Pages: security headers, and no token anywhere.
    let r = http()
        .get(format!("{gw}/console/approvals"))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap();
    let csp = r.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    assert_eq!(r.headers()["cache-control"], "no-store");
    assert!(!r.text().await.unwrap().contains("tok-alice"));
    // Without a session, a page sends the browser to the sign-in form.
    let r = http()
        .get(format!("{gw}/console/intents"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/console/sign-in");
}

#[tokio::test]
async fn malformed_console_input_is_a_page_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _sandbox) = gateway(dir.path()).await;
    let (cookie, csrf) = session(&gw, "tok-admin").await;
    for (path, want) in [
        ("/console/intents/not-a-key%00".to_owned(), 404),
        (format!("/console/intents/{}", "f".repeat(64)), 404),
        ("/console/approvals/ap_nope".to_owned(), 404),
        (
            "/console/intents?state=bogus&limit=-1&q=%FF".to_owned(),
            200,
        ),
    ] {
        let r = http()
            .get(format!("{gw}{path}"))
            .header("Cookie", &cookie)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let kind = r.headers()["content-type"].to_str().unwrap().to_owned();
        assert_eq!(status, want, "{path}");
        assert!(kind.starts_with("text/html"), "{path}: {kind}");
    }
    let id = held(&gw, "M-1").await;
    let (status, _) = post(
        &gw,
        &format!("/console/approvals/{id}/decide"),
        &cookie,
        &format!("_csrf={csrf}&choice=maybe"),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = post(
        &gw,
        &format!("/console/approvals/{id}/decide"),
        &cookie,
        &format!("_csrf={csrf}&choice=deny&reason={}", "x".repeat(100_000)),
    )
    .await;
    assert_eq!(status, 200, "a long reason is cut, not refused");
    let (status, _) = post(
        &gw,
        "/console/breakers/zz/reset",
        &cookie,
        &format!("_csrf={csrf}"),
    )
    .await;
    assert_eq!(status, 404);
}
