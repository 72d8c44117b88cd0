//! The gateway end to end: real `oncegate sandbox` and `oncegate serve` processes,
//! real sockets, a real SQLite file.
//!
//! Why one file: every scenario shares the same processes and helpers; split by surface
//! (mcp.rs, late.rs, store_faults.rs, args.rs) where a harness of its own was needed.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Proc, Setup, client, effects, fault};

fn call(gw: &Proc, token: &str, capability: &str, arguments: Value) -> (u16, Value) {
    call_at(&gw.url, token, capability, arguments)
}

fn call_at(url: &str, token: &str, capability: &str, arguments: Value) -> (u16, Value) {
    let r = client()
        .post(format!("{url}/v1/calls"))
        .bearer_auth(token)
        .json(&json!({"capability": capability, "arguments": arguments}))
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(Value::Null))
}

#[test]
fn timeout_after_commit_then_drifting_replans_give_one_charge() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    fault(&setup.sandbox, "/v1/charges", "stall_after_commit", 5000);
    let (_, first) = call(
        &gw,
        "tok-planner",
        "charge_card",
        json!({"order_id": "T-1", "amount": "12.50", "memo": "first"}),
    );
    assert_eq!(first["status"], "unknown", "{first}");
    assert!(
        first["message"]
            .as_str()
            .unwrap()
            .contains("do not call again")
    );
    for amount in [json!(12.5), json!("USD 12.50"), json!({"minor": 1250})] {
        let (code, again) = call(
            &gw,
            "tok-planner",
            "charge_card",
            json!({"order_id": "T-1", "amount": amount, "memo": "the charge failed, reissue it"}),
        );
        assert_eq!(
            (code, again["status"].as_str()),
            (200, Some("replayed")),
            "{again}"
        );
        assert!(again["effect_ref"].as_str().unwrap().starts_with("ch_"));
        assert_eq!(
            again["result"]["order_id"], "T-1",
            "a reconciled replay carries the charge itself: {again}"
        );
    }
    assert_eq!(effects(&setup.sandbox, "charge").len(), 1);
}

#[test]
fn a_provider_that_ignores_keys_still_sends_one_email() {
    let setup = Setup::new(&["emails"]);
    let gw = setup.gateway();
    fault(&setup.sandbox, "/v1/emails", "stall_after_commit", 5000);
    let args = json!({"order_id": "E-1", "to": "Ann@Example.com", "template": "receipt", "body": "Thanks!"});
    let (_, first) = call(&gw, "tok-planner", "send_email", args);
    assert_eq!(first["status"], "unknown", "{first}");
    for to in ["Ann@example.COM", " Ann@EXAMPLE.com "] {
        let (_, again) = call(
            &gw,
            "tok-planner",
            "send_email",
            json!({"order_id": "E-1", "to": to, "template": "Receipt", "body": "Thanks again!"}),
        );
        assert_eq!(again["status"], "replayed", "{again}");
    }
    assert_eq!(effects(&setup.sandbox, "email").len(), 1);
}

#[test]
fn concurrent_identical_calls_are_one_effect_and_distinct_orders_are_not_deduped() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    fault(&setup.sandbox, "/v1/charges", "slow", 300);
    let statuses: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..32)
            .map(|i| {
                let gw = &gw;
                s.spawn(move || call(gw, "tok-planner", "charge_card", json!({"order_id": "C-1", "amount": "7.00", "memo": format!("attempt {i}")})).1["status"].as_str().unwrap().to_owned())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        statuses.iter().filter(|s| *s == "applied").count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses
            .iter()
            .all(|s| ["applied", "in_flight", "replayed"].contains(&s.as_str())),
        "{statuses:?}"
    );
    assert_eq!(effects(&setup.sandbox, "charge").len(), 1);

    std::thread::scope(|s| {
        for i in 0..10 {
            let gw = &gw;
            s.spawn(move || {
                assert_eq!(
                    call(
                        gw,
                        "tok-planner",
                        "charge_card",
                        json!({"order_id": format!("D-{i}"), "amount": "1.00"})
                    )
                    .1["status"],
                    "applied"
                )
            });
        }
    });
    assert_eq!(effects(&setup.sandbox, "charge").len(), 11);
}

