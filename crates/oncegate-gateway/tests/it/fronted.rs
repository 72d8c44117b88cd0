//! A whole MCP server fronted under an alias (`[[mcp_servers]]`), through the real
//! gateway (`serve`, with its background list reader) on a real socket, in front of the
//! sandbox's MCP surface: the tools agents see, what each undeclared policy does, a
//! declared capability that adds the key recipe, an approval that runs once, and a
//! tool list that changes while the gateway runs.

use std::path::Path;
use std::time::{Duration, Instant};

use oncegate_core::config::is_tool_name;
use oncegate_gateway::server::http_client;
use rmcp::model::ProtocolVersion;
use rmcp::model::{CallToolResult, ClientConfig};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};

use crate::support::{mcp_call, mcp_client_as, open_state, start_sandbox};

type Client = rmcp::service::RunningService<rmcp::service::RoleClient, ClientConfig>;

fn config(sandbox: &str) -> String {
    format!(
        r#"
[store]
url = "sqlite://gw.db"

[[principals]]
name = "agent"
role = "agent"
token_env = "UNUSED_TOKEN_AGENT"

[[principals]]
name = "ali"
role = "approver"
token_env = "UNUSED_TOKEN_ALI"

# Reads pass through; the charge is declared below; other writes are refused.
[[mcp_servers]]
alias = "pay"
url = "{sandbox}/mcp"
undeclared = "read"
refresh = "1h"

# Every undeclared tool waits for an approver.
[[mcp_servers]]
alias = "held"
url = "{sandbox}/mcp"
undeclared = "require_approval"
refresh = "1h"

# The default: nothing undeclared.
[[mcp_servers]]
alias = "shut"
url = "{sandbox}/mcp"
refresh = "1h"

[[capabilities]]
name = "charge"
category = "keyed"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "mcp"
server = "pay"
tool = "create_charge"
effect_ref = "/id"
body = {{ order_id = "{{business_ref}}", amount_minor = 1250, currency = "USD" }}
"#
    )
}

/// The gateway as `oncegate serve` runs it (the list reader included).
async fn gateway(dir: &Path, text: &str) -> String {
    let state = open_state(dir, text, &[("agent", "tok"), ("ali", "ali")]).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(oncegate_gateway::serve::serve(
        listener,
        state,
        Duration::from_secs(1),
        std::future::pending(),
    ));
    url
}

async fn agent(gw: &str, era: ClientLifecycleMode) -> Client {
    mcp_client_as(gw, ClientConfig::default(), era).await
}

/// An agent's client that is woken when the gateway says its tool list changed.
#[derive(Clone, Default)]
struct Told(std::sync::Arc<tokio::sync::Notify>);

impl rmcp::ClientHandler for Told {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }

    async fn on_tool_list_changed(
        &self,
        _: rmcp::service::NotificationContext<rmcp::service::RoleClient>,
    ) {
        self.0.notify_one();
    }
}

fn modern() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

async fn names(client: &Client) -> Vec<String> {
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    names
}

