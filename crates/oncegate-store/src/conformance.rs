//! The store conformance suite: written once, run against every backend.
//!
//! Each check takes a fresh, empty store and panics with a message on a violation.
//! Backends call [`run_all`] from their integration tests (see `tests/it`).
//!
//! Why one file, for now: one check per store concern (intents, approvals, the audit
//! chain, shared state, limits and findings, listings, tool pins) over the one trait pair
//! [`crate::Backend`] (every table's trait pair) that every backend implements. Issue 34
//! cuts that trait pair by table and puts this suite (and [`crate::memory`]) behind a
//! `testing` feature; the suite is split along the same cut then, so each check moves
//! once, with the trait it checks.

use jiff::Timestamp;
use oncegate_core::audit::{AuditEvent, AuditKind, verify_shard};
use oncegate_core::intent::{Approval, ApprovalReason, ApprovalState, IntentRecord, IntentState};
use oncegate_core::key::IntentKey;
use serde_json::json;

use crate::{ApprovalFilter, Backend, Commit, IntentFilter, PageAfter, StoreError};

mod limits;
mod shared_state;
pub use limits::{findings, limits};
pub use shared_state::{kill_switches, mcp_sessions, work_claims};

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("valid timestamp")
}

/// A record for tests: `key` is hex-ish text.
pub fn sample_record(key: &str, generation: u32) -> IntentRecord {
    IntentRecord {
        key: IntentKey::from_hex(key),
        generation,
        capability: "charge_card".into(),
        tenant: "acme".into(),
        principal: "planner".into(),
        run_id: Some("run-1".into()),
        step_id: None,
        business_ref: Some("A-1".into()),
        cross_key: Some(IntentKey::from_hex(format!("x{key}"))),
        args_digest: "d".into(),
        normalised: json!({"amount": {"currency": "USD", "minor": "1250"}}),
        arguments: json!({"order_id": "A-1", "amount": "12.50"}),
        state: IntentState::InFlight,
        attempts: 1,
        executions: 1,
        lease: None,
        effect_ref: None,
        result: None,
        error: None,
        approval_id: None,
        breaker_tripped: false,
        settled_at: None,
        attempt_ended_at: None,
        not_sent_reported: false,
        created_at: at(0),
        updated_at: at(0),
        version: 0,
    }
}

fn sample_event(key: &str, n: u32) -> AuditEvent {
    AuditEvent {
        at: at(i64::from(n)),
        kind: AuditKind::Call,
        key: Some(IntentKey::from_hex(key)),
        generation: 1,
        capability: Some("charge_card".into()),
        actor: "planner".into(),
        run_id: None,
        from: None,
        to: Some(IntentState::InFlight),
        status: None,
        code: None,
        detail: json!({"n": n}),
    }
}

fn sample_approval(id: &str, key: &str) -> Approval {
    Approval {
        id: id.into(),
        key: IntentKey::from_hex(key),
        generation: 1,
        capability: "refund".into(),
        principal: "planner".into(),
        args_digest: "d".into(),
        policy_hash: "p".into(),
        reason: ApprovalReason::Policy,
        detail: String::new(),
        state: ApprovalState::Pending,
        decided_by: None,
        decided_at: None,
        created_at: at(0),
        expires_at: at(3600),
        version: 0,
    }
}

/// Insert, then compare-and-set: versions advance and stale writers lose.
pub async fn compare_and_set<S: Backend>(store: &S) {
    let key = "aa01";
    let rec = sample_record(key, 1);
    store
        .commit(Commit::new(Some(rec.clone()), None, sample_event(key, 1)))
        .await
        .expect("insert");
    let dup = store
        .commit(Commit::new(Some(rec.clone()), None, sample_event(key, 2)))
        .await;
    assert!(
        matches!(dup, Err(StoreError::Conflict)),
        "a second insert of one (key, generation) must conflict, got {dup:?}"
    );

    let stored = store
        .load(&rec.key)
        .await
        .expect("load")
        .expect("record exists");
    assert_eq!(stored.version, 1);
    let mut next = stored.clone();
    next.state = IntentState::Applied;
    next.effect_ref = Some("ch_1".into());
    store
        .commit(Commit::new(Some(next.clone()), None, sample_event(key, 3)))
        .await
        .expect("cas");
    let stale = store
        .commit(Commit::new(Some(next), None, sample_event(key, 4)))
        .await;
    assert!(
        matches!(stale, Err(StoreError::Conflict)),
        "a stale version must conflict, got {stale:?}"
    );
    let reread = store.load(&rec.key).await.unwrap().unwrap();
    assert_eq!(
        (reread.state, reread.version, reread.effect_ref.as_deref()),
        (IntentState::Applied, 2, Some("ch_1"))
    );
}

