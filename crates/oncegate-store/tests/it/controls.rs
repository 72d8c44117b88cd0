//! Every control chained (issue 32): kill switches, holds, limit reservations and
//! findings carry seals linked to the audit record that wrote them. Deleted or edited
//! behind the store's back, they are refused at load (a switch or hold is on, a limit
//! refuses new reservations) and reported by `audit verify`. Each backend runs the same
//! schedule against its own database, tampered with in plain SQL.

use std::path::Path;

use jiff::{SignedDuration, Timestamp};
use oncegate_core::audit::{AuditEvent, AuditKind, RowKind};
use oncegate_store::audit_check::{Walk, save_checkpoint, verify_audit};
use oncegate_store::conformance::sample_record;
use oncegate_store::{
    Backend, Commit, FindingRow, IntentsWrite, KillSwitchChange, LimitReconcile, OpenMode,
    Reservation, SqliteStore, StoreError, StoreOptions,
};
use sqlx::Connection;

fn admin(at: Timestamp) -> AuditEvent {
    AuditEvent {
        at,
        kind: AuditKind::Admin,
        key: None,
        generation: 0,
        capability: None,
        actor: "ops".into(),
        run_id: None,
        from: None,
        to: None,
        status: None,
        code: None,
        detail: serde_json::json!({}),
    }
}

async fn switch<S: IntentsWrite>(store: &S, target: &str, reason: Option<&str>, at: Timestamp) {
    let mut commit = Commit::event(admin(at));
    commit.kill_switch = Some(KillSwitchChange {
        target: target.into(),
        reason: reason.map(str::to_owned),
        actor: "ops".into(),
        at,
    });
    store.commit(commit).await.unwrap();
}

