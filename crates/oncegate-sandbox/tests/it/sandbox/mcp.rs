//! The sandbox's MCP surface over a real socket, driven by rmcp's own client in both
//! protocol eras: the tools, idempotency keys from arguments and `_meta` on the one
//! ledger the HTTP API shows, faults queued through the admin API, and the API key.

use std::time::Duration;

use oncegate_sandbox::{Resource, SandboxConfig};
use reqwest::StatusCode;
use rmcp::{
    ClientLifecycleMode, ClientServiceExt,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientConfig, ErrorCode,
        ProtocolVersion, RequestMetaObject,
    },
    service::{ClientInitializeError, RoleClient, RunningService, ServiceError},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};

use super::charge;
use crate::support::Running;

type Client = RunningService<RoleClient, ClientConfig>;

const KEY_META: &str = "dev.oncegate/idempotency_key";

/// A 2026-07-28 client: `server/discover`, then stateless requests.
fn modern() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

/// A 2025-11-25 client: `initialize`, then a session.
fn legacy() -> ClientLifecycleMode {
    ClientLifecycleMode::Initialize
}

async fn try_connect(
    sandbox: &Running,
    lifecycle: ClientLifecycleMode,
    api_key: Option<&str>,
) -> Result<Client, ClientInitializeError> {
    // reqwest is built without a default crypto provider; any test may be first.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // rmcp's own reqwest client has no connect timeout; a real caller brings its own.
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("a client with these settings always builds");
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", sandbox.base));
    if let Some(key) = api_key {
        config = config.auth_header(key);
    }
    let transport = StreamableHttpClientTransport::with_client(http, config);
    ClientConfig::default()
        .serve_with_lifecycle(transport, lifecycle)
        .await
}

async fn connect(sandbox: &Running, lifecycle: ClientLifecycleMode) -> Client {
    try_connect(sandbox, lifecycle, sandbox.api_key.as_deref())
        .await
        .expect("the MCP client starts")
}

fn params(tool: &str, arguments: Value, key_in_meta: Option<&str>) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("tool arguments are an object: {arguments}");
    };
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    if let Some(key) = key_in_meta {
        let mut meta = RequestMetaObject::new();
        meta.insert(KEY_META.to_owned(), json!(key));
        params.meta = Some(meta);
    }
    params
}

async fn try_call(
    client: &Client,
    tool: &str,
    arguments: Value,
    key_in_meta: Option<&str>,
) -> Result<CallToolResult, ServiceError> {
    match client
        .call_tool_once(params(tool, arguments, key_in_meta))
        .await?
    {
        CallToolResponse::Complete(result) => Ok(result),
        other => panic!("{tool} answered something other than a result: {other:?}"),
    }
}

async fn call(
    client: &Client,
    tool: &str,
    arguments: Value,
    key_in_meta: Option<&str>,
) -> CallToolResult {
    try_call(client, tool, arguments, key_in_meta)
        .await
        .unwrap_or_else(|e| panic!("{tool} is answered: {e}"))
}

/// The structured answer of a successful call, checked against its text twin.
fn answer(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let structured = result
        .structured_content
        .clone()
        .expect("structuredContent");
    let [block] = result.content.as_slice() else {
        panic!("one content block: {result:?}");
    };
    let text = &block.as_text().expect("a text block").text;
    let from_text: Value = serde_json::from_str(text).expect("the text is JSON");
    assert_eq!(
        from_text, structured,
        "the text block is the structured answer"
    );
    structured
}

/// The `error` code of a tool error result.
fn error_code(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let body = result
        .structured_content
        .as_ref()
        .expect("structuredContent");
    body["error"].as_str().expect("an error code").to_owned()
}

fn replayed(result: &CallToolResult) -> bool {
    result
        .meta
        .as_ref()
        .and_then(|meta| meta.get("dev.oncegate/idempotent_replayed"))
        == Some(&json!(true))
}

