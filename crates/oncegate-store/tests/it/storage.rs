//! Storage forms (issue 10, point 3): the stored bytes of an intent row, an approval
//! row and an audit record, their row seals and the audit hash, pinned by snapshots so
//! a rename of a domain or API field cannot silently change them; and rows written by
//! an earlier build, decoded and re-encoded byte for byte.

use jiff::Timestamp;
use oncegate_core::audit::{
    AuditEvent, AuditKind, AuditRecord, ChainHead, ChainKey, EncodedEvent, RowKind, RowSeal,
    StoredRow, add_row_seals, row_hash, row_hash_of, seal, seal_with, verify_rows, verify_shard,
};
use oncegate_core::codes::Code;
use oncegate_core::intent::{
    Approval, ApprovalReason, ApprovalState, IntentRecord, IntentState, Lease, Reason, Status,
};
use oncegate_core::key::IntentKey;
use oncegate_store::storage::{ApprovalRowV1, AuditRowV1, IntentRowV1};
use oncegate_store::{Commit, IntentsRead, IntentsWrite, MemoryStore, SqliteStore};
use serde_json::{Value, json};
use sqlx::{Connection, Row};

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + second).unwrap()
}

/// An intent with every optional field set, so every field's spelling is pinned.
fn full_intent() -> IntentRecord {
    IntentRecord {
        key: IntentKey::from_hex("ab".repeat(32)),
        generation: 2,
        capability: "charge_card".into(),
        tenant: "acme".into(),
        principal: "planner".into(),
        run_id: Some("run-1".into()),
        step_id: Some("step-3".into()),
        business_ref: Some("A-1".into()),
        cross_key: Some(IntentKey::from_hex("cd".repeat(32))),
        args_digest: "ef".repeat(32),
        normalised: json!({"amount": {"currency": "USD", "minor": "1250"}}),
        arguments: json!({"order_id": "A-1", "amount": "12.50"}),
        state: IntentState::Unknown,
        attempts: 2,
        executions: 1,
        lease: Some(Lease {
            owner: "gw-1".into(),
            expires_at: at(30),
            nonce: None,
        }),
        effect_ref: Some("ch_1".into()),
        result: Some(json!({"id": "ch_1", "amount": 1250})),
        error: Some(Reason::new(Code::UpstreamUnknown, "the upstream timed out")),
        approval_id: Some("ap_1".into()),
        breaker_tripped: true,
        settled_at: Some(Timestamp::from_millisecond(1_700_000_040_500).unwrap()),
        attempt_ended_at: Some(at(50)),
        not_sent_reported: false,
        created_at: at(0),
        updated_at: at(60),
        version: 4,
    }
}

fn full_approval() -> Approval {
    Approval {
        id: "ap_1".into(),
        key: IntentKey::from_hex("ab".repeat(32)),
        generation: 2,
        capability: "refund".into(),
        principal: "planner".into(),
        args_digest: "ef".repeat(32),
        policy_hash: "12".repeat(32),
        reason: ApprovalReason::UnknownFirstAttempt,
        detail: "the first attempt's status is unknown".into(),
        state: ApprovalState::Approved,
        decided_by: Some("alice".into()),
        decided_at: Some(at(120)),
        created_at: at(60),
        expires_at: at(3660),
        version: 2,
    }
}

fn full_event() -> AuditEvent {
    let mut event = AuditEvent {
        at: at(60),
        kind: AuditKind::Approval,
        key: Some(IntentKey::from_hex("ab".repeat(32))),
        generation: 2,
        capability: Some("refund".into()),
        actor: "alice".into(),
        run_id: Some("run-1".into()),
        from: Some(IntentState::PendingApproval),
        to: Some(IntentState::InFlight),
        status: Some(Status::InFlight),
        code: Some(Code::InFlight),
        detail: json!({"approval_id": "ap_1", "choice": "approve"}),
    };
    add_row_seals(
        &mut event,
        Some(RowSeal {
            key: "ab".repeat(32),
            generation: 2,
            version: 5,
            hash: "34".repeat(32),
        }),
        Some(RowSeal {
            key: "ap_1".into(),
            generation: 2,
            version: 3,
            hash: "56".repeat(32),
        }),
    );
    event
}

#[test]
fn intent_row_v1_bytes_and_seal() {
    let body = IntentRowV1::from(&full_intent()).to_body();
    insta::assert_snapshot!(format!("body: {body}\nrow_hash: {}", row_hash(&body)));
}

#[test]
fn approval_row_v1_bytes_and_seal() {
    let body = ApprovalRowV1::from(&full_approval()).to_body();
    insta::assert_snapshot!(format!("body: {body}\nrow_hash: {}", row_hash(&body)));
}

