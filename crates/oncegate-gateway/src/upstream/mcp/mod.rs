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
//! cost more than the call. Only an upstream whose URL and header templates are the
//! same for every call (literal, or `{env.NAME}` only) is pooled: one templated per
//! intent (`{key}`, `{arg.*}`, `{run_id}`, ...) would leave a client behind per intent,
//! so it connects per call. Only clients at the stateless 2026-07-28 era are pooled: a
//! 2025-11-25 session that expires is re-initialised by rmcp, which cuts the streams of
//! the session's other calls. The pool is bounded ([`POOL_CAPACITY`] clients, each
//! dropped after [`POOL_IDLE`] unused). A client whose call failed below the protocol
//! (the connection, the session, a stale negotiation) is dropped from the pool, so the
//! next call connects anew; each call is still its own JSON-RPC request, never shared
//! between two attempts.
//!
//! The `tools/call` runs in its own task: rmcp cancels the upstream request when its
//! future is dropped, and an effect must never be cancelled half-way, so on a timeout the
//! gateway stops waiting but leaves the request to finish. While it runs it is listed in
//! [`RunningCalls`] (a reconciliation's "not found" proves nothing meanwhile), and its
//! late answer is handed back to be recorded like any other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use oncegate_core::redact::Redactor;
use rmcp::model::{
    CallToolRequest, CancelledNotificationParam, ClientRequest, RequestId, ServerResult,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorCode, JsonObject,
    ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::{ClientLifecycleMode, ClientServiceExt};

mod lists;
mod relay;

pub use self::lists::{list_tools, tool_schema, watch_tools, with_peer};
use self::relay::Relay;
pub use self::relay::{ProgressRoute, ProgressRoutes, log_rank};
use super::client::reqwest_error_text;
use crate::inflight::InFlight;
pub use crate::tool_result::{all_text, as_tool_result, first_text, record_of, structured};

/// The `_meta` key an MCP upstream finds the intent key under.
pub const IDEMPOTENCY_META_KEY: &str = "dev.oncegate/idempotency_key";

/// The most upstreams a gateway keeps a connected client for; connecting one more drops
/// the least recently used.
pub const POOL_CAPACITY: usize = 64;

/// How long a pooled client may stay unused before it is dropped.
pub const POOL_IDLE: Duration = Duration::from_secs(5 * 60);

/// The most `tools/call`s one client sends at once; more wait inside rmcp (whose default
/// is 16) until one ends, and a call that waits past its timeout reads `unknown` though
/// it was never sent. The gateway has no concurrency limit of its own to take this
/// from (`[gateway]` bounds argument and answer sizes, not calls), and one pooled client
/// carries every concurrent call to its upstream, so the bound is set well above what
/// one upstream is expected to serve at once.
pub const MAX_CONCURRENT_CALLS: usize = 256;

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
    /// Whether the URL and headers are the same for every call (their templates are
    /// literal or read `{env.NAME}` only), so the client may be pooled.
    pub poolable: bool,
    /// The intent whose waiting agents hear the upstream's progress for this call
    /// ([`ProgressRoutes`]); none for reads of the gateway's own.
    pub progress: Option<String>,
    /// What the URL and headers were filled with from the environment: no error about
    /// this call shows it (nor the URL's userinfo and query).
    pub secrets: Redactor,
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

impl CallEnd {
    /// With its message passed through `secrets` (a result is the server's answer, kept
    /// as it came).
    fn redacted(self, secrets: &Redactor) -> Self {
        match self {
            CallEnd::NotSent(m) => CallEnd::NotSent(secrets.text(&m)),
            CallEnd::Rejected(m) => CallEnd::Rejected(secrets.text(&m)),
            CallEnd::Unknown(m) => CallEnd::Unknown(secrets.text(&m)),
            result @ CallEnd::Result(_) => result,
        }
    }
}

type Client = RunningService<RoleClient, Relay>;

/// Cancels a request upstream if the future awaiting it is dropped (as rmcp's own
/// `call_tool_once` does); disarmed once the answer came.
struct Abandoned(Option<(Peer<RoleClient>, RequestId)>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        if let Some((peer, id)) = self.0.take() {
            let cancel = CancelledNotificationParam::new(
                Some(id),
                Some("request abandoned by the caller".into()),
            );
            tokio::spawn(async move {
                let _ = peer.notify_cancelled(cancel).await;
            });
        }
    }
}

