//! Trusting nothing unproven about a provider (issue 32), with real `oncegate sandbox`
//! and `oncegate serve` processes:
//! - a reconciliation read that cannot find what oncegate knows was applied is caught
//!   by the sweep's read-back, and until an admin clears the doubt its "not found"
//!   never counts as absence (an unknown intent is not re-executed);
//! - a provider that ignores idempotency keys is caught when a keyed re-execution
//!   answers another charge than the one the intent already knew (an MCP call's late
//!   answer), and the capability is treated as `non_idempotent` until cleared: the
//!   next unknown intent waits for its first attempt instead of charging again.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Log, Proc, Setup, call, client, effects_where, fault, intent, spawn_logged};

/// How long the sandbox takes before it commits: well past the gateway's 1 s timeout.
const COMMIT_AFTER_MS: u64 = 4000;

/// `GET path` as the admin (`tok-ops`).
fn admin_get(gw: &Proc, path: &str) -> Value {
    client()
        .get(format!("{}{path}", gw.url))
        .bearer_auth("tok-ops")
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// The doubts that are on, as `(capability, doubt)`.
fn doubts(gw: &Proc) -> Vec<(String, String)> {
    admin_get(gw, "/v1/admin/doubts")["doubts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|d| {
            (
                d["capability"].as_str().unwrap_or_default().to_owned(),
                d["doubt"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Waits (generously: the machine is shared) until `wanted` is among the doubts.
fn until_doubted(gw: &Proc, capability: &str, doubt: &str) -> Vec<(String, String)> {
    let wanted = (capability.to_owned(), doubt.to_owned());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let on = doubts(gw);
        if on.contains(&wanted) || Instant::now() > deadline {
            return on;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The effects of `kind` the sandbox committed for one order.
fn effects_of(sandbox: &Proc, kind: &str, order: &str) -> Vec<Value> {
    effects_where(sandbox, &format!("kind={kind}&order_id={order}"))
}

/// The gateway, with its log kept for the test to read.
fn gateway(setup: &Setup, sweep_every: &str) -> (Proc, Log) {
    spawn_logged(setup.gateway_command(&[], sweep_every))
}

/// Every value of `metric` on the gateway's `/metrics`, summed.
fn metric(gw: &Proc, metric: &str) -> f64 {
    let text = client()
        .get(format!("{}/metrics", gw.url))
        .send()
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(metric))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `send_email` whose reconciliation read asks for a reference the provider never
/// has (a typo in its query), read back every second, with a 1 s settle horizon.
fn unproven_read() -> Setup {
    Setup::with_registry(&[], |text| {
        text.replace(
            "url = \"{env.SANDBOX_URL}/v1/emails?dedupe_ref={key}\"",
            "url = \"{env.SANDBOX_URL}/v1/emails?dedupe_ref=x{key}\"\nread_back_every = \"1s\"",
        )
        .replace(
            "name = \"send_email\"\n",
            "name = \"send_email\"\nsettle_horizon = \"1s\"\n",
        )
        .replace("attempt_ceiling = 5\n", "attempt_ceiling = 100\n")
    })
}

fn email(order: &str) -> Value {
    json!({"order_id": order, "to": "ann@example.com", "template": "receipt", "body": "Thanks!"})
}

#[test]
fn a_reconciliation_read_that_cannot_find_applied_effects_is_doubted_and_proves_no_absence() {
    let setup = unproven_read();
    let (gw, log) = gateway(&setup, "200ms");
    let sent = call(&gw, "send_email", &email("RB-1")).1;
    assert_eq!(sent["status"], "applied", "{sent}");

    // The sweep reads the applied email back through the read: it is not found.
    let on = until_doubted(&gw, "send_email", "reconciliation_unproven");
    assert!(
        on.contains(&("send_email".into(), "reconciliation_unproven".into())),
        "{on:?}"
    );
    let alert = log.wait_for(Duration::from_secs(5), |l| {
        l.contains("reconciliation_unproven") && l.contains("cannot prove absence")
    });
    assert!(alert.is_ok(), "no alert line: {alert:?}");
    let findings = admin_get(&gw, "/v1/findings");
    assert!(
        findings["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["rule"] == "reconciliation_unproven" && f["capability"] == "send_email"),
        "{findings}"
    );
    assert!(metric(&gw, "oncegate_provider_doubts_total") >= 1.0);
    assert!(metric(&gw, "oncegate_read_backs_total") >= 1.0);

    // An email whose answer is lost: the sweep's reads say "not found" past the settle
    // horizon, which without the doubt would be absence (and the repeat a second email).
    fault(&setup.sandbox, "/v1/emails", "drop_after_commit", 0);
    let lost = call(&gw, "send_email", &email("RB-2")).1;
    assert_eq!(lost["status"], "unknown", "{lost}");
    let key = lost["intent_key"].as_str().unwrap().to_owned();
    std::thread::sleep(Duration::from_secs(3));
    let swept = intent(&gw, &key);
    assert_eq!(
        swept["state"], "unknown",
        "not found is not absence: {swept}"
    );
    let again = call(&gw, "send_email", &email("RB-2")).1;
    assert!(
        matches!(
            again["status"].as_str(),
            Some("pending_approval" | "unknown")
        ),
        "a repeat waits for a human, it does not send again: {again}"
    );
    assert_eq!(effects_of(&setup.sandbox, "email", "RB-2").len(), 1);

    // `check-config --probe` reports it as a problem.
    let config = setup.dir.path().join("oncegate.toml");
    let probe = setup.oncegate(&[
        "check-config",
        "--probe",
        "--config",
        config.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&probe.stderr);
    assert!(!probe.status.success(), "{stderr}");
    assert!(
        stderr.contains("send_email reconcile: reconciliation_unproven"),
        "{stderr}"
    );

    // An admin clears it (audited); the doubt is gone.
    let cleared = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args([
            "doubts",
            "clear",
            "send_email",
            "reconciliation_unproven",
            "--reason",
            "read query fixed",
            "--url",
            &gw.url,
            "--token",
            "tok-ops",
        ])
        .output()
        .unwrap();
    assert!(
        cleared.status.success(),
        "{}",
        String::from_utf8_lossy(&cleared.stderr)
    );
    assert!(doubts(&gw).is_empty(), "{:?}", doubts(&gw));
    let audit = client()
        .get(format!("{}/v1/audit", gw.url))
        .bearer_auth("tok-ops")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        audit.contains("read query fixed")
            && audit.contains("\"doubt\":\"reconciliation_unproven\""),
        "{audit}"
    );
}

/// `charge_card` over MCP (keyed, reconciled by the key) with 1 s timeouts.
fn charges(ignore: &[&str]) -> Setup {
    Setup::with_registry(ignore, |text| {
        text.replace("timeout = \"5s\"", "timeout = \"1s\"")
            .replace("attempt_ceiling = 10\n", "attempt_ceiling = 100\n")
    })
}

fn charge(order: &str) -> Value {
    json!({"order_id": order, "amount": "7.00"})
}

/// A charge whose first attempt commits late (after the timeout); the agent repeats
/// every 300 ms until it hears the charge happened. Answers the statuses it heard, once
/// the late commit has certainly landed (so that a duplicate, if any, is counted).
fn late_charge(setup: &Setup, gw: &Proc, order: &str) -> Vec<String> {
    let started = Instant::now();
    let heard = repeat_late_charge(setup, gw, order);
    let landed = started + Duration::from_millis(COMMIT_AFTER_MS + 2000);
    if let Some(left) = landed.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
    heard
}

fn repeat_late_charge(setup: &Setup, gw: &Proc, order: &str) -> Vec<String> {
    fault(&setup.sandbox, "/v1/charges", "slow", COMMIT_AFTER_MS);
    let first = call(gw, "charge_card", &charge(order)).1;
    assert_eq!(first["status"], "unknown", "{first}");
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let again = call(gw, "charge_card", &charge(order)).1;
        seen.push(again["status"].as_str().unwrap_or("?").to_owned());
        if matches!(again["status"].as_str(), Some("replayed" | "applied"))
            || Instant::now() > deadline
        {
            return seen;
        }
    }
}

#[test]
fn a_provider_that_ignores_keys_is_caught_and_its_capability_waits_like_a_non_idempotent_one() {
    let setup = charges(&["charges"]);
    let (gw, log) = gateway(&setup, "1h");

    // The repeat re-executes at once with the same key (keyed: the provider is trusted
    // to dedupe); this provider makes a second charge. The first attempt's late answer
    // then names another charge than the one recorded.
    let heard = late_charge(&setup, &gw, "KI-1");
    let on = until_doubted(&gw, "charge_card", "keys_ignored");
    assert!(
        on.contains(&("charge_card".into(), "keys_ignored".into())),
        "heard {heard:?}; doubts {on:?}"
    );
    let twice = effects_of(&setup.sandbox, "charge", "KI-1");
    eprintln!(
        "charges for KI-1 (the provider ignored the key): {}",
        twice.len()
    );
    assert_eq!(twice.len(), 2, "{twice:?}");
    let alert = log.wait_for(Duration::from_secs(5), |l| {
        l.contains("keys_ignored")
            && l.contains("the provider does not honour idempotency keys for charge_card")
    });
    assert!(alert.is_ok(), "no alert line: {alert:?}");
    let findings = admin_get(&gw, "/v1/findings");
    assert!(
        findings["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["rule"] == "keys_ignored" && f["capability"] == "charge_card"),
        "{findings}"
    );

    // Now treated as non_idempotent: the next intent's repeats hear "unknown" until the
    // first attempt lands, and nothing is charged twice.
    let heard = late_charge(&setup, &gw, "KI-2");
    eprintln!("KI-2's repeats heard {heard:?}");
    assert!(
        heard[..heard.len() - 1].iter().all(|s| s == "unknown"),
        "{heard:?}"
    );
    let once = effects_of(&setup.sandbox, "charge", "KI-2");
    eprintln!("charges for KI-2 (after the doubt): {}", once.len());
    assert_eq!(once.len(), 1, "{once:?}");

    // An admin clears it through the API.
    let cleared = client()
        .post(format!(
            "{}/v1/admin/doubts/charge_card/keys_ignored/clear",
            gw.url
        ))
        .bearer_auth("tok-ops")
        .json(&json!({"reason": "provider fixed"}))
        .send()
        .unwrap();
    assert_eq!(cleared.status(), 200);
    assert!(doubts(&gw).is_empty());
    let again = client()
        .post(format!(
            "{}/v1/admin/doubts/charge_card/keys_ignored/clear",
            gw.url
        ))
        .bearer_auth("tok-ops")
        .send()
        .unwrap();
    assert_eq!(again.status(), 404, "nothing left to clear");
}

#[test]
fn a_provider_that_honours_keys_raises_no_doubt() {
    let setup = charges(&[]);
    let (gw, _log) = gateway(&setup, "1h");
    late_charge(&setup, &gw, "KH-1");
    assert_eq!(effects_of(&setup.sandbox, "charge", "KH-1").len(), 1);
    assert!(doubts(&gw).is_empty(), "{:?}", doubts(&gw));
}
