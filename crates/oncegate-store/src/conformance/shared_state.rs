//! Conformance checks for the state every replica decides with, beside intents:
//! kill switches (written with their audit event), MCP sessions and work claims.
//! Backend-agnostic: expiry that a shared backend judges by its own clock is waited for
//! in real time, never simulated with a `now` far ahead.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use oncegate_core::audit::{AuditEvent, AuditKind};
use oncegate_core::codes::Code;
use serde_json::json;

use super::fixtures::{at, sample_record};
use crate::{Backend, Commit, KillSwitchChange, McpSession, StoreError};

fn switch_commit(target: &str, reason: Option<&str>, n: i64) -> Commit {
    let event = AuditEvent {
        at: at(n),
        kind: AuditKind::Admin,
        key: None,
        generation: 0,
        capability: target.strip_prefix("capability:").map(str::to_owned),
        actor: "ops".into(),
        run_id: None,
        from: None,
        to: None,
        status: None,
        code: Some(Code::KillSwitch),
        detail: json!({"kill_switch": target, "on": reason.is_some()}),
    };
    let mut commit = Commit::event(event);
    commit.kill_switch = Some(KillSwitchChange {
        target: target.into(),
        reason: reason.map(str::to_owned),
        actor: "ops".into(),
        at: at(n),
    });
    commit
}

/// Kill switches are set, replaced and cleared with their audit event, listed by
/// target, and never written by a commit that loses.
pub async fn kill_switches<S: Backend>(store: &S) {
    assert!(
        store.kill_switches().await.unwrap().is_empty(),
        "none at first"
    );
    store
        .commit(switch_commit("capability:pay", Some("incident 1"), 1))
        .await
        .unwrap();
    store
        .commit(switch_commit("agent:planner", Some("looping"), 2))
        .await
        .unwrap();
    store
        .commit(switch_commit("capability:pay", Some("incident 2"), 3))
        .await
        .unwrap();
    let on = store.kill_switches().await.unwrap();
    let summary: Vec<_> = on
        .iter()
        .map(|s| (s.target.as_str(), s.reason.as_str(), s.set_by.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("agent:planner", "looping", "ops"),
            ("capability:pay", "incident 2", "ops")
        ],
        "one switch per target, the latest reason, by target"
    );
    assert_eq!(on[1].set_at, at(3));

    // A commit that loses its compare-and-set writes no switch either.
    let mut stale = switch_commit("capability:refund", Some("never"), 4);
    let mut record = sample_record("ee01", 1);
    record.version = 7;
    stale.record = Some(record);
    assert!(matches!(
        store.commit(stale).await,
        Err(StoreError::Conflict)
    ));
    assert_eq!(store.kill_switches().await.unwrap().len(), 2);

    store
        .commit(switch_commit("capability:pay", None, 5))
        .await
        .unwrap();
    // Clearing a switch that is off is a no-op.
    store
        .commit(switch_commit("capability:refund", None, 6))
        .await
        .unwrap();
    let on = store.kill_switches().await.unwrap();
    assert_eq!(on.len(), 1);
    assert_eq!(on[0].target, "agent:planner");

    let audited = store
        .audit_after(0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, r)| r.event.code == Some(Code::KillSwitch))
        .count();
    assert_eq!(audited, 5, "every change that landed is in the audit chain");
}

fn session(
    id: &str,
    principal: Option<&str>,
    state: Option<serde_json::Value>,
    n: i64,
) -> McpSession {
    McpSession {
        id: id.into(),
        principal: principal.map(str::to_owned),
        state,
        updated_at: at(n),
    }
}

