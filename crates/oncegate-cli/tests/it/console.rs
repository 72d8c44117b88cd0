//! The console in a real browser: headless Debian Chromium driven over WebDriver
//! (chromedriver, through fantoccini) against `oncegate serve` and the sandbox, both real
//! processes. An approver signs in by pasting a token, approves a held refund by clicking
//! (a double click, a stale second tab and two approvers at once: one refund), denies
//! another with a reason the agent is then told; an agent's token cannot sign in; a POST
//! without the session's CSRF token changes nothing; signing out ends the session. The
//! screenshots in docs/ (approvals queue, an intent's timeline) are taken here.
//!
//! Chromium and chromedriver come from `tests/clients/setup.sh browser` (apt).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::support::{Proc, Setup, client, effects};

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

fn install_browser() {
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
}

fn driver() -> Driver {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Owned by a `Driver` at once, so it is killed and reaped however this ends.
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
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return driver;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("chromedriver did not listen on {port}");
}

/// A fresh headless Chromium (its own profile) of `driver`.
async fn browser(driver: &Driver, profile: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1280,1000",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a WebDriver session")
}

async fn text_of(c: &Client, css: &str) -> String {
    el(c, css).await.text().await.unwrap()
}

/// The element `css` selects, or a panic that shows the page it is missing from.
async fn el(c: &Client, css: &str) -> fantoccini::elements::Element {
    match c.find(Locator::Css(css)).await {
        Ok(e) => e,
        Err(e) => {
            let url = c
                .current_url()
                .await
                .map(|u| u.to_string())
                .unwrap_or_default();
            let page = c.source().await.unwrap_or_default();
            panic!("no `{css}` on {url} ({e}):\n{page}");
        }
    }
}

/// Marks the page, so [`next_page`] can tell it from the one a click leads to.
async fn mark(c: &Client) {
    c.execute("window.__seen = true", vec![]).await.unwrap();
}

