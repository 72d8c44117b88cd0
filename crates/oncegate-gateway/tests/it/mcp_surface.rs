//! What `POST /mcp` shows agents: schemas from the registry, from an MCP upstream's own
//! tools/list, or derived from the key recipe; hints from the category.

use oncegate_gateway::server::{http_client, install_crypto};
use rmcp::model::{CallToolRequestParams, CallToolResponse, ClientConfig, ProtocolVersion};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};

use crate::mcp_upstream::provider;
use crate::support::{registry_in, start_gateway};

async fn gateway(upstream: &str, dir: &std::path::Path) -> String {
    let text = format!(
        r#"
[store]
url = "sqlite://gw.db"

[[principals]]
name = "agent"
role = "agent"
token_env = "UNUSED_TOKEN_AGENT"

[[capabilities]]
name = "pay"
description = "pay an invoice"
category = "keyed"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "mcp"
url = "{upstream}"
tool = "ok"
idempotency_arg = "idempotency_key"
effect_ref = "/id"

[[capabilities]]
name = "note"
category = "non_idempotent"
input_schema = {{ type = "object", properties = {{ text = {{ type = "string" }} }}, required = ["text"] }}
key = {{ business_ref = "text" }}

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:9/notes"
idempotency = "argument"
idempotency_arg = "key"

[[capabilities]]
name = "lookup"
category = "read"

[capabilities.upstream]
kind = "http"
method = "GET"
url = "http://127.0.0.1:9/lookup"
"#
    );
    let base = start_gateway(dir, &text, &[("agent", "tok")]).await;
    format!("{base}/mcp")
}

#[tokio::test]
async fn tools_show_the_right_schemas_and_honest_hints() {
    install_crypto();
    let (upstream, provider) = provider().await;
    let dir = tempfile::tempdir().unwrap();
    let url = gateway(&upstream, dir.path()).await;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    config.auth_header = Some("tok".into());
    let transport = StreamableHttpClientTransport::with_client(http_client(), config);
    let client = ClientConfig::default()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let tool =
        |name: &str| serde_json::to_value(tools.iter().find(|t| t.name == name).unwrap()).unwrap();

    // The upstream's own schema, without the key argument the gateway fills in.
    let pay = tool("pay");
    assert_eq!(
        pay["inputSchema"]["properties"],
        json!({"order_id": {"type": "string"}}),
        "{pay}"
    );
    assert_eq!(pay["inputSchema"]["required"], json!(["order_id"]));
    assert_eq!(
        (
            &pay["annotations"]["readOnlyHint"],
            &pay["annotations"]["idempotentHint"]
        ),
        (&json!(false), &json!(true))
    );
    // The registry's schema as written.
    let note = tool("note");
    assert_eq!(note["inputSchema"]["required"], json!(["text"]), "{note}");
    assert_eq!(note["annotations"]["idempotentHint"], json!(false));
    let lookup = tool("lookup");
    assert_eq!(
        lookup["annotations"]["readOnlyHint"],
        json!(true),
        "{lookup}"
    );

    // A call threads the key into the argument and _meta; the model's own value for the
    // key argument never reaches the tool.
    let mut params = CallToolRequestParams::new("pay");
    params.arguments = Some(
        json!({"order_id": "I-1", "idempotency_key": "from-the-model"})
            .as_object()
            .unwrap()
            .clone(),
    );
    let CallToolResponse::Complete(result) = client.call_tool_once(params).await.unwrap() else {
        panic!("not a complete result")
    };
    let outcome = result.meta.as_ref().unwrap()["dev.oncegate/outcome"].clone();
    assert_eq!(outcome["status"], "applied", "{outcome}");
    let seen = provider.keys.lock().unwrap().clone();
    let key = outcome["intentKey"].as_str().unwrap();
    assert_eq!(seen.last().unwrap()["arg"], Value::from(key), "{seen:?}");
    assert_eq!(seen.last().unwrap()["meta"], Value::from(key), "{seen:?}");
    client.cancel().await.unwrap();
}

/// Whether a model line tells the model not to call again.
fn line_forbids_repeat(line: &str) -> bool {
    let line = line.to_lowercase();
    line.contains("do not call again") || line.contains("do not retry")
}

