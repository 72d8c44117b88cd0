//! The detection backstop end to end: real `oncegate sandbox` and `oncegate serve`
//! processes. A charge made straight at the provider (a direct credential, bypassing
//! the gateway) duplicates one the gateway made; the scheduler's next tick finds it in
//! the provider's listing, holds the order, and an admin clears the hold.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{API_KEY, CHARGE_DETECTION as DETECTION, Proc, Setup, client};

fn setup(webhook: &str) -> Setup {
    let gateway = format!(
        "[gateway]\nalert_webhook = \"{webhook}\"\nalert_webhook_secret_env = \"ONCEGATE_TEST_WEBHOOK_SECRET\"\n"
    );
    Setup::with_registry(&[], |text| {
        text.replacen("[gateway]\n", &gateway, 1).replacen(
            "# --- refund:",
            &format!("{DETECTION}# --- refund:"),
            1,
        )
    })
}

const SECRET: &str = "whsec_test";

/// One request a webhook receiver got: its delivery id, and whether its signature
/// verified.
#[derive(Debug)]
struct Received {
    delivery: String,
    signed: bool,
    body: Value,
}

/// A webhook receiver on loopback that answers 500 to its first request and 200 to
/// the others, and keeps what it received.
fn receiver() -> (String, Arc<Mutex<Vec<Received>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let seen = got.clone();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut headers = Vec::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                headers.push(line.trim_end().to_owned());
            }
            let header = |name: &str| {
                headers
                    .iter()
                    .find_map(|h| {
                        let (k, v) = h.split_once(':')?;
                        k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
                    })
                    .unwrap_or_default()
            };
            let length: usize = header("content-length").parse().unwrap_or(0);
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let now = jiff::Timestamp::now().as_second();
            seen.lock().unwrap().push(Received {
                delivery: header("oncegate-delivery"),
                signed: oncegate_gateway::webhook::verify(
                    SECRET.as_bytes(),
                    &header("oncegate-signature"),
                    &body,
                    now,
                    300,
                ),
                body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            });
            let status = if n == 0 {
                "500 Internal Server Error"
            } else {
                "200 OK"
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    (url, got)
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
    let (hook, received) = receiver();
    let setup = setup(&hook);
    let gw = setup.gateway_with(&[("ONCEGATE_TEST_WEBHOOK_SECRET", SECRET)]);
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

    // The webhook: the first delivery failed (500), the retry landed; both carry the
    // finding's id as the delivery id and a valid signature; nothing else was sent.
    let deadline = Instant::now() + Duration::from_secs(20);
    while received.lock().unwrap().len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    let got = received.lock().unwrap();
    assert_eq!(got.len(), 2, "{got:?}");
    let id = found[0]["id"].as_str().unwrap();
    assert!(got.iter().all(|r| r.delivery == id && r.signed), "{got:?}");
    assert_eq!(got[1].body["kind"], "bypass", "{got:?}");
    assert!(
        findings(&gw)[0]["delivered_at"].is_string(),
        "{:?}",
        findings(&gw)
    );
}

