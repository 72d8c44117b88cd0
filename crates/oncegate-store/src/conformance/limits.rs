//! Limits and findings on every backend: a budget reserved inside the claim's commit
//! (refused past its max, writing nothing), never twice for one (key, generation),
//! released by a record that settles without an effect; a finding stored once (its id
//! taken twice is a conflict that writes nothing), and its delivery outbox.

use oncegate_core::intent::IntentState;
use oncegate_core::key::IntentKey;

use super::fixtures::{at, sample_event, sample_record};
use crate::{Backend, Commit, FindingRow, Reservation, StoreError};

/// Before any reservation a test makes, by the sample events' clock or a store's own.
#[allow(non_snake_case)]
fn LONG_AGO() -> jiff::Timestamp {
    at(-86_400 * 3650)
}

fn budget(amount: i64, enforce: bool) -> Reservation {
    Reservation {
        scope: "charge_budget@planner".into(),
        amount,
        max: 2500,
        since: at(-86_400),
        enforce,
    }
}

fn claim(key: &str, amount: i64, enforce: bool) -> Commit {
    let mut c = Commit::new(Some(sample_record(key, 1)), None, sample_event(key, 1));
    c.reservations = vec![budget(amount, enforce)];
    c
}

/// The budget: reserved with the claim, refused past max without a trace, kept once
/// per intent, released by `failed`, overridable by an approver.
pub async fn limits<S: Backend>(store: &S) {
    let scope = "charge_budget@planner";
    // Read from long before: a store that keeps its own clock (PostgreSQL) reserves at its
    // own `now()`, not at the sample event's time.
    let used = || async { store.limit_used(scope, LONG_AGO()).await.unwrap() };
    store.commit(claim("e101", 1000, true)).await.expect("fits");
    store.commit(claim("e102", 1000, true)).await.expect("fits");
    assert_eq!(used().await, 2000);
    let audit_before = store.audit_after(0, 10_000).await.unwrap().len();
    let over = store.commit(claim("e103", 1000, true)).await;
    assert!(
        matches!(
            &over,
            Err(StoreError::LimitReached {
                used: 2000,
                max: 2500,
                amount: 1000,
                ..
            })
        ),
        "past the budget the commit is refused, got {over:?}"
    );
    assert!(
        store
            .load(&IntentKey::from_hex("e103"))
            .await
            .unwrap()
            .is_none(),
        "a refused claim writes no record"
    );
    assert_eq!(
        store.audit_after(0, 10_000).await.unwrap().len(),
        audit_before,
        "a refused claim writes no audit record"
    );
    assert_eq!(used().await, 2000);

    // The same intent settling (its reservation carried again) reserves nothing more.
    let mut applied = store
        .load(&IntentKey::from_hex("e101"))
        .await
        .unwrap()
        .unwrap();
    applied.state = IntentState::Applied;
    let mut c = Commit::new(Some(applied), None, sample_event("e101", 2));
    c.reservations = vec![budget(1000, true)];
    store
        .commit(c)
        .await
        .expect("a repeat is not a second reservation");
    assert_eq!(used().await, 2000);

    // A failed effect gives its reservation back in the same commit.
    let mut failed = store
        .load(&IntentKey::from_hex("e102"))
        .await
        .unwrap()
        .unwrap();
    failed.state = IntentState::Failed;
    store
        .commit(Commit::new(Some(failed), None, sample_event("e102", 2)))
        .await
        .unwrap();
    assert_eq!(used().await, 1000, "failed releases");
    store
        .commit(claim("e103", 1000, true))
        .await
        .expect("the released budget fits");
    assert_eq!(used().await, 2000);

    // An approver's override reserves past the max, and counts.
    store
        .commit(claim("e104", 5000, false))
        .await
        .expect("not enforced");
    assert_eq!(used().await, 7000);
    // Before the window's start nothing counts; another scope is its own budget.
    assert_eq!(store.limit_used(scope, at(1_000_000)).await.unwrap(), 0);
    assert_eq!(
        store
            .limit_used("charge_budget@other", LONG_AGO())
            .await
            .unwrap(),
        0
    );
}

fn finding(id: &str) -> FindingRow {
    FindingRow {
        id: id.into(),
        rule: "charge_card".into(),
        raised_at: at(10),
        body: format!("{{\"id\":\"{id}\"}}"),
        delivered_at: None,
        attempts: 0,
        next_attempt_at: Some(at(10)),
        problem: None,
    }
}

/// A finding is stored once; the outbox hands it out until it is delivered.
pub async fn findings<S: Backend>(store: &S) {
    let mut c = Commit::event(sample_event("f201", 1));
    c.finding = Some(finding("f_one"));
    store.commit(c).await.expect("first raise");
    let audit_before = store.audit_after(0, 10_000).await.unwrap().len();
    let mut again = Commit::event(sample_event("f201", 2));
    again.finding = Some(finding("f_one"));
    let twice = store.commit(again).await;
    assert!(
        matches!(twice, Err(StoreError::Conflict)),
        "a finding raised twice is a conflict, got {twice:?}"
    );
    assert_eq!(
        store.audit_after(0, 10_000).await.unwrap().len(),
        audit_before,
        "the lost raise writes no audit record"
    );
    let listed = store.findings(10, None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0], finding("f_one"), "a finding round-trips");

    assert_eq!(
        store.findings_due(at(5), 10).await.unwrap().len(),
        0,
        "not due yet"
    );
    assert_eq!(store.findings_due(at(10), 10).await.unwrap().len(), 1);
    store
        .finding_delivery("f_one", 1, None, Some(at(100)))
        .await
        .unwrap();
    assert!(
        store.findings_due(at(50), 10).await.unwrap().is_empty(),
        "backing off"
    );
    let due = store.findings_due(at(100), 10).await.unwrap();
    assert_eq!((due.len(), due[0].attempts), (1, 1));
    store
        .finding_delivery("f_one", 2, Some(at(101)), None)
        .await
        .unwrap();
    assert!(
        store
            .findings_due(at(1_000_000), 10)
            .await
            .unwrap()
            .is_empty(),
        "a delivered finding is not sent again"
    );
    let stored = &store.findings(10, None).await.unwrap()[0];
    assert_eq!((stored.delivered_at, stored.attempts), (Some(at(101)), 2));
}
