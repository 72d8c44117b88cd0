//! Two gateways on one store, as two replicas are: a kill switch set through one stops
//! calls on the other within a second (and clears on both), and a 2025-11-25 MCP
//! session opened on one continues on the other, still bound to its principal.
//!
//! Both gateways serve real sockets with their own Gate (own caches, own rmcp session
//! manager) over one opened SQLite store (the file has one writer per process).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oncegate_engine::{Gate, SystemClock};
use oncegate_gateway::server::{AppState, app, http_client, install_crypto};
use oncegate_sandbox::{self as sandbox, SandboxConfig};
use oncegate_store::SharedRead;
use serde_json::{Value, json};

use crate::support::registry_in;

fn registry_text(sandbox: &str) -> String {
    format!(
        r#"
[store]
url = "sqlite://replicas.db"

[[principals]]
name = "agent"
role = "agent"
token_env = "UNUSED_TOKEN_AGENT"

[[principals]]
name = "agent2"
role = "agent"
token_env = "UNUSED_TOKEN_AGENT2"

[[principals]]
name = "admin"
role = "admin"
token_env = "UNUSED_TOKEN_ADMIN"

[[capabilities]]
name = "charge"
category = "keyed"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "http"
url = "{sandbox}/v1/charges"
effect_ref = "/id"
body = {{ order_id = "{{arg.order_id}}", amount_minor = 1250, currency = "USD" }}
"#
    )
}

/// Two gateways on one store; their URLs, and the store.
async fn two_replicas(dir: &Path) -> (String, String, oncegate_store::Store) {
    install_crypto();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let provider = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sandbox::serve(listener, SandboxConfig::default()));
    let text = registry_text(&provider);
    let first = Gate::open_with(
        registry_in(dir, &text),
        oncegate_store::OpenMode::CreateIfMissing,
    )
    .await
    .unwrap();
    let store = first.store().clone();
    let second = Gate::with_store(
        registry_in(dir, &text),
        first.store().clone(),
        Arc::new(SystemClock),
    );
    let mut urls = Vec::new();
    for gate in [first, second] {
        let state = AppState::with_tokens(
            gate,
            http_client(),
            vec![
                ("agent".into(), "tok".into()),
                ("agent2".into(), "tok2".into()),
                ("admin".into(), "adm".into()),
            ],
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        urls.push(format!("http://{}", listener.local_addr().unwrap()));
        tokio::spawn(async move { axum::serve(listener, app(state)).await.unwrap() });
    }
    (urls.remove(0), urls.remove(0), store)
}

async fn charge(gw: &str, order: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{gw}/v1/calls"))
        .bearer_auth("tok")
        .json(&json!({"capability": "charge", "arguments": {"order_id": order}}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn switch(gw: &str, killed: bool) -> Value {
    let r = reqwest::Client::new()
        .put(format!("{gw}/v1/admin/kill-switches/charge"))
        .bearer_auth("adm")
        .json(&json!({"killed": killed, "reason": "incident 9"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

fn killed(body: &Value) -> bool {
    body["status"] == "refused" && body["reason"]["code"] == "OG-0005"
}

/// Calls `gw` (a fresh order each time) until `done` holds; how long that took.
async fn until(gw: &str, done: impl Fn(&Value) -> bool) -> Duration {
    let started = Instant::now();
    for n in 0.. {
        let (_, body) = charge(gw, &format!("POLL-{n}-{}", started.elapsed().as_nanos())).await;
        if done(&body) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "never switched: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_switch_set_on_one_replica_stops_calls_on_the_other_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, _) = two_replicas(dir.path()).await;
    // B has read the switches (none yet).
    let (status, body) = charge(&b, "K-1").await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("applied")),
        "{body}"
    );

    let listed = switch(&a, true).await;
    assert_eq!(
        listed["kill_switches"]["capability:charge"], "incident 9",
        "{listed}"
    );
    let (_, body) = charge(&a, "K-2").await;
    assert!(killed(&body), "the replica that set it at once: {body}");
    let took = until(&b, killed).await;
    assert!(
        took < Duration::from_secs(1),
        "B honoured it after {took:?}"
    );
    // A replay of what already happened is still a replay.
    let (_, body) = charge(&b, "K-1").await;
    assert_eq!(body["status"], "replayed", "{body}");

    let listed = switch(&b, false).await;
    assert_eq!(listed["kill_switches"], json!({}), "{listed}");
    let took = until(&a, |body| body["status"] == "applied").await;
    assert!(took < Duration::from_secs(1), "A cleared after {took:?}");
}

/// A raw `POST /mcp` as a 2025-11-25 client sends it: (status, new session id, body).
async fn post_legacy(
    gw: &str,
    token: &str,
    session: Option<&str>,
    body: &Value,
) -> (u16, Option<String>, String) {
    let mut request = reqwest::Client::new()
        .post(format!("{gw}/mcp"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .bearer_auth(token);
    if let Some(id) = session {
        request = request
            .header("Mcp-Session-Id", id)
            .header("MCP-Protocol-Version", "2025-11-25");
    }
    let response = request.body(body.to_string()).send().await.unwrap();
    let status = response.status().as_u16();
    let id = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, id, response.text().await.unwrap())
}

fn tools_call(id: u64, order: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "charge", "arguments": {"order_id": order}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_session_opened_on_one_replica_continues_on_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, store) = two_replicas(dir.path()).await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "replica-test", "version": "0"}}});
    let (status, session, body) = post_legacy(&a, "tok", None, &initialize).await;
    assert_eq!(status, 200, "{body}");
    let session = session.expect("a 2025-11-25 client gets a session");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post_legacy(&a, "tok", Some(&session), &initialized).await.0,
        202
    );
    let (status, _, body) = post_legacy(&a, "tok", Some(&session), &tools_call(2, "M-1")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("APPLIED as ch_"), "{body}");

    // The load balancer sends the next request to B, which never saw the session.
    let (status, _, body) = post_legacy(&b, "tok2", Some(&session), &tools_call(3, "M-1")).await;
    assert_eq!(status, 404, "not another principal's on B either: {body}");
    let (status, _, body) = post_legacy(&b, "tok", Some(&session), &tools_call(4, "M-1")).await;
    assert_eq!(status, 200, "B restored the session: {body}");
    assert!(body.contains("ALREADY APPLIED as ch_"), "{body}");
    let (status, _, body) = post_legacy(&b, "tok", Some(&session), &tools_call(5, "M-2")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("APPLIED as ch_"), "{body}");

    // The client ends it on B: B no longer serves it, and the store forgot it.
    let r = reqwest::Client::new()
        .delete(format!("{b}/mcp"))
        .bearer_auth("tok")
        .header("Mcp-Session-Id", &session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let (status, _, body) = post_legacy(&b, "tok", Some(&session), &tools_call(6, "M-3")).await;
    assert_eq!(status, 404, "ended: {body}");
    assert_eq!(store.mcp_session(&session).await.unwrap(), None);
}
