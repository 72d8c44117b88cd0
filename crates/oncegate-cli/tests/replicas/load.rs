//! 300 calls over three replicas: 100 intents, each sent three times (once to every
//! replica, concurrently), with a provider that ignores idempotency keys and stalls
//! after committing some of them. Exactly 100 effects.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cluster::{Cluster, Plan, effect_key, email, in_states, status};
use crate::pg::poll;

const INTENTS: usize = 100;
const COPIES: usize = 3;
const STALLED: u32 = 12;
const THREADS: usize = 12;

#[test]
fn three_hundred_calls_over_three_replicas_are_one_hundred_emails() {
    let started = Instant::now();
    let cluster = Cluster::start(Plan::default());
    // The first creates commit, then stall past the gateway's 1 s timeout: their calls
    // answer `unknown` and their repeats must reconcile, never send again.
    cluster.faults("/v1/emails", "stall_after_commit", STALLED, 1_500);

    // Work item n: intent n / 3, to replica n % 3, so the three copies of an intent
    // reach three different replicas at about the same moment.
    let next = AtomicUsize::new(0);
    let answers = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= INTENTS * COPIES {
                        break;
                    }
                    let order = format!("LOAD-{}", n / COPIES);
                    let replica = n % cluster.len();
                    let (code, body) = cluster.call(replica, "send_email", &email(&order));
                    answers.lock().unwrap().push((order, replica, code, body));
                }
            });
        }
    });
    let answers = answers.into_inner().unwrap();
    let called = started.elapsed();
    assert_eq!(answers.len(), INTENTS * COPIES);
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for (order, replica, code, body) in &answers {
        let s = status(body);
        assert!(
            ["applied", "replayed", "in_flight", "unknown"].contains(&s),
            "{order} on replica {replica}: {code} {body}"
        );
        *tally.entry(s.to_owned()).or_default() += 1;
    }
    println!("300 calls in {called:?}: {tally:?}");
    let applied_answers: BTreeSet<&str> = answers
        .iter()
        .filter(|(.., body)| status(body) == "applied")
        .map(|(order, ..)| order.as_str())
        .collect();
    assert_eq!(
        answers
            .iter()
            .filter(|(.., body)| status(body) == "applied")
            .count(),
        applied_answers.len(),
        "an intent was answered `applied` twice: it executed twice"
    );
    assert!(
        tally.contains_key("unknown"),
        "no call met a stalled provider: the fault did not bite {tally:?}"
    );

    // The stalled intents are reconciled by the sweep (or by a repeat): every intent
    // ends applied.
    let mut intents: Vec<Value> = Vec::new();
    let settled = poll(Duration::from_secs(30), || {
        intents = cluster.intents();
        intents.len() == INTENTS && in_states(&intents, &["applied"]).len() == INTENTS
    });
    assert!(
        settled,
        "not every intent settled applied: {:?}",
        intents
            .iter()
            .filter(|i| i["state"] != "applied")
            .map(|i| (&i["business_ref"], &i["state"]))
            .collect::<Vec<_>>()
    );

    let emails = cluster.emails();
    let sent: BTreeSet<&str> = emails.iter().filter_map(effect_key).collect();
    let keys: BTreeSet<&str> = intents.iter().filter_map(|i| i["key"].as_str()).collect();
    assert_eq!(emails.len(), INTENTS, "one email per intent: {emails:?}");
    assert_eq!(
        sent, keys,
        "every email is one intent's, and every intent sent one"
    );

    // A fourth copy of every intent, anywhere: replayed, nothing sent.
    for n in 0..INTENTS {
        let (i, code, body) = cluster.call_next("send_email", &email(&format!("LOAD-{n}")));
        assert_eq!(
            (code, status(&body)),
            (200, "replayed"),
            "replica {i}: {body}"
        );
    }
    assert_eq!(cluster.emails().len(), INTENTS);

    let (clean, report) = cluster.audit_verify();
    assert!(clean, "audit verify: {report}");
    println!("load test: {:?} in all", started.elapsed());
}