#[test]
fn audit_row_v1_bytes_and_hash() {
    let plain = AuditRowV1::from(seal(full_event(), &ChainHead::genesis()));
    let key = ChainKey::new(b"chain secret").unwrap();
    let keyed = AuditRowV1::from(seal_with(
        full_event(),
        &ChainHead::genesis(),
        Some(&key),
        oncegate_core::audit::AUDIT_SHARDS,
    ));
    insta::assert_snapshot!(format!(
        "shard: {}\nseq: {}\nprev_hash: {}\nhash: {}\nkeyed hash: {}\nbody: {}",
        plain.shard,
        plain.seq,
        plain.prev_hash,
        plain.hash,
        keyed.hash,
        plain.body_text()
    ));
}

/// A commit writes and seals its rows straight from their storage forms, without the
/// value form a load reads back: the two spellings must give the same bytes and hashes.
#[test]
fn rows_and_events_written_without_a_value_match_their_value_form() {
    let intent = IntentRowV1::from(&full_intent());
    assert_eq!(intent.body_text(), intent.to_body().to_string());
    assert_eq!(row_hash_of(&intent), row_hash(&intent.to_body()));
    let approval = ApprovalRowV1::from(&full_approval());
    assert_eq!(approval.body_text(), approval.to_body().to_string());
    assert_eq!(row_hash_of(&approval), row_hash(&approval.to_body()));
    let event = full_event();
    let head = ChainHead::genesis();
    let sealed = seal(event.clone(), &head);
    assert_eq!(
        EncodedEvent::new(event.clone()).hash_at(sealed.shard, &head, None),
        sealed.hash
    );
    assert_eq!(
        AuditRowV1::body_text_of(&event),
        AuditRowV1::from(sealed).body_text()
    );
}

#[test]
fn domain_values_round_trip_through_their_storage_forms() {
    let intent = full_intent();
    let back =
        IntentRecord::from(IntentRowV1::from_body(IntentRowV1::from(&intent).to_body()).unwrap());
    assert_eq!(back, intent);
    let approval = full_approval();
    let back =
        Approval::from(ApprovalRowV1::from_body(ApprovalRowV1::from(&approval).to_body()).unwrap());
    assert_eq!(back, approval);
    let record = seal(full_event(), &ChainHead::genesis());
    let row = AuditRowV1::from(record.clone());
    let read = AuditRowV1::from_columns(
        row.shard,
        row.seq,
        row.prev_hash.clone(),
        row.hash.clone(),
        &row.body_text(),
    )
    .unwrap();
    assert_eq!(AuditRecord::from(read), record);
}

/// Every spelling an approval row can carry for its enums (the intent and audit enums
/// are pinned in `oncegate_core::audit::encoding`).
#[test]
fn approval_variant_spellings() {
    let spell = |values: Vec<Value>| {
        values
            .iter()
            .map(|v| v.as_str().expect("a string spelling").to_owned())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let states = [
        ApprovalState::Pending,
        ApprovalState::Approved,
        ApprovalState::Denied,
        ApprovalState::Expired,
        ApprovalState::Void,
    ];
    let reasons = [
        ApprovalReason::Policy,
        ApprovalReason::UnknownFirstAttempt,
        ApprovalReason::OutsideWindow,
        ApprovalReason::CrossRun,
    ];
    insta::assert_snapshot!(format!(
        "approval states: {}\napproval reasons: {}",
        spell(states.map(|s| json!(s)).to_vec()),
        spell(reasons.map(|r| json!(r)).to_vec()),
    ));
}

/// Both backends store (and seal) the storage form: SQLite's body column holds exactly
/// its bytes, and the in-memory store's seal hashes the same body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_backends_store_the_storage_forms() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let sqlite = SqliteStore::scratch(&db).await.unwrap();
    let memory = MemoryStore::new();
    let mut intent = full_intent();
    intent.version = 0;
    let mut approval = full_approval();
    approval.version = 0;
    let commit = Commit::new(Some(intent.clone()), Some(approval.clone()), full_event());
    sqlite.commit(commit.clone()).await.unwrap();
    memory.commit(commit).await.unwrap();

    intent.version = 1;
    approval.version = 1;
    let intent_body = IntentRowV1::from(&intent).to_body();
    let approval_body = ApprovalRowV1::from(&approval).to_body();
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let stored: String = sqlx::query("SELECT body FROM intents")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, intent_body.to_string());
    let stored: String = sqlx::query("SELECT body FROM approvals")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, approval_body.to_string());

    for rows in [
        sqlite.stored_rows().await.unwrap(),
        memory.stored_rows().await.unwrap(),
    ] {
        let hash = |kind: RowKind| {
            rows.iter()
                .find(|r| r.kind == kind)
                .map(|r| (r.body_hash.clone().unwrap(), r.sealed_hash.clone()))
                .unwrap()
        };
        let expected = row_hash(&intent_body);
        assert_eq!(hash(RowKind::Intent), (expected.clone(), Some(expected)));
        let expected = row_hash(&approval_body);
        assert_eq!(hash(RowKind::Approval), (expected.clone(), Some(expected)));
    }
    assert_eq!(
        sqlite.load(&intent.key).await.unwrap(),
        Some(intent.clone())
    );
    assert_eq!(memory.load(&intent.key).await.unwrap(), Some(intent));
}

