//! The bytes of `GET /v1/intents/{key}` and `GET /v1/approvals`, pinned: the gateway
//! answers with wire types of its own (`wire/`), so a rename in core's `IntentRecord`
//! or `Approval` cannot change what a client reads. The volatile values (ids, the key,
//! times, the lease's owner) are replaced by their field's name before the comparison;
//! everything else, field order and spelling included, is compared byte for byte.
//! The detection and control listings (findings, holds, doubts, limits, kill switches)
//! are pinned the same way: they too answer with wire types of their own.

use serde_json::Value;

use crate::console::{gateway, held, http};
use crate::support::{open_state, serve_app};

/// The fields whose values change from run to run, and what stands for them (every
/// time the same, so a time that happens to equal another reads the same either way).
const VOLATILE: [(&str, &str); 10] = [
    ("id", "[id]"),
    ("key", "[key]"),
    ("approval_id", "[approval_id]"),
    ("owner", "[owner]"),
    ("created_at", "[time]"),
    ("updated_at", "[time]"),
    ("expires_at", "[time]"),
    ("decided_at", "[time]"),
    ("settled_at", "[time]"),
    ("set_at", "[time]"),
];

/// `body` with every string value of a volatile field replaced by its stand-in: the raw
/// bytes otherwise untouched (no re-serialisation, so field order is what is compared).
fn scrubbed(body: &str) -> String {
    fn collect(v: &Value, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let stand_in = VOLATILE.iter().find(|(f, _)| f == k).map(|(_, s)| *s);
                    if let (Some(stand_in), Value::String(s)) = (stand_in, v) {
                        out.push((stand_in.to_owned(), s.clone()));
                    }
                    collect(v, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| collect(v, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    collect(&serde_json::from_str(body).unwrap(), &mut found);
    // Longest first, so a value that holds another is replaced whole.
    found.sort_by_key(|(_, s)| std::cmp::Reverse(s.len()));
    let mut text = body.to_owned();
    for (stand_in, value) in found {
        text = text.replace(&format!("\"{value}\""), &format!("\"{stand_in}\""));
    }
    text
}

async fn get(url: &str) -> String {
    let r = http()
        .get(url)
        .bearer_auth("tok-admin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

#[tokio::test]
async fn intents_and_approvals_keep_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _sandbox) = gateway(dir.path()).await;
    held(&gw, "o-wire-1").await;
    let approvals = get(&format!("{gw}/v1/approvals")).await;
    let listed: Value = serde_json::from_str(&approvals).unwrap();
    let key = listed["approvals"][0]["key"].as_str().unwrap().to_owned();
    let intent = get(&format!("{gw}/v1/intents/{key}")).await;
    insta::assert_snapshot!("approvals", scrubbed(&approvals));
    insta::assert_snapshot!("intent", scrubbed(&intent));
}

/// A capability with a money limit, an admin, and nothing upstream (no call is made).
const CONTROLS: &str = r#"
[store]
url = "sqlite://gw.db"

[[principals]]
name = "admin"
role = "admin"
token_env = "UNUSED_TOKEN_ADMIN"

[[capabilities]]
name = "pay"
category = "keyed"
key = { business_ref = "order_id", significant = [{ arg = "amount", type = "money", default_currency = "USD" }] }

[[capabilities.limits]]
name = "pay_budget"
argument = "amount"
max = "10.00"
currency = "USD"
window = "24h"
over = "require_approval"

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:9/v1/charges"
effect_ref = "/id"
body = { order_id = "{arg.order_id}", amount_minor = 1250, currency = "USD" }
"#;

#[tokio::test]
async fn detection_and_control_listings_keep_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let state = open_state(dir.path(), CONTROLS, &[("admin", "tok-admin")]).await;
    let gate = state.gate().clone();
    let gw = serve_app(state).await;
    gate.place_hold(
        "detection",
        "pay",
        &oncegate_core::config::HoldOn::BusinessRef,
        Some(&serde_json::json!("o-wire-2")),
        "finding f_1: paid twice",
        serde_json::json!({}),
    )
    .await
    .unwrap();
    // A doubt is a stored switch under its own prefix: written as the sweep writes it.
    gate.set_kill_switch(
        "oncegate-sweep",
        "keys-ignored:pay",
        Some("a second effect".into()),
    )
    .await
    .unwrap();
    let killed = http()
        .put(format!("{gw}/v1/admin/kill-switches/pay"))
        .bearer_auth("tok-admin")
        .json(&serde_json::json!({"killed": true, "reason": "incident 34"}))
        .send()
        .await
        .unwrap();
    assert_eq!(killed.status(), 200);
    let killed = killed.text().await.unwrap();
    let findings = get(&format!("{gw}/v1/findings")).await;
    let holds = get(&format!("{gw}/v1/admin/holds")).await;
    let doubts = get(&format!("{gw}/v1/admin/doubts")).await;
    let limits = get(&format!("{gw}/v1/limits")).await;
    insta::assert_snapshot!("kill_switches", scrubbed(&killed));
    insta::assert_snapshot!("findings", scrubbed(&findings));
    insta::assert_snapshot!("holds", scrubbed(&holds));
    insta::assert_snapshot!("doubts", scrubbed(&doubts));
    insta::assert_snapshot!("limits", scrubbed(&limits));
    let listed: Value = serde_json::from_str(&holds).unwrap();
    let hold = listed["holds"][0]["id"].as_str().unwrap();
    let cleared_hold = post(&format!("{gw}/v1/admin/holds/{hold}/clear")).await;
    let cleared_doubt = post(&format!("{gw}/v1/admin/doubts/pay/keys_ignored/clear")).await;
    insta::assert_snapshot!("cleared_hold", scrubbed(&cleared_hold));
    insta::assert_snapshot!("cleared_doubt", scrubbed(&cleared_doubt));
}

/// An admin's `POST` without a body: its answer's bytes.
async fn post(url: &str) -> String {
    let r = http()
        .post(url)
        .bearer_auth("tok-admin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}