#[tokio::test]
async fn the_tools_are_listed_in_both_protocol_eras() {
    let sandbox = Running::start(SandboxConfig::default()).await;

    let mut listings = Vec::new();
    for (lifecycle, version) in [
        (modern(), ProtocolVersion::V_2026_07_28),
        (legacy(), ProtocolVersion::V_2025_11_25),
    ] {
        let client = connect(&sandbox, lifecycle).await;
        let info = client.peer_info().expect("the server introduced itself");
        assert_eq!(info.protocol_version, version);
        listings.push(client.list_all_tools().await.expect("tools/list"));
        client.cancel().await.expect("the client closes");
    }

    assert_eq!(listings[0], listings[1], "one catalogue for both eras");
    let tools = &listings[0];
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "create_charge",
            "create_refund",
            "send_email",
            "append_ledger",
            "find_charge",
            "find_refund",
            "find_email",
            "find_ledger_entry",
            "get_order",
            "list_effects",
        ]
    );
    for tool in tools {
        let annotations = tool.annotations.as_ref().expect("annotated");
        let creates = !(tool.name.starts_with("find_")
            || tool.name == "get_order"
            || tool.name == "list_effects");
        assert_eq!(annotations.read_only_hint, Some(!creates), "{}", tool.name);
        if creates {
            assert_eq!(annotations.destructive_hint, Some(false), "{}", tool.name);
            assert_eq!(annotations.idempotent_hint, Some(false), "{}", tool.name);
            assert!(
                tool.input_schema["properties"]
                    .get("idempotency_key")
                    .is_some(),
                "{}",
                tool.name
            );
        }
        assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
    }
    let charge_schema = &tools[0].input_schema;
    assert_eq!(
        charge_schema["required"],
        json!(["order_id", "amount_minor", "currency"])
    );
    assert_eq!(
        charge_schema["properties"]["amount_minor"]["type"],
        "integer"
    );
}

#[tokio::test]
async fn descriptions_change_at_runtime_and_malformed_changes_are_refused() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let client = connect(&sandbox, modern()).await;
    let description = |tools: &[rmcp::model::Tool], name: &str| {
        tools
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.description.clone())
            .map(String::from)
    };
    let before = client.list_all_tools().await.unwrap();
    let original = description(&before, "find_charge").expect("described");
    let put = |body: Value| {
        sandbox
            .client
            .put(format!("{}/_sandbox/mcp/descriptions", sandbox.base))
            .json(&body)
            .send()
    };
    let r = put(json!({"tools": {"find_charge": "changed under you"}}))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let after = client.list_all_tools().await.unwrap();
    assert_eq!(
        description(&after, "find_charge").as_deref(),
        Some("changed under you")
    );
    assert_eq!(
        description(&after, "get_order"),
        description(&before, "get_order"),
        "only the named tool changes"
    );
    for bad in [
        json!({"tools": ["find_charge"]}),
        json!({"tool": {}}),
        json!("x"),
    ] {
        let r = put(bad.clone()).await.unwrap();
        assert!(r.status().is_client_error(), "{bad}: {}", r.status());
    }
    // An empty map restores the catalogue's descriptions.
    let r = put(json!({"tools": {}})).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let restored = client.list_all_tools().await.unwrap();
    assert_eq!(description(&restored, "find_charge"), Some(original));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_legacy_client_gets_a_session() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": { "name": "curl", "version": "1" },
        },
    });

    let response = sandbox
        .request(reqwest::Method::POST, "/mcp")
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    let session = response
        .headers()
        .get("mcp-session-id")
        .expect("an Mcp-Session-Id");
    assert!(!session.is_empty());
}

#[tokio::test]
async fn a_key_in_meta_or_in_the_arguments_is_one_effect_on_both_surfaces() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let modern = connect(&sandbox, modern()).await;
    let legacy = connect(&sandbox, legacy()).await;
    let body = charge("A-1", 1250);

    let first = call(&modern, "create_charge", body.clone(), Some("k-1")).await;
    let mut with_argument = body.clone();
    with_argument["idempotency_key"] = json!("k-1");
    let second = call(&legacy, "create_charge", with_argument.clone(), None).await;
    // Both at once is fine when they agree.
    let third = call(&modern, "create_charge", with_argument, Some("k-1")).await;

    let created = answer(&first);
    assert!(created["id"].as_str().unwrap().starts_with("ch_"));
    assert_eq!(created["amount_minor"], 1250);
    assert_eq!(created["currency"], "USD");
    assert_eq!(created["idempotency_key"], "k-1");
    assert!(!replayed(&first));
    assert_eq!(answer(&second), created);
    assert!(replayed(&second));
    assert_eq!(answer(&third), created);
    // The same key and body over HTTP is the same effect too.
    let over_http = sandbox
        .post("/v1/charges", Some("k-1"), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(over_http.headers()["idempotent-replayed"], "true");
    let over_http: Value = over_http.json().await.unwrap();
    assert_eq!(over_http, created);
    let effects = sandbox.effects("").await;
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["kind"], "charge");
    assert_eq!(effects[0]["idempotency_key"], "k-1");
    assert_eq!(
        effects[0]["request"], body,
        "the key is not part of the body"
    );
}