#[test]
fn oncegate_detect_runs_the_rules_on_demand_and_holds_list_and_clear_them() {
    // The scheduler's slot is a year long (an hourly one could roll over mid-test and
    // raise the finding first), so it runs once at startup (over nothing): what is
    // found below is found by `oncegate detect`, beside the running gateway.
    let setup = Setup::with_registry(&[], |text| {
        text.replacen(
            "# --- refund:",
            &format!(
                "{}# --- refund:",
                DETECTION.replace("every = \"1s\"", "every = \"8760h\"")
            ),
            1,
        )
    });
    let gw = setup.gateway();
    let config = setup.dir.path().join("oncegate.toml");
    let config = config.to_str().unwrap();
    for order in ["D-1", "D-2"] {
        let o = call(
            &gw,
            json!({"order_id": order, "amount": "40.00", "memo": "x"}),
        );
        assert_eq!(o["status"], "applied", "{o}");
    }
    // Legitimate distinct charges: nothing found.
    let clean = setup.oncegate(&["detect", "--config", config, "--since", "1h", "--json"]);
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    let report: Value = serde_json::from_slice(&clean.stdout).unwrap();
    assert_eq!(report["findings"], json!([]), "{report}");
    assert_eq!(report["runs"][0]["compared"], 2, "{report}");
    assert_eq!(
        report["runs"][0]["listed"], 2,
        "the provider listed both: {report}"
    );

    let direct = client()
        .post(format!("{}/v1/charges", setup.sandbox.url))
        .bearer_auth(API_KEY)
        .json(&json!({"order_id": "D-1", "amount_minor": 4000, "currency": "USD"}))
        .send()
        .unwrap();
    assert!(direct.status().is_success());

    // The table names the bypass and its hold; stderr has the run's line.
    let found = setup.oncegate(&[
        "detect",
        "--config",
        config,
        "--since",
        "1h",
        "--rule",
        "charge_card",
    ]);
    let table = String::from_utf8_lossy(&found.stdout);
    let progress = String::from_utf8_lossy(&found.stderr);
    assert!(found.status.success(), "{table}{progress}");
    assert!(
        table.starts_with("FINDING") && table.contains("bypass"),
        "{table}"
    );
    assert!(progress.contains("1 new finding(s)"), "{progress}");
    let hold = table
        .split_whitespace()
        .find(|w| w.starts_with("h_"))
        .unwrap_or_else(|| panic!("no hold in {table}"))
        .to_owned();
    // Run again: found again, raised never twice.
    let again = setup.oncegate(&["detect", "--config", config, "--since", "1h", "--json"]);
    let report: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(report["findings"], json!([]), "{report}");
    assert_eq!(
        report["runs"][0]["known"].as_array().unwrap().len(),
        1,
        "{report}"
    );
    assert_eq!(
        findings(&gw).len(),
        1,
        "the gateway lists the CLI's finding"
    );

    // The running gateway honours the hold the CLI placed (its cache is ≤500 ms).
    std::thread::sleep(Duration::from_millis(700));
    let held = call(
        &gw,
        json!({"order_id": "D-1", "amount": "5.00", "memo": "x"}),
    );
    assert_eq!(held["status"], "refused", "{held}");
    assert!(held.to_string().contains("OG-0026"), "{held}");

    let remote = ["--url", gw.url.as_str(), "--token", "tok-ops"];
    let listed = setup.oncegate(&[&["holds", "list"][..], &remote].concat());
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success() && text.contains(&hold) && text.contains("D-1"),
        "{text}"
    );
    // An agent's token is refused, and says so.
    let agent = setup.oncegate(&[
        "holds",
        "list",
        "--url",
        gw.url.as_str(),
        "--token",
        "tok-planner",
    ]);
    assert!(!agent.status.success());
    let cleared = setup.oncegate(
        &[
            &[
                "holds",
                "clear",
                hold.as_str(),
                "--reason",
                "refunded by hand",
            ][..],
            &remote,
        ]
        .concat(),
    );
    assert!(
        cleared.status.success(),
        "{}",
        String::from_utf8_lossy(&cleared.stdout)
    );
    let twice = setup.oncegate(&[&["holds", "clear", hold.as_str()][..], &remote].concat());
    assert!(
        !twice.status.success(),
        "a cleared hold is not cleared twice"
    );
    std::thread::sleep(Duration::from_millis(700));
    let after = call(
        &gw,
        json!({"order_id": "D-1", "amount": "5.00", "memo": "x"}),
    );
    assert_eq!(after["status"], "applied", "{after}");
    let audit = setup.oncegate(&["audit", "verify", "--config", config]);
    assert!(
        audit.status.success(),
        "the CLI's writes beside the gateway keep the chain whole: {}",
        String::from_utf8_lossy(&audit.stdout)
    );

    let unknown = setup.oncegate(&["detect", "--config", config, "--rule", "nope"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no duplicate rule is named `nope`"));
}

#[test]
fn an_mcp_listing_is_read_in_pages_like_an_http_one() {
    // The sandbox's `list_effects` tool on its MCP endpoint, one effect per page so
    // the cursor is followed.
    let mcp = DETECTION
        .replace("every = \"1s\"", "every = \"8760h\"")
        .replace("kind = \"http\"\nurl = \"{env.SANDBOX_URL}/v1/effects\"", "kind = \"mcp\"\nurl = \"{env.SANDBOX_URL}/mcp\"\ntool = \"list_effects\"\npage_size = 1");
    assert!(mcp.contains("tool = \"list_effects\""));
    let setup = Setup::with_registry(&[], |text| {
        text.replacen("# --- refund:", &format!("{mcp}# --- refund:"), 1)
    });
    let gw = setup.gateway();
    let config = setup.dir.path().join("oncegate.toml");
    let config = config.to_str().unwrap();
    for order in ["M-1", "M-2"] {
        let o = call(
            &gw,
            json!({"order_id": order, "amount": "7.00", "memo": "x"}),
        );
        assert_eq!(o["status"], "applied", "{o}");
    }
    let direct = client()
        .post(format!("{}/v1/charges", setup.sandbox.url))
        .bearer_auth(API_KEY)
        .json(&json!({"order_id": "M-2", "amount_minor": 700, "currency": "USD"}))
        .send()
        .unwrap();
    assert!(direct.status().is_success());
    let out = setup.oncegate(&["detect", "--config", config, "--since", "1h", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["runs"][0]["listed"], 3,
        "three pages of one: {report}"
    );
    let found = report["findings"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{report}");
    assert_eq!(found[0]["kind"], "bypass");
    assert!(found[0]["effects"].to_string().contains("M-2"), "{report}");
}
