//! Approvers see what will happen, and approve exactly that: through the real router on
//! a socket, against the sandbox as the provider.
//!
//! - `GET /v1/approvals/{id}` shows an email's body (an argument outside the key), the
//!   amount as "150.00 USD", the request the execution would send with its credential
//!   header masked, why it is held, and the digest of every sent argument it is bound to.
//! - An MCP upstream's preview is the `tools/call` (server, tool, arguments, `_meta`).
//! - An unknown first attempt's approval warns that approving may execute it again.
//! - A repeat with another body while the approval waits, or after it, never sends that
//!   body; a two-phase claim with another body is refused 409 `OG-0012`.
//! - The console's card shows the same in headless Chromium (chromedriver, as the CLI's
//!   browser test drives it), and an agent's markup in the body stays text.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

use serde_json::{Value, json};

use crate::support::{effects, start_gateway, start_sandbox};

/// A gateway-side value no answer may show: what `{env.CARGO_MANIFEST_DIR}` is filled
/// with (cargo and nextest set it for every test process, as a deployment sets its
/// credentials).
const SECRET: &str = env!("CARGO_MANIFEST_DIR");

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

# Every email waits for a human; the body is not in the key.
[[capabilities]]
name = "send_email"
category = "non_idempotent"
policy = "p.cedar"
key = {{ business_ref = "order_id", significant = [{{ arg = "to", type = "email" }}, {{ arg = "amount", type = "money", default_currency = "USD" }}] }}

[capabilities.upstream]
kind = "http"
url = "{sandbox}/v1/emails"
effect_ref = "/id"
headers = {{ Authorization = "Bearer {{env.CARGO_MANIFEST_DIR}}", X-Client = "c-{{env.CARGO_MANIFEST_DIR}}" }}
body = {{ order_id = "{{business_ref}}", to = "{{norm.to}}", template = "refund_notice", body = "{{arg.body}}", dedupe_ref = "{{key}}" }}

# A provider that fails with a 500 (unknown), escalated to a human on the repeat.
[[capabilities]]
name = "flaky_email"
category = "non_idempotent"
on_unknown = "escalate"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "http"
url = "{sandbox}/v1/emails"
headers = {{ Sandbox-Fault = "fail_before_commit" }}
body = {{ order_id = "{{business_ref}}", to = "a@example.com", template = "receipt", body = "{{arg.body}}" }}

# A tool on an MCP server, held: its preview is the tools/call.
[[capabilities]]
name = "charge"
category = "keyed"
policy = "p.cedar"
key = {{ business_ref = "order_id", significant = [{{ arg = "amount", type = "money", default_currency = "EUR" }}] }}

[capabilities.upstream]
kind = "mcp"
url = "{sandbox}/mcp"
tool = "create_charge"
headers = {{ Authorization = "Bearer {{env.CARGO_MANIFEST_DIR}}" }}
body = {{ order_id = "{{business_ref}}", amount_minor = "{{norm.amount.minor}}", currency = "{{norm.amount.currency}}", memo = "{{arg.memo}}" }}

# Executed by its callers (two-phase): held, then claimed.
[[capabilities]]
name = "letter"
category = "non_idempotent"
on_unknown = "escalate"
policy = "p.cedar"
key = {{ business_ref = "order_id" }}
"#
    )
}

const POLICY: &str = r#"
permit (principal, action, resource) when { principal.role == "agent" };
@id("every-email")
@oncegate("require_approval")
permit (principal, action in [Action::"send_email", Action::"letter", Action::"charge"], resource);
"#;

async fn gateway(dir: &Path) -> (String, String) {
    let sandbox = start_sandbox().await;
    std::fs::write(dir.join("p.cedar"), POLICY).unwrap();
    let tokens = [("agent", "tok-agent"), ("alice", "tok-alice")];
    let url = start_gateway(dir, &registry(&sandbox), &tokens).await;
    (url, sandbox)
}

/// The body an injected agent writes: a phishing link, and markup that must stay text.
const PHISHING: &str = "Your refund is ready. Confirm at https://evil.example/login?session=1 <img src=x onerror=\"window.__xss=1\"><script>window.__xss=2</script>";

fn email(body: &str) -> Value {
    json!({"order_id": "O-1", "to": "Ann@Example.com", "amount": "150", "body": body})
}

async fn post(gw: &str, path: &str, token: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{gw}{path}"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn call(gw: &str, capability: &str, arguments: Value) -> (u16, Value) {
    post(
        gw,
        "/v1/calls",
        "tok-agent",
        json!({"capability": capability, "arguments": arguments}),
    )
    .await
}

/// Holds `arguments` of `capability`: the approval's id.
async fn held(gw: &str, capability: &str, arguments: Value) -> String {
    let (status, v) = call(gw, capability, arguments).await;
    assert_eq!(
        (status, v["status"].as_str()),
        (202, Some("pending_approval")),
        "{v}"
    );
    v["approval_id"].as_str().unwrap().to_owned()
}