#[tokio::test]
async fn a_key_reused_with_other_arguments_is_refused() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let client = connect(&sandbox, modern()).await;
    let first = call(&client, "create_charge", charge("A-1", 1250), Some("k-1")).await;
    answer(&first);

    let reused = call(&client, "create_charge", charge("A-1", 9999), Some("k-1")).await;
    let mut conflicting = charge("A-1", 1250);
    conflicting["idempotency_key"] = json!("k-2");
    let conflict = call(&client, "create_charge", conflicting, Some("k-1")).await;
    let invalid = call(&client, "create_charge", charge("A-1", -5), None).await;

    assert_eq!(error_code(&reused), "idempotency_key_reused");
    assert_eq!(error_code(&conflict), "idempotency_key_conflict");
    assert_eq!(error_code(&invalid), "invalid_request");
    assert_eq!(sandbox.effects("").await.len(), 1);
}

#[tokio::test]
async fn find_tools_and_get_order_answer_as_the_http_lookups_do() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let client = connect(&sandbox, modern()).await;
    let created = answer(&call(&client, "create_charge", charge("A-1", 1250), Some("k-1")).await);
    let mut refund = charge("A-1", 250);
    refund["idempotency_key"] = json!("k-r");
    answer(&call(&client, "create_refund", refund, None).await);

    let found = answer(
        &call(
            &client,
            "find_charge",
            json!({ "idempotency_key": "k-1" }),
            None,
        )
        .await,
    );
    let missing = answer(
        &call(
            &client,
            "find_charge",
            json!({ "idempotency_key": "k-2" }),
            None,
        )
        .await,
    );
    let order = answer(&call(&client, "get_order", json!({ "order_id": "A-1" }), None).await);
    let no_criterion = call(&client, "find_charge", json!({}), None).await;
    let not_an_email = call(&client, "find_charge", json!({ "dedupe_ref": "d" }), None).await;
    let unknown = try_call(&client, "create_charges", charge("A-1", 1), None).await;

    assert_eq!(found, json!({ "found": true, "charge": created }));
    assert_eq!(
        found,
        sandbox.get_json("/v1/charges?idempotency_key=k-1").await
    );
    assert_eq!(missing, json!({ "found": false }));
    assert_eq!(order, sandbox.get_json("/v1/orders/A-1").await);
    assert_eq!(order["refunds"][0]["amount_minor"], 250);
    assert_eq!(error_code(&no_criterion), "missing_lookup_parameter");
    assert_eq!(error_code(&not_an_email), "invalid_request");
    match unknown {
        Err(ServiceError::McpError(error)) => assert_eq!(error.code, ErrorCode::INVALID_PARAMS),
        other => panic!("an unknown tool is a protocol error: {other:?}"),
    }
}