// Rows as an earlier build wrote them (commit 57477d5): a refund held for approval,
// approved by alice and applied, through the Gate on a real SQLite file, copied from
// `sqlite3 -json oncegate.db` (intents, approvals, and audit shard 1).
const INTENT_BODY: &str = r#"{"key":"6991f1d3d5cdf1827c8c9b3ce2e9e5dafaad0a792043b9cea7f604d22f467868","generation":1,"capability":"refund","tenant":"acme","principal":"agent","run_id":null,"step_id":null,"business_ref":"A-1","cross_key":null,"args_digest":"b1e24249f5d7abf1a8bbfac6e4b4c82aa0497e125a46169b3ee3e31fa80dc380","normalised":{"amount":{"currency":"USD","minor":"25000"}},"arguments":{"order_id":"A-1","amount":"250.00"},"state":"applied","attempts":1,"executions":1,"lease":null,"effect_ref":"re_1","result":{"key":"6991f1d3d5cdf1827c8c9b3ce2e9e5dafaad0a792043b9cea7f604d22f467868","amount":250},"error":null,"approval_id":"ap_366b3b4f8d611a32","breaker_tripped":false,"settled_at":"2026-12-01T11:11:17.882367475Z","attempt_ended_at":null,"created_at":"2026-12-01T11:11:17.87767Z","updated_at":"2026-12-01T11:11:17.882367475Z","version":3}"#;
const INTENT_ROW_HASH: &str = "5cad6addba02acbc01803455ab332875de8b785ef09b423be4f8a6ecd6a4b3a7";
const APPROVAL_BODY: &str = r#"{"id":"ap_366b3b4f8d611a32","key":"6991f1d3d5cdf1827c8c9b3ce2e9e5dafaad0a792043b9cea7f604d22f467868","generation":1,"capability":"refund","principal":"agent","args_digest":"b1e24249f5d7abf1a8bbfac6e4b4c82aa0497e125a46169b3ee3e31fa80dc380","policy_hash":"e1ceda49cbfb65d7fa5585e6161b69d4c289bfb630f7e52166bb2af18c144cdc","reason":"policy","detail":"policy requires a human approval for this call (policies: big-refund)","state":"approved","decided_by":"alice","decided_at":"2026-12-01T11:11:17.880932069Z","created_at":"2026-12-01T11:11:17.87767Z","expires_at":"2026-12-02T11:11:17.87767Z","version":2}"#;
const APPROVAL_ROW_HASH: &str = "4cd0b07c48071b9f26d8b6028a2a5670cc9e8d4e6db8c51f45070c086c582e39";
const AUDIT_SHARD_1: [(u64, &str, &str, &str); 3] = [
    (
        1,
        "0000000000000000000000000000000000000000000000000000000000000000",
        "794fe804cdf3d783bfdb9e0c8c793c7e1bccfd7274bd6937f7f606acb36b0b08",
        r#"{"at":"2026-12-01T11:11:17.87767Z","kind":"call","key":"6991f1d3d5cdf1827c8c9b3ce2e9e5dafaad0a792043b9cea7f604d22f467868","generation":1,"capability":"refund","actor":"agent","run_id":null,"from":null,"to":"pending_approval","status":"pending_approval","code":null,"detail":{"alerts":[],"approval_id":"ap_366b3b4f8d611a32","previous_generation":null,"row_intent":{"key":"6991f1d3d5cdf1827c8c9b3ce2e9e5dafaad0a792043b9cea7f604d22f467868","generation":1,"version":1,"hash":"1cb314056acf082c3697c87228c4f6164bf9256e50639ea8560af426568e0145"},"row_approval":{"key":"ap_366b3b4f8d611a32","generation":1,"version":1,"hash":"34741ecbfea0d6ca5e46ad748bddff8eff10dbf3fde3233dbedeac71e73d9df3"}}}"#,
    ),
    (
        2,
        "794fe804cdf3d783bfdb9e0c8c793c7e1bccfd7274bd6937f7f606acb36b0b08",
        "5a220911e758adef5b5d5aced8cd6cfd1a0cf58626ff69375c9d5d122f11256b",
        r#"{"at":"2026-12-01T11:11:17.880932069Z","kind":"approval","key":"6991f1d3d5cdf1827c8c9b3ce2e9e5dafaad0a792043b9cea7f604d22f467868","generation":1,"capability":"refund","actor":"alice","run_id":null,"from":"pending_approval","to":"in_flight","status":"in_flight","code":"OG-0014","detail":{"approval_id":"ap_366b3b4f8d611a32","choice":"approve","row_intent":{"key":"6991f1d3d5cdf1827c8c9b3ce2e9e5dafaad0a792043b9cea7f604d22f467868","generation":1,"version":2,"hash":"8e45063c96360f6d95949d10dde9e5b8462015fde01cbb6ca766e5dfd3c6f5c3"},"row_approval":{"key":"ap_366b3b4f8d611a32","generation":1,"version":2,"hash":"4cd0b07c48071b9f26d8b6028a2a5670cc9e8d4e6db8c51f45070c086c582e39"}}}"#,
    ),
    (
        3,
        "5a220911e758adef5b5d5aced8cd6cfd1a0cf58626ff69375c9d5d122f11256b",
        "393a57826a31f9e06fa81df253a77064305a3fd0154ed4667fc7286eb211490f",
        r#"{"at":"2026-12-01T11:11:17.882367475Z","kind":"effect","key":"6991f1d3d5cdf1827c8c9b3ce2e9e5dafaad0a792043b9cea7f604d22f467868","generation":1,"capability":"refund","actor":"alice","run_id":null,"from":"in_flight","to":"applied","status":"applied","code":null,"detail":{"effect_ref":"re_1","row_intent":{"key":"6991f1d3d5cdf1827c8c9b3ce2e9e5dafaad0a792043b9cea7f604d22f467868","generation":1,"version":3,"hash":"5cad6addba02acbc01803455ab332875de8b785ef09b423be4f8a6ecd6a4b3a7"}}}"#,
    ),
];

