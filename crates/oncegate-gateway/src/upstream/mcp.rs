//! MCP upstreams: a capability whose effect is a tool on an MCP server (Streamable HTTP).
//!
//! Each call connects with rmcp (the 2026-07-28 stateless era first, 2025-11-25 with a
//! session as the fallback), sends one `tools/call` with the intent key in
//! `_meta["dev.oncegate/idempotency_key"]` (and in the tool's own key argument where the
//! registry names one), and classifies the answer:
//!
//! - a failure to connect or to discover the server: nothing of the call left, `not_sent`;
//! - a result: `applied`, or `failed` when the tool reports `isError` (definite);
//! - a JSON-RPC error that rejects the request itself (parse, invalid request, unknown
//!   method or tool, invalid params): `failed`; any other error, a lost connection or the
//!   timeout: `unknown`, because the tool may have run.
//!
//! A gateway keeps one connected client per upstream (URL and headers) in [`Sessions`]
//! and sends every call through it, concurrently: connecting and discovering per call
//! cost more than the call. A client whose call failed below the protocol (the
//! connection, the session) is dropped from the pool, so the next call connects anew;
//! each call is still its own JSON-RPC request, never shared between two attempts.
//!
//! The `tools/call` runs in its own task: rmcp cancels the upstream request when its
//! future is dropped, and an effect must never be cancelled half-way, so on a timeout the
//! gateway stops waiting but leaves the request to finish. While it runs it is listed in
//! [`RunningCalls`] (a reconciliation's "not found" proves nothing meanwhile), and its
//! late answer is handed back to be recorded like any other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientConfig, ErrorCode, JsonObject,
    ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt};

use super::client::reqwest_error_text;
use crate::inflight::InFlight;
pub use crate::tool_result::{all_text, as_tool_result, first_text, record_of, structured};

/// The `_meta` key an MCP upstream finds the intent key under.
pub const IDEMPOTENCY_META_KEY: &str = "dev.oncegate/idempotency_key";

/// How long a timed-out `tools/call` is left running before it is given up.
pub const LATE_ANSWER_LIMIT: Duration =
    Duration::from_secs(oncegate_core::config::MCP_LATE_ANSWER_LIMIT_SECS);

/// The `tools/call`s of effects that are still running in this process, by the key
/// threaded upstream. Shared by every executor of a gateway, so a repeat or the sweep
/// (with executors of their own) sees a call another request left running.
#[derive(Clone, Default)]
pub struct RunningCalls(Arc<Mutex<HashMap<String, usize>>>);

impl RunningCalls {
    /// Lists a call under `key` until the guard drops (when the call has ended).
    pub fn enter(&self, key: &str) -> RunningGuard {
        *self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.to_owned())
            .or_default() += 1;
        RunningGuard {
            calls: self.clone(),
            key: key.to_owned(),
        }
    }

    /// Whether a call under `key` is still running.
    pub fn is_running(&self, key: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(key)
    }
}

/// Held by one running call (see [`RunningCalls::enter`]).
pub struct RunningGuard {
    calls: RunningCalls,
    key: String,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        let mut map = self.calls.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// The late end of a `tools/call` that outlived its timeout: resolves when the
/// upstream finally answers, or with [`CallEnd::Unknown`] once it is given up.
pub type LateEnd = tokio::sync::oneshot::Receiver<CallEnd>;

/// One `tools/call` to send.
pub struct ToolCall {
    /// The server's Streamable HTTP endpoint.
    pub url: String,
    /// Headers for every request (credentials; `Authorization: Bearer` included).
    pub headers: Vec<(String, String)>,
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: JsonObject,
    /// `_meta` entries to add to the request.
    pub meta: JsonObject,
    /// How long the whole exchange may take.
    pub timeout: Duration,
}

/// How a `tools/call` ended.
pub enum CallEnd {
    /// The server answered with a tool result (which may be `isError`).
    Result(CallToolResult),
    /// Nothing of the call reached the server.
    NotSent(String),
    /// The server rejected the request itself (JSON-RPC error): nothing ran.
    Rejected(String),
    /// It may have run.
    Unknown(String),
}

type Client = RunningService<RoleClient, ClientConfig>;

/// Connected MCP clients, one per upstream (URL and headers), shared by every executor
/// of a gateway.
#[derive(Clone, Default)]
pub struct Sessions(Arc<Mutex<HashMap<String, Arc<Client>>>>);

impl Sessions {
    fn key(call: &ToolCall) -> String {
        let mut headers: Vec<String> = call
            .headers
            .iter()
            .map(|(n, v)| format!("{n}:{v}"))
            .collect();
        headers.sort();
        format!("{}\n{}", call.url, headers.join("\n"))
    }

