//! The audit chain ([`crate::AuditRead`] / [`crate::AuditWrite`]): one chained record per
//! commit, an intent's timeline, and every row sealed by the record that wrote it.

use oncegate_core::audit::verify_shard;
use oncegate_core::key::IntentKey;

use super::fixtures::sample_event;
use super::intents::{compare_and_set, generations_and_approvals};
use crate::{Backend, Commit};

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