#[tokio::test]
async fn list_effects_pages_as_get_v1_effects_does() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let client = connect(&sandbox, modern()).await;
    answer(&call(&client, "create_refund", charge("A-0", 100), None).await);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let noted = jiff::Timestamp::now().to_string();
    tokio::time::sleep(Duration::from_millis(20)).await;
    for n in 1..=5 {
        let key = format!("k-{n}");
        answer(&call(&client, "create_charge", charge("A-1", 100 * n), Some(&key)).await);
    }

    let mut pages = Vec::new();
    let mut after = Value::Null;
    loop {
        let arguments = json!({ "kind": "charge", "since": noted, "limit": 2, "after": after });
        let listing = answer(&call(&client, "list_effects", arguments, None).await);
        let query = match after.as_u64() {
            Some(after) => format!("?kind=charge&since={noted}&limit=2&after={after}"),
            None => format!("?kind=charge&since={noted}&limit=2"),
        };
        assert_eq!(
            listing,
            sandbox.get_json(&format!("/v1/effects{query}")).await,
            "the HTTP answer, {query}"
        );
        let seqs: Vec<u64> = listing["effects"]
            .as_array()
            .expect("an effects array")
            .iter()
            .filter_map(|e| e["seq"].as_u64())
            .collect();
        after = listing["next"].clone();
        pages.push((seqs, after.clone()));
        if after.is_null() {
            break;
        }
    }
    let everything = answer(&call(&client, "list_effects", json!({}), None).await);
    let since_noted = answer(&call(&client, "list_effects", json!({ "since": noted }), None).await);
    let bad = [
        json!({ "limit": 0 }),
        json!({ "limit": 1001 }),
        json!({ "limit": "2" }),
        json!({ "since": "yesterday" }),
        json!({ "kind": "charges" }),
        json!({ "cursor": 2 }),
    ];

    assert_eq!(
        pages,
        [
            (vec![2, 3], json!(3)),
            (vec![4, 5], json!(5)),
            (vec![6], Value::Null)
        ]
    );
    assert_eq!(everything, sandbox.get_json("/v1/effects").await);
    assert_eq!(everything["effects"].as_array().unwrap().len(), 6);
    assert_eq!(everything["next"], Value::Null);
    assert_eq!(since_noted["effects"].as_array().unwrap().len(), 5);
    assert_eq!(since_noted["effects"][0]["idempotency_key"], "k-1");
    for arguments in bad {
        let result = call(&client, "list_effects", arguments.clone(), None).await;
        assert_eq!(error_code(&result), "invalid_request", "{arguments}");
    }
}

#[tokio::test]
async fn the_api_key_guards_mcp_too() {
    let config = SandboxConfig {
        api_key: Some("sk_test_123".to_owned()),
        ..SandboxConfig::default()
    };
    let sandbox = Running::start(config).await;

    let bare = sandbox
        .client
        .post(format!("{}/mcp", sandbox.base))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover" }))
        .send()
        .await
        .unwrap();
    let without_key = try_connect(&sandbox, modern(), None).await;
    let wrong_key = try_connect(&sandbox, legacy(), Some("sk_test_124")).await;
    let client = connect(&sandbox, modern()).await;
    let created = call(&client, "create_charge", charge("A-1", 1250), Some("k-1")).await;

    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(bare.headers()["www-authenticate"], "Bearer");
    let error = without_key.expect_err("no key, no client");
    assert_eq!(error.auth_challenge(), Some("Bearer"), "{error}");
    let error = wrong_key.expect_err("a wrong key, no client");
    assert_eq!(error.auth_challenge(), Some("Bearer"), "{error}");
    answer(&created);
    assert_eq!(sandbox.effects("").await.len(), 1);
}

#[tokio::test]
async fn refusals_before_commit_over_mcp_leave_no_effect() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let client = connect(&sandbox, modern()).await;

    for fault in ["fail_before_commit", "decline", "rate_limit"] {
        sandbox
            .queue_fault(json!({ "path": "/v1/charges", "fault": fault }))
            .await;
    }
    let failed = try_call(&client, "create_charge", charge("A-1", 1250), Some("k-1")).await;
    let declined = call(&client, "create_charge", charge("A-1", 1250), Some("k-1")).await;
    let limited = call(&client, "create_charge", charge("A-1", 1250), Some("k-1")).await;

    match failed {
        Err(ServiceError::McpError(error)) => assert_eq!(error.code, ErrorCode::INTERNAL_ERROR),
        other => panic!("fail_before_commit is a JSON-RPC internal error: {other:?}"),
    }
    assert_eq!(error_code(&declined), "card_declined");
    assert_eq!(error_code(&limited), "rate_limited");
    assert_eq!(sandbox.effects("").await.len(), 0);
    // Nothing was recorded under the key, so the retry goes through.
    answer(&call(&client, "create_charge", charge("A-1", 1250), Some("k-1")).await);
    assert_eq!(sandbox.effects("").await.len(), 1);
}

