//! The store goes away under load and comes back: every gateway connection terminated
//! by the server (`pg_terminate_backend`), and PostgreSQL itself restarted. Calls in
//! the outage are refused with the store-unavailable code or succeed; nothing executes
//! without a claim; the replicas recover by themselves.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cluster::{Cluster, Plan, Timing, code, effect_key, email, in_states, status};
use crate::pg::{Database, PrivateCluster, poll};

/// The store-unavailable code (`OG-0007`).
const STORE_UNAVAILABLE: &str = "OG-0007";
const LOADERS: usize = 4;

/// One answer under load: the order, when it was sent (since the load began), how long
/// it took, and what came back.
struct Answer {
    order: String,
    sent: Duration,
    took: Duration,
    code: u16,
    body: Value,
}

/// Sends distinct emails round robin from `LOADERS` threads until `outage` returns,
/// then for `after` more. Answers every call's answer.
fn under_load(
    cluster: &Cluster,
    prefix: &str,
    after: Duration,
    outage: impl FnOnce(),
) -> Vec<Answer> {
    let stop = AtomicBool::new(false);
    let next = AtomicUsize::new(0);
    let answers = Mutex::new(Vec::new());
    let began = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..LOADERS {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let order = format!("{prefix}-{}", next.fetch_add(1, Ordering::Relaxed));
                    let sent = began.elapsed();
                    let (_, code, body) = cluster.call_next("send_email", &email(&order));
                    answers.lock().unwrap().push(Answer {
                        order,
                        sent,
                        took: began.elapsed() - sent,
                        code,
                        body,
                    });
                }
            });
        }
        // Load before the outage, so the pools hold connections to cut.
        assert!(poll(Duration::from_secs(10), || answers
            .lock()
            .unwrap()
            .len()
            >= 20));
        outage();
        let resumed = Instant::now();
        while resumed.elapsed() < after {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
    });
    answers.into_inner().unwrap()
}

/// Every answer is a decided call or a refusal with the store-unavailable code; answers
/// (status or code) -> count.
fn check_answers(answers: &[Answer]) -> BTreeMap<String, usize> {
    let mut tally = BTreeMap::new();
    for a in answers {
        let s = status(&a.body);
        let fine = ["applied", "replayed", "in_flight", "unknown"].contains(&s)
            || (a.code == 503 && code(&a.body) == Some(STORE_UNAVAILABLE));
        assert!(
            fine,
            "{} (sent at {:?}, answered in {:?}): {} {}",
            a.order, a.sent, a.took, a.code, a.body
        );
        let label = if fine && a.code == 503 {
            STORE_UNAVAILABLE.to_owned()
        } else {
            s.to_owned()
        };
        *tally.entry(label).or_default() += 1;
    }
    tally
}

/// Service resumed: a fresh email on every replica is applied (polled with a deadline,
/// no restart).
fn resumes(cluster: &Cluster, prefix: &str) {
    for i in 0..cluster.len() {
        let mut n = 0;
        let mut last = Value::Null;
        let ok = poll(Duration::from_secs(15), || {
            n += 1;
            let (_, body) = cluster.call(i, "send_email", &email(&format!("{prefix}-R{i}-{n}")));
            last = body;
            status(&last) == "applied"
        });
        assert!(ok, "replica {i} did not resume by itself: {last}");
    }
}

/// The outage tests' plan: a short settle horizon, so that an intent claimed just before
/// its gateway lost the store (its request may never have left) is proven absent within
/// the test, not two minutes later.
fn plan() -> Plan {
    Plan {
        timing: Timing {
            timeout: "1s",
            lease: "2s",
            settle_horizon: Some("3s"),
        },
        ..Plan::default()
    }
}

