//! The harness every gateway test file shares: a gateway on a real socket (its registry
//! written to a temporary directory, its store beside it, static tokens), the sandbox
//! provider, an agent's MCP client of `/mcp`, and what the sandbox recorded. Test files
//! start their processes here instead of copying the start-up.

use std::path::Path;

use oncegate_gateway::server::{AppState, app, http_client, install_crypto};
use oncegate_sandbox::{self as sandbox, SandboxConfig};
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, RequestMetaObject};
use rmcp::service::ServiceError;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt};
use serde_json::Value;

/// Loads the registry `text` from `dir` (its store, if any, lives there too).
pub(crate) fn registry_in(dir: &Path, text: &str) -> oncegate_core::Registry {
    std::fs::write(dir.join("c.toml"), text).unwrap();
    oncegate_engine::config::load_registry(&dir.join("c.toml")).unwrap()
}

/// The state of a gateway over the registry `text` (written to `dir`, its store created
/// there if missing), whose principals log in with `tokens` (principal, token).
pub(crate) async fn open_state(dir: &Path, text: &str, tokens: &[(&str, &str)]) -> AppState {
    install_crypto();
    let registry = registry_in(dir, text);
    let gate =
        oncegate_engine::Gate::open_with(registry, oncegate_store::OpenMode::CreateIfMissing)
            .await
            .unwrap();
    let tokens = tokens
        .iter()
        .map(|(name, token)| ((*name).to_owned(), (*token).to_owned()))
        .collect();
    AppState::with_tokens(gate, http_client(), tokens)
}

/// Serves `state`'s router on a fresh local socket: its base URL.
pub(crate) async fn serve_app(state: AppState) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app(state)).await.unwrap() });
    url
}

/// A gateway over the registry `text` in `dir`, on a fresh local socket: its base URL.
pub(crate) async fn start_gateway(dir: &Path, text: &str, tokens: &[(&str, &str)]) -> String {
    serve_app(open_state(dir, text, tokens).await).await
}

/// The sandbox provider with its default behaviour, on a fresh local socket.
pub(crate) async fn start_sandbox() -> String {
    start_sandbox_with(SandboxConfig::default()).await
}

/// The sandbox provider configured by `config`, on a fresh local socket.
pub(crate) async fn start_sandbox_with(config: SandboxConfig) -> String {
    install_crypto();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sandbox::serve(listener, config));
    base
}

/// The effects the sandbox at `sandbox` recorded, oldest first.
pub(crate) async fn effects(sandbox: &str) -> Vec<Value> {
    let body: Value = reqwest::Client::new()
        .get(format!("{sandbox}/v1/effects"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap_or(Value::Null);
    body["effects"].as_array().unwrap().clone()
}

/// An agent's MCP client of the gateway's `/mcp` (token `tok`), handled by `handler`,
/// in `era`.
pub(crate) async fn mcp_client_as<H: ClientHandler>(
    gw: &str,
    handler: H,
    era: ClientLifecycleMode,
) -> rmcp::service::RunningService<rmcp::service::RoleClient, H> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("{gw}/mcp"));
    config.auth_header = Some("tok".into());
    let transport = StreamableHttpClientTransport::with_client(http_client(), config);
    handler.serve_with_lifecycle(transport, era).await.unwrap()
}

/// One `tools/call` of `tool` with `arguments` and `_meta` `meta`, answered whole.
pub(crate) async fn mcp_call<H: ClientHandler>(
    client: &rmcp::service::RunningService<rmcp::service::RoleClient, H>,
    tool: &str,
    arguments: Value,
    meta: Value,
) -> Result<CallToolResult, ServiceError> {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = Some(arguments.as_object().unwrap().clone());
    if let Value::Object(m) = meta {
        params.meta = Some(RequestMetaObject::from(m));
    }
    match client.call_tool_once(params).await? {
        CallToolResponse::Complete(r) => Ok(r),
        _ => panic!("not a complete result"),
    }
}