#[tokio::test]
async fn every_answer_carries_the_outcome_in_structured_content_as_declared() {
    install_crypto();
    let (upstream, _provider) = provider().await;
    let dir = tempfile::tempdir().unwrap();
    let url = gateway(&upstream, dir.path()).await;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    config.auth_header = Some("tok".into());
    let transport = StreamableHttpClientTransport::with_client(http_client(), config);
    let client = ClientConfig::default()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();

    // Every tool declares the field, and allows the upstream's own beside it.
    for tool in client.list_all_tools().await.unwrap() {
        let schema = serde_json::to_value(tool.output_schema.as_deref()).unwrap();
        assert_eq!(schema["type"], "object", "{}: {schema}", tool.name);
        assert_eq!(schema["required"], json!(["oncegate"]), "{schema}");
        assert_eq!(schema["additionalProperties"], json!(true), "{schema}");
        assert_eq!(
            schema["properties"]["oncegate"]["required"],
            json!(["status", "message", "do_not_call_again"]),
            "{schema}"
        );
    }

    let call = |name: &str, arguments: Value| {
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = Some(arguments.as_object().unwrap().clone());
        let client = &client;
        async move {
            let CallToolResponse::Complete(result) = client.call_tool_once(params).await.unwrap()
            else {
                panic!("not a complete result")
            };
            serde_json::to_value(result).unwrap()
        }
    };
    let first = call("pay", json!({"order_id": "S-1"})).await;
    let again = call("pay", json!({"order_id": "S-1"})).await;
    // Refused before deciding: the key's argument is missing.
    let refused = call("note", json!({})).await;
    for (result, status, forbids) in [
        (&first, "applied", false),
        (&again, "replayed", true),
        (&refused, "refused", false),
    ] {
        let og = &result["structuredContent"]["oncegate"];
        let line = result["content"][0]["text"].as_str().unwrap();
        assert_eq!(og["status"], status, "{result}");
        assert_eq!(
            og["message"], line,
            "the model line, for structured readers: {result}"
        );
        assert_eq!(og["do_not_call_again"], forbids, "{result}");
        assert_eq!(line_forbids_repeat(line), forbids, "{line}");
        assert_eq!(
            og["intent_key"], result["_meta"]["dev.oncegate/outcome"]["intentKey"],
            "{result}"
        );
    }
    // The upstream's own structured answer keeps its fields, the replay included.
    assert_eq!(first["structuredContent"]["id"], "fx_1", "{first}");
    assert_eq!(again["structuredContent"]["id"], "fx_1", "{again}");
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(refused["structuredContent"]["oncegate"]["intent_key"].is_null());
    client.cancel().await.unwrap();
}

/// The merge rules of `structuredContent`, and its `oncegate` field agreeing with the model
/// line, for every status and shape of upstream answer (not only those a live call
/// reaches easily).
#[test]
fn every_outcome_says_in_structured_content_what_its_line_says() {
    use oncegate_core::codes::Code;
    use oncegate_core::intent::{IntentState, Outcome, Reason, Status};
    use oncegate_core::key::IntentKey;
    use oncegate_gateway::mcp::surface::tool_result;

    let dir = tempfile::tempdir().unwrap();
    let registry = registry_in(
        dir.path(),
        r#"
[store]
url = "sqlite://gw.db"

[[capabilities]]
name = "note"
category = "non_idempotent"
key = { business_ref = "text" }

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:9/notes"
idempotency = "argument"
idempotency_arg = "key"
"#,
    );
    let cap = registry.capability("note").unwrap();
    let statuses = [
        (Status::Applied, None, true),
        (Status::Replayed, Some(IntentState::Applied), true),
        (Status::Replayed, Some(IntentState::Failed), false),
        (Status::InFlight, None, false),
        (Status::Unknown, None, false),
        (Status::PendingApproval, None, false),
        (Status::Denied, None, false),
        (Status::DryRun, None, true),
        (Status::Failed, None, false),
    ];
    let codes = [
        Code::InvalidArguments,
        Code::RateLimited,
        Code::ApprovalQueueFull,
        Code::AttemptCeiling,
    ];
    let refusals = codes.map(|c| (Status::Refused, None, false, Some(c)));
    let answers = [
        (None, json!(null)),
        (Some(json!({"id": "n_1"})), json!({"id": "n_1"})),
        // An upstream field of the same name is never overwritten: the value moves whole.
        (
            Some(json!({"id": "n_1", "oncegate": 7})),
            json!({"result": {"id": "n_1", "oncegate": 7}}),
        ),
        (Some(json!(["a", "b"])), json!({"result": ["a", "b"]})),
        (Some(json!("done")), json!({"result": "done"})),
    ];
    let cases = statuses
        .into_iter()
        .map(|(s, st, ok)| (s, st, ok, Some(Code::Contention)))
        .chain(refusals);
    for (status, state, success, code) in cases {
        for (answer, expected) in &answers {
            let outcome = Outcome {
                status,
                key: Some(IntentKey::from_hex("ab12")),
                generation: 1,
                attempt: 1,
                state,
                effect_ref: Some("n_1".into()),
                result: answer.clone(),
                approval_id: (status == Status::PendingApproval).then(|| "ap_1".to_owned()),
                reason: code.map(|code| Reason {
                    code,
                    message: "why".into(),
                }),
                alerts: Vec::new(),
            };
            let result = serde_json::to_value(tool_result(&outcome, cap)).unwrap();
            let structured = &result["structuredContent"];
            let og = &structured["oncegate"];
            let line = result["content"][0]["text"].as_str().unwrap();
            let case = format!("{status:?} {state:?} {code:?} {answer:?}: {result}");
            assert_eq!(og["message"], line, "{case}");
            assert_eq!(og["status"], json!(status.as_str()), "{case}");
            assert_eq!(og["do_not_call_again"], line_forbids_repeat(line), "{case}");
            assert_eq!(og["intent_key"], "ab12", "{case}");
            assert_eq!(
                og.get("approval_id").is_some(),
                status == Status::PendingApproval,
                "{case}"
            );
            assert_eq!(result["isError"], json!(!success), "{case}");
            // The upstream's value: shown when the call succeeded or the provider refused it.
            let shown = success || matches!(status, Status::Failed | Status::Replayed);
            let mut rest = structured.as_object().unwrap().clone();
            rest.remove("oncegate");
            let want = if shown && answer.is_some() {
                expected.clone()
            } else {
                json!({})
            };
            assert_eq!(Value::Object(rest), want, "{case}");
        }
    }
}
