//! The front door and the upstream's answer, through the real router on a real socket,
//! against the sandbox (or a tiny provider of its own where the sandbox has no such
//! answer): dot segments in URL paths, argument and answer limits, structural headers,
//! `Authorization` parsing, MCP upstream refusals, and an MCP upstream's progress
//! relayed to the agent.
//!
//! Why one file: the cases share one router-on-a-socket harness and its providers.

use std::path::Path;

use axum::http::{HeaderName, HeaderValue};

use reqwest::header::HeaderMap;
use rmcp::model::{CallToolResult, ClientConfig, ProtocolVersion};
use rmcp::service::ServiceError;
use rmcp::{ClientHandler, ClientLifecycleMode};
use serde_json::{Value, json};
use sha2::Digest;

use crate::support::{effects, mcp_call, mcp_client_as, start_gateway, start_sandbox};

const PRINCIPALS: &str = r#"
[store]
url = "sqlite://gw.db"

[[principals]]
name = "agent"
role = "agent"
token_env = "UNUSED_TOKEN_AGENT"

[[principals]]
name = "admin"
role = "admin"
token_env = "UNUSED_TOKEN_ADMIN"
"#;

/// A gateway over `capabilities` (TOML after the principals), served on a socket.
async fn gateway(dir: &Path, gateway_table: &str, capabilities: &str) -> String {
    let text = format!("{gateway_table}\n{PRINCIPALS}\n{capabilities}");
    start_gateway(dir, &text, &[("agent", "tok"), ("admin", "adm")]).await
}