    /// The pooled client for `call`'s upstream, connecting one when there is none (or
    /// the pooled one has closed).
    async fn client(&self, http: reqwest::Client, call: &ToolCall) -> Result<Arc<Client>, String> {
        let key = Self::key(call);
        let pooled = self.lock().get(&key).filter(|c| !c.is_closed()).cloned();
        if let Some(client) = pooled {
            return Ok(client);
        }
        let client = Arc::new(connect(http, call).await?);
        // Two calls may connect at once; the first one pooled stays, the other is used
        // for its own call and then closes.
        Ok(self
            .lock()
            .entry(key)
            .and_modify(|c| {
                if c.is_closed() {
                    *c = client.clone();
                }
            })
            .or_insert(client)
            .clone())
    }

    /// Drops `client` from the pool (if it is still the pooled one).
    fn evict(&self, call_key: &str, client: &Arc<Client>) {
        let mut pool = self.lock();
        if pool.get(call_key).is_some_and(|c| Arc::ptr_eq(c, client)) {
            pool.remove(call_key);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Client>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn transport_config(call: &ToolCall) -> Result<StreamableHttpClientTransportConfig, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(call.url.clone());
    let mut custom = HashMap::new();
    for (name, value) in &call.headers {
        if name.eq_ignore_ascii_case("authorization") {
            // The scheme is case-insensitive (RFC 9110), as on oncegate's own door.
            match value
                .split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            {
                Some((_, token)) => config.auth_header = Some(token.trim_matches(' ').to_owned()),
                None => {
                    return Err("MCP upstreams take `Authorization: Bearer <token>` only".into());
                }
            }
            continue;
        }
        let name = axum::http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| format!("header `{name}`: {e}"))?;
        let value = axum::http::HeaderValue::from_str(value)
            .map_err(|_| format!("header `{name}` has a value that cannot be sent"))?;
        custom.insert(name, value);
    }
    config.custom_headers = custom;
    // Sessions that expire are re-initialised by rmcp only for requests the server
    // rejected with 404 (never processed), which is safe for effects.
    config.reinit_on_expired_session = true;
    Ok(config)
}

/// Connects: `server/discover` (2026-07-28), or `initialize` with a legacy server.
async fn connect(client: reqwest::Client, call: &ToolCall) -> Result<Client, String> {
    let transport = StreamableHttpClientTransport::with_client(client, transport_config(call)?);
    ClientConfig::default()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
        )
        .await
        .map_err(|e| error_chain(&e))
}

/// The error and its sources, without echoing a URL (it may carry credentials).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        let part = match err.downcast_ref::<reqwest::Error>() {
            Some(r) => reqwest_error_text(r).text,
            None => err.to_string(),
        };
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
        source = err.source();
    }
    text
}

/// True when the error chain proves the request never left: a failed connect.
fn never_sent(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(err) = source {
        if err
            .downcast_ref::<reqwest::Error>()
            .is_some_and(|r| r.is_connect() || r.is_builder())
        {
            return true;
        }
        source = err.source();
    }
    false
}

fn classify(e: ServiceError) -> CallEnd {
    match e {
        ServiceError::McpError(data)
            if [
                ErrorCode::PARSE_ERROR,
                ErrorCode::INVALID_REQUEST,
                ErrorCode::METHOD_NOT_FOUND,
                ErrorCode::INVALID_PARAMS,
            ]
            .contains(&data.code) =>
        {
            CallEnd::Rejected(format!(
                "the upstream rejected the call ({}): {}",
                data.code.0, data.message
            ))
        }
        ServiceError::McpError(data) => CallEnd::Unknown(format!(
            "the upstream answered an error ({}): {}; it may have run",
            data.code.0, data.message
        )),
        ServiceError::TransportSend(ref err) if never_sent(err.error.as_ref()) => CallEnd::NotSent(
            format!("nothing was sent to the upstream: {}", error_chain(&e)),
        ),
        other => CallEnd::Unknown(format!(
            "the connection failed after the call was sent: {}",
            error_chain(&other)
        )),
    }
}