/// A conflicting commit writes nothing: neither its approval nor its audit event.
pub async fn conflict_is_atomic<S: Backend>(store: &S) {
    let key = "bb02";
    let rec = sample_record(key, 1);
    store
        .commit(Commit::new(Some(rec.clone()), None, sample_event(key, 1)))
        .await
        .unwrap();
    let before = store.audit_after(0, 10_000).await.unwrap().len();
    let loser = store
        .commit(Commit::new(
            Some(rec),
            Some(sample_approval("ap_lost", key)),
            sample_event(key, 2),
        ))
        .await;
    assert!(matches!(loser, Err(StoreError::Conflict)));
    assert!(
        store.approval("ap_lost").await.unwrap().is_none(),
        "a lost race must not leave its approval"
    );
    assert_eq!(
        store.audit_after(0, 10_000).await.unwrap().len(),
        before,
        "a lost race must not leave audit records"
    );
}

/// Generations: load returns the newest; approvals round-trip and CAS.
pub async fn generations_and_approvals<S: Backend>(store: &S) {
    let key = "cc03";
    store
        .commit(Commit::new(
            Some(sample_record(key, 1)),
            None,
            sample_event(key, 1),
        ))
        .await
        .unwrap();
    let mut g2 = sample_record(key, 2);
    g2.state = IntentState::PendingApproval;
    g2.approval_id = Some("ap_1".into());
    store
        .commit(Commit::new(
            Some(g2),
            Some(sample_approval("ap_1", key)),
            sample_event(key, 2),
        ))
        .await
        .unwrap();
    let latest = store
        .load(&IntentKey::from_hex(key))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.generation, 2);

    let pending = store
        .list_approvals(&pending_approvals())
        .await
        .unwrap()
        .items;
    assert!(pending.iter().any(|a| a.id == "ap_1"));
    let mut ap = store.approval("ap_1").await.unwrap().unwrap();
    assert_eq!(ap.version, 1);
    ap.state = ApprovalState::Approved;
    store
        .commit(Commit::new(None, Some(ap.clone()), sample_event(key, 3)))
        .await
        .unwrap();
    let again = store
        .commit(Commit::new(None, Some(ap), sample_event(key, 4)))
        .await;
    assert!(
        matches!(again, Err(StoreError::Conflict)),
        "approving twice from one read must conflict"
    );
    assert!(
        store
            .list_approvals(&pending_approvals())
            .await
            .unwrap()
            .items
            .iter()
            .all(|a| a.id != "ap_1")
    );
}