#[test]
fn rows_written_by_an_earlier_build_decode_and_re_encode_byte_for_byte() {
    let value: Value = serde_json::from_str(INTENT_BODY).unwrap();
    assert_eq!(
        row_hash(&value),
        INTENT_ROW_HASH,
        "the fixture is what SQLite held"
    );
    let intent = IntentRecord::from(IntentRowV1::from_body(value).unwrap());
    assert_eq!(intent.state, IntentState::Applied);
    let again = IntentRowV1::from(&intent).to_body();
    assert_eq!(again.to_string(), INTENT_BODY);
    assert_eq!(row_hash(&again), INTENT_ROW_HASH);

    let value: Value = serde_json::from_str(APPROVAL_BODY).unwrap();
    assert_eq!(row_hash(&value), APPROVAL_ROW_HASH);
    let approval = Approval::from(ApprovalRowV1::from_body(value).unwrap());
    assert_eq!(approval.state, ApprovalState::Approved);
    let again = ApprovalRowV1::from(&approval).to_body();
    assert_eq!(again.to_string(), APPROVAL_BODY);
    assert_eq!(row_hash(&again), APPROVAL_ROW_HASH);

    let records: Vec<AuditRecord> = AUDIT_SHARD_1
        .iter()
        .map(|(seq, prev, hash, body)| {
            let row =
                AuditRowV1::from_columns(1, *seq, (*prev).into(), (*hash).into(), body).unwrap();
            let record = AuditRecord::from(row);
            assert_eq!(AuditRowV1::from(record.clone()).body_text(), *body);
            record
        })
        .collect();
    let head = verify_shard(1, &records).expect("the earlier build's chain still verifies");
    assert_eq!((head.seq, head.hash.as_str()), (3, AUDIT_SHARD_1[2].2));

    // `audit verify`'s row check: both rows match the newest records that sealed them.
    let rows = [
        StoredRow {
            kind: RowKind::Intent,
            key: intent.key.as_str().to_owned(),
            generation: 1,
            body_hash: Ok(INTENT_ROW_HASH.into()),
            sealed_hash: Some(INTENT_ROW_HASH.into()),
            link: Some((1, 3)),
        },
        StoredRow {
            kind: RowKind::Approval,
            key: approval.id.clone(),
            generation: 0,
            body_hash: Ok(APPROVAL_ROW_HASH.into()),
            sealed_hash: Some(APPROVAL_ROW_HASH.into()),
            link: Some((1, 2)),
        },
    ];
    assert_eq!(verify_rows(&records, &rows), []);
}
