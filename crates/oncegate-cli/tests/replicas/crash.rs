//! One replica SIGKILLed while its calls are in flight: the others take over its
//! intents once their leases expire, reconcile them against the provider's record, and
//! never send a second effect. Nothing stays in flight.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cluster::{Cluster, Plan, Timing, effect_key, email, in_states, status};
use crate::pg::poll;

/// Calls on the victim that commit and then stall (their effect exists at the kill).
const COMMITTED: u32 = 3;
/// Calls on the victim that are still being processed at the kill, and commit after it.
const LATE: u32 = 2;

#[test]
fn a_replica_killed_mid_call_is_reconciled_by_the_others_with_no_second_effect() {
    let mut cluster = Cluster::start(Plan {
        // A timeout long enough that the kill lands while the calls are in flight, and a
        // lease just past it: the survivors may take over 4 s after the last heartbeat.
        timing: Timing {
            timeout: "3s",
            lease: "4s",
            settle_horizon: None,
        },
        ..Plan::default()
    });
    let victim = 0;
    cluster.faults("/v1/emails", "stall_after_commit", COMMITTED, 20_000);
    cluster.faults("/v1/emails", "slow", LATE, 2_000);
    let orders: Vec<String> = (0..COMMITTED + LATE)
        .map(|n| format!("CRASH-{n}"))
        .collect();

    let url = cluster.url(victim).to_owned();
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let calls: Vec<_> = orders
            .iter()
            .map(|order| {
                let url = url.clone();
                s.spawn(move || crate::cluster::call_at(&url, "send_email", &email(order)))
            })
            .collect();
        // Every call is claimed (so its request is on its way to the provider), the
        // stalled ones have committed, the slow ones are still at the provider.
        let mut seen = (0, 0);
        assert!(
            poll(Duration::from_secs(10), || {
                seen = (
                    in_states(&cluster.intents(), &["in_flight"]).len(),
                    cluster.emails().len(),
                );
                seen.0 == orders.len() && seen.1 >= COMMITTED as usize
            }),
            "(claims, emails) before the kill: {seen:?}"
        );
        cluster.kill(victim);
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let killed_at = Instant::now();
    for (code, body) in &answers {
        assert_eq!(
            *code, 0,
            "the victim answered before it was killed: {code} {body}"
        );
    }
    let intents = cluster.intents();
    assert_eq!(intents.len(), orders.len(), "{intents:?}");
    assert!(
        in_states(&intents, &["in_flight"]).len() == orders.len(),
        "the kill landed while every call was in flight: {:?}",
        intents.iter().map(|i| &i["state"]).collect::<Vec<_>>()
    );

    // Repeats on the survivors while the dead replica's leases are live: none executes.
    for order in &orders {
        let (i, code, body) = cluster.call_next("send_email", &email(order));
        assert!(
            ["in_flight", "unknown", "replayed"].contains(&status(&body)),
            "a repeat on replica {i} of {order}: {code} {body}"
        );
    }

    // After the lease, the survivors' sweeps reconcile every intent.
    let mut intents: Vec<Value> = Vec::new();
    let settled = poll(Duration::from_secs(30), || {
        intents = cluster.intents();
        in_states(&intents, &["applied", "failed", "pending_approval"]).len() == orders.len()
    });
    assert!(
        settled,
        "intents still unsettled {:?} after the kill: {:?}",
        killed_at.elapsed(),
        intents
            .iter()
            .map(|i| (&i["business_ref"], &i["state"]))
            .collect::<Vec<_>>()
    );
    println!("settled {:?} after the kill", killed_at.elapsed());
    // Every effect exists, so every intent was found applied, none escalated.
    assert_eq!(in_states(&intents, &["applied"]).len(), orders.len());

    // Repeats everywhere now: replayed, nothing sent again.
    for order in &orders {
        let (i, code, body) = cluster.call_next("send_email", &email(order));
        assert_eq!(
            (code, status(&body)),
            (200, "replayed"),
            "replica {i}: {body}"
        );
    }
    let emails = cluster.emails();
    assert_eq!(
        emails.len(),
        orders.len(),
        "one email per intent: {emails:?}"
    );
    let sent: BTreeSet<&str> = emails.iter().filter_map(effect_key).collect();
    let keys: BTreeSet<&str> = intents.iter().filter_map(|i| i["key"].as_str()).collect();
    assert_eq!(sent, keys);
    let (clean, report) = cluster.audit_verify();
    assert!(clean, "audit verify: {report}");
}
