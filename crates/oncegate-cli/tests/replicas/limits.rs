//! Limits and detection across replicas on one PostgreSQL store: a budget with room
//! for three charges, raced by sixteen distinct charges spread over three replicas,
//! lets exactly three reach the provider; a bypass is found once however many
//! replicas run the rule, its hold stops the order on every replica, and the alert
//! webhook is sent that finding once.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};

use crate::cluster::{Cluster, Plan, code, status, with_charge_limit};
use crate::pg::poll;
use crate::support::{API_KEY, CHARGE_DETECTION, client, effects_where};

/// `charge_card` with a budget of 37.50 USD a day for the whole capability.
fn budget(text: String) -> String {
    with_charge_limit(text, "charge_budget", "37.50")
}

#[test]
fn three_replicas_sharing_a_budget_let_exactly_its_room_through() {
    let cluster = Cluster::start(Plan {
        edit: budget,
        ..Plan::default()
    });
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..16)
            .map(|i| {
                let cluster = &cluster;
                s.spawn(move || {
                    cluster.call(
                        i % cluster.len(),
                        "charge_card",
                        &json!({"order_id": format!("B-{i}"), "amount": "12.50"}),
                    )
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let applied = answers
        .iter()
        .filter(|(_, b)| status(b) == "applied")
        .count();
    let limited = answers
        .iter()
        .filter(|(_, b)| status(b) == "refused" && code(b) == Some("OG-0027"))
        .count();
    assert_eq!((applied, limited), (3, 13), "{answers:?}");
    let charges = effects_where(cluster.sandbox(), "kind=charge");
    assert_eq!(charges.len(), 3, "the provider's ledger: {charges:?}");
    // Every replica reads the same budget.
    for i in 0..cluster.len() {
        let limits = cluster.admin_get(i, "/v1/limits");
        let b = &limits["limits"][0];
        assert_eq!(
            (
                b["limit"].as_str(),
                b["used"].as_i64(),
                b["remaining"].as_i64()
            ),
            (Some("charge_budget"), Some(3750), Some(0)),
            "replica {i}: {limits}"
        );
    }
}

/// The webhook receiver's URL, for [`detection`] (a plain `fn`, as [`Plan::edit`] is).
static HOOK: OnceLock<String> = OnceLock::new();

/// A duplicate rule every second over the sandbox's listing, holding the order; the
/// findings go to [`HOOK`].
fn detection(text: String) -> String {
    let hook = HOOK.get().expect("the receiver runs first");
    text.replacen(
        "[gateway]\n",
        &format!("[gateway]\nalert_webhook = \"{hook}\"\n"),
        1,
    )
    .replacen(
        "# --- refund:",
        &format!("{CHARGE_DETECTION}# --- refund:"),
        1,
    )
}

/// A webhook receiver on loopback answering 200, keeping each delivery id it got.
fn receiver() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let seen = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut delivery, mut length) = (String::new(), 0usize);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.trim_end().split_once(':') {
                    match k.to_ascii_lowercase().as_str() {
                        "oncegate-delivery" => delivery = v.trim().to_owned(),
                        "content-length" => length = v.trim().parse().unwrap_or(0),
                        _ => {}
                    }
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            seen.lock().unwrap().push(delivery);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    (url, got)
}

#[test]
fn a_bypass_is_found_once_held_on_every_replica_and_sent_once() {
    let (hook, received) = receiver();
    HOOK.set(hook).unwrap();
    let started = jiff::Timestamp::now().as_second();
    let cluster = Cluster::start(Plan {
        edit: detection,
        ..Plan::default()
    });
    let (_, first) = cluster.call(
        0,
        "charge_card",
        &json!({"order_id": "H-1", "amount": "20.00"}),
    );
    assert_eq!(status(&first), "applied", "{first}");
    let direct = client()
        .post(format!("{}/v1/charges", cluster.sandbox().url))
        .bearer_auth(API_KEY)
        .json(&json!({"order_id": "H-1", "amount_minor": 2000, "currency": "USD"}))
        .send()
        .unwrap();
    assert!(direct.status().is_success());

    let mut findings = Value::Null;
    assert!(
        poll(Duration::from_secs(20), || {
            findings = cluster.admin_get(1, "/v1/findings");
            findings["findings"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
        }),
        "no finding: {findings}"
    );
    // Three replicas ran the rule for several slots: still one finding.
    std::thread::sleep(Duration::from_secs(3));
    for i in 0..cluster.len() {
        let listed = cluster.admin_get(i, "/v1/findings");
        assert_eq!(
            listed["findings"].as_array().unwrap().len(),
            1,
            "replica {i}: {listed}"
        );
    }
    let id = findings["findings"][0]["id"].as_str().unwrap().to_owned();
    // The hold stops the order on every replica (each reads the store within 500 ms).
    std::thread::sleep(Duration::from_millis(700));
    for i in 0..cluster.len() {
        let (_, held) = cluster.call(
            i,
            "charge_card",
            &json!({"order_id": "H-1", "amount": format!("{}.00", 30 + i)}),
        );
        assert_eq!(
            (status(&held), code(&held)),
            ("refused", Some("OG-0026")),
            "replica {i}: {held}"
        );
    }
    assert_eq!(
        effects_where(cluster.sandbox(), "kind=charge&order_id=H-1").len(),
        2
    );
    assert!(
        poll(Duration::from_secs(20), || !received
            .lock()
            .unwrap()
            .is_empty()),
        "the webhook got nothing"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        *received.lock().unwrap(),
        vec![id],
        "one delivery, by one replica"
    );
    let (clean, report) = cluster.audit_verify();
    assert!(clean, "{report}");

    // One replica per slot: all three scheduled the one-second rule for the whole
    // test, and together ran it at most once per slot that began meanwhile (which
    // replica takes a slot is whichever claims it first).
    let runs: Vec<u64> = (0..cluster.len())
        .map(|i| {
            let text = client()
                .get(format!("{}/metrics", cluster.url(i)))
                .send()
                .unwrap()
                .text()
                .unwrap();
            text.lines()
                .find(|l| l.starts_with("oncegate_detection_runs_total{rule=\"charge_card\"}"))
                .and_then(|l| l.split_whitespace().last())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        })
        .collect();
    let slots = (jiff::Timestamp::now().as_second() - started + 1) as u64;
    let total: u64 = runs.iter().sum();
    assert!(
        total <= slots && total >= 3,
        "{total} runs over {slots} one-second slots by three replicas: {runs:?}"
    );
}