/// One `tools/call`, as rmcp's `call_tool_once` sends it, with the upstream's progress
/// for it relayed to the agents waiting on `intent`. The token is rmcp's, known once the
/// request is queued: progress an upstream sent before its request could even arrive
/// cannot be missed.
async fn call_once(
    client: &Client,
    params: CallToolRequestParams,
    intent: Option<String>,
) -> Result<CallToolResponse, ServiceError> {
    let handle = client
        .peer()
        .send_request_with_option(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await?;
    // Every request is bound, the gateway's own reads too: a log line while one runs
    // beside an intent's call is nobody's.
    let _bound = client.service().bind(handle.progress_token.clone(), intent);
    let mut abandoned = Abandoned(Some((client.peer().clone(), handle.id.clone())));
    let answer = handle.await_response().await;
    abandoned.0 = None;
    match answer? {
        ServerResult::CallToolResult(result) => Ok(CallToolResponse::Complete(result)),
        ServerResult::InputRequiredResult(result) => Ok(CallToolResponse::InputRequired(result)),
        ServerResult::CreateTaskResult(result) => Ok(CallToolResponse::Task(result)),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// Connected MCP clients, one per upstream (URL and headers), shared by every executor
/// of a gateway; bounded in number and in idle time. Their progress notifications go
/// where [`Sessions::progress`] routes them.
#[derive(Clone)]
pub struct Sessions(Arc<Mutex<Pool>>, ProgressRoutes);

struct Pool {
    clients: HashMap<String, Pooled>,
    capacity: usize,
    idle: Duration,
}

struct Pooled {
    client: Arc<Client>,
    last_used: Instant,
}

impl Default for Sessions {
    fn default() -> Self {
        Self::bounded(POOL_CAPACITY, POOL_IDLE)
    }
}

impl Sessions {
    /// A pool of at most `capacity` clients, each dropped after `idle` unused.
    pub fn bounded(capacity: usize, idle: Duration) -> Self {
        Self(
            Arc::new(Mutex::new(Pool {
                clients: HashMap::new(),
                capacity: capacity.max(1),
                idle,
            })),
            ProgressRoutes::default(),
        )
    }

    /// Where the upstreams' progress notifications go.
    pub fn progress(&self) -> &ProgressRoutes {
        &self.1
    }

    /// How many clients are pooled.
    pub fn len(&self) -> usize {
        self.lock().clients.len()
    }

    /// Whether no client is pooled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn key(call: &ToolCall) -> String {
        let mut headers: Vec<String> = call
            .headers
            .iter()
            .map(|(n, v)| format!("{n}:{v}"))
            .collect();
        headers.sort();
        format!("{}\n{}", call.url, headers.join("\n"))
    }

    /// The client for `call`'s upstream and whether it is pooled: the pooled one, or a
    /// new one, pooled when the call and the negotiated era allow it.
    async fn client(
        &self,
        http: reqwest::Client,
        call: &ToolCall,
    ) -> Result<(Arc<Client>, bool), String> {
        if !call.poolable {
            return Ok((Arc::new(connect(http, call, &self.1).await?), false));
        }
        let key = Self::key(call);
        {
            let mut pool = self.lock();
            let now = Instant::now();
            match pool.clients.get_mut(&key) {
                Some(p) if usable(&p.client) => {
                    p.last_used = now;
                    return Ok((p.client.clone(), true));
                }
                Some(_) => {
                    if let Some(stale) = pool.clients.remove(&key) {
                        retire(stale.client);
                    }
                }
                None => {}
            }
        }
        let client = Arc::new(connect(http, call, &self.1).await?);
        let modern = client
            .peer_info()
            .is_some_and(|info| info.protocol_version == ProtocolVersion::V_2026_07_28);
        if !modern {
            return Ok((client, false));
        }
        let mut pool = self.lock();
        // Two calls may connect at once: the client pooled first stays, and a later one
        // serves only its own call and is then closed.
        if pool.clients.get(&key).is_some_and(|p| usable(&p.client)) {
            return Ok((client, false));
        }
        let now = Instant::now();
        let idle = pool.idle;
        let expired: Vec<String> = pool
            .clients
            .iter()
            .filter(|(_, p)| now.duration_since(p.last_used) >= idle)
            .map(|(k, _)| k.clone())
            .collect();
        for k in expired {
            if let Some(p) = pool.clients.remove(&k) {
                retire(p.client);
            }
        }
        while pool.clients.len() >= pool.capacity {
            let Some(oldest) = pool
                .clients
                .iter()
                .min_by_key(|(_, p)| p.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(p) = pool.clients.remove(&oldest) {
                retire(p.client);
            }
        }
        if let Some(replaced) = pool.clients.insert(
            key,
            Pooled {
                client: client.clone(),
                last_used: now,
            },
        ) {
            retire(replaced.client);
        }
        Ok((client, true))
    }

    /// Drops `client` from the pool (if it is still the pooled one).
    fn evict(&self, call_key: &str, client: &Arc<Client>) {
        let mut pool = self.lock();
        if pool
            .clients
            .get(call_key)
            .is_some_and(|p| Arc::ptr_eq(&p.client, client))
            && let Some(p) = pool.clients.remove(call_key)
        {
            retire(p.client);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether a client can carry another call: neither cancelled nor with its service loop
/// (the transport) gone.
fn usable(client: &Client) -> bool {
    !client.is_closed() && !client.peer().is_transport_closed()
}

/// Closes a client that left the pool once nobody uses it. A call still running on it
/// keeps it open (closing it would cut the call); that call's task closes it when it
/// ends, and whichever holder drops it last cancels it in any case.
fn retire(client: Arc<Client>) {
    if let Ok(client) = Arc::try_unwrap(client) {
        tokio::spawn(async move {
            let _ = client.cancel().await;
        });
    }
}

/// JSON-RPC errors that say the client's negotiated state no longer fits the server
/// (it was upgraded or reconfigured under a pooled client): the next call should connect
/// anew. MCP 2026-07-28 defines them; rmcp names them.
const STALE_NEGOTIATION: [ErrorCode; 3] = [
    // -32020: the `Mcp-*` headers do not match the request body.
    ErrorCode::HEADER_MISMATCH,
    // -32021: the server now requires a client capability that was not declared.
    ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
    // -32022: the server no longer supports the negotiated protocol version.
    ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
];

/// Whether a pooled client should leave the pool after this answer.
fn evicts(answer: &Result<CallToolResponse, ServiceError>, client: &Client) -> bool {
    match answer {
        Ok(_) => !usable(client),
        Err(ServiceError::McpError(data)) => {
            STALE_NEGOTIATION.contains(&data.code) || !usable(client)
        }
        Err(_) => true,
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
    config.max_concurrent_requests = MAX_CONCURRENT_CALLS;
    // Sessions that expire are re-initialised by rmcp only for requests the server
    // rejected with 404 (never processed), which is safe for effects.
    config.reinit_on_expired_session = true;
    Ok(config)
}

/// Connects: `server/discover` (2026-07-28), or `initialize` with a legacy server.
async fn connect(
    client: reqwest::Client,
    call: &ToolCall,
    routes: &ProgressRoutes,
) -> Result<Client, String> {
    connect_as(client, call, Relay::new(routes)).await
}

async fn connect_as(
    client: reqwest::Client,
    call: &ToolCall,
    relay: Relay,
) -> Result<Client, String> {
    let transport = StreamableHttpClientTransport::with_client(client, transport_config(call)?);
    relay
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

/// The error and its sources. rmcp's wrappers print the reqwest error whole, URL
/// included: the caller passes the text through the call's [`Redactor`].
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
///
/// rmcp wraps the reqwest error of a connected client's request in
/// `StreamableHttpError::Client` without exposing it as the error's source, so that
/// wrapper is opened too: otherwise a pooled client whose upstream has gone away would
/// read every refused connection as a call that may have run.
fn never_sent(e: &(dyn std::error::Error + 'static)) -> bool {
    let refused = |r: &reqwest::Error| r.is_connect() || r.is_builder();
    let mut source = Some(e);
    while let Some(err) = source {
        if err.downcast_ref::<reqwest::Error>().is_some_and(refused) {
            return true;
        }
        if let Some(StreamableHttpError::Client(r)) =
            err.downcast_ref::<StreamableHttpError<reqwest::Error>>()
            && refused(r)
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
    let secrets = call.secrets.clone();
    let connecting = async {
        match sessions {
            Some(pool) => pool.client(client, &call).await,
            None => connect(client, &call, &ProgressRoutes::default())
                .await
                .map(|c| (Arc::new(c), false)),
        }
    };
    let (peer, pooled) = match tokio::time::timeout_at(deadline, connecting).await {
        Ok(Ok(peer)) => peer,
        Ok(Err(e)) => {
            return (
                CallEnd::NotSent(format!("could not connect to the MCP upstream: {e}"))
                    .redacted(&secrets),
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
    let progress = call.progress;
    // Its own task: dropping rmcp's future would cancel the upstream request.
    let mut task = tokio::spawn(async move {
        let answer = call_once(&peer, params, progress).await;
        // The call has ended (answered or failed): from here on it can no longer take
        // effect through this request.
        drop(running);
        // A pooled client stays for the next call unless this answer shows it cannot
        // carry one; a client that is no longer pooled is closed by its last call.
        if let Some((pool, key, client)) = pool
            && evicts(&answer, &client)
        {
            pool.evict(&key, &client);
        }
        if let Ok(client) = Arc::try_unwrap(peer) {
            let _ = client.cancel().await;
        }
        answer
    });
    let end = move |joined: Result<
        Result<CallToolResponse, ServiceError>,
        tokio::task::JoinError,
    >| {
        match joined {
            Ok(Ok(CallToolResponse::Complete(result))) => CallEnd::Result(result),
            Ok(Ok(_)) => CallEnd::Unknown(
                "the upstream answered with a task or an input request, which oncegate does not drive; it may run".into(),
            ),
            Ok(Err(e)) => classify(e),
            Err(join) => CallEnd::Unknown(format!("the upstream call task failed: {join}")),
        }
        .redacted(&secrets)
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
