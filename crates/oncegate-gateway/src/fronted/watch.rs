//! Keeping fronted MCP servers' tool lists current: each `[[mcp_servers]]` entry is read
//! at startup, again whenever the server says its list changed (a watching connection:
//! `subscriptions/listen` at 2026-07-28, the session's notifications at 2025-11-25),
//! and at the latest every `refresh`. Each read is classified ([`super::classify`]),
//! checked against the pinned definitions (a changed tool is held: not handed on), and
//! handed to the engine, which then knows the undeclared tools' capabilities. While a
//! server has a held tool its list is read every few seconds, so an acceptance made
//! through another replica is honoured here soon; and every few seconds the store is
//! asked whether another replica saw a change this one still offers, so a change of a
//! server that announces nothing is held everywhere soon too.

use std::sync::Arc;
use std::time::Duration;

use oncegate_core::config::McpServer;
use tokio::sync::Notify;

use oncegate_core::config::Capability;
use oncegate_engine::{PinCheck, ToolDefinition};
use rmcp::model::Tool;

use super::classify::{FrontedTool, Verdict, classify, definition};
use crate::state::AppState;
use crate::upstream::{mcp, server_request};

/// How long a watching connection that failed waits before it connects again.
const WATCH_RETRY: Duration = Duration::from_secs(5);

/// How soon a list that could not be read is read again.
const READ_RETRY: Duration = Duration::from_secs(5);

/// Keeps every fronted server's list current. Runs until the process ends.
pub async fn front_servers(state: AppState) {
    let servers = state.gate().registry().mcp_servers.clone();
    let tasks: Vec<_> = servers
        .into_iter()
        .map(|server| tokio::spawn(keep_current(state.clone(), server)))
        .collect();
    for task in tasks {
        let _ = task.await;
    }
}

/// Reads every fronted server's list once, side by side (each within its `timeout`), so
/// that a gateway that says it is listening lists their tools from its first request.
/// A server that cannot be read is left to [`front_servers`], which retries it.
pub async fn read_all(state: &AppState) {
    let servers = state.gate().registry().mcp_servers.clone();
    futures::future::join_all(servers.iter().map(|server| read(state, server))).await;
}

async fn keep_current(state: AppState, server: McpServer) {
    let changed = Arc::new(Notify::new());
    let watcher = tokio::spawn(watch(state.clone(), server.clone(), changed.clone()));
    let refresh = server.refresh.unsigned_abs();
    // A list [`read_all`] read before serving is current: the first re-read waits.
    let mut read_already = state.fronted().tools(&server.alias);
    loop {
        let outcome = if let Some(tools) = read_already.take() {
            Ok(tools)
        } else {
            read(&state, &server).await
        };
        // A held tool waits for an admin, who may accept through another replica.
        let held = |tools: &[FrontedTool]| {
            tools
                .iter()
                .any(|t| matches!(t.verdict, Verdict::Changed(_)))
        };
        let wait = match outcome {
            Ok(tools) if !held(&tools) => refresh,
            _ => READ_RETRY.min(refresh),
        };
        let next_read = tokio::time::Instant::now() + wait;
        // Until then, the store is asked every few seconds whether another replica saw
        // a change this one has not (a server that announces nothing): then read now.
        loop {
            let nap =
                PIN_POLL.min(next_read.saturating_duration_since(tokio::time::Instant::now()));
            tokio::select! {
                () = changed.notified() => break,
                () = tokio::time::sleep(nap) => {}
                () = state.mcp_shutdown().cancelled() => {
                    watcher.abort();
                    return;
                }
            }
            if tokio::time::Instant::now() >= next_read || changed_elsewhere(&state, &server).await
            {
                break;
            }
        }
    }
}

/// How often a replica asks the store whether another one saw a tool change.
const PIN_POLL: Duration = Duration::from_secs(5);

/// Whether the store holds a change of one of `server`'s tools that this replica still
/// offers (another replica read it first; its pin is pending). A store that cannot be
/// read says no: the next scheduled read checks the pins anyway.
async fn changed_elsewhere(state: &AppState, server: &McpServer) -> bool {
    let Ok(pins) = state.gate().tool_pins().await else {
        return false;
    };
    let offered = state.fronted().tools(&server.alias).unwrap_or_default();
    pins.iter()
        .filter(|p| p.server == server.alias && p.pending.is_some())
        .any(|p| {
            offered
                .iter()
                .any(|t| t.tool.as_str() == p.tool && !matches!(t.verdict, Verdict::Changed(_)))
        })
}