/// POSTs a call with extra headers; (status, body).
async fn call(gw: &str, headers: HeaderMap, capability: &str, arguments: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{gw}/v1/calls"))
        .headers(headers)
        .json(&json!({"capability": capability, "arguments": arguments}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn bearer(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    h
}

fn with(mut h: HeaderMap, name: &'static str, value: &[u8]) -> HeaderMap {
    h.append(
        HeaderName::from_static(name),
        HeaderValue::from_bytes(value).unwrap(),
    );
    h
}

async fn get_json(url: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn mcp_client(
    gw: &str,
) -> rmcp::service::RunningService<rmcp::service::RoleClient, ClientConfig> {
    mcp_client_as(
        gw,
        ClientConfig::default(),
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
}

fn outcome(r: &CallToolResult) -> Value {
    r.meta.as_ref().unwrap()["dev.oncegate/outcome"].clone()
}

fn first_text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_default()
}

async fn intent_count(gw: &str) -> usize {
    let (status, body) = get_json(&format!("{gw}/v1/intents"), Some("adm")).await;
    assert_eq!(status, 200, "{body}");
    body["intents"].as_array().unwrap().len()
}

fn customer_charges(sandbox: &str) -> String {
    format!(
        r#"
[[capabilities]]
name = "charge"
category = "keyed"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "http"
url = "{sandbox}/v1/customers/{{arg.customer}}/charges"
effect_ref = "/id"
body = {{ order_id = "{{arg.order_id}}", amount_minor = 1250, currency = "USD" }}

[[capabilities]]
name = "charge_keyed"
category = "keyed"
require_client_key = true
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "http"
url = "{sandbox}/v1/customers/{{arg.customer}}/charges"
body = {{ order_id = "{{arg.order_id}}", amount_minor = 1250, currency = "USD" }}

[[capabilities]]
name = "charge_plain"
category = "keyed"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "http"
url = "{sandbox}/v1/charges"
effect_ref = "/id"
body = {{ order_id = "{{arg.order_id}}", amount_minor = 1250, currency = "USD" }}

[capabilities.reconcile]
kind = "http"
url = "{sandbox}/v1/orders/{{arg.order_id}}/x"
"#
    )
}

#[tokio::test]
async fn dot_segments_in_a_url_path_are_refused_before_anything_is_claimed_or_sent() {
    let sandbox = start_sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "", &customer_charges(&sandbox)).await;

    // `/v1/customers/../charges` is `/v1/charges`: a real charge, before the fix.
    // Look-alikes a normalising server reads as dots or slashes, and encoded separators
    // (a server that decodes before routing reads `a%2Fb` as two segments).
    for customer in [
        "..",
        ".",
        "%2e%2e",
        ".%2E",
        "%252E.",
        "..%2F",
        "%2e%2e%5c",
        "\u{2024}\u{2024}",
        "\u{2025}",
        "\u{FF0E}\u{FF0E}",
        "\u{FF0F}..\u{FF0F}",
        "a\u{2215}b",
        "a\u{2044}b",
        "\u{2100}",
        "\u{2488}\u{2488}",
        "c\u{2105}o",
        "c-1%2Fcharges",
        "c-1/charges",
        "c-1%5Ccharges",
        "c-1\\charges",
    ] {
        let (status, body) = call(
            &gw,
            bearer("tok"),
            "charge",
            json!({"order_id": "D-1", "customer": customer}),
        )
        .await;
        assert_eq!(status, 422, "{customer}: {body}");
        assert_eq!(body["error"]["code"], "OG-0009", "{customer}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("path segment"), "{customer}: {message}");
        assert!(
            !message.contains("127.0.0.1"),
            "the URL is not echoed: {message}"
        );
    }
    // The reconciliation read's URL is checked too, before the effect is claimed.
    let (status, body) = call(
        &gw,
        bearer("tok"),
        "charge_plain",
        json!({"order_id": ".."}),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (422, &json!("OG-0009")),
        "{body}"
    );

    // And on /mcp.
    let client = mcp_client(&gw).await;
    let r = mcp_call(
        &client,
        "charge",
        json!({"order_id": "D-2", "customer": ".."}),
        Value::Null,
    )
    .await
    .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(outcome(&r)["code"], "OG-0009", "{r:?}");
    assert!(first_text(&r).starts_with("INVALID ARGUMENTS"), "{r:?}");
    client.cancel().await.unwrap();

    // A refused call binds no Idempotency-Key either: the key is still free.
    let keyed = with(bearer("tok"), "idempotency-key", b"ik-1");
    let (status, body) = call(
        &gw,
        keyed.clone(),
        "charge_keyed",
        json!({"order_id": "D-4", "customer": ".."}),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (422, &json!("OG-0009")),
        "{body}"
    );

    assert!(
        effects(&sandbox).await.is_empty(),
        "nothing reached the provider"
    );
    assert_eq!(intent_count(&gw).await, 0, "nothing was claimed");

    let (status, body) = call(
        &gw,
        keyed,
        "charge_keyed",
        json!({"order_id": "D-5", "customer": "c-1"}),
    )
    .await;
    assert_eq!((status, &body["status"]), (200, &json!("failed")), "{body}");

    // A value that only contains dots is an ordinary segment and is sent.
    let (status, body) = call(
        &gw,
        bearer("tok"),
        "charge",
        json!({"order_id": "D-3", "customer": "a..b"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["status"], "failed",
        "the sandbox has no customers: {body}"
    );
    assert_eq!(intent_count(&gw).await, 2);
}

fn nested(levels: usize) -> Value {
    let mut v = json!("leaf");
    for _ in 0..levels {
        v = json!({"n": v});
    }
    v
}

#[tokio::test]
async fn arguments_over_the_limits_are_refused_before_a_claim() {
    let sandbox = start_sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "", &customer_charges(&sandbox)).await;
    let (status, body) = call(
        &gw,
        bearer("tok"),
        "charge_plain",
        json!({"order_id": "L-1", "extra": nested(32)}),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (422, &json!("OG-0053")),
        "{body}"
    );
    let (status, body) = call(
        &gw,
        bearer("tok"),
        "charge_plain",
        json!({"order_id": "L-1", "memo": "x".repeat(65 * 1024)}),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (413, &json!("OG-0052")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_argument_bytes"),
        "{body}"
    );

    let client = mcp_client(&gw).await;
    let r = mcp_call(
        &client,
        "charge_plain",
        json!({"order_id": "L-1", "extra": nested(40)}),
        Value::Null,
    )
    .await
    .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(outcome(&r)["code"], "OG-0053", "{r:?}");
    client.cancel().await.unwrap();
    assert!(effects(&sandbox).await.is_empty());
    assert_eq!(intent_count(&gw).await, 0);

    // The limits are configurable.
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(
        dir.path(),
        "[gateway]\nmax_argument_depth = 2\nmax_argument_bytes = 100",
        &customer_charges(&sandbox),
    )
    .await;
    let (status, body) = call(
        &gw,
        bearer("tok"),
        "charge_plain",
        json!({"order_id": "L-2", "extra": {"a": {"b": 1}}}),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (422, &json!("OG-0053")),
        "{body}"
    );
    let (status, body) = call(
        &gw,
        bearer("tok"),
        "charge_plain",
        json!({"order_id": "L-2", "memo": "x".repeat(100)}),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (413, &json!("OG-0052")),
        "{body}"
    );
    let (status, body) = call(
        &gw,
        bearer("tok"),
        "charge_plain",
        json!({"order_id": "L-2"}),
    )
    .await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("applied")),
        "{body}"
    );
}

/// A provider whose answers are over the limits: 126 levels deep, or 30 MB.
async fn big_answers() -> String {
    use axum::routing::post;
    let deep = || async {
        let mut text = String::from("\"fx_deep\"");
        for _ in 0..126 {
            text = format!("{{\"id\":\"fx_deep\",\"n\":{text}}}");
        }
        ([("content-type", "application/json")], text)
    };
    let huge = || async {
        // Streamed in 64 KiB chunks, 30 MiB in all.
        let chunk = bytes_of(64 * 1024);
        let head = futures::stream::once(async {
            Ok::<_, std::io::Error>(b"{\"id\":\"fx_huge\",\"pad\":\"".to_vec())
        });
        let body = futures::stream::iter((0..480).map(move |_| Ok(chunk.clone())));
        let tail = futures::stream::once(async { Ok(b"\"}".to_vec()) });
        use futures::StreamExt;
        (
            [("content-type", "application/json")],
            axum::body::Body::from_stream(head.chain(body).chain(tail)),
        )
    };
    let app = axum::Router::new()
        .route("/deep", post(deep))
        .route("/huge", post(huge));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn bytes_of(n: usize) -> Vec<u8> {
    vec![b'x'; n]
}

fn big_capabilities(provider: &str) -> String {
    format!(
        r#"
[[capabilities]]
name = "deep"
category = "non_idempotent"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "http"
url = "{provider}/deep"
effect_ref = "/id"

[[capabilities]]
name = "huge"
category = "non_idempotent"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "http"
url = "{provider}/huge"
timeout = "60s"
effect_ref = "/id"
"#
    )
}

#[tokio::test]
async fn an_answer_nested_126_levels_deep_is_applied_and_stays_readable() {
    let provider = big_answers().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "", &big_capabilities(&provider)).await;
    let (status, first) = call(&gw, bearer("tok"), "deep", json!({"order_id": "N-1"})).await;
    assert_eq!(
        (status, &first["status"]),
        (200, &json!("applied")),
        "{first}"
    );
    // Read whole (it is within the size limit), so the effect reference is kept.
    assert_eq!(first["effect_ref"], "fx_deep", "{first}");
    let summary = &first["result"]["dev.oncegate/truncated"];
    assert!(
        summary["reason"].as_str().unwrap().contains("126 levels"),
        "{first}"
    );
    assert!(summary["sha256"].as_str().unwrap().len() == 64, "{summary}");

    // A repeat replays it, the record reads back, and listing still works.
    let (status, again) = call(&gw, bearer("tok"), "deep", json!({"order_id": "N-1"})).await;
    assert_eq!(
        (status, &again["status"]),
        (200, &json!("replayed")),
        "{again}"
    );
    assert_eq!(again["result"], first["result"]);
    let key = first["intent_key"].as_str().unwrap();
    let (status, record) = get_json(&format!("{gw}/v1/intents/{key}"), Some("adm")).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["state"], "applied", "{record}");
    assert_eq!(intent_count(&gw).await, 1);
}

#[tokio::test]
async fn a_30_mb_answer_is_stored_as_its_digest_never_whole() {
    let provider = big_answers().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "", &big_capabilities(&provider)).await;
    let (status, first) = call(&gw, bearer("tok"), "huge", json!({"order_id": "H-1"})).await;
    assert_eq!(
        (status, &first["status"]),
        (200, &json!("applied")),
        "{first}"
    );
    let summary = &first["result"]["dev.oncegate/truncated"];
    let body_len = "{\"id\":\"fx_huge\",\"pad\":\"".len() + 480 * 64 * 1024 + 2;
    assert_eq!(summary["bytes"], body_len, "{summary}");
    let mut hasher = sha2::Sha256::new();
    hasher.update(b"{\"id\":\"fx_huge\",\"pad\":\"");
    for _ in 0..480 {
        hasher.update(bytes_of(64 * 1024));
    }
    hasher.update(b"\"}");
    assert_eq!(summary["sha256"], hex::encode(hasher.finalize()));
    assert_eq!(summary["preview"].as_str().unwrap().len(), 1024);
    assert!(
        summary["preview"]
            .as_str()
            .unwrap()
            .starts_with("{\"id\":\"fx_huge\"")
    );

    // The replay is small, and so is the store.
    let r = reqwest::Client::new()
        .post(format!("{gw}/v1/calls"))
        .bearer_auth("tok")
        .json(&json!({"capability": "huge", "arguments": {"order_id": "H-1"}}))
        .send()
        .await
        .unwrap();
    let replay = r.bytes().await.unwrap();
    assert!(replay.len() < 8 * 1024, "replay is {} bytes", replay.len());
    let again: Value = serde_json::from_slice(&replay).unwrap();
    assert_eq!(again["status"], "replayed", "{again}");
    let stored: u64 = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    assert!(stored < 4 * 1024 * 1024, "the store holds {stored} bytes");
}

#[tokio::test]
async fn structural_headers_are_visible_ascii_once_or_refused() {
    let sandbox = start_sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "", &customer_charges(&sandbox)).await;
    let long = "s".repeat(256);
    let bad: [(&'static str, &[u8]); 6] = [
        ("oncegate-step-id", "étape-1".as_bytes()),
        ("oncegate-run-id", b"run 1"),
        ("oncegate-step-id", b""),
        ("oncegate-step-id", long.as_bytes()),
        ("idempotency-key", "clé".as_bytes()),
        ("idempotency-key", b"a\tb"),
    ];
    for (name, value) in bad {
        let (status, body) = call(
            &gw,
            with(bearer("tok"), name, value),
            "charge_plain",
            json!({"order_id": "S-1"}),
        )
        .await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("OG-0050")),
            "{name}: {value:?}: {body}"
        );
    }
    // Sent twice: which one would count?
    let twice = with(
        with(bearer("tok"), "oncegate-step-id", b"a"),
        "oncegate-step-id",
        b"b",
    );
    let (status, body) = call(&gw, twice, "charge_plain", json!({"order_id": "S-1"})).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("OG-0050")),
        "{body}"
    );
    assert_eq!(intent_count(&gw).await, 0);
    assert!(effects(&sandbox).await.is_empty());

    // Valid ids still make distinct steps distinct.
    let ok = with(
        with(bearer("tok"), "oncegate-run-id", b"run-1"),
        "oncegate-step-id",
        &[b's'; 255],
    );
    let (status, body) = call(&gw, ok, "charge_plain", json!({"order_id": "S-1"})).await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("applied")),
        "{body}"
    );

    // MCP `_meta` ids: strings of the same alphabet, or invalid params.
    let client = mcp_client(&gw).await;
    for meta in [
        json!({"dev.oncegate/step_id": 7}),
        json!({"dev.oncegate/run_id": {"id": "r"}}),
        json!({"dev.oncegate/step_id": "s".repeat(256)}),
        json!({"dev.oncegate/step_id": "étape"}),
    ] {
        let e = mcp_call(
            &client,
            "charge_plain",
            json!({"order_id": "S-2"}),
            meta.clone(),
        )
        .await
        .unwrap_err();
        let ServiceError::McpError(data) = e else {
            panic!("{meta}: {e:?}")
        };
        assert_eq!(data.code.0, -32602, "{meta}: {data:?}");
        assert_eq!(data.data.as_ref().unwrap()["code"], "OG-0050", "{data:?}");
    }
    let r = mcp_call(
        &client,
        "charge_plain",
        json!({"order_id": "S-2"}),
        json!({"dev.oncegate/run_id": "run-2", "dev.oncegate/step_id": "charge"}),
    )
    .await
    .unwrap();
    assert_eq!(outcome(&r)["status"], "applied", "{r:?}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive_and_authorization_is_sent_once() {
    let sandbox = start_sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), "", &customer_charges(&sandbox)).await;
    let url = format!("{gw}/v1/intents");
    for value in ["bearer adm", "BEARER adm", "Bearer   adm", "bEaReR adm"] {
        let r = reqwest::Client::new()
            .get(&url)
            .header("authorization", value)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{value}");
    }
    for value in [
        "Basic adm",
        "Bearer",
        "Bearer ",
        "Beareradm",
        "Bearer wrong",
    ] {
        let r = reqwest::Client::new()
            .get(&url)
            .header("authorization", value)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401, "{value}");
        // Not authenticated is its own code, not Forbidden's (OG-0013).
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "OG-0054", "{value}: {body}");
    }
    // Authenticated with the wrong role: 403 and Forbidden.
    let (status, body) = get_json(&url, Some("tok")).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "OG-0013", "{body}");
    let two = with(bearer("adm"), "authorization", b"Bearer adm");
    let r = reqwest::Client::new()
        .get(&url)
        .headers(two.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "OG-0051", "{body}");

    // The same at /mcp's door, before any JSON-RPC is read.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    }}});
    let post = |headers: HeaderMap| {
        reqwest::Client::new()
            .post(format!("{gw}/mcp"))
            .headers(headers)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/list")
            .json(&init)
            .send()
    };
    let r = post(two).await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "OG-0051", "{body}");
    let mut lower = HeaderMap::new();
    lower.insert("authorization", HeaderValue::from_static("bearer tok"));
    let r = post(lower).await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    assert_eq!(
        status, 200,
        "a lower-case scheme authenticates on /mcp: {text}"
    );
    assert!(text.contains("charge_plain"), "{text}");
    // A wrong token at /mcp: the same 401, code and challenge as the JSON API.
    let r = post(bearer("wrong")).await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert!(r.headers().contains_key("www-authenticate"), "{r:?}");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "OG-0054", "{body}");
}

