//! `/mcp` end to end, with MCP clients that nobody here wrote: the PyPI `mcp` package
//! (as an agent, in both protocol eras), the TypeScript SDK and rmcp, against
//! `oncegate serve --config examples/payments.toml` in front of `oncegate sandbox`.
//! Every test counts effects in the sandbox's own ledger.
//!
//! The Python and Node clients are installed by `tests/clients/setup.sh` (cached, and
//! safe to run from parallel test processes), which the first test here calls, so
//! `cargo nextest run` alone works on a fresh clone.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResponse, ProtocolVersion};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};

use crate::support::{API_KEY, Proc, Setup, client, effects, effects_where, fault};

const OUTCOME: &str = "dev.oncegate/outcome";
pub(crate) const MODERN: &str = "2026-07-28";

#[test]
fn a_python_agent_in_the_legacy_era_cannot_charge_an_order_twice() {
    python_agent("legacy", "PY-L-1");
}

#[test]
fn a_python_agent_in_the_2026_era_cannot_charge_an_order_twice() {
    python_agent(MODERN, "PY-M-1");
}

#[test]
fn a_stdio_client_through_oncegate_connect_charges_once_in_both_eras() {
    let clients = clients();
    let setup = Setup::example();
    let gw = setup.gateway();
    for (era, order) in [("legacy", "STDIO-L-1"), (MODERN, "STDIO-M-1")] {
        let mut cmd = Command::new(&clients.python);
        cmd.arg(clients.root.join("tests/clients/python/stdio_agent.py"))
            .args(["--oncegate", env!("CARGO_BIN_EXE_oncegate")])
            .args(["--url", &format!("{}/mcp", gw.url)])
            .args(["--token-env", "ONCEGATE_STDIO_TOKEN"])
            .args(["--sandbox", &setup.sandbox.url, "--sandbox-key", API_KEY])
            .args(["--order", order, "--era", era])
            .env("ONCEGATE_STDIO_TOKEN", "tok-planner")
            .env("PYTHONUNBUFFERED", "1");
        let (ok, output) = run_client(cmd, Duration::from_secs(120));
        assert!(ok, "the stdio agent ({era}) failed:\n{output}");
        assert!(output.contains("every check holds"), "{output}");
        // Counted here too, so the script cannot pass by checking the wrong thing.
        let charges = effects_where(&setup.sandbox, &format!("kind=charge&order_id={order}"));
        assert_eq!(charges.len(), 1, "{era}: {charges:?}");
    }
}

#[test]
fn the_fronted_example_offers_a_servers_reads_and_its_declared_charge_in_both_eras() {
    let clients = clients();
    let setup = Setup::with_example("fronted.toml", &[], |text| text);
    let gw = setup.gateway();
    let mut cmd = Command::new(&clients.python);
    cmd.arg(clients.root.join("tests/clients/python/fronted_agent.py"))
        .args(client_args(&gw, &setup.sandbox, "FR-1"))
        .env("PYTHONUNBUFFERED", "1");
    let (ok, output) = run_client(cmd, Duration::from_secs(120));
    assert!(ok, "the fronted agent failed:\n{output}");
    assert!(output.contains("every check holds"), "{output}");
    // Counted here too: one charge per era's order, and no refund reached the server.
    for order in ["FR-1-legacy", "FR-1-auto"] {
        let charges = effects_where(&setup.sandbox, &format!("kind=charge&order_id={order}"));
        assert_eq!(charges.len(), 1, "{order}: {charges:?}");
    }
    assert!(effects(&setup.sandbox, "refund").is_empty());
}

#[test]
fn the_typescript_sdk_round_trip_is_one_charge() {
    let clients = clients();
    let setup = Setup::example();
    let gw = setup.gateway();
    let mut cmd = Command::new("node");
    cmd.arg(clients.node_dir.join("roundtrip.mjs"))
        .current_dir(&clients.node_dir)
        .args(client_args(&gw, &setup.sandbox, "NODE-1"));
    let (ok, output) = run_client(cmd, Duration::from_secs(60));
    assert!(ok, "the node round trip failed:\n{output}");
    assert!(output.contains("every check holds"), "{output}");
    assert_eq!(
        effects_where(&setup.sandbox, "kind=charge&order_id=NODE-1").len(),
        1
    );
}