/// `GET /v1/approvals/{id}` as `token`: (status, body, the body's text).
async fn detail(gw: &str, id: &str, token: &str) -> (u16, Value, String) {
    let r = reqwest::Client::new()
        .get(format!("{gw}/v1/approvals/{id}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    )
}

async fn emails(sandbox: &str) -> Vec<Value> {
    effects(sandbox)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "email")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_detail_shows_every_sent_argument_money_the_request_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, sandbox) = gateway(dir.path()).await;
    let id = held(&gw, "send_email", email(PHISHING)).await;

    let (status, d, text) = detail(&gw, &id, "tok-alice").await;
    assert_eq!(status, 200, "{text}");
    // Every argument the upstream receives, the body outside the key included.
    assert_eq!(d["arguments"], email(PHISHING));
    assert_eq!(d["money"][0]["argument"], "amount");
    assert_eq!(d["money"][0]["amount"], "150.00 USD");
    assert_eq!(d["money"][0]["minor"], 15000);
    // The request the execution would send, as the executor renders it.
    let r = &d["request"];
    assert_eq!(r["kind"], "http");
    assert_eq!(r["method"], "POST");
    assert_eq!(r["url"], format!("{sandbox}/v1/emails"));
    assert_eq!(r["body"]["body"], PHISHING, "the link is shown whole");
    assert_eq!(r["body"]["to"], "Ann@example.com");
    assert_eq!(r["body"]["template"], "refund_notice");
    assert_eq!(r["body"]["dedupe_ref"], d["intent"]["key"]);
    let header = |name: &str| {
        r["headers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["name"] == name)
            .map(|h| h["value"].as_str().unwrap().to_owned())
    };
    assert_eq!(header("Authorization").as_deref(), Some("Bearer ***"));
    assert_eq!(header("X-Client").as_deref(), Some("c-***"));
    assert!(
        !text.contains(SECRET),
        "a credential reached the answer: {text}"
    );
    // Why, and what it is bound to.
    assert_eq!(d["held_because"]["reason"], "policy");
    assert!(
        d["held_because"]["detail"]
            .as_str()
            .unwrap()
            .contains("every-email"),
        "{d}"
    );
    assert_eq!(d["arguments_digest"], d["approval"]["args_digest"]);
    assert_eq!(
        d["arguments_digest"],
        oncegate_core::key::sent_digest(&email(PHISHING))
    );
    assert_eq!(d["arguments_bound"], true);
    assert_eq!(
        d["warning"],
        Value::Null,
        "a first attempt: nothing to warn of"
    );
    assert!(emails(&sandbox).await.is_empty(), "a preview sends nothing");

    // Approvers and admins only; an unknown id is 404.
    assert_eq!(detail(&gw, &id, "tok-agent").await.0, 403);
    assert_eq!(detail(&gw, "ap_nope", "tok-alice").await.0, 404);
    assert_eq!(detail(&gw, &id, "wrong").await.0, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_upstreams_preview_is_the_tools_call_it_would_send() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, sandbox) = gateway(dir.path()).await;
    let memo = "refund to IBAN DE00 0000 (changed by the agent)";
    let id = held(
        &gw,
        "charge",
        json!({"order_id": "C-1", "amount": "12.5", "memo": memo}),
    )
    .await;
    let (status, d, text) = detail(&gw, &id, "tok-alice").await;
    assert_eq!(status, 200, "{text}");
    let r = &d["request"];
    assert_eq!(r["kind"], "mcp");
    assert_eq!(r["url"], format!("{sandbox}/mcp"));
    assert_eq!(r["tool"], "create_charge");
    assert_eq!(
        r["body"],
        json!({"order_id": "C-1", "amount_minor": 1250, "currency": "EUR", "memo": memo})
    );
    assert_eq!(
        r["meta"]["dev.oncegate/idempotency_key"], d["intent"]["key"],
        "the key travels in _meta"
    );
    assert_eq!(r["headers"][0]["value"], "Bearer ***");
    assert_eq!(d["money"][0]["amount"], "12.50 EUR");
    assert!(!text.contains(SECRET), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_first_attempts_approval_warns_that_approving_may_execute_again() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _sandbox) = gateway(dir.path()).await;
    let note = json!({"order_id": "F-1", "body": "hello"});
    let (_, first) = call(&gw, "flaky_email", note.clone()).await;
    // No read can tell: held for a human at once, and a repeat hears the same approval.
    assert_eq!(first["status"], "pending_approval", "{first}");
    let id = held(&gw, "flaky_email", note).await;
    assert_eq!(first["approval_id"], id.as_str(), "{first}");
    let (status, d, text) = detail(&gw, &id, "tok-alice").await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(d["held_because"]["reason"], "unknown_first_attempt");
    let warning = d["warning"].as_str().unwrap();
    assert!(
        warning.contains("UNKNOWN") && warning.contains("again"),
        "{warning}"
    );
    assert_eq!(d["intent"]["executions"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drifted_body_after_the_approval_is_never_sent() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, sandbox) = gateway(dir.path()).await;
    let approved = "Your refund of 150.00 USD is on its way.";
    let id = held(&gw, "send_email", email(approved)).await;
    // While it waits, a re-plan with another body is the same intent: it is told the
    // approval waits, and it changes nothing the approver sees.
    let (status, v) = call(&gw, "send_email", email(PHISHING)).await;
    assert_eq!(
        (status, v["approval_id"].as_str()),
        (202, Some(id.as_str())),
        "{v}"
    );
    let (_, d, _) = detail(&gw, &id, "tok-alice").await;
    assert_eq!(d["arguments"]["body"], approved);

    let (status, v) = post(
        &gw,
        &format!("/v1/approvals/{id}/approve"),
        "tok-alice",
        json!({}),
    )
    .await;
    assert_eq!(
        (status, v["status"].as_str()),
        (200, Some("applied")),
        "{v}"
    );
    // After it, a repeat with another body replays; nothing else is sent.
    let (_, v) = call(&gw, "send_email", email(PHISHING)).await;
    assert_eq!(v["status"], "replayed", "{v}");
    let sent = emails(&sandbox).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["request"]["body"], approved);

    // A two-phase claim of an approved call with another body: 409 OG-0012, and the
    // claim with the approved arguments executes them.
    let letter = |body: &str| json!({"order_id": "L-1", "body": body});
    let claim = |arguments: Value| {
        let gw = gw.clone();
        async move {
            post(
                &gw,
                "/v1/intents/claim",
                "tok-agent",
                json!({"capability": "letter", "arguments": arguments}),
            )
            .await
        }
    };
    let (status, v) = claim(letter(approved)).await;
    assert_eq!(status, 202, "{v}");
    let id = v["approval_id"].as_str().unwrap().to_owned();
    let (status, v) = post(
        &gw,
        &format!("/v1/approvals/{id}/approve"),
        "tok-alice",
        json!({}),
    )
    .await;
    assert_eq!(
        (status, v["status"].as_str()),
        (200, Some("approved")),
        "{v}"
    );
    let (status, v) = claim(letter(PHISHING)).await;
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["reason"]["code"], "OG-0012", "{v}");
    let (status, v) = claim(letter(approved)).await;
    assert_eq!(
        (status, v["status"].as_str()),
        (200, Some("execute")),
        "{v}"
    );
    assert_eq!(v["arguments"], letter(approved));
}