#[tokio::test]
async fn mcp_upstream_refusals_that_prove_nothing_happened_are_failed_with_its_message() {
    let (upstream, _) = crate::mcp_upstream::provider().await;
    let dir = tempfile::tempdir().unwrap();
    let capability = |name: &str, tool: &str| {
        format!(
            r#"
[[capabilities]]
name = "{name}"
category = "non_idempotent"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "mcp"
url = "{upstream}"
tool = "{tool}"
idempotency_arg = "idempotency_key"
rejected = "^Input validation error:"
"#
        )
    };
    let caps = [
        capability("pay_invalid", "invalid"),
        capability("pay_validation", "validation"),
        capability("pay_declined", "declined"),
    ]
    .concat();
    let gw = gateway(dir.path(), "", &caps).await;
    for (name, said) in [
        ("pay_invalid", "amount is missing"),
        ("pay_validation", "'amount' is a required property"),
    ] {
        let (status, first) = call(&gw, bearer("tok"), name, json!({"order_id": "R-1"})).await;
        assert_eq!(status, 200, "{first}");
        assert_eq!(first["status"], "failed", "{name}: {first}");
        assert_eq!(first["state"], "failed", "{name}: {first}");
        let message = first["reason"]["message"].as_str().unwrap();
        assert!(message.contains(said), "{name}: {message}");
        // Definite: a repeat replays the failure, it is not reconciled forever.
        let (_, again) = call(&gw, bearer("tok"), name, json!({"order_id": "R-1"})).await;
        assert_eq!(
            (&again["status"], &again["state"]),
            (&json!("replayed"), &json!("failed")),
            "{name}: {again}"
        );
    }
    // A tool error the pattern does not name may have come after the effect.
    let (status, body) = call(
        &gw,
        bearer("tok"),
        "pay_declined",
        json!({"order_id": "R-1"}),
    )
    .await;
    assert_eq!(
        (status, &body["status"]),
        (202, &json!("unknown")),
        "{body}"
    );

    // On /mcp the model sees the upstream's own words.
    let client = mcp_client(&gw).await;
    let r = mcp_call(
        &client,
        "pay_validation",
        json!({"order_id": "R-2"}),
        Value::Null,
    )
    .await
    .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(outcome(&r)["state"], "failed", "{r:?}");
    assert!(
        first_text(&r).contains("'amount' is a required property"),
        "{r:?}"
    );
    client.cancel().await.unwrap();
}

