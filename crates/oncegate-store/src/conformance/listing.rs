//! Listings of intents, approvals and findings: filters, order, the cross-run lookup,
//! `updated_since`, and cursor paging.

use oncegate_core::intent::{IntentRecord, IntentState};

use super::fixtures::{at, pending_approvals, sample_approval, sample_event, sample_record};
use crate::{ApprovalFilter, Backend, Commit, IntentFilter, PageAfter};

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

// Long on purpose: one story over one set of rows: each page's assertions depend on the
// rows and cursors of the pages before it, and a row is written between two pages on
// purpose; cut up, the shared rows and cursors would be threaded through every piece.
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