/// chromedriver, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Chromium and chromedriver from `tests/clients/setup.sh browser`, and a driver on a
/// free port.
fn driver() -> Driver {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(root.join("tests/clients/setup.sh"))
        .arg("browser")
        .stdin(Stdio::null())
        .output()
        .expect("run tests/clients/setup.sh browser");
    assert!(
        out.status.success(),
        "tests/clients/setup.sh browser failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let driver = Driver {
        child: Command::new("/usr/bin/chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver"),
        url: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    driver
}

async fn browser(driver: &Driver, profile: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-background-networking", "--disable-sync",
                "--window-size=1280,1000", format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a WebDriver session")
}

/// Waits until `css` is on the page; its text.
async fn text_when_shown(c: &Client, css: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(e) = c.find(Locator::Css(css)).await {
            return e.text().await.unwrap();
        }
        if Instant::now() > deadline {
            let page = c.source().await.unwrap_or_default();
            panic!("no `{css}`:\n{page}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_card_shows_the_body_money_and_the_request_in_a_browser() {
    let driver = driver();
    let dir = tempfile::tempdir().unwrap();
    let (gw, sandbox) = gateway(dir.path()).await;
    let id = held(&gw, "send_email", email(PHISHING)).await;

    let c = browser(&driver, &dir.path().join("profile")).await;
    c.goto(&format!("{gw}/console/sign-in")).await.unwrap();
    c.find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys("tok-alice")
        .await
        .unwrap();
    c.find(Locator::Css("main form button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    text_when_shown(&c, "form.who").await;
    c.goto(&format!("{gw}/console/approvals")).await.unwrap();
    let card = format!("section.held[data-approval='{id}']");
    let text = text_when_shown(&c, &card).await;

    // The body as the JSON the upstream receives (its quotes escaped), as text.
    let shown = serde_json::to_string(PHISHING).unwrap();
    assert!(
        text.contains(shown.trim_matches('"')),
        "the body, as text: {text}"
    );
    assert!(text.contains("150.00 USD"), "{text}");
    assert!(
        text.contains(&format!("POST {sandbox}/v1/emails")),
        "the request line: {text}"
    );
    assert!(text.contains("Authorization: Bearer ***"), "{text}");
    assert!(
        text.contains("policy requires a human approval"),
        "why: {text}"
    );
    assert!(text.contains("every-email"), "which policy: {text}");
    assert!(!text.contains(SECRET), "a credential on the card: {text}");
    let sent = c
        .find(Locator::Css(&format!("{card} dd.sent-arguments")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        sent.contains("\"body\"") && sent.contains("evil.example"),
        "{sent}"
    );
    // The agent's markup stayed text: nothing it wrote ran or became an element.
    let ran = c
        .execute(
            "return [window.__xss === undefined, document.querySelectorAll('main img').length]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        ran,
        json!([true, 0]),
        "agent-written markup became a page element"
    );
    let page = c.source().await.unwrap();
    assert!(!page.contains(SECRET));
    c.close().await.unwrap();
}