#[test]
fn thirty_two_parallel_rmcp_calls_are_one_charge() {
    // The example's own ceiling of 10: 32 identical calls are one execution, and the
    // other 31 are polls and replays, which never count against the ceiling.
    let setup = Setup::with_registry(&[], |registry| registry);
    let gw = setup.gateway();
    // A slow provider keeps the first call in flight while the others arrive.
    fault(&setup.sandbox, "/v1/charges", "slow", 500);
    oncegate_gateway::server::install_crypto();
    let url = format!("{}/mcp", gw.url);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let answers: Vec<Value> = runtime.block_on(async move {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let mut config = StreamableHttpClientTransportConfig::with_uri(url);
        config.auth_header = Some("tok-planner".to_owned());
        config.max_concurrent_requests = 32;
        let transport = StreamableHttpClientTransport::with_client(http, config);
        let client = ()
            .serve_with_lifecycle(
                transport,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            )
            .await
            .expect("server/discover");
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..32 {
            let peer = client.peer().clone();
            calls.spawn(async move {
                let params: CallToolRequestParams = serde_json::from_value(json!({
                    "name": "charge_card",
                    "arguments": {"order_id": "RS-1", "amount": "7.00", "currency": "USD", "memo": "subagent"},
                    "_meta": {"dev.oncegate/run_id": "run-rmcp", "dev.oncegate/step_id": "charge"},
                }))
                .unwrap();
                match peer.call_tool_once(params).await.expect("tools/call") {
                    CallToolResponse::Complete(result) => serde_json::to_value(result).unwrap(),
                    other => panic!("not a plain tool result: {other:?}"),
                }
            });
        }
        let answers = calls.join_all().await;
        let _ = client.cancel().await;
        answers
    });

    let statuses: Vec<&str> = answers
        .iter()
        .map(|a| a["_meta"][OUTCOME]["status"].as_str().unwrap_or("none"))
        .collect();
    println!("32 parallel calls answered {statuses:?}");
    assert_eq!(
        statuses.iter().filter(|s| **s == "applied").count(),
        1,
        "{statuses:?}"
    );
    assert!(
        statuses
            .iter()
            .all(|s| ["applied", "replayed", "in_flight"].contains(s)),
        "{statuses:?}"
    );
    let refs: Vec<&str> = answers
        .iter()
        .filter_map(|a| a["_meta"][OUTCOME]["effectRef"].as_str())
        .collect();
    assert!(
        !refs.is_empty() && refs.iter().all(|r| *r == refs[0]),
        "{refs:?}"
    );
    for answer in &answers {
        let status = answer["_meta"][OUTCOME]["status"].as_str();
        let is_error = answer["isError"].as_bool().unwrap_or(false);
        assert_eq!(is_error, status == Some("in_flight"), "{answer}");
    }
    assert_eq!(
        effects_where(&setup.sandbox, "kind=charge&order_id=RS-1").len(),
        1
    );
    assert_eq!(effects(&setup.sandbox, "charge").len(), 1);
}

#[test]
fn malformed_unknown_unauthenticated_and_oversized_requests_execute_nothing() {
    let setup = Setup::example();
    let gw = setup.gateway();
    let charge = tools_call(
        "charge_card",
        json!({"order_id": "BAD-1", "amount": "5.00"}),
    );

    // The control: these headers and this envelope do reach a tool.
    let (status, _, body) = post_mcp(
        &gw,
        Some("tok-planner"),
        tools_call("get_order", json!({"order_id": "BAD-1"})).to_string(),
    );
    assert_eq!(status, 200, "{body}");
    let answer = jsonrpc(&body);
    assert!(
        answer["result"].is_object(),
        "a read goes through: {answer}"
    );

    // Not JSON at all (parse error), and JSON that is no JSON-RPC request (invalid request).
    for (malformed, code) in [
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card""#,
            -32700,
        ),
        (r#"{"hello":"world"}"#, -32600),
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":{"x":1},"method":"tools/call","params":{"name":"charge_card","arguments":{"order_id":"BAD-1","amount":"5.00"}}}"#,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":["BAD-1","5.00"]}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["charge_card"]}"#,
            -32602,
        ),
    ] {
        let (status, _, body) = post_mcp(&gw, Some("tok-planner"), malformed.to_owned());
        assert_eq!(status, 400, "{malformed}: {body}");
        let error: Value = serde_json::from_str(&body).unwrap_or_default();
        assert_eq!(
            (error["jsonrpc"].as_str(), error["error"]["code"].as_i64()),
            (Some("2.0"), Some(code)),
            "{malformed}: a JSON-RPC error answers a malformed request: {body}"
        );
    }

    // An unknown tool is a JSON-RPC error, not a tool result.
    let (status, _, body) = post_mcp(
        &gw,
        Some("tok-planner"),
        tools_call("transfer_everything", json!({"to": "mallory"})).to_string(),
    );
    let answer = jsonrpc(&body);
    assert!(
        answer["error"]["code"].is_i64() && answer.get("result").is_none(),
        "{status} {answer}"
    );

    // No token, a wrong token.
    for token in [None, Some("tok-nobody")] {
        let (status, headers, body) = post_mcp(&gw, token, charge.to_string());
        assert_eq!(status, 401, "{token:?}: {body}");
        let challenge = headers
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(challenge.starts_with("Bearer"), "{token:?}: {headers:?}");
    }

    // A body over 256 KiB.
    let huge = tools_call(
        "charge_card",
        json!({"order_id": "BAD-2", "amount": "5.00", "memo": "x".repeat(300 * 1024)}),
    );
    let (status, _, body) = post_mcp(&gw, Some("tok-planner"), huge.to_string());
    assert_eq!(status, 413, "{body}");

    assert!(effects(&setup.sandbox, "charge").is_empty());
}