/// MCP sessions: a write keeps what it does not name, `delete_mcp_session` forgets the
/// session and every one idle since before `idle_before`.
pub async fn mcp_sessions<S: Backend>(store: &S) {
    let id = "0b5e6d2c-0000-4000-8000-000000000001";
    let other = "0b5e6d2c-0000-4000-8000-000000000002";
    assert_eq!(store.mcp_session(id).await.unwrap(), None);
    store
        .put_mcp_session(session(id, Some("planner"), None, 10))
        .await
        .unwrap();
    let state = json!({"initialize_params": {"protocolVersion": "2025-11-25"}});
    store
        .put_mcp_session(session(id, None, Some(state.clone()), 20))
        .await
        .unwrap();
    assert_eq!(
        store.mcp_session(id).await.unwrap(),
        Some(session(id, Some("planner"), Some(state.clone()), 20)),
        "the principal is kept, the state added, the time moved"
    );
    // A touch names neither: both are kept.
    store
        .put_mcp_session(session(id, None, None, 30))
        .await
        .unwrap();
    assert_eq!(
        store.mcp_session(id).await.unwrap(),
        Some(session(id, Some("planner"), Some(state.clone()), 30))
    );

    store
        .put_mcp_session(session(other, Some("subagent"), None, 5))
        .await
        .unwrap();
    // Pruning: `other` was last written before 25, `id` after.
    store.delete_mcp_session("", at(25)).await.unwrap();
    assert_eq!(
        store.mcp_session(other).await.unwrap(),
        None,
        "idle: pruned"
    );
    assert!(
        store.mcp_session(id).await.unwrap().is_some(),
        "in use: kept"
    );

    store.delete_mcp_session(id, at(0)).await.unwrap();
    assert_eq!(store.mcp_session(id).await.unwrap(), None, "ended");
}

/// Work claims: one owner at a time, re-claimable by its owner, released only by it,
/// free again once its time is up.
pub async fn work_claims<S: Backend>(store: &S) {
    let ttl = SignedDuration::from_secs(30);
    let work = "reconcile:aa01:1";
    assert!(
        store
            .claim_work(work, "a", Timestamp::now(), ttl)
            .await
            .unwrap()
    );
    assert!(
        !store
            .claim_work(work, "b", Timestamp::now(), ttl)
            .await
            .unwrap(),
        "held by a"
    );
    assert!(
        store
            .claim_work(work, "a", Timestamp::now(), ttl)
            .await
            .unwrap(),
        "a holds it already"
    );
    store.release_work(work, "b").await.unwrap();
    assert!(
        !store
            .claim_work(work, "b", Timestamp::now(), ttl)
            .await
            .unwrap(),
        "only its owner releases it"
    );
    store.release_work(work, "a").await.unwrap();
    assert!(
        store
            .claim_work(work, "b", Timestamp::now(), ttl)
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_work("reconcile:aa01:2", "a", Timestamp::now(), ttl)
            .await
            .unwrap(),
        "another piece of work is free"
    );

    // A claim whose time is up is free (judged by the backend's clock: waited for).
    let short = "reconcile:bb01:1";
    assert!(
        store
            .claim_work(
                short,
                "a",
                Timestamp::now(),
                SignedDuration::from_millis(200)
            )
            .await
            .unwrap()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !store
        .claim_work(short, "b", Timestamp::now(), ttl)
        .await
        .unwrap()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "an expired claim was never free again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !store
            .claim_work(short, "a", Timestamp::now(), ttl)
            .await
            .unwrap(),
        "b holds it now"
    );
}

/// Work claimed as a single use (an MCP `requestState`'s nonce: each claimer is a new
/// owner): of many claims racing for the same work, exactly one wins, and no later
/// claimer wins while it lasts.
pub async fn single_use_claims<S: Backend>(store: &S) {
    let ttl = SignedDuration::from_secs(60);
    let work = "request-state:n0nce";
    let owners: Vec<String> = (0..16).map(|i| format!("use-{i}")).collect();
    let won = futures::future::join_all(
        owners
            .iter()
            .map(|o| store.claim_work(work, o, Timestamp::now(), ttl)),
    )
    .await;
    let wins = won.iter().filter(|w| matches!(w, Ok(true))).count();
    assert!(won.iter().all(Result::is_ok), "{won:?}");
    assert_eq!(wins, 1, "exactly one use of {work}: {won:?}");
    assert!(
        !store
            .claim_work(work, "use-late", Timestamp::now(), ttl)
            .await
            .unwrap(),
        "a later use is refused too"
    );
}