/// Holds a watching connection to `server`, reconnecting when it ends; a connection
/// that was watching and ended wakes a re-read, since a change may have gone unheard
/// while it was down. A server that cannot be watched is tried again less and less
/// often (up to its `refresh`), and its list is kept current by the schedule alone.
async fn watch(state: AppState, server: McpServer, changed: Arc<Notify>) {
    let longest = server.refresh.unsigned_abs().max(WATCH_RETRY);
    let mut backoff = WATCH_RETRY;
    loop {
        let ended = match server_request(&server) {
            Ok(request) => mcp::watch_tools(state.http(), &request, changed.clone()).await,
            Err(e) => Err(e),
        };
        match ended {
            Ok(()) => {
                tracing::debug!(server = %server.alias, "the watching connection ended");
                backoff = WATCH_RETRY;
                tokio::time::sleep(WATCH_RETRY).await;
                changed.notify_one();
            }
            Err(e) => {
                tracing::debug!(server = %server.alias, error = %e, "cannot watch the tool list; refreshing on schedule");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(longest);
            }
        }
    }
}

/// Reads `server`'s tool list once, classifies it and hands it to the engine.
pub async fn read(state: &AppState, server: &McpServer) -> Result<Vec<FrontedTool>, String> {
    let listed = match server_request(server) {
        Ok(request) => mcp::list_tools(state.http(), &request).await,
        Err(e) => Err(e),
    };
    match listed {
        Ok(tools) => {
            let (mut classified, caps) = classify(state.gate().registry(), server, &tools);
            let caps = match hold_changed(state, server, &tools, &mut classified, caps).await {
                Ok(caps) => caps,
                Err(e) => {
                    // Unchecked definitions are not offered: the last checked list stays.
                    let e = format!("cannot check the tools' pinned definitions: {e}");
                    tracing::warn!(server = %server.alias, error = %e, "cannot read the tool list");
                    state.fronted().failed(&server.alias, e.clone());
                    return Err(e);
                }
            };
            state.gate().set_fronted(&server.alias, caps);
            if state.fronted().set(&server.alias, classified.clone()) {
                // Said once per change of the list, not on every refresh.
                for t in &classified {
                    if let Verdict::Skipped(why) = &t.verdict {
                        tracing::warn!(server = %server.alias, tool = %t.tool, "fronted tool not offered: {why}");
                    }
                }
            }
            tracing::debug!(server = %server.alias, tools = classified.len(), "read the tool list");
            Ok(classified)
        }
        Err(e) => {
            tracing::warn!(server = %server.alias, error = %e, "cannot read the tool list");
            state.fronted().failed(&server.alias, e.clone());
            Err(e)
        }
    }
}

/// Checks the undeclared tools `server` lists against their pins: each changed one is
/// held (its verdict says why, its capability is not handed on). Refused tools are
/// pinned too: one that turns "read-only" later (a flipped `readOnlyHint`) would
/// otherwise be pinned at that moment and offered as a pass-through read at once.
/// Every checked tool's verdict records its pin.
async fn hold_changed(
    state: &AppState,
    server: &McpServer,
    tools: &[Tool],
    classified: &mut [FrontedTool],
    caps: Vec<Arc<Capability>>,
) -> Result<Vec<Arc<Capability>>, oncegate_store::StoreError> {
    let (offered, definitions): (Vec<usize>, Vec<ToolDefinition>) = classified
        .iter()
        .enumerate()
        .filter(|(_, t)| {
            matches!(
                t.verdict,
                Verdict::Read | Verdict::RequireApproval | Verdict::Refused(_)
            )
        })
        .filter_map(|(i, t)| {
            let listed = tools.iter().find(|l| l.name == t.tool.as_str())?;
            Some((
                i,
                ToolDefinition {
                    tool: t.tool.clone(),
                    name: t.name.clone(),
                    definition: definition(listed),
                },
            ))
        })
        .unzip();
    let checks = state.gate().check_pins(&server.alias, &definitions).await?;
    let mut held = Vec::new();
    for (&i, check) in offered.iter().zip(checks) {
        let t = &mut classified[i];
        if let PinCheck::Changed { pinned, offered } = &check {
            t.verdict = Verdict::Changed(format!(
                "MCP server `{}` changed this tool's definition since oncegate pinned it ({pinned}; it offers {offered} now): held until an admin accepts it (`oncegate tools accept {} {} {offered}`)",
                server.alias, server.alias, t.tool
            ));
            held.push(t.name.clone());
        }
        t.pin = Some(check);
    }
    Ok(caps
        .into_iter()
        .filter(|c| !held.contains(&c.name))
        .collect())
}