/// Sends one `tools/call`; never cancels it once sent.
///
/// A call left running past its timeout registers with `inflight` (when given), so a
/// shutdown waits for its answer instead of cutting it off. `running` (when given) is
/// held until the call has really ended, whatever the timeout. When the timeout comes
/// first, the answer is [`CallEnd::Unknown`] and the second value resolves with the
/// call's real end.
pub async fn call_tool(
    client: reqwest::Client,
    call: ToolCall,
    sessions: Option<&Sessions>,
    inflight: Option<&InFlight>,
    running: Option<RunningGuard>,
) -> (CallEnd, Option<LateEnd>) {
    let deadline = tokio::time::Instant::now() + call.timeout;
    let connecting = async {
        match sessions {
            Some(pool) => pool.client(client, &call).await.map(|c| (c, true)),
            None => connect(client, &call).await.map(|c| (Arc::new(c), false)),
        }
    };
    let (peer, pooled) = match tokio::time::timeout_at(deadline, connecting).await {
        Ok(Ok(peer)) => peer,
        Ok(Err(e)) => {
            return (
                CallEnd::NotSent(format!("could not connect to the MCP upstream: {e}")),
                None,
            );
        }
        Err(_) => {
            return (
                CallEnd::NotSent(
                    "the MCP upstream did not complete its handshake before the timeout".into(),
                ),
                None,
            );
        }
    };
    // Evicts the pooled client when the call failed below the protocol.
    let pool = sessions
        .filter(|_| pooled)
        .map(|pool| (pool.clone(), Sessions::key(&call), peer.clone()));
    let mut params = CallToolRequestParams::new(call.tool.clone());
    params.arguments = Some(call.arguments);
    if !call.meta.is_empty() {
        params.meta = Some(RequestMetaObject::from(call.meta));
    }
    let tool = call.tool;
    // Its own task: dropping rmcp's future would cancel the upstream request.
    let mut task = tokio::spawn(async move {
        let answer = peer.peer().call_tool_once(params).await;
        // The call has ended (answered or failed): from here on it can no longer take
        // effect through this request.
        drop(running);
        match pool {
            // A pooled client stays for the next call unless the transport failed.
            Some((pool, key, client)) => {
                if matches!(&answer, Err(e) if !matches!(e, ServiceError::McpError(_))) {
                    pool.evict(&key, &client);
                }
            }
            None => {
                if let Ok(client) = Arc::try_unwrap(peer) {
                    let _ = client.cancel().await;
                }
            }
        }
        answer
    });
    let end = |joined: Result<Result<CallToolResponse, ServiceError>, tokio::task::JoinError>| {
        match joined {
            Ok(Ok(CallToolResponse::Complete(result))) => CallEnd::Result(result),
            Ok(Ok(_)) => CallEnd::Unknown(
                "the upstream answered with a task or an input request, which oncegate does not drive; it may run".into(),
            ),
            Ok(Err(e)) => classify(e),
            Err(join) => CallEnd::Unknown(format!("the upstream call task failed: {join}")),
        }
    };
    match tokio::time::timeout_at(deadline, &mut task).await {
        Ok(joined) => (end(joined), None),
        Err(_) => {
            // Leave the request running and hand its answer back when it comes. A
            // server that never answers would hold the connection forever: after
            // LATE_ANSWER_LIMIT the request is given up (rmcp then cancels it upstream),
            // and that, too, is the attempt's end.
            let guard = inflight.map(InFlight::enter);
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let _guard = guard;
                let late = match tokio::time::timeout(LATE_ANSWER_LIMIT, &mut task).await {
                    Ok(joined) => {
                        tracing::info!(tool, "an MCP upstream answered after the timeout");
                        end(joined)
                    }
                    Err(_) => {
                        tracing::warn!(
                            tool,
                            "an MCP upstream never answered; giving the request up"
                        );
                        task.abort();
                        CallEnd::Unknown(format!(
                            "the upstream never answered; the request was given up after {}s",
                            LATE_ANSWER_LIMIT.as_secs()
                        ))
                    }
                };
                let _ = tx.send(late);
            });
            (
                CallEnd::Unknown("the upstream did not answer before the timeout".into()),
                Some(rx),
            )
        }
    }
}

/// The input schema of one tool on an MCP server (from its `tools/list`).
pub async fn tool_schema(client: reqwest::Client, call: ToolCall) -> Result<JsonObject, String> {
    let fetch = async {
        let peer = connect(client, &call).await?;
        let tools = peer.list_all_tools().await.map_err(|e| error_chain(&e));
        let _ = peer.cancel().await;
        tools?
            .into_iter()
            .find(|t| t.name == call.tool)
            .map(|t| (*t.input_schema).clone())
            .ok_or_else(|| format!("the upstream has no tool `{}`", call.tool))
    };
    tokio::time::timeout(call.timeout, fetch)
        .await
        .map_err(|_| "the upstream did not list its tools before the timeout".to_owned())?
}
