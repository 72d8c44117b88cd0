//! State a decision reads lives in the store, so it reaches every replica: a kill
//! switch set through one replica stops the others within a second and survives a
//! restart of all of them; a 2025-11-25 MCP session opened on one replica carries on
//! on another.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cluster::{Cluster, Plan, code, email, status};
use crate::pg::poll;
use crate::support::{client, effects_where};

/// The kill-switch code (`OG-0005`).
const KILL_SWITCH: &str = "OG-0005";

fn kill_switch(cluster: &Cluster, replica: usize, target: &str, killed: bool) {
    let r = client()
        .put(format!(
            "{}/v1/admin/kill-switches/{target}",
            cluster.url(replica)
        ))
        .bearer_auth("tok-ops")
        .json(&json!({"killed": killed, "reason": "replica test"}))
        .send()
        .unwrap();
    let code = r.status().as_u16();
    assert_eq!(
        code,
        200,
        "PUT kill switch: {}",
        r.text().unwrap_or_default()
    );
}

/// Calls `send_email` on `replica` with fresh orders until one is refused by the kill
/// switch; answers how long that took, or panics after `deadline`.
fn refused_within(cluster: &Cluster, replica: usize, deadline: Duration, tag: &str) -> Duration {
    let began = Instant::now();
    let mut n = 0;
    let mut last = Value::Null;
    let refused = poll(deadline, || {
        n += 1;
        let (_, body) = cluster.call(
            replica,
            "send_email",
            &email(&format!("{tag}-{replica}-{n}")),
        );
        last = body;
        status(&last) == "refused" && code(&last) == Some(KILL_SWITCH)
    });
    assert!(
        refused,
        "replica {replica} still calls send_email {:?} after the kill switch: {last}",
        began.elapsed()
    );
    began.elapsed()
}

#[test]
fn a_kill_switch_set_on_one_replica_stops_the_others_and_survives_a_restart() {
    let mut cluster = Cluster::start(Plan::default());
    for i in 0..cluster.len() {
        let (_, body) = cluster.call(i, "send_email", &email(&format!("KS-before-{i}")));
        assert_eq!(status(&body), "applied", "{body}");
    }
    kill_switch(&cluster, 0, "send_email", true);
    let set = Instant::now();
    let (_, own) = cluster.call(0, "send_email", &email("KS-own"));
    assert_eq!(
        code(&own),
        Some(KILL_SWITCH),
        "the replica that set it: {own}"
    );
    // Within one second of the PUT, counted from its answer, on every other replica.
    for i in 1..cluster.len() {
        let left = Duration::from_secs(1).saturating_sub(set.elapsed());
        let took = refused_within(&cluster, i, left, "KS-during");
        println!(
            "replica {i} refused after {took:?} of polling, {:?} after the PUT",
            set.elapsed()
        );
    }
    let sent = cluster.emails().len();

    // A deploy: every replica stops and starts again on the same store.
    cluster.restart_all();
    for i in 0..cluster.len() {
        let (code_, body) = cluster.call(i, "send_email", &email(&format!("KS-after-{i}")));
        assert_eq!(
            (code_, code(&body)),
            (409, Some(KILL_SWITCH)),
            "replica {i} after the restart: {body}"
        );
    }
    assert_eq!(
        cluster.emails().len(),
        sent,
        "nothing sent while switched off"
    );

    // Switched on again through another replica, it is off everywhere.
    kill_switch(&cluster, 2, "send_email", false);
    for i in 0..cluster.len() {
        let mut n = 0;
        let mut last = Value::Null;
        let ok = poll(Duration::from_secs(1), || {
            n += 1;
            let (_, body) = cluster.call(i, "send_email", &email(&format!("KS-on-{i}-{n}")));
            last = body;
            status(&last) == "applied"
        });
        assert!(ok, "replica {i} is still switched off: {last}");
    }
    let (clean, report) = cluster.audit_verify();
    assert!(clean, "audit verify: {report}");
}

/// A raw `POST /mcp` as a 2025-11-25 client sends it: (status, new session id, body).
fn post_legacy(
    url: &str,
    token: &str,
    session: Option<&str>,
    body: &Value,
) -> (u16, Option<String>, String) {
    let mut request = client()
        .post(format!("{url}/mcp"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .bearer_auth(token);
    if let Some(id) = session {
        request = request
            .header("Mcp-Session-Id", id)
            .header("MCP-Protocol-Version", "2025-11-25");
    }
    let response = request.body(body.to_string()).send().unwrap();
    let status = response.status().as_u16();
    let id = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, id, response.text().unwrap())
}

#[test]
fn a_legacy_mcp_session_opened_on_one_replica_continues_on_another() {
    let cluster = Cluster::start(Plan::default());
    let charge = |n: u64| {
        json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
            "name": "charge_card", "arguments": {"order_id": "SES-1", "amount": "2.00"}}})
    };
    let (code_, session, body) = post_legacy(
        cluster.url(0),
        "tok-planner",
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "replica-test", "version": "0"}}}),
    );
    assert_eq!(code_, 200, "initialize on replica 0: {body}");
    let session = session.expect("a 2025-11-25 client gets a session");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (code_, _, body) = post_legacy(cluster.url(1), "tok-planner", Some(&session), &initialized);
    assert_eq!(code_, 202, "notifications/initialized on replica 1: {body}");

    let (code_, _, body) = post_legacy(cluster.url(2), "tok-planner", Some(&session), &charge(2));
    assert_eq!(code_, 200, "tools/call on replica 2: {body}");
    assert!(body.contains("APPLIED as ch_"), "{body}");
    // Still its owner's on every replica.
    let (code_, _, body) = post_legacy(cluster.url(1), "tok-subagent", Some(&session), &charge(3));
    assert_eq!(code_, 404, "another principal on replica 1: {body}");
    let (code_, _, body) = post_legacy(cluster.url(0), "tok-planner", Some(&session), &charge(4));
    assert_eq!(code_, 200, "the repeat on replica 0: {body}");
    assert!(body.contains("ALREADY APPLIED as ch_"), "{body}");
    assert_eq!(
        effects_where(cluster.sandbox(), "kind=charge&order_id=SES-1").len(),
        1
    );

    // Ended by its owner on replica 1, it is gone there at once, and on the replicas
    // that cached its owner within a second (they confirm a cached owner with the store
    // at most a second old).
    let delete = client()
        .delete(format!("{}/mcp", cluster.url(1)))
        .bearer_auth("tok-planner")
        .header("Mcp-Session-Id", &session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .send()
        .unwrap();
    assert_eq!(delete.status().as_u16(), 200);
    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"});
    let (code_, _, body) = post_legacy(cluster.url(1), "tok-planner", Some(&session), &list);
    assert_eq!(code_, 404, "an ended session: {body}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    for replica in [0, 2] {
        loop {
            let (code_, _, body) =
                post_legacy(cluster.url(replica), "tok-planner", Some(&session), &list);
            if code_ == 404 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the session ended on replica 1 still answers {code_} on replica {replica}: {body}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}