#[tokio::test]
async fn stall_after_commit_over_mcp_commits_once_and_outlasts_the_caller() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let client = connect(&sandbox, modern()).await;
    sandbox
        .queue_fault(
            json!({ "path": "/v1/charges", "fault": "stall_after_commit", "delay_ms": 5000 }),
        )
        .await;

    let stalled = tokio::time::timeout(
        Duration::from_millis(500),
        client.call_tool_once(params(
            "create_charge",
            charge("A-1", 1250),
            Some("k-stall"),
        )),
    )
    .await;

    assert!(stalled.is_err(), "the caller gives up first");
    let effects = sandbox.effects("").await;
    assert_eq!(effects.len(), 1, "committed before the stall");
    assert_eq!(effects[0]["idempotency_key"], "k-stall");
    let found = answer(
        &call(
            &client,
            "find_charge",
            json!({ "idempotency_key": "k-stall" }),
            None,
        )
        .await,
    );
    assert_eq!(found["found"], true);
    assert_eq!(found["charge"]["id"], effects[0]["id"]);
    // The retry the gateway would make replays the committed charge.
    let retry = call(
        &client,
        "create_charge",
        charge("A-1", 1250),
        Some("k-stall"),
    )
    .await;
    assert!(replayed(&retry));
    assert_eq!(answer(&retry)["id"], effects[0]["id"]);
    assert_eq!(sandbox.effects("").await.len(), 1);
}

#[tokio::test]
async fn drop_after_commit_over_mcp_commits_and_never_answers() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let client = connect(&sandbox, legacy()).await;
    sandbox
        .queue_fault(json!({ "path": "/v1/refunds", "fault": "drop_after_commit" }))
        .await;

    let dropped = tokio::time::timeout(
        Duration::from_millis(500),
        client.call_tool_once(params("create_refund", charge("A-1", 500), Some("k-drop"))),
    )
    .await;

    assert!(dropped.is_err(), "no answer came");
    let effects = sandbox.effects("?kind=refund").await;
    assert_eq!(effects.len(), 1, "committed before the silence");
    // The session still works for the next call.
    let retry = call(&client, "create_refund", charge("A-1", 500), Some("k-drop")).await;
    assert!(replayed(&retry));
    assert_eq!(answer(&retry)["id"], effects[0]["id"]);
}

#[tokio::test]
async fn a_slow_create_over_mcp_commits_even_after_the_caller_left() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let client = connect(&sandbox, modern()).await;
    sandbox
        .queue_fault(json!({ "path": "/v1/ledger", "fault": "slow", "delay_ms": 800 }))
        .await;
    let entry = json!({ "order_id": "A-1", "account": "rev", "amount_minor": 1250 });

    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        client.call_tool_once(params("append_ledger", entry.clone(), Some("k-slow"))),
    )
    .await;

    assert!(gave_up.is_err(), "the caller gives up before the commit");
    assert_eq!(sandbox.effects("").await.len(), 0, "not committed yet");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    let found = loop {
        let lookup = json!({ "idempotency_key": "k-slow" });
        let found = answer(&call(&client, "find_ledger_entry", lookup, None).await);
        if found["found"] == true {
            break found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the entry never committed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let effects = sandbox.effects("?kind=ledger").await;
    assert_eq!(effects.len(), 1);
    assert_eq!(found["entry"]["id"], effects[0]["id"]);
    assert_eq!(effects[0]["request"], entry);
}

#[tokio::test]
async fn an_ignored_key_over_mcp_is_an_effect_per_call() {
    let config = SandboxConfig {
        ignore_idempotency_key: vec![Resource::Emails],
        ..SandboxConfig::default()
    };
    let sandbox = Running::start(config).await;
    let client = connect(&sandbox, modern()).await;
    let email = json!({
        "order_id": "A-1", "to": "ann@example.com", "template": "receipt", "dedupe_ref": "ik_1",
    });

    let first = answer(&call(&client, "send_email", email.clone(), Some("ik_1")).await);
    let second = answer(&call(&client, "send_email", email, Some("ik_1")).await);

    assert_ne!(first["id"], second["id"]);
    assert!(first["id"].as_str().unwrap().starts_with("em_"));
    let effects = sandbox.effects("?kind=email&idempotency_key=ik_1").await;
    assert_eq!(
        effects.len(),
        2,
        "the key is recorded as sent, not honoured"
    );
    let by_key = answer(
        &call(
            &client,
            "find_email",
            json!({ "idempotency_key": "ik_1" }),
            None,
        )
        .await,
    );
    assert_eq!(by_key, json!({ "found": false }));
    let by_ref = answer(&call(&client, "find_email", json!({ "dedupe_ref": "ik_1" }), None).await);
    assert_eq!(by_ref["email"]["id"], first["id"]);
}