/// Listing filters and the cross-run lookup.
pub async fn listing_and_cross_run<S: Backend>(store: &S) {
    let mut applied = sample_record("dd04", 1);
    applied.state = IntentState::Applied;
    store
        .commit(Commit::new(
            Some(applied.clone()),
            None,
            sample_event("dd04", 1),
        ))
        .await
        .unwrap();
    let mut tripped = sample_record("dd05", 1);
    tripped.state = IntentState::Applied;
    tripped.breaker_tripped = true;
    tripped.updated_at = at(5);
    tripped.capability = "refund".into();
    store
        .commit(Commit::new(Some(tripped), None, sample_event("dd05", 1)))
        .await
        .unwrap();

    let by_cap = store
        .list_intents(&IntentFilter {
            capability: Some("refund".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .items;
    assert!(by_cap.iter().all(|r| r.capability == "refund") && !by_cap.is_empty());
    let breakers = store
        .list_intents(&IntentFilter {
            breaker_tripped: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .items;
    assert_eq!(
        breakers.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        vec!["dd05"]
    );
    let applied_list = store
        .list_intents(&IntentFilter {
            state: Some(IntentState::Applied),
            ..Default::default()
        })
        .await
        .unwrap()
        .items;
    assert!(applied_list.len() >= 2);

    let cross = applied.cross_key.clone().unwrap();
    let other = store.find_other_run(&cross, Some("run-2")).await.unwrap();
    assert_eq!(
        other.map(|r| r.key),
        Some(applied.key.clone()),
        "another run must find run-1's intent"
    );
    assert!(
        store
            .find_other_run(&cross, Some("run-1"))
            .await
            .unwrap()
            .is_none(),
        "the same run is not another run"
    );
}

/// Newest first by default; oldest first for the sweep.
pub async fn listing_order<S: Backend>(store: &S) {
    for (i, key) in ["ee01", "ee02", "ee03"].iter().enumerate() {
        let mut r = sample_record(key, 1);
        r.updated_at = at(i as i64 * 10);
        store
            .commit(Commit::new(Some(r), None, sample_event(key, 1)))
            .await
            .unwrap();
    }
    let keys = |v: Vec<IntentRecord>| {
        v.into_iter()
            .map(|r| r.key.as_str().to_owned())
            .collect::<Vec<_>>()
    };
    let newest = store
        .list_intents(&IntentFilter::default())
        .await
        .unwrap()
        .items;
    assert_eq!(keys(newest), ["ee03", "ee02", "ee01"]);
    let oldest = store
        .list_intents(&IntentFilter {
            oldest_first: true,
            limit: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .items;
    assert_eq!(keys(oldest), ["ee01", "ee02"]);
}

/// Every commit appends one chained audit record; all shards verify.
pub async fn audit_chain<S: Backend>(store: &S) {
    for i in 0..40u32 {
        let key = format!("{:04x}ee", i * 1637);
        store
            .commit(Commit::new(None, None, sample_event(&key, i)))
            .await
            .unwrap();
    }
    let all = store.audit_after(0, 100_000).await.unwrap();
    assert!(all.len() >= 40);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "export is ordered");
    let shards = store.audit_shards().await.unwrap();
    assert!(shards.len() > 1, "audit records spread over shards");
    for shard in shards {
        let records = store.audit_shard(shard).await.unwrap();
        verify_shard(shard, &records).unwrap_or_else(|b| panic!("shard {shard} broken: {b:?}"));
    }
}

/// Listing by run and by business reference: only those intents, newest first, with
/// the other terms.
pub async fn listing_by_run_and_reference<S: Backend>(store: &S) {
    for (i, (key, run, reference)) in [
        ("a1", "run-1", "A-1"),
        ("a2", "run-2", "A-1"),
        ("a3", "run-2", "B-7"),
        ("a4", "run-3", "B-7"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut rec = sample_record(key, 1);
        rec.run_id = Some(run.into());
        rec.business_ref = Some(reference.into());
        rec.updated_at = at(10 + i as i64);
        store
            .commit(Commit::new(Some(rec), None, sample_event(key, i as u32)))
            .await
            .unwrap();
    }
    let keys = |run: Option<&str>, reference: Option<&str>| {
        let filter = IntentFilter {
            run_id: run.map(str::to_owned),
            business_ref: reference.map(str::to_owned),
            state: Some(IntentState::InFlight),
            ..IntentFilter::default()
        };
        async move {
            let l = store.list_intents(&filter).await.unwrap();
            l.items
                .iter()
                .map(|r| r.key.as_str().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(keys(Some("run-2"), None).await, ["a3", "a2"]);
    assert_eq!(keys(None, Some("B-7")).await, ["a4", "a3"]);
    assert_eq!(keys(Some("run-2"), Some("A-1")).await, ["a2"]);
    assert!(keys(Some("run-9"), None).await.is_empty());
    assert!(keys(None, Some("b-7")).await.is_empty(), "exact, as stored");
}

/// An intent's timeline: every record naming its key, in chain order, none of another
/// intent's, the newest `limit`.
pub async fn audit_of_intent<S: Backend>(store: &S) {
    for i in 0..30u32 {
        // Three intents interleaved; the same shard for two of them.
        let key = ["00aa01", "00aa02", "7f0003"][(i % 3) as usize];
        store
            .commit(Commit::new(None, None, sample_event(key, i)))
            .await
            .unwrap();
    }
    let mine = store
        .audit_of_intent(&IntentKey::from_hex("00aa01".to_owned()), 100)
        .await
        .unwrap();
    assert_eq!(mine.len(), 10);
    assert!(
        mine.iter()
            .all(|r| r.event.key.as_ref().map(IntentKey::as_str) == Some("00aa01"))
    );
    let n = |records: &[oncegate_core::audit::AuditRecord]| -> Vec<u64> {
        records
            .iter()
            .map(|r| r.event.detail["n"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(
        n(&mine),
        (0..30).step_by(3).collect::<Vec<u64>>(),
        "in chain order"
    );
    let newest = store
        .audit_of_intent(&IntentKey::from_hex("7f0003".to_owned()), 4)
        .await
        .unwrap();
    assert_eq!(n(&newest), [20, 23, 26, 29], "the newest, in chain order");
    let none = store
        .audit_of_intent(&IntentKey::from_hex("00aa09".to_owned()), 100)
        .await
        .unwrap();
    assert!(none.is_empty());
}

/// Many concurrent inserts of one (key, generation): exactly one wins.
pub async fn one_insert_wins<S: Backend>(store: &S) {
    let mut tasks = Vec::new();
    for i in 0..64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut rec = sample_record("ff06", 1);
            rec.principal = format!("agent-{i}");
            store
                .commit(Commit::new(Some(rec), None, sample_event("ff06", i)))
                .await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(()) => wins += 1,
            Err(StoreError::Conflict) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!(wins, 1, "exactly one concurrent insert may win");
}

/// Client keys: the first binding holds; a second bind returns it unchanged.
pub async fn client_key_binding<S: Backend>(store: &S) {
    let first = crate::ClientKeyBinding {
        principal: "planner".into(),
        capability: "charge_card".into(),
        client_key: "ck-1".into(),
        intent_key: IntentKey::from_hex("aa"),
        args_digest: "d1".into(),
        created_at: at(0),
    };
    assert_eq!(store.bind_client_key(first.clone()).await.unwrap(), first);
    let second = crate::ClientKeyBinding {
        intent_key: IntentKey::from_hex("bb"),
        args_digest: "d2".into(),
        ..first.clone()
    };
    assert_eq!(
        store.bind_client_key(second.clone()).await.unwrap(),
        first,
        "the first binding holds"
    );
    let other_principal = crate::ClientKeyBinding {
        principal: "subagent".into(),
        ..second
    };
    assert_eq!(
        store
            .bind_client_key(other_principal.clone())
            .await
            .unwrap(),
        other_principal,
        "keys are scoped to the principal"
    );
}

/// `updated_since` keeps only intents last written at or after it.
pub async fn listing_since<S: Backend>(store: &S) {
    for (key, secs) in [("dd01", 0), ("dd02", 100), ("dd03", 200)] {
        let mut rec = sample_record(key, 1);
        rec.updated_at = at(secs);
        store
            .commit(Commit::new(Some(rec), None, sample_event(key, 1)))
            .await
            .unwrap();
    }
    let keys = |since| async move {
        store
            .list_intents(&IntentFilter {
                updated_since: since,
                ..Default::default()
            })
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|r| r.key.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(keys(None).await.len(), 3);
    assert_eq!(
        keys(Some(at(100))).await,
        vec!["dd03", "dd02"],
        "at or after, newest first"
    );
    assert!(keys(Some(at(201))).await.is_empty());
    // With the state and capability terms, as the detection ledger reads it.
    let ledger = store
        .list_intents(&IntentFilter {
            state: Some(IntentState::InFlight),
            capability: Some("charge_card".into()),
            updated_since: Some(at(100)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ledger.items.len(), 2);
    let other = store
        .list_intents(&IntentFilter {
            state: Some(IntentState::Applied),
            updated_since: Some(at(100)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(other.items.is_empty());
}

/// Runs every check; `fresh` makes an empty store per check.
pub async fn run_all<S, F, Fut>(fresh: F)
where
    S: Backend,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = S>,
{
    compare_and_set(&fresh().await).await;
    conflict_is_atomic(&fresh().await).await;
    generations_and_approvals(&fresh().await).await;
    listing_and_cross_run(&fresh().await).await;
    audit_chain(&fresh().await).await;
    audit_of_intent(&fresh().await).await;
    listing_by_run_and_reference(&fresh().await).await;
    one_insert_wins(&fresh().await).await;
    client_key_binding(&fresh().await).await;
    listing_order(&fresh().await).await;
    rows_are_sealed(&fresh().await).await;
    kill_switches(&fresh().await).await;
    mcp_sessions(&fresh().await).await;
    work_claims(&fresh().await).await;
    limits(&fresh().await).await;
    findings(&fresh().await).await;
    listing_since(&fresh().await).await;
    tool_pins(&fresh().await).await;
    listing_pages(&fresh().await).await;
}

/// Pinned tool definitions: the first definition seen is pinned; a different one is
/// pending (first seen kept while it stays), the pin seen again clears it; only the
/// pending digest is accepted, once; another store handle (a replica) sees the same.
pub async fn tool_pins<S: Backend>(store: &S) {
    use crate::OfferedTool;
    let at = |s: i64| jiff::Timestamp::from_second(1_700_000_000 + s).unwrap();
    let offered = |tool: &str, digest: &str, s: i64| OfferedTool {
        server: "pay".into(),
        tool: tool.into(),
        digest: digest.into(),
        definition: format!("{{\"description\":\"{digest}\"}}"),
        at: at(s),
    };
    assert!(store.tool_pins().await.unwrap().is_empty());
    let first = store
        .pin_tool(offered("find", "sha256:a", 1))
        .await
        .unwrap();
    assert_eq!(
        (
            first.digest.as_str(),
            first.pinned_by.as_str(),
            first.pinned_at
        ),
        ("sha256:a", "oncegate", at(1))
    );
    assert_eq!(first.definition, "{\"description\":\"sha256:a\"}");
    assert_eq!(first.pending, None);
    // The same definition again changes nothing.
    assert_eq!(
        store
            .pin_tool(offered("find", "sha256:a", 2))
            .await
            .unwrap(),
        first
    );
    // A changed one is pending, the pin stays; seen again, its first sighting stays.
    let changed = store
        .pin_tool(offered("find", "sha256:b", 3))
        .await
        .unwrap();
    assert_eq!(changed.digest, "sha256:a");
    let pending = changed.pending.clone().expect("pending");
    assert_eq!(
        (pending.digest.as_str(), pending.seen_at),
        ("sha256:b", at(3))
    );
    assert_eq!(pending.definition, "{\"description\":\"sha256:b\"}");
    assert_eq!(
        store
            .pin_tool(offered("find", "sha256:b", 4))
            .await
            .unwrap(),
        changed
    );
    // Another change replaces the pending one.
    let again = store
        .pin_tool(offered("find", "sha256:c", 5))
        .await
        .unwrap();
    assert_eq!(
        again
            .pending
            .as_ref()
            .map(|p| (p.digest.as_str(), p.seen_at)),
        Some(("sha256:c", at(5)))
    );
    // Back to the pin: nothing is pending.
    let back = store
        .pin_tool(offered("find", "sha256:a", 6))
        .await
        .unwrap();
    assert_eq!(
        (back.digest.as_str(), back.pending.clone()),
        ("sha256:a", None)
    );
    // Only the pending digest is accepted: not a stale one, not the pin, not a tool
    // without a pin.
    store
        .pin_tool(offered("find", "sha256:d", 7))
        .await
        .unwrap();
    for stale in ["sha256:b", "sha256:c", "sha256:a"] {
        assert!(
            !store
                .accept_tool("pay", "find", stale, "root", at(8))
                .await
                .unwrap(),
            "{stale} accepted"
        );
    }
    assert!(
        !store
            .accept_tool("pay", "nothing", "sha256:d", "root", at(8))
            .await
            .unwrap()
    );
    assert!(
        store
            .accept_tool("pay", "find", "sha256:d", "root", at(9))
            .await
            .unwrap()
    );
    assert!(
        !store
            .accept_tool("pay", "find", "sha256:d", "root", at(9))
            .await
            .unwrap(),
        "accepted twice"
    );
    // Pins are per (server, tool), listed in that order, shared by every handle.
    store
        .pin_tool(offered("create", "sha256:e", 10))
        .await
        .unwrap();
    let mut other_server = offered("find", "sha256:f", 11);
    other_server.server = "held".into();
    store.pin_tool(other_server).await.unwrap();
    let replica = store.clone();
    let pins = replica.tool_pins().await.unwrap();
    let listed: Vec<_> = pins
        .iter()
        .map(|p| (p.server.as_str(), p.tool.as_str(), p.digest.as_str()))
        .collect();
    assert_eq!(
        listed,
        [
            ("held", "find", "sha256:f"),
            ("pay", "create", "sha256:e"),
            ("pay", "find", "sha256:d"),
        ]
    );
    let accepted = &pins[2];
    assert_eq!(
        (
            accepted.pinned_by.as_str(),
            accepted.pinned_at,
            accepted.pending.clone()
        ),
        ("root", at(9), None)
    );
    assert_eq!(accepted.definition, "{\"description\":\"sha256:d\"}");
}

fn pending_approvals() -> ApprovalFilter {
    ApprovalFilter {
        state: Some(ApprovalState::Pending),
        ..ApprovalFilter::default()
    }
}

/// Cursor paging: every row exactly once, in order, across pages (ties in time broken
/// by key and generation), both orders; a row written between two pages neither
/// shifts nor repeats one; the last page has no next cursor; approvals and findings
/// page the same way; pending approvals counted per principal, expired ones not.
pub async fn listing_pages<S: Backend>(store: &S) {
    // 23 intents over 5 distinct times (ties!), two generations of one key.
    let mut expected = Vec::new();
    for i in 0..23u32 {
        let key = format!("ff{:02x}", (i * 7) % 23);
        let mut r = sample_record(&key, 1);
        r.updated_at = at(i64::from(i % 5));
        store
            .commit(Commit::new(Some(r), None, sample_event(&key, i)))
            .await
            .unwrap();
        expected.push((i64::from(i % 5), key, 1u32));
    }
    let mut g2 = sample_record("ff00", 2);
    g2.updated_at = at(2);
    store
        .commit(Commit::new(Some(g2), None, sample_event("ff00", 99)))
        .await
        .unwrap();
    expected.push((2, "ff00".into(), 2));
    expected.sort();
    for oldest_first in [false, true] {
        let mut seen = Vec::new();
        let mut after: Option<PageAfter> = None;
        let mut pages = 0;
        loop {
            let page = store
                .list_intents(&IntentFilter {
                    limit: 5,
                    oldest_first,
                    after: after.clone(),
                    ..IntentFilter::default()
                })
                .await
                .unwrap();
            pages += 1;
            assert!(page.items.len() <= 5, "a page holds at most its limit");
            for r in &page.items {
                let secs = r.updated_at.as_second() - at(0).as_second();
                seen.push((secs, r.key.as_str().to_owned(), r.generation));
            }
            match page.next {
                Some(next) => {
                    assert_eq!(page.items.len(), 5, "only a full page has a next one");
                    assert_eq!(
                        Some(&next),
                        page.items.last().map(PageAfter::of_intent).as_ref(),
                        "the cursor is the last row's position"
                    );
                    after = Some(next);
                }
                None => break,
            }
            assert!(pages < 10, "paging must end");
        }
        let mut want = expected.clone();
        if !oldest_first {
            want.reverse();
        }
        assert_eq!(
            seen, want,
            "each intent exactly once, in order (oldest_first={oldest_first})"
        );
        assert_eq!(pages, 5, "24 rows in pages of 5");
    }

    // A row written between two pages: the next page continues where the first ended.
    let first = store
        .list_intents(&IntentFilter {
            limit: 4,
            ..IntentFilter::default()
        })
        .await
        .unwrap();
    let mut newer = sample_record("fe01", 1);
    newer.updated_at = at(50);
    store
        .commit(Commit::new(Some(newer), None, sample_event("fe01", 1)))
        .await
        .unwrap();
    let second = store
        .list_intents(&IntentFilter {
            limit: 4,
            after: first.next.clone(),
            ..IntentFilter::default()
        })
        .await
        .unwrap();
    let keys = |l: &crate::Listing<IntentRecord>| {
        l.items
            .iter()
            .map(|r| (r.key.as_str().to_owned(), r.generation))
            .collect::<Vec<_>>()
    };
    let want: Vec<_> = expected
        .iter()
        .rev()
        .skip(4)
        .take(4)
        .map(|(_, k, g)| (k.clone(), *g))
        .collect();
    assert_eq!(
        keys(&second),
        want,
        "a newer row does not shift the next page"
    );

    // Filters page too, the cursor inside the filter.
    let mut filtered = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_intents(&IntentFilter {
                state: Some(IntentState::InFlight),
                capability: Some("charge_card".into()),
                limit: 7,
                after,
                ..IntentFilter::default()
            })
            .await
            .unwrap();
        filtered.extend(keys(&page));
        after = page.next;
        if after.is_none() {
            break;
        }
    }
    assert_eq!(filtered.len(), 25, "every in-flight charge once");

    // Approvals: oldest first, paged by (created_at, id).
    for i in 0..7u32 {
        let mut a = sample_approval(&format!("ap_{i:02}"), &format!("fd{i:02}"));
        a.created_at = at(i64::from(i / 3));
        if i == 6 {
            a.principal = "other".into();
        }
        if i == 5 {
            a.expires_at = at(-10);
        }
        store
            .commit(Commit::new(None, Some(a), sample_event("fd00", 200 + i)))
            .await
            .unwrap();
    }
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_approvals(&ApprovalFilter {
                limit: 3,
                after,
                ..pending_approvals()
            })
            .await
            .unwrap();
        ids.extend(page.items.iter().map(|a| a.id.clone()));
        after = page.next;
        if after.is_none() {
            break;
        }
    }
    let want: Vec<String> = (0..7).map(|i| format!("ap_{i:02}")).collect();
    assert_eq!(ids, want, "every approval once, oldest first");
    let newest = store
        .list_approvals(&ApprovalFilter {
            limit: 3,
            newest_first: true,
            ..ApprovalFilter::default()
        })
        .await
        .unwrap();
    let newest_ids: Vec<&str> = newest.items.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(newest_ids, ["ap_06", "ap_05", "ap_04"], "newest first");
    let older = store
        .list_approvals(&ApprovalFilter {
            limit: 3,
            newest_first: true,
            after: newest.next,
            ..ApprovalFilter::default()
        })
        .await
        .unwrap();
    let older_ids: Vec<&str> = older.items.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(
        older_ids,
        ["ap_03", "ap_02", "ap_01"],
        "the next page, newest first"
    );
    let all = store.list_approvals(&pending_approvals()).await.unwrap();
    assert_eq!(all.items.len(), 7, "no limit: every row");
    assert!(all.next.is_none());
    assert_eq!(
        store.pending_approvals_of("planner", at(0)).await.unwrap(),
        5,
        "planner's pending approvals, the expired one not counted"
    );
    assert_eq!(store.pending_approvals_of("other", at(0)).await.unwrap(), 1);
    assert_eq!(
        store.pending_approvals_of("nobody", at(0)).await.unwrap(),
        0
    );
    assert_eq!(
        store
            .pending_approvals_of("planner", at(7200))
            .await
            .unwrap(),
        0,
        "all expired later"
    );

    // Findings: newest first, ties by id (descending), paged by (raised_at, id).
    for i in 0..7u32 {
        let mut c = Commit::event(sample_event("fc00", 300 + i));
        c.finding = Some(crate::FindingRow {
            id: format!("f_{i:02}"),
            rule: "charge_card".into(),
            raised_at: at(i64::from(i / 2)),
            body: format!("{{\"id\":\"f_{i:02}\"}}"),
            delivered_at: None,
            attempts: 0,
            next_attempt_at: None,
            problem: None,
        });
        store.commit(c).await.unwrap();
    }
    let mut ids = Vec::new();
    let mut after: Option<PageAfter> = None;
    loop {
        let page = store.findings(3, after.as_ref()).await.unwrap();
        ids.extend(page.iter().map(|f| f.id.clone()));
        if page.len() < 3 {
            break;
        }
        after = page.last().map(PageAfter::of_finding);
    }
    let want: Vec<String> = (0..7).rev().map(|i| format!("f_{i:02}")).collect();
    assert_eq!(ids, want, "every finding once, newest first");
}

/// Every row written names the audit record that wrote its current version, which
/// seals the row's hash: `verify_rows` finds nothing wrong, and the chain seals each
/// row's newest version.
pub async fn rows_are_sealed<S: Backend>(store: &S) {
    generations_and_approvals(store).await;
    compare_and_set(store).await;
    let all: Vec<_> = store
        .audit_after(0, 100_000)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    let rows = store.stored_rows().await.unwrap();
    assert!(
        rows.iter()
            .any(|r| r.kind == oncegate_core::audit::RowKind::Approval)
            && rows
                .iter()
                .any(|r| r.kind == oncegate_core::audit::RowKind::Intent),
        "rows of both kinds are listed"
    );
    let problems = oncegate_core::audit::verify_rows(&all, &rows);
    assert!(
        problems.is_empty(),
        "rows do not match the chain: {problems:?}"
    );
    for row in &rows {
        assert!(row.link.is_some(), "row {} names no audit record", row.key);
    }
}