/// Waits until a page that [`mark`] has not marked is loaded and shows `css`; its
/// `<main>` text.
async fn next_page(c: &Client, css: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = c
            .execute(
                "return !window.__seen && document.readyState === 'complete' && !!document.querySelector(arguments[0])",
                vec![json!(css)],
            )
            .await
            .unwrap_or(json!(false));
        if ready == json!(true) {
            return text_of(c, "main").await;
        }
        if Instant::now() > deadline {
            let page = c.source().await.unwrap_or_default();
            panic!("no new page with `{css}`:\n{page}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Clicks `css` and waits for the page it leads to (one showing `then`).
async fn click(c: &Client, css: &str, then: &str) -> String {
    mark(c).await;
    el(c, css).await.click().await.unwrap();
    next_page(c, then).await
}

async fn sign_in(c: &Client, gw: &str, token: &str) {
    c.goto(&format!("{gw}/console")).await.unwrap();
    assert!(
        c.current_url()
            .await
            .unwrap()
            .path()
            .ends_with("/console/sign-in")
    );
    el(c, "#token").await.send_keys(token).await.unwrap();
    click(c, "main form button[type=submit]", "form.who, p.notice").await;
}

/// The pending approval card of `id`'s button (`approve` or `deny`).
fn button(id: &str, choice: &str) -> String {
    format!("form[action='/console/approvals/{id}/decide'] button[value='{choice}']")
}

fn call(gw: &Proc, capability: &str, arguments: Value) -> Value {
    client()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .json(&json!({"capability": capability, "arguments": arguments}))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

fn held(gw: &Proc, order: &str, amount: &str) -> String {
    let answer = call(gw, "refund", json!({"order_id": order, "amount": amount}));
    assert_eq!(answer["status"], "pending_approval", "{answer}");
    answer["approval_id"].as_str().unwrap().to_owned()
}

fn approval_state(gw: &Proc, id: &str) -> String {
    let list: Value = client()
        .get(format!("{}/v1/approvals", gw.url))
        .bearer_auth("tok-ops")
        .send()
        .unwrap()
        .json()
        .unwrap();
    list["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .map(|a| a["state"].as_str().unwrap().to_owned())
        .unwrap()
}

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

#[test]
fn approvers_decide_in_a_real_browser_and_each_intent_has_one_effect() {
    install_browser();
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let driver = driver();
    let profiles = tempfile::tempdir().unwrap();
    let (alice, bob) = rt.block_on(async {
        (
            browser(&driver, &profiles.path().join("alice")).await,
            browser(&driver, &profiles.path().join("bob")).await,
        )
    });

    // An agent's token cannot sign in; a wrong token neither.
    rt.block_on(async {
        sign_in(&alice, &gw.url, "tok-planner").await;
        let said = text_of(&alice, "main").await;
        assert!(said.contains("agents cannot sign in"), "{said}");
        assert!(alice.get_named_cookie("oncegate_console").await.is_err());
        sign_in(&alice, &gw.url, "not-a-token").await;
        assert!(text_of(&alice, "main").await.contains("not accepted"));
    });

    // Three held refunds (over 100.00), one per scene.
    let clicked = held(&gw, "R-100", "150.00");
    let raced = held(&gw, "R-200", "175.00");
    let denied = held(&gw, "R-300", "250.00");
    assert!(effects(&setup.sandbox, "refund").is_empty());

    let effect = rt.block_on(async {
        sign_in(&alice, &gw.url, "tok-alice").await;
        sign_in(&bob, &gw.url, "tok-bob").await;
        alice.goto(&format!("{}/console/approvals", gw.url)).await.unwrap();
        let queue = text_of(&alice, "main").await;
        for needed in ["R-100", "R-200", "R-300", "policy requires a human approval", "planner", "15000"] {
            assert!(queue.contains(needed), "the queue shows {needed}: {queue}");
        }
        // Every visible form control is labelled.
        let unlabelled = alice
            .execute(
                "return [...document.querySelectorAll('input:not([type=hidden]),select,textarea')].filter(e => e.labels.length === 0 && !e.getAttribute('aria-label')).length",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(unlabelled, json!(0));
        alice.set_window_size(1280, 1500).await.unwrap();
        let png = alice.screenshot().await.unwrap();
        std::fs::write(docs().join("console-approvals.png"), png).unwrap();
        alice.set_window_size(1280, 1000).await.unwrap();

        // A second tab of the same session, opened before the decision.
        let first = alice.window().await.unwrap();
        let second = alice.new_window(true).await.unwrap().handle;
        alice.switch_to_window(second.clone()).await.unwrap();
        alice.goto(&format!("{}/console/approvals", gw.url)).await.unwrap();
        alice.switch_to_window(first).await.unwrap();

        // A double click, with the page's once-only script taken away: whatever the
        // browser sends for it (Chromium cancels the first submission's navigation, so
        // the gateway may see one request or two), one refund. The stale tab below is
        // the second request for certain.
        alice
            .execute(
                "document.querySelectorAll('form[data-once]').forEach(f => f.removeAttribute('data-once'))",
                vec![],
            )
            .await
            .unwrap();
        let approve = el(&alice, &button(&clicked, "approve")).await;
        let mouse = MouseActions::new("mouse".into())
            .then(PointerAction::MoveToElement {
                element: approve,
                duration: None,
                x: 0.0,
                y: 0.0,
            })
            .then(PointerAction::Down { button: MOUSE_BUTTON_LEFT })
            .then(PointerAction::Up { button: MOUSE_BUTTON_LEFT })
            .then(PointerAction::Down { button: MOUSE_BUTTON_LEFT })
            .then(PointerAction::Up { button: MOUSE_BUTTON_LEFT });
        mark(&alice).await;
        alice.perform_actions(mouse).await.unwrap();
        let outcome = next_page(&alice, "p.notice").await;
        assert!(outcome.contains("Executed once: effect re_"), "{outcome}");
        let effect = outcome
            .split("effect ")
            .nth(1)
            .unwrap()
            .split(|c: char| c == '.' || c.is_whitespace())
            .next()
            .unwrap()
            .to_owned();

        // The stale second tab approves too: it is told the first result.
        alice.switch_to_window(second).await.unwrap();
        let again = click(&alice, &button(&clicked, "approve"), "p.notice").await;
        assert!(again.contains(&format!("Executed once: effect {effect}")), "{again}");
        alice.close_window().await.unwrap();
        let left = alice.windows().await.unwrap();
        alice.switch_to_window(left[0].clone()).await.unwrap();
        effect
    });
    let refunds = effects(&setup.sandbox, "refund");
    assert_eq!(
        refunds.len(),
        1,
        "one refund for a double click and a second tab: {refunds:?}"
    );
    assert_eq!(refunds[0]["id"], effect.as_str());

    // Two approvers click Approve on the same request at the same moment.
    rt.block_on(async {
        for c in [&alice, &bob] {
            c.goto(&format!("{}/console/approvals", gw.url))
                .await
                .unwrap();
        }
        let approve = button(&raced, "approve");
        let (ta, tb) = tokio::join!(
            click(&alice, &approve, "p.notice"),
            click(&bob, &approve, "p.notice"),
        );
        assert!(ta.contains("Executed once: effect re_"), "{ta}");
        assert!(tb.contains("Executed once: effect re_"), "{tb}");
    });
    let r200: Vec<_> = effects(&setup.sandbox, "refund")
        .into_iter()
        .filter(|r| r["order_id"] == "R-200")
        .collect();
    assert_eq!(r200.len(), 1, "two approvers at once: one refund: {r200:?}");

    // A forged POST without the CSRF token, from the signed-in browser itself: 403, and
    // the approval is still pending.
    rt.block_on(async {
        alice
            .goto(&format!("{}/console/approvals", gw.url))
            .await
            .unwrap();
        // (A script's fetch is stopped by the console's content security policy before
        // it leaves; a form is what such a page could send.)
        mark(&alice).await;
        alice
            .execute(
                "const f = document.createElement('form');
                 f.method = 'post'; f.action = arguments[0];
                 const i = document.createElement('input');
                 i.name = 'choice'; i.value = 'approve'; f.appendChild(i);
                 document.body.appendChild(f); f.submit();",
                vec![json!(format!("/console/approvals/{denied}/decide"))],
            )
            .await
            .unwrap();
        let refused = next_page(&alice, "p.notice").await;
        assert!(
            refused.contains("CSRF token is missing or wrong")
                && refused.contains("nothing was changed"),
            "{refused}"
        );
    });
    assert_eq!(approval_state(&gw, &denied), "pending");
    // The same with the session cookie taken out of the browser and a made-up token.
    let cookie = rt
        .block_on(alice.get_named_cookie("oncegate_console"))
        .unwrap()
        .value()
        .to_owned();
    let forged = client()
        .post(format!("{}/console/approvals/{denied}/decide", gw.url))
        .header("Cookie", format!("oncegate_console={cookie}"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("choice=approve&_csrf=0000")
        .send()
        .unwrap();
    assert_eq!(forged.status().as_u16(), 403);
    assert_eq!(approval_state(&gw, &denied), "pending");
    assert_eq!(effects(&setup.sandbox, "refund").len(), 2);

    // Deny with a reason: the agent's next call is told.
    rt.block_on(async {
        alice
            .goto(&format!("{}/console/approvals", gw.url))
            .await
            .unwrap();
        let note = alice
            .find(Locator::Id(&format!("note-{denied}")))
            .await
            .unwrap();
        note.send_keys("customer already refunded by phone")
            .await
            .unwrap();
        let t = click(&alice, &button(&denied, "deny"), "p.notice").await;
        assert!(t.contains("Denied"), "{t}");
    });
    let told = call(
        &gw,
        "refund",
        json!({"order_id": "R-300", "amount": "250.00"}),
    );
    assert_eq!(told["status"], "denied", "{told}");
    assert!(
        told["reason"]["message"]
            .as_str()
            .unwrap()
            .contains("denied by alice: customer already refunded by phone"),
        "{told}"
    );
    assert_eq!(effects(&setup.sandbox, "refund").len(), 2);

    // The intent's page: its timeline from the audit chain, screenshotted for the docs.
    let key = call(&gw, "refund", json!({"order_id": "R-100", "amount": "150"}))["intent_key"]
        .as_str()
        .unwrap()
        .to_owned();
    rt.block_on(async {
        alice.goto(&format!("{}/console/intents?q=r-100", gw.url)).await.unwrap();
        let page = click(
            &alice,
            &format!("a[href='/console/intents/{key}']"),
            "ol.timeline",
        )
        .await;
        for needed in ["Held for approval", "Approval decided (approve)", "Attempt recorded", "Approval repeated", &effect] {
            assert!(page.contains(needed), "the timeline shows {needed}: {page}");
        }
        // Tall enough for the record and its timeline.
        alice.set_window_size(1280, 2300).await.unwrap();
        let png = alice.screenshot().await.unwrap();
        std::fs::write(docs().join("console-intent.png"), png).unwrap();

        // Readable at 375 px: nothing wider than the viewport.
        alice.set_window_size(375, 800).await.unwrap();
        for path in ["/console/approvals", &format!("/console/intents/{key}")] {
            alice.goto(&format!("{}{path}", gw.url)).await.unwrap();
            let overflow = alice
                .execute("return document.documentElement.scrollWidth - document.documentElement.clientWidth", vec![])
                .await
                .unwrap();
            assert!(overflow.as_i64().unwrap() <= 0, "{path} is wider than 375 px: {overflow}");
        }
        alice.set_window_size(1280, 1000).await.unwrap();

        // An approver sees no controls; signing out ends the session.
        alice.goto(&format!("{}/console/controls", gw.url)).await.unwrap();
        assert!(text_of(&alice, "main").await.contains("may not open this page"));
        alice.goto(&format!("{}/console/approvals", gw.url)).await.unwrap();
        let out = click(&alice, "form.who button", "p.notice").await;
        assert!(out.contains("signed out"), "{out}");
        alice.goto(&format!("{}/console/approvals", gw.url)).await.unwrap();
        assert!(alice.current_url().await.unwrap().path().ends_with("/console/sign-in"));
    });
    // The old cookie, replayed: signed out for good.
    let replayed = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{}/console/approvals", gw.url))
        .header("Cookie", format!("oncegate_console={cookie}"))
        .send()
        .unwrap();
    assert_eq!(replayed.status().as_u16(), 303);
    rt.block_on(async {
        alice.close().await.unwrap();
        bob.close().await.unwrap();
    });
}

#[test]
fn admins_switch_capabilities_off_and_verify_the_chain_from_the_console() {
    install_browser();
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let driver = driver();
    let profile = tempfile::tempdir().unwrap();
    let ops = rt.block_on(browser(&driver, profile.path()));
    rt.block_on(async {
        sign_in(&ops, &gw.url, "tok-ops").await;
        ops.goto(&format!("{}/console/controls", gw.url))
            .await
            .unwrap();
        el(&ops, "#ks-target option[value='capability:refund']")
            .await
            .click()
            .await
            .unwrap();
        ops.find(Locator::Id("ks-reason"))
            .await
            .unwrap()
            .send_keys("provider incident")
            .await
            .unwrap();
        let t = click(
            &ops,
            "form[action='/console/controls/kill-switch'] button.deny",
            "p.notice",
        )
        .await;
        assert!(t.contains("capability:refund is switched off"), "{t}");
        assert!(t.contains("provider incident"), "{t}");
    });
    let refused = call(&gw, "refund", json!({"order_id": "K-1", "amount": "10.00"}));
    assert_eq!(refused["status"], "refused", "{refused}");
    assert!(effects(&setup.sandbox, "refund").is_empty());
    rt.block_on(async {
        let t = click(&ops, "td form button", "p.notice").await;
        assert!(t.contains("capability:refund is on again"), "{t}");
        let t = click(
            &ops,
            "form[action='/console/controls/verify'] button",
            "p.notice",
        )
        .await;
        assert!(t.contains("The audit chain verifies"), "{t}");
        ops.goto(&format!("{}/console/attention", gw.url))
            .await
            .unwrap();
        assert!(text_of(&ops, "main").await.contains("Tripped breakers"));
        ops.close().await.unwrap();
    });
    let applied = call(&gw, "refund", json!({"order_id": "K-1", "amount": "10.00"}));
    assert_eq!(applied["status"], "applied", "{applied}");
}
