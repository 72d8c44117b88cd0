//! Intents and approvals ([`crate::IntentsRead`] / [`crate::IntentsWrite`]): compare-and-set,
//! atomic commits, generations, one insert winning a race, client-key bindings.

use oncegate_core::intent::{ApprovalState, IntentState};
use oncegate_core::key::IntentKey;

use super::fixtures::{at, pending_approvals, sample_approval, sample_event, sample_record};
use crate::{Backend, Commit, StoreError};

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
