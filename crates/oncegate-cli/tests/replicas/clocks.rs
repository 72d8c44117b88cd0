//! One clock decides (issue 31), across replicas on one PostgreSQL store: some replicas
//! run with a wrong wall clock (libfaketime: 130 s fast, 600 s slow, 25 h fast), and
//! still judge the settle horizon, an approval's expiry and a daily budget by the
//! database's clock, never their own. Each test first checks, on
//! `oncegate_clock_skew_seconds`, that each replica's wall clock is as wrong as meant;
//! effects are counted in the sandbox's own ledger.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cluster::{Cluster, Plan, Timing, code, email, status, with_charge_limit};
use crate::support::{client, clock_skew, effects_where, faketime_env, spawn_logged};

/// How long the sandbox takes before it commits a late effect: well past the 1 s
/// upstream timeout, so that repeats and sweeps on every replica read "not found" for
/// several seconds first.
const COMMIT_AFTER_MS: u64 = 6000;

/// Replica `i`'s wall clock is `offset` seconds off the database's.
fn assert_skew(cluster: &Cluster, i: usize, offset: f64) {
    let skew = clock_skew(cluster.url(i));
    assert!(
        (skew - offset).abs() < 2.0,
        "replica {i}'s wall clock should be {offset:+} s off the store's, /metrics says {skew:+}"
    );
}

/// Replica 0's clock is right, replica 1's 130 s fast, replica 2's 600 s slow.
const SKEWED: [f64; 3] = [0.0, 130.0, -600.0];

fn skewed(i: usize) -> Vec<(&'static str, String)> {
    match i {
        1 => faketime_env("+130s"),
        2 => faketime_env("-600s"),
        _ => Vec::new(),
    }
}

/// A charge over the provider's HTTP API, which (`--ignore-idempotency-key charges`)
/// ignores the key: only the gateway stands between a repeat and a second charge. It is
/// reconciled by order (the provider keeps no ignored key to look up).
const CHARGE_HTTP: &str = r#"
[[capabilities]]
name = "charge_http"
description = "Charge an order over the provider's HTTP API, which ignores the key."
category = "non_idempotent"
replay_window = "10m"
attempt_ceiling = 1000
lease = "2s"
settle_horizon = "25s"
on_unknown = "reconcile"

[capabilities.key]
business_ref = "order_id"
significant = [
  { arg = "amount", type = "money", currency_arg = "currency", default_currency = "USD" },
]

[capabilities.upstream]
kind = "http"
url = "{env.SANDBOX_URL}/v1/charges"
headers = { Authorization = "Bearer {env.SANDBOX_API_KEY}" }
timeout = "1s"
effect_ref = "/id"
body = { order_id = "{business_ref}", amount_minor = "{norm.amount.minor}", currency = "{norm.amount.currency}" }

[capabilities.reconcile]
kind = "http"
url = "{env.SANDBOX_URL}/v1/charges?order_id={business_ref}"
found = "/found"
effect_ref = "/charge/id"
result = "/charge"
"#;

/// One intent whose first attempt the provider commits late.
struct Late {
    capability: &'static str,
    arguments: Value,
    /// The sandbox's effect kind (`email`, `charge`).
    kind: &'static str,
    /// The replica the first call goes through; the repeats alternate between the
    /// other two.
    first: usize,
}

impl Late {
    fn order(&self) -> &str {
        self.arguments["order_id"].as_str().unwrap()
    }
}

