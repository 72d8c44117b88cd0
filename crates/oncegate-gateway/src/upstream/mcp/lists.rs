//! Reads of an MCP server's own lists, each on a connection of its own: its tools (and
//! one tool's input schema), a watch on its tool list, and one-off reads (resources,
//! prompts) for the fronted servers' relays. None of these sends an effect.

use std::sync::Arc;

use rmcp::model::{JsonObject, ProtocolVersion, Tool};
use rmcp::service::{Peer, RoleClient, ServiceError};

use super::{ProgressRoutes, Relay, ToolCall, connect, connect_as, error_chain};

/// The input schema of one tool on an MCP server (from its `tools/list`).
pub async fn tool_schema(client: reqwest::Client, call: ToolCall) -> Result<JsonObject, String> {
    list_tools(client, &call)
        .await?
        .into_iter()
        .find(|t| t.name == call.tool)
        .map(|t| (*t.input_schema).clone())
        .ok_or_else(|| format!("the upstream has no tool `{}`", call.tool))
}

/// Every tool an MCP server lists (all pages), within `call.timeout`.
pub async fn list_tools(client: reqwest::Client, call: &ToolCall) -> Result<Vec<Tool>, String> {
    with_peer(client, call, async |peer| peer.list_all_tools().await)
        .await
        .map_err(|e| e.message.to_string())
}

/// Asks the server `call` names one thing on a connection of its own, within the
/// call's timeout: a read (tools, resources, prompts). The server's own JSON-RPC error
/// comes back as it was; any other failure as an internal error saying what failed.
pub async fn with_peer<T>(
    client: reqwest::Client,
    call: &ToolCall,
    ask: impl AsyncFnOnce(&Peer<RoleClient>) -> Result<T, ServiceError>,
) -> Result<T, rmcp::model::ErrorData> {
    use rmcp::model::ErrorData;
    let fetch = async {
        let peer = connect(client, call, &ProgressRoutes::default())
            .await
            .map_err(|e| {
                ErrorData::internal_error(format!("cannot reach the upstream: {e}"), None)
            })?;
        let answer = ask(peer.peer()).await.map_err(|e| match e {
            ServiceError::McpError(e) => e,
            e => {
                ErrorData::internal_error(format!("the upstream failed: {}", error_chain(&e)), None)
            }
        });
        let _ = peer.cancel().await;
        answer
    };
    tokio::time::timeout(call.timeout, fetch)
        .await
        .map_err(|_| {
            ErrorData::internal_error("the upstream did not answer before the timeout", None)
        })
        .and_then(|answer| answer)
        .map_err(|mut e| {
            // rmcp's errors print the URL it failed on (and the server's own may echo
            // a credential): what reaches an agent or the log shows neither.
            e.message = call.secrets.text(&e.message).into();
            e
        })
}

/// Holds a connection to an MCP server open and wakes `changed` each time the server
/// says its tool list changed: a `subscriptions/listen` stream at 2026-07-28, the
/// session's own notifications at 2025-11-25. Returns when the connection ends (or the
/// server cannot be subscribed to); the caller reconnects, and re-reads the list, since
/// a change may have gone unheard meanwhile.
pub async fn watch_tools(
    client: reqwest::Client,
    call: &ToolCall,
    changed: Arc<tokio::sync::Notify>,
) -> Result<(), String> {
    watch(client, call, changed)
        .await
        .map_err(|e| call.secrets.text(&e))
}

async fn watch(
    client: reqwest::Client,
    call: &ToolCall,
    changed: Arc<tokio::sync::Notify>,
) -> Result<(), String> {
    let mut relay = Relay::new(&ProgressRoutes::default());
    relay.tools_changed = Some(changed.clone());
    let peer = tokio::time::timeout(call.timeout, connect_as(client, call, relay))
        .await
        .map_err(|_| "the upstream did not answer before the timeout".to_owned())??;
    let stateless = peer
        .peer_info()
        .is_some_and(|info| info.protocol_version == ProtocolVersion::V_2026_07_28);
    if !stateless {
        // Notifications arrive on the session's stream and wake `changed` (Relay).
        let _ = peer.waiting().await;
        return Ok(());
    }
    let filter = rmcp::model::SubscriptionFilter::builder()
        .tools_list_changed()
        .build();
    let mut subscription = peer.listen(filter).await.map_err(|e| error_chain(&e))?;
    if subscription.acknowledged().tools_list_changed != Some(true) {
        let _ = peer.cancel().await;
        return Err("the upstream does not send tools/list_changed".into());
    }
    loop {
        match subscription.next().await {
            Ok(Some(rmcp::model::ServerNotification::ToolListChangedNotification(_))) => {
                changed.notify_one();
            }
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                // It was watching: the caller re-reads, as a change may have gone unheard.
                tracing::debug!(error = %call.secrets.text(&error_chain(&e)), "the tool-list subscription ended");
                break;
            }
        }
    }
    let _ = peer.cancel().await;
    Ok(())
}