#[test]
fn a_session_belongs_to_its_principal_and_browsers_need_an_allowed_origin() {
    let setup = Setup::example();
    let gw = setup.gateway();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw-test", "version": "0"}}});
    let legacy =
        |token: &str, session: Option<&str>, body: &Value| post_legacy(&gw, token, session, body);
    let (status, session, body) = legacy("tok-planner", None, &initialize);
    assert_eq!(status, 200, "{body}");
    let session = session.expect("a 2025-11-25 client gets a session");
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let (status, _, body) = legacy("tok-planner", Some(&session), &list);
    assert_eq!(status, 200, "the owner uses its session: {body}");
    // Some clients send `"params": null` for "no params" (keepalive pings).
    let ping = json!({"jsonrpc": "2.0", "id": "p1", "method": "ping", "params": null});
    let (status, _, body) = legacy("tok-planner", Some(&session), &ping);
    assert_eq!(status, 200, "{body}");
    // Another principal's token cannot use, resume or end it.
    let (status, _, body) = legacy("tok-subagent", Some(&session), &list);
    assert_eq!(status, 404, "{body}");
    let (status, _, body) = legacy(
        "tok-subagent",
        Some(&session),
        &tools_call(
            "charge_card",
            json!({"order_id": "SES-1", "amount": "1.00"}),
        ),
    );
    assert_eq!(status, 404, "{body}");
    let delete = client()
        .delete(format!("{}/mcp", gw.url))
        .bearer_auth("tok-subagent")
        .header("Mcp-Session-Id", &session)
        .send()
        .unwrap();
    assert_eq!(delete.status().as_u16(), 404);
    let (status, _, body) = legacy("tok-planner", Some(&session), &list);
    assert_eq!(status, 200, "still the owner's: {body}");
    // The owner ends it (200: SDKs expect 200 or 204), and then it is gone.
    let delete = client()
        .delete(format!("{}/mcp", gw.url))
        .bearer_auth("tok-planner")
        .header("Mcp-Session-Id", &session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .send()
        .unwrap();
    assert_eq!(delete.status().as_u16(), 200);
    let (status, _, body) = legacy("tok-planner", Some(&session), &list);
    assert_eq!(status, 404, "{body}");

    // A browser page (it sends Origin) is refused unless gateway.mcp_allowed_origins lists it.
    let (status, _, body) = {
        let response = client()
            .post(format!("{}/mcp", gw.url))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("Origin", "http://evil.example")
            .bearer_auth("tok-planner")
            .body(initialize.to_string())
            .send()
            .unwrap();
        let status = response.status().as_u16();
        (status, (), response.text().unwrap())
    };
    assert_eq!(status, 403, "{body}");
    assert!(effects(&setup.sandbox, "charge").is_empty());
}

#[test]
fn a_2025_session_survives_a_gateway_restart_and_stays_its_owners() {
    let setup = Setup::example();
    let send = |gw: &Proc, token: &str, session: Option<&str>, body: Value| {
        post_legacy(gw, token, session, &body)
    };
    let charge = |n: u64| {
        json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
            "name": "charge_card", "arguments": {"order_id": "RST-1", "amount": "2.00"}}})
    };
    let mut gw = setup.gateway();
    let (status, session, body) = send(
        &gw,
        "tok-planner",
        None,
        json!({"jsonrpc": "2.0", "id": 1,
        "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw-test", "version": "0"}}}),
    );
    assert_eq!(status, 200, "{body}");
    let session = session.unwrap();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(send(&gw, "tok-planner", Some(&session), initialized).0, 202);
    let (status, _, body) = send(&gw, "tok-planner", Some(&session), charge(2));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("APPLIED as ch_"), "{body}");

    // A deploy: the gateway stops and starts again on the same store.
    drop(gw);
    gw = setup.gateway();
    let (status, _, body) = send(&gw, "tok-subagent", Some(&session), charge(3));
    assert_eq!(status, 404, "still not another principal's: {body}");
    let (status, _, body) = send(&gw, "tok-planner", Some(&session), charge(4));
    assert_eq!(status, 200, "the session was restored: {body}");
    assert!(body.contains("ALREADY APPLIED as ch_"), "{body}");
    assert_eq!(
        effects_where(&setup.sandbox, "kind=charge&order_id=RST-1").len(),
        1
    );
}