/// A finding of two effects under one charge, raised at `at`.
async fn finding<S: IntentsWrite>(store: &S, id: &str, at: Timestamp) {
    let mut commit = Commit::event(admin(at));
    commit.finding = Some(FindingRow {
        id: id.into(),
        rule: "charge_card".into(),
        raised_at: at,
        body: format!(r#"{{"id":"{id}","effects":["ch_1","ch_2"]}}"#),
        delivered_at: None,
        attempts: 0,
        next_attempt_at: Some(at),
        problem: None,
    });
    store.commit(commit).await.unwrap();
}

/// A charge of 100 against the budget `daily` (250 a day), as a claim's commit.
async fn charge<S: IntentsWrite>(store: &S, key: &str) -> Result<(), StoreError> {
    let rec = sample_record(key, 1);
    let at = rec.created_at;
    let mut event = admin(at);
    event.kind = AuditKind::Call;
    event.key = Some(rec.key.clone());
    event.generation = 1;
    let mut commit = Commit::new(Some(rec), None, event);
    commit.reservations = vec![Reservation {
        scope: "daily".into(),
        amount: 100,
        max: 250,
        since: at - SignedDuration::from_hours(24),
        enforce: true,
    }];
    store.commit(commit).await
}

/// The schedule: controls written through the store, checked clean; then each kind
/// deleted or edited in SQL (`tamper`), and refused at load and by `audit verify`.
pub async fn controls_are_chained<S, T>(store: &S, tamper: T)
where
    S: Backend,
    T: AsyncFn(&str),
{
    let at = sample_record("ab01", 1).created_at;
    switch(store, "capability:send_email", Some("phishing"), at).await;
    switch(store, "hold:charge_card:customer=cus_1", Some("fraud"), at).await;
    switch(store, "capability:refund", Some("audit"), at).await;
    switch(store, "capability:refund", None, at).await;
    finding(store, "f-1", at).await;
    charge(store, "ab01").await.unwrap();
    charge(store, "ab02").await.unwrap();
    assert!(
        matches!(
            charge(store, "ab03").await,
            Err(StoreError::LimitReached { used: 200, .. })
        ),
        "the budget holds two charges"
    );

    let on = store.kill_switches().await.unwrap();
    let targets: Vec<_> = on.iter().map(|s| s.target.as_str()).collect();
    assert_eq!(
        targets,
        ["capability:send_email", "hold:charge_card:customer=cus_1"],
        "a cleared switch is off"
    );
    assert!(on.iter().all(|s| s.problem.is_none()), "{on:?}");
    assert!(store.findings(10, None).await.unwrap()[0].problem.is_none());
    let clean = verify_audit(store, None, "", &[], Walk::Full)
        .await
        .unwrap();
    assert!(clean.ok(), "{:?}", clean.row_problems);

    // Deleted and edited behind the store's back.
    tamper("DELETE FROM kill_switches WHERE target = 'capability:send_email'").await;
    tamper(
        "UPDATE kill_switches SET reason = NULL WHERE target = 'hold:charge_card:customer=cus_1'",
    )
    .await;
    tamper("DELETE FROM kill_switches WHERE target = 'capability:refund'").await;
    tamper("DELETE FROM reservations WHERE key = 'ab01'").await;
    tamper(r#"UPDATE findings SET body = '{"id":"f-1","effects":[]}' WHERE id = 'f-1'"#).await;

    let on = store.kill_switches().await.unwrap();
    let targets: Vec<_> = on.iter().map(|s| s.target.as_str()).collect();
    assert_eq!(
        targets,
        [
            "capability:refund",
            "capability:send_email",
            "hold:charge_card:customer=cus_1"
        ],
        "a deleted or edited switch or hold is on (fail closed)"
    );
    assert!(on.iter().all(|s| s.problem.is_some()), "{on:?}");
    match charge(store, "ab03").await {
        Err(StoreError::Integrity(problem)) => {
            assert!(problem.contains("limit daily"), "{problem}");
            assert!(problem.contains("refused"), "{problem}");
        }
        other => panic!("a deleted reservation must not make room in its budget: {other:?}"),
    }
    assert!(store.findings(10, None).await.unwrap()[0].problem.is_some());

    let report = verify_audit(store, None, "", &[], Walk::Full)
        .await
        .unwrap();
    let count = |kind: RowKind| {
        report
            .row_problems
            .iter()
            .filter(|p| p.kind == kind)
            .count()
    };
    assert_eq!(count(RowKind::Switch), 3, "{:?}", report.row_problems);
    assert_eq!(count(RowKind::Limit), 1, "{:?}", report.row_problems);
    assert_eq!(count(RowKind::Finding), 1, "{:?}", report.row_problems);

    // The ledger holds: reconciling puts the deleted reservation back, and the budget
    // is full again (two charges), not one charge lighter.
    reconcile(store, false).await.unwrap();
    assert!(
        matches!(
            charge(store, "ab03").await,
            Err(StoreError::LimitReached { used: 200, .. })
        ),
        "the deleted reservation is back"
    );
    let report = verify_audit(store, None, "", &[], Walk::Full)
        .await
        .unwrap();
    assert_eq!(
        count_of(&report, RowKind::Limit),
        0,
        "{:?}",
        report.row_problems
    );
}

/// `audit verify --since-checkpoint` checks the controls written after the checkpoint
/// (it reads the controls alone, not every row): one edited and one deleted are found,
/// one left alone is not, and nothing written before the checkpoint is walked again.
pub async fn controls_after_a_checkpoint_are_checked<S, T>(store: &S, tamper: T)
where
    S: Backend,
    T: AsyncFn(&str),
{
    let at = sample_record("ab01", 1).created_at;
    switch(store, "capability:before", Some("old"), at).await;
    charge(store, "ab01").await.unwrap();
    let first = verify_audit(store, None, "", &[], Walk::FromCheckpoint)
        .await
        .unwrap();
    assert!(first.ok(), "{:?}", first.row_problems);
    save_checkpoint(store, None, "", &first, Timestamp::now())
        .await
        .unwrap()
        .expect("a clean walk moves the checkpoint");

    switch(store, "capability:send_email", Some("phishing"), at).await;
    switch(store, "capability:refund", Some("audit"), at).await;
    finding(store, "f-2", at).await;
    let clean = verify_audit(store, None, "", &[], Walk::FromCheckpoint)
        .await
        .unwrap();
    assert!(clean.ok(), "{:?}", clean.row_problems);
    assert_eq!(
        (clean.records, clean.rows),
        (3, 3),
        "the three new records and the three controls they wrote, nothing from before"
    );

    tamper("DELETE FROM kill_switches WHERE target = 'capability:send_email'").await;
    tamper(r#"UPDATE findings SET body = '{"id":"f-2","effects":[]}' WHERE id = 'f-2'"#).await;
    let report = verify_audit(store, None, "", &[], Walk::FromCheckpoint)
        .await
        .unwrap();
    let mut found: Vec<_> = report
        .row_problems
        .iter()
        .map(|p| (p.kind, p.key.as_str()))
        .collect();
    found.sort_unstable();
    assert_eq!(
        found,
        [
            (RowKind::Switch, "capability:send_email"),
            (RowKind::Finding, "f-2")
        ],
        "{:?}",
        report.row_problems
    );
}

fn count_of(report: &oncegate_store::audit_check::AuditReport, kind: RowKind) -> usize {
    report
        .row_problems
        .iter()
        .filter(|p| p.kind == kind)
        .count()
}

async fn reconcile<S: IntentsWrite>(store: &S, accept_table: bool) -> Result<(), StoreError> {
    let mut commit = Commit::event(admin(sample_record("ab01", 1).created_at));
    commit.limit_reconcile = Some(LimitReconcile {
        scope: "daily".into(),
        accept_table,
    });
    store.commit(commit).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_controls_deleted_or_edited_are_refused_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (store, db) = sqlite(dir.path()).await;
    controls_are_chained(&store, async |sql: &str| tamper(&db, sql).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_controls_after_a_checkpoint_are_checked_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let (store, db) = sqlite(dir.path()).await;
    controls_after_a_checkpoint_are_checked(&store, async |sql: &str| tamper(&db, sql).await).await;
}

async fn sqlite(dir: &Path) -> (SqliteStore, std::path::PathBuf) {
    let db = dir.join("controls.db");
    let store = SqliteStore::open_with(&db, OpenMode::CreateIfMissing, StoreOptions::default())
        .await
        .unwrap();
    (store, db)
}

/// Runs `sql` on the store's file behind its back.
pub(crate) async fn tamper(db: &Path, sql: &str) {
    let mut conn = raw(db).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
}

async fn raw(db: &Path) -> sqlx::SqliteConnection {
    sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap()
}

/// A ledger whose entries are deleted (not only the table) is refused too, and an
/// edited entry: the chain of entries does not hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_deleted_or_edited_ledger_entry_refuses_the_budget() {
    for tamper in [
        "DELETE FROM limit_ledger WHERE key = 'ab01'; DELETE FROM reservations WHERE key = 'ab01'",
        "UPDATE limit_ledger SET amount = 1 WHERE key = 'ab01'; UPDATE reservations SET amount = 1 WHERE key = 'ab01'",
        "UPDATE limit_heads SET seq = seq - 1",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ledger.db");
        let store = SqliteStore::open_with(&db, OpenMode::CreateIfMissing, StoreOptions::default())
            .await
            .unwrap();
        charge(&store, "ab01").await.unwrap();
        charge(&store, "ab02").await.unwrap();
        let mut conn = raw(&db).await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(tamper.to_owned()))
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
        assert!(
            matches!(charge(&store, "ab03").await, Err(StoreError::Integrity(_))),
            "{tamper}"
        );
        let report = verify_audit(&store, None, "", &[], Walk::Full)
            .await
            .unwrap();
        assert!(
            count_of(&report, RowKind::Limit) > 0,
            "{tamper}: {:?}",
            report.row_problems
        );
        // The ledger does not hold: only an admin who accepts the reservations as
        // found gets the budget back.
        assert!(
            matches!(
                reconcile(&store, false).await,
                Err(StoreError::Integrity(_))
            ),
            "{tamper}"
        );
        reconcile(&store, true).await.unwrap();
        let report = verify_audit(&store, None, "", &[], Walk::Full)
            .await
            .unwrap();
        assert_eq!(
            count_of(&report, RowKind::Limit),
            0,
            "{tamper}: {:?}",
            report.row_problems
        );
        assert!(
            !matches!(charge(&store, "ab03").await, Err(StoreError::Integrity(_))),
            "{tamper}: the budget is usable again"
        );
    }
}