/// The first call through `late.first`, then, once every case's first call is
/// answered, a repeat every 500 ms through the two other replicas in turn, until the
/// intent is settled and the late commit has certainly landed (or an answer is not one
/// of a late commit's, or 45 s passed). Answers every (replica, answer), for the test to
/// judge once it has counted the effects.
fn repeat_through_the_others(
    cluster: &Cluster,
    late: &Late,
    started: &Barrier,
) -> Vec<(usize, Value)> {
    let at = Instant::now();
    let (_, first) = cluster.call(late.first, late.capability, &late.arguments);
    let went_unknown = status(&first) == "unknown";
    let mut answers = vec![(late.first, first)];
    // Every late fault is taken by a first call before anyone repeats.
    started.wait();
    let landed = at + Duration::from_millis(COMMIT_AFTER_MS + 1500);
    let deadline = at + Duration::from_secs(45);
    for n in 0.. {
        if !went_unknown {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        let replica = (late.first + 1 + n % 2) % cluster.len();
        let (_, again) = cluster.call(replica, late.capability, &late.arguments);
        let answered = status(&again).to_owned();
        answers.push((replica, again));
        let settled = matches!(answered.as_str(), "applied" | "replayed");
        if !(settled || matches!(answered.as_str(), "unknown" | "in_flight"))
            || (settled && Instant::now() > landed)
            || Instant::now() > deadline
        {
            break;
        }
    }
    answers
}

/// What the agent heard about `late`: unknown at first, then only "unknown" or "in
/// flight" (never a refusal, a new approval or a second execution) until settled.
fn assert_heard_a_late_commit(late: &Late, answers: &[(usize, Value)]) {
    let statuses: Vec<&str> = answers.iter().map(|(_, a)| status(a)).collect();
    let settled = |s: &str| matches!(s, "applied" | "replayed");
    let n = statuses.len();
    assert!(
        n >= 2
            && statuses[0] == "unknown"
            && statuses[1..n - 1]
                .iter()
                .all(|s| matches!(*s, "unknown" | "in_flight") || settled(s))
            && settled(statuses[n - 1]),
        "{}: {statuses:?}\n{answers:#?}",
        late.order()
    );
}

/// Late commits repeated through replicas whose clocks are 130 s fast and 600 s slow,
/// with every replica sweeping every 250 ms: a 25 s settle horizon is judged by the
/// database's clock, so no replica concludes absence while the first attempt can land.
/// Three emails (first attempted on each replica) and one HTTP charge (first attempted
/// on the correct replica): one effect each, and every answer that names an effect
/// names that one.
#[test]
fn late_commits_repeated_through_replicas_130_s_fast_and_600_s_slow_are_one_effect_each() {
    let cluster = Cluster::start(Plan {
        ignore: &["emails", "charges"],
        timing: Timing {
            timeout: "1s",
            lease: "2s",
            settle_horizon: Some("25s"),
        },
        edit: |text| {
            text.replace("attempt_ceiling = 5\n", "attempt_ceiling = 1000\n") + CHARGE_HTTP
        },
        env: skewed,
        ..Plan::default()
    });
    for (i, offset) in SKEWED.into_iter().enumerate() {
        assert_skew(&cluster, i, offset);
    }
    let cases: Vec<Late> = (0..3)
        .map(|first| Late {
            capability: "send_email",
            arguments: email(&format!("CLK-E{first}")),
            kind: "email",
            first,
        })
        .chain([Late {
            capability: "charge_http",
            arguments: json!({"order_id": "CLK-C0", "amount": "12.50"}),
            kind: "charge",
            first: 0,
        }])
        .collect();
    cluster.faults("/v1/emails", "slow", 3, COMMIT_AFTER_MS);
    cluster.faults("/v1/charges", "slow", 1, COMMIT_AFTER_MS);

    let started = Barrier::new(cases.len());
    let t0 = Instant::now();
    let answers: Vec<Vec<(usize, Value)>> = std::thread::scope(|s| {
        let threads: Vec<_> = cases
            .iter()
            .map(|late| {
                let (cluster, started) = (&cluster, &started);
                s.spawn(move || repeat_through_the_others(cluster, late, started))
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });

    // The sweeps keep running a while longer (and every late commit has landed): still
    // nothing more.
    let quiet =
        Instant::now().max(t0 + Duration::from_millis(COMMIT_AFTER_MS)) + Duration::from_secs(2);
    std::thread::sleep(quiet.saturating_duration_since(Instant::now()));
    for (late, answers) in cases.iter().zip(&answers) {
        let query = format!("kind={}&order_id={}", late.kind, late.order());
        let ledger = effects_where(cluster.sandbox(), &query);
        assert_eq!(
            ledger.len(),
            1,
            "one {} for {}: {ledger:#?}\nanswers: {answers:#?}",
            late.kind,
            late.order()
        );
        let id = ledger[0]["id"].as_str().unwrap();
        for (replica, answer) in answers {
            if let Some(named) = answer["effect_ref"].as_str() {
                assert_eq!(
                    named, id,
                    "replica {replica} told the agent of another {}: {answers:#?}",
                    late.kind
                );
            }
        }
        assert_heard_a_late_commit(late, answers);
        for i in 0..cluster.len() {
            let (_, again) = cluster.call(i, late.capability, &late.arguments);
            assert_eq!(
                (status(&again), again["effect_ref"].as_str()),
                ("replayed", Some(id)),
                "replica {i}: {again}"
            );
        }
    }
    let intents = cluster.intents();
    assert!(
        intents.iter().all(|i| i["state"] == "applied"),
        "{intents:#?}"
    );
    assert_eq!(intents.len(), cases.len(), "{intents:#?}");
}

/// `POST /v1/approvals/{id}/approve` on replica `i` as an approver: (HTTP status, body).
fn approve(cluster: &Cluster, i: usize, id: &str) -> (u16, Value) {
    let r = client()
        .post(format!("{}/v1/approvals/{id}/approve", cluster.url(i)))
        .bearer_auth("tok-alice")
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}

/// A refund held for an approver with a 6 s TTL, asked through the correct replica 0,
/// approved 8 s later through replica 1, whose clock is 10 minutes slow: by the
/// database's clock the approval has expired. Refused with `OG-0003`, no refund. (One
/// approved in time through the same replica is made, once.)
#[test]
fn an_approval_past_its_ttl_is_refused_through_a_replica_ten_minutes_slow() {
    let cluster = Cluster::start(Plan {
        replicas: 2,
        edit: |text| {
            text.replacen(
                "name = \"refund\"\n",
                "name = \"refund\"\napproval_ttl = \"6s\"\n",
                1,
            )
        },
        env: |i| match i {
            1 => faketime_env("-600s"),
            _ => Vec::new(),
        },
        ..Plan::default()
    });
    assert_skew(&cluster, 0, 0.0);
    assert_skew(&cluster, 1, -600.0);
    let args = json!({"order_id": "CLK-R1", "amount": "250.00"});
    let (http, held) = cluster.call(0, "refund", &args);
    // The approval was asked (and its expiry set) before the answer: the TTL is
    // counted from here at the latest.
    let asked = Instant::now();
    assert_eq!((http, status(&held)), (202, "pending_approval"), "{held}");
    let id = held["approval_id"].as_str().unwrap().to_owned();

    // In time, through the slow replica: the refund is made.
    let (_, in_time) = cluster.call(
        0,
        "refund",
        &json!({"order_id": "CLK-R2", "amount": "150.00"}),
    );
    let (_, approved) = approve(&cluster, 1, in_time["approval_id"].as_str().unwrap());
    assert_eq!(status(&approved), "applied", "{approved}");

    std::thread::sleep((asked + Duration::from_secs(8)).saturating_duration_since(Instant::now()));
    let (http, body) = approve(&cluster, 1, &id);
    assert_eq!(
        code(&body),
        Some("OG-0003"),
        "approved past its TTL through the slow replica (HTTP {http}): {body}"
    );
    let refunds = effects_where(cluster.sandbox(), "kind=refund&order_id=CLK-R1");
    assert!(refunds.is_empty(), "a refund past the TTL: {refunds:#?}");

    // Both replicas list it expired; the agent's repeat, through either, hears so.
    for i in 0..cluster.len() {
        let listed = cluster.admin_get(i, "/v1/approvals");
        let approval = listed["approvals"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["id"] == id.as_str()))
            .unwrap_or_else(|| panic!("replica {i} does not list {id}: {listed}"));
        assert_eq!(approval["state"], "expired", "replica {i}: {approval}");
        let (_, again) = cluster.call(i, "refund", &args);
        assert_eq!(code(&again), Some("OG-0003"), "replica {i}: {again}");
    }
    let refunds = effects_where(cluster.sandbox(), "kind=refund");
    assert_eq!(
        refunds
            .iter()
            .map(|r| r["order_id"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["CLK-R2"],
        "{refunds:#?}"
    );
}

/// `charge_card` with a budget of 100.00 USD per rolling 24 h.
fn daily_budget(text: String) -> String {
    with_charge_limit(text, "daily_budget", "100.00")
}

/// 93.00 of a 100.00 daily budget charged through the correct replica 0; then, through
/// replica 1, whose clock is 25 h fast (a new day by its own clock): 40.00 is refused
/// (`OG-0027`), 7.00 fits and is charged, 0.01 more is refused. The provider charged
/// exactly the budget.
#[test]
fn a_daily_budget_holds_through_a_replica_25_h_fast() {
    let cluster = Cluster::start(Plan {
        replicas: 2,
        edit: daily_budget,
        env: |i| match i {
            1 => faketime_env("+25h"),
            _ => Vec::new(),
        },
        ..Plan::default()
    });
    assert_skew(&cluster, 0, 0.0);
    assert_skew(&cluster, 1, 25.0 * 3600.0);
    let charge = |replica: usize, order: &str, amount: &str| {
        let (_, body) = cluster.call(
            replica,
            "charge_card",
            &json!({"order_id": order, "amount": amount}),
        );
        body
    };
    for (order, amount) in [("CLK-L1", "60.00"), ("CLK-L2", "33.00")] {
        let body = charge(0, order, amount);
        assert_eq!(status(&body), "applied", "{order}: {body}");
    }
    let over = charge(1, "CLK-L3", "40.00");
    assert_eq!(
        (status(&over), code(&over)),
        ("refused", Some("OG-0027")),
        "40.00 over the 7.00 left, through the fast replica: {over}"
    );
    let fits = charge(1, "CLK-L4", "7.00");
    assert_eq!(status(&fits), "applied", "{fits}");
    for (replica, order) in [(1, "CLK-L5"), (0, "CLK-L6")] {
        let body = charge(replica, order, "0.01");
        assert_eq!(
            (status(&body), code(&body)),
            ("refused", Some("OG-0027")),
            "replica {replica}: {body}"
        );
    }

    let charges = effects_where(cluster.sandbox(), "kind=charge");
    let total: i64 = charges
        .iter()
        .map(|c| c["amount_minor"].as_i64().unwrap())
        .sum();
    assert_eq!(
        (charges.len(), total),
        (3, 10_000),
        "the provider charged the budget exactly: {charges:#?}"
    );
    for i in 0..cluster.len() {
        let limits = cluster.admin_get(i, "/v1/limits");
        let b = &limits["limits"][0];
        assert_eq!(
            (b["used"].as_i64(), b["remaining"].as_i64()),
            (Some(10_000), Some(0)),
            "replica {i}: {limits}"
        );
    }
}

/// The skew a replica's `/readyz` reports: the number after `skew `, in seconds.
fn readyz_skew(body: &str) -> Option<f64> {
    let after = body.split("skew ").nth(1)?;
    after.split_whitespace().next()?.parse().ok()
}

/// A replica's wrong clock is reported, never needed: a replica 130 s fast and one 600 s
/// slow each show the skew on `/metrics` (`oncegate_clock_skew_seconds`) and in
/// `/readyz`, and log a warning at start; the correct replica shows none.
#[test]
fn a_replica_reports_how_far_its_clock_is_from_the_database() {
    let cluster = Cluster::start(Plan {
        replicas: 1,
        ..Plan::default()
    });
    let (fast, fast_log) = spawn_logged(cluster.serve_command(&faketime_env("+130s")));
    let (slow, slow_log) = spawn_logged(cluster.serve_command(&faketime_env("-600s")));
    for (url, offset, side, log) in [
        (cluster.url(0), 0.0, None, None),
        (fast.url.as_str(), 130.0, Some("ahead of"), Some(&fast_log)),
        (slow.url.as_str(), -600.0, Some("behind"), Some(&slow_log)),
    ] {
        let metric = clock_skew(url);
        assert!(
            (metric - offset).abs() < 2.0,
            "{url}: oncegate_clock_skew_seconds {metric}, expected about {offset}"
        );
        let r = client().get(format!("{url}/readyz")).send().unwrap();
        assert_eq!(r.status().as_u16(), 200, "{url}");
        let body = r.text().unwrap();
        assert!(
            body.starts_with("ready\n") && body.contains("clock: postgresql now()"),
            "{url}: {body}"
        );
        let shown = readyz_skew(&body).unwrap_or_else(|| panic!("{url}: no skew in {body}"));
        assert!((shown - offset).abs() < 2.0, "{url}: {body}");
        if let Some(side) = side {
            assert!(body.contains(side), "{url}: {body}");
        }
        if let (Some(log), Some(side)) = (log, side) {
            let warning = log
                .wait_for(Duration::from_secs(20), |l| {
                    l.contains("WARN") && l.contains("this host's clock is off from the store's")
                })
                .unwrap_or_else(|lines| {
                    panic!("{url}: no skew warning; the log:\n{}", lines.join("\n"))
                });
            assert!(warning.contains(side), "{warning}");
        }
    }
}