/// A raw `POST /mcp` as a 2025-11-25 client sends it: (status, new session id, body).
pub(crate) fn post_legacy(
    gw: &Proc,
    token: &str,
    session: Option<&str>,
    body: &Value,
) -> (u16, Option<String>, String) {
    let mut request = client()
        .post(format!("{}/mcp", gw.url))
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

/// The agent script of `tests/clients/python/agent.py`, in one protocol era.
fn python_agent(era: &str, order: &str) {
    let clients = clients();
    let setup = Setup::example();
    let gw = setup.gateway();
    let started = Instant::now();
    let mut cmd = Command::new(&clients.python);
    cmd.arg(clients.root.join("tests/clients/python/agent.py"))
        .args(client_args(&gw, &setup.sandbox, order))
        .args(["--era", era])
        .env("PYTHONUNBUFFERED", "1");
    let (ok, output) = run_client(cmd, Duration::from_secs(120));
    println!("python agent ({era}) took {:.1?}", started.elapsed());
    assert!(ok, "the python agent ({era}) failed:\n{output}");
    assert!(output.contains("every check holds"), "{output}");
    // Counted here too, so the script cannot pass by checking the wrong thing.
    let orders = [
        order.to_owned(),
        format!("{order}-closed"),
        format!("{order}-parallel"),
    ];
    for order in &orders {
        let charges = effects_where(&setup.sandbox, &format!("kind=charge&order_id={order}"));
        assert_eq!(charges.len(), 1, "{order}: {charges:?}");
    }
    assert_eq!(effects(&setup.sandbox, "charge").len(), orders.len());
}

fn client_args(gw: &Proc, sandbox: &Proc, order: &str) -> Vec<String> {
    [
        "--url",
        &format!("{}/mcp", gw.url),
        "--token",
        "tok-planner",
        "--sandbox",
        &sandbox.url,
        "--sandbox-key",
        API_KEY,
        "--order",
        order,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Where `tests/clients/setup.sh` put the clients.
pub(crate) struct Clients {
    pub(crate) root: PathBuf,
    pub(crate) python: PathBuf,
    node_dir: PathBuf,
}

/// Installs the clients once per test process; the script itself is cached and locked
/// across the processes nextest runs in parallel.
pub(crate) fn clients() -> &'static Clients {
    static CLIENTS: OnceLock<Clients> = OnceLock::new();
    CLIENTS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .unwrap();
        let out = Command::new("bash")
            .arg(root.join("tests/clients/setup.sh"))
            .stdin(Stdio::null())
            .output()
            .expect("run tests/clients/setup.sh");
        assert!(
            out.status.success(),
            "tests/clients/setup.sh failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Clients {
            python: root.join("target/mcp-clients/venv/bin/python"),
            node_dir: root.join("tests/clients/node"),
            root,
        }
    })
}

/// Runs a client to its end (killed after `limit`); returns success and everything it printed.
pub(crate) fn run_client(mut cmd: Command, limit: Duration) -> (bool, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the client");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = format!(
        "{}{}{}",
        stdout.join().unwrap(),
        stderr.join().unwrap(),
        if status.is_none() {
            format!("\n(killed after {limit:?})")
        } else {
            String::new()
        }
    );
    println!("{output}");
    (status.is_some_and(|s| s.success()), output)
}

/// A 2026-07-28 `tools/call`: the protocol version rides in `_meta`, no session.
pub(crate) fn tools_call(name: &str, arguments: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    })
}

/// A raw `POST /mcp` with the headers a 2026-07-28 client sends.
pub(crate) fn post_mcp(
    gw: &Proc,
    token: Option<&str>,
    body: String,
) -> (u16, reqwest::header::HeaderMap, String) {
    let parsed: Option<Value> = serde_json::from_str(&body).ok();
    let mut request = client()
        .post(format!("{}/mcp", gw.url))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", MODERN);
    if let Some(method) = parsed.as_ref().and_then(|b| b["method"].as_str()) {
        request = request.header("Mcp-Method", method);
    }
    if let Some(name) = parsed.as_ref().and_then(|b| b["params"]["name"].as_str()) {
        request = request.header("Mcp-Name", name);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.body(body).send().unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().unwrap())
}

/// The JSON-RPC message in a response body, plain JSON or the last SSE `data:` event.
pub(crate) fn jsonrpc(body: &str) -> Value {
    if let Ok(value) = serde_json::from_str(body) {
        return value;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .next_back()
        .unwrap_or_else(|| panic!("no JSON-RPC message in `{body}`"))
}