/// Nothing executed without a claim: once the sweeps settle every intent (applied, or
/// proven never sent: `not_applied`), each email in the sandbox's ledger is exactly one
/// applied intent's, and each applied intent sent exactly one email. Then the
/// `not_applied` intents, called again, execute once each.
fn one_effect_per_applied_intent(cluster: &Cluster) {
    let unsettled = ["in_flight", "unknown"];
    let mut intents: Vec<Value> = Vec::new();
    let settled = poll(Duration::from_secs(30), || {
        intents = cluster.intents();
        in_states(&intents, &unsettled).is_empty()
    });
    assert!(settled, "unsettled: {:?}", in_states(&intents, &unsettled));
    let odd: Vec<_> = intents
        .iter()
        .filter(|i| !["applied", "not_applied"].contains(&i["state"].as_str().unwrap_or("")))
        .collect();
    assert!(odd.is_empty(), "{odd:?}");
    let emails = cluster.emails();
    let mut per_key: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &emails {
        let key = effect_key(e).expect("every email names its intent");
        *per_key.entry(key).or_default() += 1;
    }
    let applied: BTreeSet<&str> = in_states(&intents, &["applied"])
        .into_iter()
        .filter_map(|i| i["key"].as_str())
        .collect();
    for (key, n) in &per_key {
        assert_eq!(*n, 1, "intent {key} sent {n} emails");
        assert!(
            applied.contains(key),
            "an email without an applied intent: {key}"
        );
    }
    assert_eq!(
        per_key.len(),
        applied.len(),
        "an applied intent without its email"
    );
    let never_sent: Vec<&str> = in_states(&intents, &["not_applied"])
        .into_iter()
        .filter_map(|i| i["business_ref"].as_str())
        .collect();
    println!(
        "{} applied, {} proven never sent",
        applied.len(),
        never_sent.len()
    );
    for order in &never_sent {
        let (i, code, body) = cluster.call_next("send_email", &email(order));
        assert_eq!(
            (code, status(&body)),
            (200, "applied"),
            "{order} again on replica {i}: {body}"
        );
    }
    assert_eq!(cluster.emails().len(), applied.len() + never_sent.len());
    let (clean, report) = cluster.audit_verify();
    assert!(clean, "audit verify: {report}");
}

#[test]
fn every_gateway_connection_terminated_under_load_and_service_resumes() {
    let cluster = Cluster::start(plan());
    let mut terminated = 0;
    let answers = under_load(&cluster, "TERM", Duration::from_millis(500), || {
        // Cut every connection of this test's database, again and again for 1.5 s:
        // calls meet dead connections mid-transaction and at checkout.
        let began = Instant::now();
        while began.elapsed() < Duration::from_millis(1_500) {
            terminated += cluster.db.terminate_backends();
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    assert!(terminated > 0, "no gateway connection was ever cut");
    let tally = check_answers(&answers);
    println!(
        "{terminated} backends terminated; {} calls: {tally:?}",
        answers.len()
    );
    resumes(&cluster, "TERM");
    one_effect_per_applied_intent(&cluster);
}

#[test]
fn postgres_restarted_under_load_and_service_resumes() {
    let server = PrivateCluster::start();
    let db = Database::create_on(&server.url);
    let cluster = Cluster::start_on(db, plan());
    let mut restarted = Duration::ZERO;
    let answers = under_load(&cluster, "RESTART", Duration::from_millis(500), || {
        let began = Instant::now();
        server.restart();
        restarted = began.elapsed();
    });
    let tally = check_answers(&answers);
    println!(
        "restart took {restarted:?}; {} calls: {tally:?}",
        answers.len()
    );
    resumes(&cluster, "RESTART");

    // While the server is down, every replica refuses, promptly and with the code (the
    // three at once: each waits out its pool's acquire timeout first).
    server.stop();
    std::thread::scope(|s| {
        for i in 0..cluster.len() {
            let cluster = &cluster;
            s.spawn(move || {
                let began = Instant::now();
                let (status_, body) = cluster.call(i, "send_email", &email(&format!("DOWN-{i}")));
                let took = began.elapsed();
                assert_eq!(
                    (status_, code(&body)),
                    (503, Some(STORE_UNAVAILABLE)),
                    "replica {i} with PostgreSQL down: {body}"
                );
                assert!(
                    took < Duration::from_secs(10),
                    "replica {i} took {took:?} to refuse"
                );
                println!("replica {i} refused in {took:?} with PostgreSQL down");
            });
        }
    });
    server.resume();
    resumes(&cluster, "RESUMED");
    one_effect_per_applied_intent(&cluster);
    drop(cluster);
}
