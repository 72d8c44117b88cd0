//! The detection backstop end to end: real `oncegate sandbox` and `oncegate serve`
//! processes. A charge made straight at the provider (a direct credential, bypassing
//! the gateway) duplicates one the gateway made; the scheduler's next tick finds it in
//! the provider's listing, holds the order, and an admin clears the hold.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{API_KEY, Proc, Setup, client};

/// The example's `charge_card` with a hold-escalating duplicate rule ticking every
/// second and the sandbox's effects listing as upstream truth.
const DETECTION: &str = r#"
[capabilities.duplicates]
on = ["business_ref", "amount"]
within = "24h"
every = "1s"
escalation = "hold"

[capabilities.listing]
kind = "http"
url = "{env.SANDBOX_URL}/v1/effects"
headers = { Authorization = "Bearer {env.SANDBOX_API_KEY}" }
params = { kind = "charge" }
effect_ref = "/id"
key = "/idempotency_key"
arguments = { order_id = "/order_id", amount = { minor = "/amount_minor", currency = "/currency" } }

"#;

fn setup() -> Setup {
    Setup::with_registry(&[], |text| {
        text.replacen("# --- refund:", &format!("{DETECTION}# --- refund:"), 1)
    })
}

fn call(gw: &Proc, arguments: Value) -> Value {
    client()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .json(&json!({"capability": "charge_card", "arguments": arguments}))
        .send()
        .unwrap()
        .json()
        .unwrap()
}

fn admin_get(gw: &Proc, path: &str) -> Value {
    client()
        .get(format!("{}{path}", gw.url))
        .bearer_auth("tok-ops")
        .send()
        .unwrap()
        .json()
        .unwrap()
}

fn findings(gw: &Proc) -> Vec<Value> {
    admin_get(gw, "/v1/findings")["findings"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_bypass_duplicate_is_found_within_a_tick_held_and_cleared() {
    let setup = setup();
    let gw = setup.gateway();
    let first = call(
        &gw,
        json!({"order_id": "A-1", "amount": "12.50", "memo": "x"}),
    );
    assert_eq!(first["status"], "applied", "{first}");
    // A legitimate, distinct charge: no finding may name it.
    let other = call(
        &gw,
        json!({"order_id": "B-1", "amount": "12.50", "memo": "x"}),
    );
    assert_eq!(other["status"], "applied", "{other}");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        findings(&gw).is_empty(),
        "no false positives: {:?}",
        findings(&gw)
    );

    // The same order charged again with the provider's own credential.
    let direct = client()
        .post(format!("{}/v1/charges", setup.sandbox.url))
        .bearer_auth(API_KEY)
        .json(&json!({"order_id": "A-1", "amount_minor": 1250, "currency": "USD"}))
        .send()
        .unwrap();
    assert!(direct.status().is_success(), "{}", direct.text().unwrap());

    let deadline = Instant::now() + Duration::from_secs(20);
    let found = loop {
        let f = findings(&gw);
        if !f.is_empty() || Instant::now() > deadline {
            break f;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["kind"], "bypass", "{}", found[0]);
    assert_eq!(
        found[0]["effects"].as_array().unwrap().len(),
        2,
        "{}",
        found[0]
    );

    // The order is held: the next call for it is refused, with a line for the model.
    let held = call(
        &gw,
        json!({"order_id": "A-1", "amount": "30.00", "memo": "x"}),
    );
    assert_eq!(held["status"], "refused", "{held}");
    assert!(held.to_string().contains("OG-0026"), "{held}");
    // Others go on.
    let c = call(
        &gw,
        json!({"order_id": "C-1", "amount": "1.00", "memo": "x"}),
    );
    assert_eq!(c["status"], "applied", "{c}");

    let holds = admin_get(&gw, "/v1/admin/holds")["holds"].clone();
    assert_eq!(holds.as_array().unwrap().len(), 1, "{holds}");
    let id = holds[0]["id"].as_str().unwrap().to_owned();
    // An agent cannot clear it.
    let agent = client()
        .post(format!("{}/v1/admin/holds/{id}/clear", gw.url))
        .bearer_auth("tok-planner")
        .send()
        .unwrap();
    assert_eq!(agent.status().as_u16(), 403);
    let cleared = client()
        .post(format!("{}/v1/admin/holds/{id}/clear", gw.url))
        .bearer_auth("tok-ops")
        .json(&json!({"reason": "refunded the direct charge"}))
        .send()
        .unwrap();
    assert_eq!(cleared.status().as_u16(), 200);
    let after = call(
        &gw,
        json!({"order_id": "A-1", "amount": "30.00", "memo": "x"}),
    );
    assert_eq!(after["status"], "applied", "{after}");

    // Every later tick finds the same finding again, and raises nothing new.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(findings(&gw).len(), 1, "{:?}", findings(&gw));
}