#[test]
fn approvals_execute_once_and_only_approvers_decide() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    // An agent cannot name a principal in the body.
    let r = client()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .json(&json!({"capability": "refund", "principal": "alice", "arguments": {"order_id": "R-1", "amount": "10"}}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(effects(&setup.sandbox, "refund").is_empty());

    let (code, held) = call(
        &gw,
        "tok-planner",
        "refund",
        json!({"order_id": "R-1", "amount": "250.00"}),
    );
    assert_eq!(
        (code, held["status"].as_str()),
        (202, Some("pending_approval")),
        "{held}"
    );
    let id = held["approval_id"].as_str().unwrap().to_owned();
    let (_, again) = call(
        &gw,
        "tok-planner",
        "refund",
        json!({"order_id": "R-1", "amount": 250}),
    );
    assert_eq!(again["approval_id"].as_str(), Some(id.as_str()));

    let agent = client()
        .post(format!("{}/v1/approvals/{id}/approve", gw.url))
        .bearer_auth("tok-planner")
        .send()
        .unwrap();
    assert_eq!(agent.status().as_u16(), 403);
    let results: Vec<Value> = std::thread::scope(|s| {
        let hs: Vec<_> = ["tok-alice", "tok-bob", "tok-alice"]
            .into_iter()
            .map(|t| {
                let (gw, id) = (&gw, &id);
                s.spawn(move || {
                    client()
                        .post(format!("{}/v1/approvals/{id}/approve", gw.url))
                        .bearer_auth(t)
                        .send()
                        .unwrap()
                        .json::<Value>()
                        .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(effects(&setup.sandbox, "refund").len(), 1, "{results:?}");
    let (_, after) = call(
        &gw,
        "tok-planner",
        "refund",
        json!({"order_id": "R-1", "amount": "250"}),
    );
    assert_eq!(after["status"], "replayed");
}

#[test]
fn missing_or_wrong_tokens_get_401_and_nothing_runs() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    let no_token = client()
        .post(format!("{}/v1/calls", gw.url))
        .json(
            &json!({"capability": "charge_card", "arguments": {"order_id": "X-1", "amount": "1"}}),
        )
        .send()
        .unwrap();
    assert_eq!(no_token.status().as_u16(), 401);
    assert!(no_token.headers().contains_key("www-authenticate"));
    let (code, _) = call(
        &gw,
        "tok-wrong",
        "charge_card",
        json!({"order_id": "X-1", "amount": "1"}),
    );
    assert_eq!(code, 401);
    let malformed = client()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .body("{not json")
        .send()
        .unwrap();
    assert_eq!(malformed.status().as_u16(), 400);
    let (code, bad) = call(
        &gw,
        "tok-planner",
        "charge_card",
        json!({"order_id": "X-1", "amount": "1.005"}),
    );
    assert_eq!(
        (code, bad["error"]["code"].as_str()),
        (422, Some("OG-0009"))
    );
    let doc: Value = client()
        .get(format!("{}/v1/openapi.json", gw.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(
        doc["paths"]["/v1/calls"]["post"].is_object(),
        "the OpenAPI document is served"
    );
    let big = client()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .body(vec![b'x'; 1024 * 1024])
        .send()
        .unwrap();
    assert_eq!(big.status().as_u16(), 413);
    assert_eq!(big.json::<Value>().unwrap()["error"]["code"], "OG-0022");
    assert!(effects(&setup.sandbox, "charge").is_empty());
}

#[test]
fn a_removed_store_refuses_calls_and_readiness_fails() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    assert_eq!(
        client()
            .get(format!("{}/readyz", gw.url))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        call(
            &gw,
            "tok-planner",
            "charge_card",
            json!({"order_id": "S-1", "amount": "1"})
        )
        .1["status"],
        "applied"
    );
    std::fs::remove_file(setup.db()).unwrap();
    let (code, refused) = call(
        &gw,
        "tok-planner",
        "charge_card",
        json!({"order_id": "S-2", "amount": "1"}),
    );
    assert_eq!(
        (code, refused["reason"]["code"].as_str()),
        (503, Some("OG-0007")),
        "{refused}"
    );
    assert_eq!(
        client()
            .get(format!("{}/readyz", gw.url))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        503
    );
    assert_eq!(
        effects(&setup.sandbox, "charge").len(),
        1,
        "no effect without a durable claim"
    );
}

#[test]
fn a_caller_that_hangs_up_still_gets_its_effect_recorded() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    fault(&setup.sandbox, "/v1/charges", "slow", 800);
    oncegate_gateway::server::install_crypto();
    let impatient = reqwest::blocking::Client::builder()
        .timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    let gone = impatient
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .json(
            &json!({"capability": "charge_card", "arguments": {"order_id": "H-1", "amount": "3"}}),
        )
        .send();
    assert!(gone.is_err(), "the caller hung up");
    // Repeats while the detached effect is still running are in_flight; once it is
    // recorded they replay. Never a second charge.
    let deadline = Instant::now() + Duration::from_secs(10);
    let again = loop {
        let (_, again) = call(
            &gw,
            "tok-planner",
            "charge_card",
            json!({"order_id": "H-1", "amount": "3.00"}),
        );
        if again["status"] != "in_flight" || Instant::now() > deadline {
            break again;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(again["status"], "replayed", "{again}");
    assert_eq!(effects(&setup.sandbox, "charge").len(), 1);
}

#[test]
fn a_gateway_killed_between_commit_and_record_does_not_charge_twice() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    fault(&setup.sandbox, "/v1/charges", "stall_after_commit", 10_000);
    let url = gw.url.clone();
    oncegate_gateway::server::install_crypto();
    let pending = std::thread::spawn(move || {
        let _ = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
            .post(format!("{url}/v1/calls"))
            .bearer_auth("tok-planner")
            .json(&json!({"capability": "charge_card", "arguments": {"order_id": "K-1", "amount": "9.99"}}))
            .send();
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while effects(&setup.sandbox, "charge").is_empty() {
        assert!(Instant::now() < deadline, "the provider never committed");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(gw); // SIGKILL while the gateway waits for the provider's answer.
    let _ = pending.join();

    let gw = setup.gateway();
    std::thread::sleep(Duration::from_millis(3100)); // the dead gateway's lease expires
    let (_, again) = call(
        &gw,
        "tok-planner",
        "charge_card",
        json!({"order_id": "K-1", "amount": 9.99}),
    );
    assert_eq!(again["status"], "replayed", "{again}");
    assert!(again["effect_ref"].as_str().unwrap().starts_with("ch_"));
    assert_eq!(effects(&setup.sandbox, "charge").len(), 1);
}

fn keyed_call(
    gw: &Proc,
    key: Option<&str>,
    capability: &str,
    arguments: Value,
    step: &str,
) -> (u16, Value) {
    let mut req = client()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .header("Oncegate-Run-Id", "run-1")
        .header("Oncegate-Step-Id", step)
        .json(&json!({"capability": capability, "arguments": arguments}));
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    let r = req.send().unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}

#[test]
fn coded_orchestrators_keys_follow_the_ietf_draft() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    let entry = json!({"entry_ref": "L-1", "account": "4000", "amount": "12.00"});
    let (code, missing) = keyed_call(&gw, None, "append_ledger", entry.clone(), "s1");
    assert_eq!(
        (code, missing["error"]["code"].as_str()),
        (400, Some("OG-0017")),
        "{missing}"
    );
    let (code, first) = keyed_call(&gw, Some("orch-1"), "append_ledger", entry.clone(), "s1");
    assert_eq!(
        (code, first["status"].as_str()),
        (200, Some("applied")),
        "{first}"
    );
    let (code, again) = keyed_call(
        &gw,
        Some("orch-1"),
        "append_ledger",
        json!({"entry_ref": "L-1", "account": "4000", "amount": 12}),
        "s1",
    );
    assert_eq!(
        (code, again["status"].as_str()),
        (200, Some("replayed")),
        "{again}"
    );
    let (code, reused) = keyed_call(
        &gw,
        Some("orch-1"),
        "append_ledger",
        json!({"entry_ref": "L-1", "account": "4000", "amount": "13.00"}),
        "s1",
    );
    assert_eq!(
        (code, reused["error"]["code"].as_str()),
        (422, Some("OG-0018")),
        "{reused}"
    );
    assert_eq!(effects(&setup.sandbox, "ledger").len(), 1);

    fault(&setup.sandbox, "/v1/ledger", "slow", 700);
    let gw_ref = &gw;
    std::thread::scope(|s| {
        let slow = s.spawn(move || {
            keyed_call(
                gw_ref,
                Some("orch-2"),
                "append_ledger",
                json!({"entry_ref": "L-2", "account": "4000", "amount": "1"}),
                "s2",
            )
        });
        std::thread::sleep(Duration::from_millis(250));
        let (code, busy) = keyed_call(
            gw_ref,
            Some("orch-2"),
            "append_ledger",
            json!({"entry_ref": "L-2", "account": "4000", "amount": "1"}),
            "s2",
        );
        assert_eq!(code, 409, "{busy}");
        assert_eq!(slow.join().unwrap().0, 200);
    });
}

#[test]
fn reads_pass_through_under_a_per_principal_rate_cap() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    let codes: Vec<u16> = (0..6)
        .map(|_| call(&gw, "tok-planner", "get_order", json!({"order_id": "A-1"})).0)
        .collect();
    assert_eq!(codes[0], 200, "{codes:?}");
    assert!(
        codes.contains(&429),
        "a burst above 3/s is capped: {codes:?}"
    );
    let (code, other) = call(&gw, "tok-subagent", "get_order", json!({"order_id": "A-1"}));
    assert_eq!(code, 200, "another principal has its own bucket: {other}");
    assert_eq!(other["result"]["order_id"], "A-1");
}

/// Accepts one HTTP request and returns its body.
fn one_webhook() -> (String, std::thread::JoinHandle<String>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    let handle = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut conn = loop {
            match listener.accept() {
                Ok((conn, _)) => break conn,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => panic!("no webhook arrived: {e}"),
            }
        };
        conn.set_nonblocking(false).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = conn.read(&mut chunk).unwrap();
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if body.len() >= len {
                    let _ = conn.write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n");
                    return body.to_owned();
                }
            }
            if n == 0 {
                return String::new();
            }
        }
    });
    (url, handle)
}

#[test]
fn cross_run_repeats_alert_by_webhook_and_metrics() {
    let setup = Setup::new(&[]);
    let (hook, received) = one_webhook();
    let gw = setup.gateway_with(&[("TEST_ALERT_URL", hook.as_str())]);
    let run_call = |run: &str| {
        client()
            .post(format!("{}/v1/calls", gw.url))
            .bearer_auth("tok-planner")
            .header("Oncegate-Run-Id", run)
            .json(&json!({"capability": "charge_card", "arguments": {"order_id": "X-9", "amount": "4.00"}}))
            .send()
            .unwrap()
            .json::<Value>()
            .unwrap()
    };
    assert_eq!(run_call("run-a")["status"], "applied");
    let second = run_call("run-b");
    assert_eq!(
        second["status"], "replayed",
        "global scope: the same intent, replayed"
    );
    assert_eq!(second["alerts"][0]["kind"], "cross_run", "{second}");
    let body: Value = serde_json::from_str(&received.join().unwrap()).unwrap();
    assert_eq!(
        (body["alert"]["kind"].as_str(), body["capability"].as_str()),
        (Some("cross_run"), Some("charge_card")),
        "{body}"
    );
    let metrics = client()
        .get(format!("{}/metrics", gw.url))
        .send()
        .unwrap()
        .text()
        .unwrap();
    for needle in [
        "oncegate_decisions_total{capability=\"charge_card\",outcome=\"replayed\"}",
        "oncegate_alerts_total",
        "oncegate_store_commit_seconds",
        "oncegate_upstream_seconds",
        "oncegate_duplicates_prevented_total",
    ] {
        assert!(
            metrics.contains(needle),
            "{needle} missing from /metrics:\n{metrics}"
        );
    }
    assert_eq!(effects(&setup.sandbox, "charge").len(), 1);
}

fn oncegate_cli(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn admins_switch_capabilities_off_and_approvers_use_the_cli() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    let put = |target: &str, token: &str, body: Value| {
        client()
            .put(format!("{}/v1/admin/kill-switches/{target}", gw.url))
            .bearer_auth(token)
            .json(&body)
            .send()
            .unwrap()
    };
    assert_eq!(
        put("charge_card", "tok-planner", json!({"killed": true}))
            .status()
            .as_u16(),
        403
    );
    assert_eq!(
        put("chrage_card", "tok-ops", json!({"killed": true}))
            .status()
            .as_u16(),
        404
    );
    assert_eq!(
        put(
            "charge_card",
            "tok-ops",
            json!({"killed": true, "reason": "incident 42"})
        )
        .status()
        .as_u16(),
        200
    );
    let (code, refused) = call(
        &gw,
        "tok-planner",
        "charge_card",
        json!({"order_id": "K-1", "amount": "1"}),
    );
    assert_eq!(
        (code, refused["reason"]["code"].as_str()),
        (409, Some("OG-0005")),
        "{refused}"
    );
    assert_eq!(
        put("charge_card", "tok-ops", json!({"killed": false}))
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        call(
            &gw,
            "tok-planner",
            "charge_card",
            json!({"order_id": "K-1", "amount": "1"})
        )
        .1["status"],
        "applied"
    );
    let missing = client()
        .post(format!("{}/v1/admin/breakers/deadbeef/reset", gw.url))
        .bearer_auth("tok-ops")
        .send()
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);

    let (_, held) = call(
        &gw,
        "tok-planner",
        "refund",
        json!({"order_id": "K-1", "amount": "500"}),
    );
    let id = held["approval_id"].as_str().unwrap().to_owned();
    let alice = [
        ("ONCEGATE_URL", gw.url.as_str()),
        ("ONCEGATE_TOKEN", "tok-alice"),
    ];
    let (ok, listed) = oncegate_cli(&["approvals", "list"], &alice);
    assert!(ok && listed.contains(&id), "{listed}");
    let (ok, denied) = oncegate_cli(&["approvals", "deny", &id], &alice);
    assert!(
        ok && denied.contains("\"denied\""),
        "a denial is the command working: {denied}"
    );
    let (ok, again) = oncegate_cli(
        &["approvals", "approve", &id],
        &[
            ("ONCEGATE_URL", gw.url.as_str()),
            ("ONCEGATE_TOKEN", "tok-bob"),
        ],
    );
    assert!(ok && again.contains("already denied"), "{again}");
    let (ok, agent) = oncegate_cli(
        &["approvals", "approve", &id],
        &[
            ("ONCEGATE_URL", gw.url.as_str()),
            ("ONCEGATE_TOKEN", "tok-planner"),
        ],
    );
    assert!(!ok && agent.contains("403"), "{agent}");
    assert!(effects(&setup.sandbox, "refund").is_empty());
}

#[test]
fn sigterm_lets_in_flight_calls_finish_and_be_recorded() {
    let setup = Setup::new(&[]);
    let mut gw = setup.gateway();
    fault(&setup.sandbox, "/v1/charges", "slow", 1500);
    let url = gw.url.clone();
    let running = std::thread::spawn(move || {
        let gw = Proc {
            child: Command::new("true").spawn().unwrap(),
            url,
        };
        call(
            &gw,
            "tok-planner",
            "charge_card",
            json!({"order_id": "G-1", "amount": "2.00"}),
        )
    });
    std::thread::sleep(Duration::from_millis(400));
    let term = Command::new("kill")
        .args(["-TERM", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let (code, done) = running.join().unwrap();
    assert_eq!(
        (code, done["status"].as_str()),
        (200, Some("applied")),
        "the in-flight call finished: {done}"
    );
    let exit = gw.child.wait().unwrap();
    assert!(exit.success(), "a clean exit after draining: {exit:?}");

    let gw = setup.gateway();
    let (_, again) = call(
        &gw,
        "tok-planner",
        "charge_card",
        json!({"order_id": "G-1", "amount": 2}),
    );
    assert_eq!(
        again["status"], "replayed",
        "the result was recorded before exit: {again}"
    );
    assert_eq!(effects(&setup.sandbox, "charge").len(), 1);
}

#[test]
fn a_client_that_never_finishes_its_headers_is_cut_off() {
    use std::io::{Read, Write};
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    let addr = gw.url.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.write_all(b"POST /v1/calls HTTP/1.1\r\nHost: oncegate\r\n")
        .unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    let n = conn.read(&mut buf).unwrap_or(0);
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(25),
        "the server closed the connection after its header timeout ({elapsed:?}, {n} bytes)"
    );
    assert!(
        n == 0 || String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
}

#[test]
fn the_background_sweep_resolves_unknowns_nobody_repeats() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway_sweeping(&[], "300ms");
    fault(&setup.sandbox, "/v1/charges", "stall_after_commit", 5000);
    let (_, first) = call(
        &gw,
        "tok-planner",
        "charge_card",
        json!({"order_id": "W-1", "amount": "6.00"}),
    );
    assert_eq!(first["status"], "unknown", "{first}");
    let key = first["intent_key"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    let intent = loop {
        let intent: Value = client()
            .get(format!("{}/v1/intents/{key}", gw.url))
            .bearer_auth("tok-ops")
            .send()
            .unwrap()
            .json()
            .unwrap();
        if intent["state"] == "applied" || Instant::now() > deadline {
            break intent;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        intent["state"], "applied",
        "the sweep found the charge: {intent}"
    );
    assert!(intent["effect_ref"].as_str().unwrap().starts_with("ch_"));
    assert_eq!(effects(&setup.sandbox, "charge").len(), 1);
}

#[test]
fn repeats_of_an_applied_charge_always_replay_with_the_effect_and_never_trip_the_ceiling() {
    // The example registry as a user runs it: charge_card's ceiling is 10.
    let setup = Setup::example();
    let gw = setup.gateway();
    let args = json!({"order_id": "CEIL-1", "amount": "12.50"});
    let (_, first) = call(&gw, "tok-planner", "charge_card", args.clone());
    assert_eq!(first["status"], "applied", "{first}");
    let charge = first["effect_ref"].as_str().unwrap().to_owned();
    // Ten parallel identical calls first (they used to spend the whole ceiling), then
    // fifteen more one by one: every one is a replay with the effect in its text line.
    let parallel: Vec<_> = (0..10)
        .map(|_| {
            let (url, args) = (gw.url.clone(), args.clone());
            std::thread::spawn(move || call_at(&url, "tok-planner", "charge_card", args))
        })
        .collect();
    let mut answers: Vec<Value> = parallel.into_iter().map(|t| t.join().unwrap().1).collect();
    for _ in 0..15 {
        answers.push(call(&gw, "tok-planner", "charge_card", args.clone()).1);
    }
    for again in &answers {
        assert_eq!(again["status"], "replayed", "{again}");
        let line = again["message"].as_str().unwrap();
        assert!(
            line.starts_with("ALREADY APPLIED") && line.contains(&charge),
            "the model reads the effect, not a refusal: {line}"
        );
    }
    assert!(
        answers.iter().any(|a| a["alerts"]
            .as_array()
            .is_some_and(|x| x.iter().any(|k| k["kind"] == "replay_storm"))),
        "a storm of replays raises an alert"
    );
    assert_eq!(effects(&setup.sandbox, "charge").len(), 1);
}