/// `charge_mcp`: the sandbox's `create_charge` tool, keyed on the order.
fn charge_mcp(sandbox: &str) -> String {
    format!(
        r#"
[[capabilities]]
name = "charge_mcp"
category = "keyed"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "mcp"
url = "{sandbox}/mcp"
tool = "create_charge"
timeout = "10s"
effect_ref = "/id"
body = {{ order_id = "{{arg.order_id}}", amount_minor = "1250", currency = "USD" }}
"#
    )
}

/// An agent's client that keeps the progress and the log lines it hears.
#[derive(Clone, Default)]
struct Heard(
    std::sync::Arc<std::sync::Mutex<Vec<rmcp::model::ProgressNotificationParam>>>,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
);

impl Heard {
    fn logs(&self) -> Vec<String> {
        self.1.lock().unwrap().clone()
    }
}

impl ClientHandler for Heard {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _: rmcp::service::NotificationContext<rmcp::service::RoleClient>,
    ) {
        self.0.lock().unwrap().push(params);
    }

    #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, still what clients use.
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _: rmcp::service::NotificationContext<rmcp::service::RoleClient>,
    ) {
        self.1.lock().unwrap().push(params.data.to_string());
    }
}

#[tokio::test]
async fn an_upstream_log_line_reaches_only_agents_that_asked_and_wait_on_its_intent() {
    let sandbox = start_sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let caps = charge_mcp(&sandbox);
    let gw = gateway(dir.path(), "", &caps).await;
    let (heard_a, heard_b, heard_quiet) = (Heard::default(), Heard::default(), Heard::default());
    let a = mcp_client_as(&gw, heard_a.clone(), ClientLifecycleMode::Initialize).await;
    let b = mcp_client_as(&gw, heard_b.clone(), ClientLifecycleMode::Initialize).await;
    let quiet = mcp_client_as(&gw, heard_quiet.clone(), ClientLifecycleMode::Initialize).await;
    #[allow(deprecated)]
    for client in [&a, &b] {
        client
            .set_level(rmcp::model::SetLevelRequestParams::new(
                rmcp::model::LoggingLevel::Debug,
            ))
            .await
            .unwrap();
    }

    // Alone on the upstream connection: the agent hears its intent's log line.
    let r = mcp_call(&a, "charge_mcp", json!({"order_id": "L-A1"}), Value::Null)
        .await
        .unwrap();
    assert_eq!(outcome(&r)["state"], "applied", "{r:?}");
    let logs = heard_a.logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("accepted charges for order L-A1")),
        "{logs:?}"
    );

    // Two intents at once on the one pooled upstream connection, and one agent that
    // asked for no logs: nobody hears a line about an intent that is not theirs.
    let slow = json!({"path": "/v1/charges", "fault": "slow", "times": 3, "delay_ms": 400});
    reqwest::Client::new()
        .post(format!("{sandbox}/_sandbox/faults"))
        .json(&slow)
        .send()
        .await
        .unwrap();
    let (ra, rb, rq) = tokio::join!(
        mcp_call(&a, "charge_mcp", json!({"order_id": "L-A2"}), Value::Null),
        mcp_call(&b, "charge_mcp", json!({"order_id": "L-B2"}), Value::Null),
        mcp_call(
            &quiet,
            "charge_mcp",
            json!({"order_id": "L-Q2"}),
            Value::Null
        ),
    );
    for r in [ra, rb, rq] {
        assert_eq!(outcome(&r.unwrap())["state"], "applied");
    }
    let (la, lb) = (heard_a.logs(), heard_b.logs());
    assert!(
        la.iter()
            .all(|l| !l.contains("L-B2") && !l.contains("L-Q2")),
        "{la:?}"
    );
    assert!(
        lb.iter().all(|l| !l.contains("L-A") && !l.contains("L-Q2")),
        "{lb:?}"
    );
    assert!(heard_quiet.logs().is_empty(), "{:?}", heard_quiet.logs());
    for client in [a, b, quiet] {
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn an_mcp_upstreams_progress_reaches_the_agent_waiting_on_the_intent_in_both_eras() {
    let sandbox = start_sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let caps = charge_mcp(&sandbox);
    let gw = gateway(dir.path(), "", &caps).await;
    let eras = [
        (
            "modern",
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        ),
        ("legacy", ClientLifecycleMode::Initialize),
    ];
    for (era, mode) in eras {
        // Slow: the upstream reports "accepted" well before its answer.
        let queued = reqwest::Client::new()
            .post(format!("{sandbox}/_sandbox/faults"))
            .json(&json!({"path": "/v1/charges", "fault": "slow", "times": 1, "delay_ms": 800}))
            .send()
            .await
            .unwrap();
        assert!(queued.status().is_success());
        let heard = Heard::default();
        let client = mcp_client_as(&gw, heard.clone(), mode).await;
        let order = format!("P-{era}");
        let r = mcp_call(
            &client,
            "charge_mcp",
            json!({"order_id": order}),
            Value::Null,
        )
        .await
        .unwrap();
        assert_eq!(outcome(&r)["state"], "applied", "{era}: {r:?}");
        let progress = heard.0.lock().unwrap().clone();
        let accepted = progress
            .iter()
            .find(|p| p.message.as_deref() == Some("accepted"))
            .unwrap_or_else(|| panic!("{era}: no relayed progress in {progress:?}"));
        assert_eq!(
            (accepted.progress, accepted.total),
            (1.0, Some(2.0)),
            "{era}"
        );
        // Under the agent's own token, not the one the gateway gave the upstream.
        assert!(
            progress
                .iter()
                .all(|p| p.progress_token == accepted.progress_token),
            "{era}: {progress:?}"
        );

        // A replay runs nothing upstream, so there is nothing to report; one charge.
        let again = mcp_call(
            &client,
            "charge_mcp",
            json!({"order_id": order}),
            Value::Null,
        )
        .await
        .unwrap();
        assert_eq!(outcome(&again)["status"], "replayed", "{era}: {again:?}");
        let charges = effects(&sandbox)
            .await
            .into_iter()
            .filter(|e| e["order_id"] == json!(order))
            .count();
        assert_eq!(charges, 1, "{era}");
        client.cancel().await.unwrap();
    }
}