/// Waits until the agent's tool list satisfies `ok` (the gateway reads the servers'
/// lists in the background).
async fn until_listed(client: &Client, ok: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = names(client).await;
        if ok(&listed) {
            return listed;
        }
        assert!(
            Instant::now() < deadline,
            "never listed as expected: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    try_call(client, tool, arguments).await.unwrap()
}

async fn try_call(
    client: &Client,
    tool: &str,
    arguments: Value,
) -> Result<CallToolResult, rmcp::service::ServiceError> {
    mcp_call(client, tool, arguments, Value::Null).await
}

fn outcome(r: &CallToolResult) -> Value {
    r.meta
        .as_ref()
        .and_then(|m| m.get("dev.oncegate/outcome"))
        .cloned()
        .unwrap_or(Value::Null)
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn effects(sandbox: &str, kind: &str) -> Vec<Value> {
    crate::support::effects(sandbox)
        .await
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fronted_server_is_listed_under_its_alias_and_each_tool_follows_its_policy() {
    let sandbox = start_sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &config(&sandbox)).await;
    let client = agent(&gw, modern()).await;
    let listed = until_listed(&client, |l| {
        l.iter().any(|n| n == "pay_find_charge") && l.iter().any(|n| n == "held_create_refund")
    })
    .await;

    // Every name is a valid MCP tool name; the declared tool is listed under the
    // registry's name only; reads of `pay`; everything of `held`; nothing of `shut`.
    assert!(listed.iter().all(|n| is_tool_name(n)), "{listed:?}");
    for expected in [
        "charge",
        "pay_find_charge",
        "pay_get_order",
        "pay_list_effects",
        "held_create_refund",
        "held_create_charge",
        "held_find_charge",
    ] {
        assert!(
            listed.iter().any(|n| n == expected),
            "{expected} in {listed:?}"
        );
    }
    for absent in ["pay_create_charge", "pay_create_refund", "pay_send_email"] {
        assert!(
            !listed.iter().any(|n| n == absent),
            "{absent} in {listed:?}"
        );
    }
    assert!(!listed.iter().any(|n| n.starts_with("shut_")), "{listed:?}");

    // The declared capability adds the key recipe: a drifted re-plan is one charge.
    let first = call(
        &client,
        "charge",
        json!({"order_id": "F-1", "memo": "first"}),
    )
    .await;
    assert_eq!(outcome(&first)["state"], "applied", "{first:?}");
    let again = call(
        &client,
        "charge",
        json!({"order_id": "F-1", "memo": "re-plan"}),
    )
    .await;
    assert_eq!(outcome(&again)["status"], "replayed", "{again:?}");
    assert_eq!(effects(&sandbox, "charge").await.len(), 1);

    // A read passes through to the upstream tool, with the upstream's answer.
    let found = call(&client, "pay_find_charge", json!({"order_id": "F-1"})).await;
    assert_eq!(outcome(&found)["status"], "applied", "{found:?}");
    assert!(text(&found).contains("\"found\":true"), "{}", text(&found));

    // A write that is not read-only, and every tool of a `refuse` server: refused, with
    // the reason, and nothing reaches the upstream.
    for (tool, why) in [
        ("pay_create_refund", "annotations say read-only"),
        ("shut_create_refund", "undeclared = \"refuse\""),
    ] {
        let refused = call(
            &client,
            tool,
            json!({"order_id": "F-1", "amount_minor": 100, "currency": "USD"}),
        )
        .await;
        assert_eq!(refused.is_error, Some(true), "{tool}: {refused:?}");
        assert!(text(&refused).contains(why), "{tool}: {}", text(&refused));
    }
    assert!(effects(&sandbox, "refund").await.is_empty());

    // require_approval: held; approved, it runs once; the same call again replays; the
    // same tool with other arguments is another intent, held again.
    let refund = json!({"order_id": "F-1", "amount_minor": 500, "currency": "USD"});
    let held = call(&client, "held_create_refund", refund.clone()).await;
    assert_eq!(outcome(&held)["status"], "pending_approval", "{held:?}");
    assert!(effects(&sandbox, "refund").await.is_empty());
    let approval = outcome(&held)["approvalId"]
        .as_str()
        .unwrap_or_else(|| panic!("{held:?}"))
        .to_owned();
    let http = reqwest::Client::new();
    let approve = async || -> Value {
        http.post(format!("{gw}/v1/approvals/{approval}/approve"))
            .bearer_auth("ali")
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    };
    let decided = approve().await;
    assert_eq!(decided["status"], "applied", "{decided}");
    // A second click answers the first decision.
    let twice = approve().await;
    assert_eq!(twice["status"], "replayed", "{twice}");
    let replay = call(&client, "held_create_refund", refund.clone()).await;
    assert_eq!(outcome(&replay)["status"], "replayed", "{replay:?}");
    let other = call(
        &client,
        "held_create_refund",
        json!({"order_id": "F-1", "amount_minor": 501, "currency": "USD"}),
    )
    .await;
    assert_eq!(outcome(&other)["status"], "pending_approval", "{other:?}");
    assert_eq!(effects(&sandbox, "refund").await.len(), 1);

    // The same names over the 2025-11-25 era.
    let legacy = agent(&gw, ClientLifecycleMode::Initialize).await;
    assert_eq!(names(&legacy).await, listed);
    legacy.cancel().await.unwrap();
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fronted_servers_changed_tool_list_reaches_agents_without_waiting_for_the_refresh() {
    let sandbox = start_sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), &config(&sandbox)).await;
    let client = agent(&gw, modern()).await;
    // Both servers' lists read (each is read on its own: one may lag on a busy machine).
    until_listed(&client, |l| {
        l.iter().any(|n| n == "pay_find_email") && l.iter().any(|n| n == "held_create_refund")
    })
    .await;
    // Agents are told in turn: a 2026 subscription and a 2025 session's stream.
    let mut subscription = client
        .listen(
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build(),
        )
        .await
        .unwrap();
    assert_eq!(
        subscription.acknowledged().tools_list_changed,
        Some(true),
        "the gateway offers list_changed to agents"
    );
    let told = Told::default();
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("{gw}/mcp"));
    config.auth_header = Some("tok".into());
    let legacy = told
        .clone()
        .serve_with_lifecycle(
            StreamableHttpClientTransport::with_client(http_client(), config),
            ClientLifecycleMode::Initialize,
        )
        .await
        .unwrap();

    let hide = |tools: Value| {
        let sandbox = sandbox.clone();
        async move {
            let r = reqwest::Client::new()
                .put(format!("{sandbox}/_sandbox/mcp/hidden"))
                .json(&json!({ "tools": tools }))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
        }
    };
    // A call held for approval when its tool leaves the list can still be denied.
    let refund = json!({"order_id": "F-9", "amount_minor": 500, "currency": "USD"});
    let held = call(&client, "held_create_refund", refund).await;
    assert_eq!(outcome(&held)["status"], "pending_approval", "{held:?}");
    let approval = outcome(&held)["approvalId"].as_str().unwrap().to_owned();

    // The refresh is an hour: only the server's list_changed can make this prompt.
    hide(json!(["find_email", "create_refund"])).await;
    until_listed(&client, |l| {
        !l.iter().any(|n| n == "pay_find_email") && l.iter().any(|n| n == "pay_find_charge")
    })
    .await;
    let heard = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(rmcp::model::ServerNotification::ToolListChangedNotification(_)) =
                subscription.next().await.unwrap()
            {
                break;
            }
        }
    })
    .await;
    assert!(heard.is_ok(), "the 2026 subscription heard no list change");
    tokio::time::timeout(Duration::from_secs(10), told.0.notified())
        .await
        .expect("the 2025 session heard no list change");
    legacy.cancel().await.unwrap();
    let decide = async |choice: &str| {
        reqwest::Client::new()
            .post(format!("{gw}/v1/approvals/{approval}/{choice}"))
            .bearer_auth("ali")
            .json(&json!({}))
            .send()
            .await
            .unwrap()
    };
    // Approving would run a tool the server no longer offers: refused, nothing runs.
    let approved = decide("approve").await;
    assert!(approved.status().is_client_error(), "{approved:?}");
    let denied = decide("deny").await;
    let denied: Value = denied.json().await.unwrap();
    assert_eq!(denied["state"], "denied", "{denied}");
    assert!(effects(&sandbox, "refund").await.is_empty());
    // No longer listed upstream: an unknown tool (a JSON-RPC error, as MCP asks).
    let gone = try_call(&client, "pay_find_email", json!({"order_id": "F-1"})).await;
    assert!(
        format!("{gone:?}").contains("unknown tool `pay_find_email`"),
        "{gone:?}"
    );

    hide(json!([])).await;
    until_listed(&client, |l| l.iter().any(|n| n == "pay_find_email")).await;
    let back = call(&client, "pay_find_email", json!({"order_id": "F-1"})).await;
    assert_eq!(outcome(&back)["status"], "applied", "{back:?}");
    client.cancel().await.unwrap();
}
