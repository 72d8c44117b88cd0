//! The sandbox's MCP surface: its provider calls as tools, over MCP Streamable HTTP.
//!
//! One ledger, two surfaces: a tool call runs the same create, lookup and listing code
//! as the HTTP API, so an effect created here is the same kind of effect as a `POST`,
//! listed by `GET /v1/effects` (and `list_effects`) with its idempotency key as sent, a
//! call and a `POST` with the same key and body are one effect, and a fault queued for
//! `/v1/charges` breaks the next charge whichever surface makes it. The tools are
//! documented on [`super::router`].
//!
//! rmcp serves both protocol eras from the one endpoint: a 2025-11-25 client initializes
//! and gets a session, a 2026-07-28 request carries its version in `_meta` and is served
//! statelessly. Whichever it is, a cancelled call (a client that gave up, or closed its
//! stream) only stops the waiting here: the commit runs on its own task (see
//! `Sandbox::create`).

use std::sync::Arc;

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
        ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities, ServerConfig,
        Tool,
    },
    service::RequestContext,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

mod catalogue;
mod tool_call;

use self::catalogue::catalogue;
use self::tool_call::ToolCall;
use crate::ledger::NewEffect;
use crate::provider::{
    AfterCommit, EffectsParams, LookupError, LookupParams, Refusal, Sandbox, acceptable_key,
};
use crate::resource::Resource;

/// Where a create tool takes its idempotency key from, besides its `idempotency_key`
/// argument: the request's `_meta`, which is where a gateway puts a key it derived
/// itself, out of the model's reach.
const IDEMPOTENCY_KEY_META: &str = "dev.oncegate/idempotency_key";

/// The argument a create tool takes its idempotency key from.
const IDEMPOTENCY_KEY_ARGUMENT: &str = "idempotency_key";

/// Set in a create result's `_meta` when it replays an earlier call (HTTP's
/// `Idempotent-Replayed: true`).
const REPLAYED_META: &str = "dev.oncegate/idempotent_replayed";

/// The `/mcp` endpoint of `sandbox`.
pub(super) fn service(sandbox: Arc<Sandbox>) -> StreamableHttpService<Tools, LocalSessionManager> {
    let tools = Tools {
        sandbox,
        catalogue: catalogue().into(),
    };
    // rmcp's defaults, on purpose: legacy-era clients keep their sessions, and only
    // loopback `Host` headers pass (DNS-rebinding protection; the sandbox is a loopback
    // service). Stateless (2026-07-28) calls are answered as plain JSON rather than an
    // SSE stream; rmcp keeps SSE for legacy sessions whatever this says.
    let config = StreamableHttpServerConfig::default().with_json_response(true);
    StreamableHttpService::new(move || Ok(tools.clone()), Arc::default(), config)
}

/// The sandbox's MCP server: one per session (legacy era) or per request (2026-07-28),
/// all sharing the sandbox.
#[derive(Clone)]
pub(super) struct Tools {
    sandbox: Arc<Sandbox>,
    catalogue: Arc<[Tool]>,
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, still sent.
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_logging()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(
                "oncegate-sandbox",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "A simulated payments, email and ledger provider. Creates take an optional \
                 idempotency_key (or _meta[\"dev.oncegate/idempotency_key\"]): a repeat with \
                 the same key and arguments answers the first result and commits nothing.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let hidden = self.sandbox.hidden().clone();
        Ok(ListToolsResult::with_all_items(
            self.catalogue
                .iter()
                .filter(|t| !hidden.contains(t.name.as_ref()))
                .map(|t| self.described(t.clone()))
                .collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        if self.sandbox.hidden().contains(name) {
            return None;
        }
        self.catalogue
            .iter()
            .find(|tool| tool.name == name)
            .map(|t| self.described(t.clone()))
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        // A 2025-11-25 session hears list changes on its own stream, until it ends.
        let mut changes = self.sandbox.tools_changed.subscribe();
        let peer = context.peer;
        tokio::spawn(async move {
            while changes.recv().await.is_ok() {
                if peer.notify_tool_list_changed().await.is_err() {
                    break;
                }
            }
        });
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        (requested.tools_list_changed == Some(true)).then(|| {
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build()
        })
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), McpError> {
        // A 2026-07-28 subscription hears list changes until the client cancels it.
        let mut changes = self.sandbox.tools_changed.subscribe();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = changes.recv() => match changed {
                    Ok(()) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        if context.sink().notify_tool_list_changed().await.is_err() {
                            return Ok(());
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let hidden = self.sandbox.hidden().contains(request.name.as_ref());
        let Some(call) = ToolCall::parse(&request.name).filter(|_| !hidden) else {
            return Err(McpError::invalid_params(
                format!("tool not found: {}", request.name),
                None,
            ));
        };
        // rmcp moves the request's `_meta` into the context before a handler runs; look
        // in both, in case a transport ever leaves it in place.
        let meta_key = context
            .meta
            .get(IDEMPOTENCY_KEY_META)
            .or_else(|| request.meta.as_ref()?.get(IDEMPOTENCY_KEY_META))
            .cloned();
        let traceparent = context
            .meta
            .get_traceparent()
            .or_else(|| request.meta.as_ref()?.get_traceparent())
            .map(str::to_owned);
        let tracestate = context
            .meta
            .get("tracestate")
            .or_else(|| request.meta.as_ref()?.get("tracestate"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let arguments = request.arguments.unwrap_or_default();
        // A caller that asked for progress hears it: accepted, then committed (what a
        // long-running provider tool reports while it works).
        let progress = context.meta.get_progress_token();
        let report = |step: f64, message: &str| {
            let (peer, token, message) =
                (context.peer.clone(), progress.clone(), message.to_owned());
            async move {
                if let Some(progress_token) = token {
                    let mut p = rmcp::model::ProgressNotificationParam::new(progress_token, step);
                    p.total = Some(2.0);
                    p.message = Some(message);
                    let _ = peer.notify_progress(p).await;
                }
            }
        };
        let outcome = match call {
            ToolCall::Create(resource) => {
                // And a log line naming the order, as providers log what they accepted.
                let order = arguments
                    .get("order_id")
                    .and_then(Value::as_str)
                    .unwrap_or("-");
                #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, still sent.
                let line = rmcp::model::LoggingMessageNotificationParam::new(
                    rmcp::model::LoggingLevel::Info,
                    Value::String(format!("accepted {} for order {order}", resource.as_str())),
                )
                .with_logger("sandbox");
                #[allow(deprecated)]
                let _ = context.peer.notify_logging_message(line).await;
                report(1.0, "accepted").await;
                let created = self
                    .create(
                        resource,
                        arguments,
                        meta_key,
                        (traceparent.as_deref(), tracestate.as_deref()),
                        &context.ct,
                    )
                    .await;
                if created.is_ok() {
                    report(2.0, "committed").await;
                }
                created
            }
            ToolCall::Find(resource) => self.find(resource, arguments),
            ToolCall::GetOrder => self.get_order(arguments),
            ToolCall::ListEffects => self.list_effects(arguments),
        };
        match outcome {
            Ok(result) => Ok(result.into()),
            Err(error) => error.into_result().map(CallToolResponse::from),
        }
    }
}

impl Tools {
    /// A catalogue tool with its description as `PUT /_sandbox/mcp/descriptions` set it.
    fn described(&self, mut tool: Tool) -> Tool {
        if let Some(text) = self.sandbox.descriptions().get(tool.name.as_ref()) {
            tool.description = Some(text.clone().into());
        }
        tool
    }

    async fn create(
        &self,
        resource: Resource,
        mut arguments: JsonObject,
        meta_key: Option<Value>,
        (traceparent, tracestate): (Option<&str>, Option<&str>),
        cancelled: &CancellationToken,
    ) -> Result<CallToolResult, ToolError> {
        // The key is how the call is named, not part of what it asks for: stripped, the
        // stored body is what the same `POST` would store.
        let argument_key = arguments.remove(IDEMPOTENCY_KEY_ARGUMENT);
        let key = idempotency_key(argument_key, meta_key)?;
        let effect = NewEffect::parse(resource, Value::Object(arguments))
            .map_err(|e| ToolError::InvalidArguments(e.0))?
            .traced(traceparent, tracestate);
        let created = self
            .sandbox
            .create(effect, key, None)
            .await
            .map_err(ToolError::Refused)?;

        match created.after_commit {
            AfterCommit::Answer => {}
            AfterCommit::Stall(delay) => {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = cancelled.cancelled() => return Err(ToolError::Cancelled),
                }
            }
            // HTTP closes the connection; an MCP call has no connection of its own (a
            // session multiplexes calls), so it is left unanswered instead.
            AfterCommit::Drop => {
                cancelled.cancelled().await;
                return Err(ToolError::Cancelled);
            }
        }

        let mut result = CallToolResult::structured(created.object);
        if created.replayed {
            let mut meta = MetaObject::default();
            meta.insert(REPLAYED_META.to_owned(), Value::Bool(true));
            result = result.with_meta(Some(meta));
        }
        Ok(result)
    }

    fn find(&self, resource: Resource, arguments: JsonObject) -> Result<CallToolResult, ToolError> {
        let params = LookupParams::deserialize(Value::Object(arguments))
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        let found = self.sandbox.lookup(resource, &params)?;
        Ok(CallToolResult::structured(found))
    }

    fn get_order(&self, arguments: JsonObject) -> Result<CallToolResult, ToolError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct OrderArguments {
            order_id: String,
        }
        let OrderArguments { order_id } = OrderArguments::deserialize(Value::Object(arguments))
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        if order_id.is_empty() {
            return Err(ToolError::InvalidArguments(
                "order_id must not be empty".to_owned(),
            ));
        }
        Ok(CallToolResult::structured(self.sandbox.order(&order_id)))
    }

    fn list_effects(&self, arguments: JsonObject) -> Result<CallToolResult, ToolError> {
        let params = EffectsParams::deserialize(Value::Object(arguments))
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        let listing = self
            .sandbox
            .effects(&params)
            .map_err(|e| ToolError::InvalidArguments(e.0))?;
        Ok(CallToolResult::structured(listing))
    }
}

/// The idempotency key of a create: the argument or the `_meta` entry, which must agree
/// when both are given. `null` counts as not given, as agents often send it for optional
/// arguments.
fn idempotency_key(
    argument: Option<Value>,
    meta: Option<Value>,
) -> Result<Option<String>, ToolError> {
    let argument = key_text(argument, "idempotency_key")?;
    let meta = key_text(meta, "_meta[\"dev.oncegate/idempotency_key\"]")?;
    let key = match (argument, meta) {
        (Some(argument), Some(meta)) if argument != meta => return Err(ToolError::KeyConflict),
        (argument, meta) => argument.or(meta),
    };
    match key {
        Some(key) if !acceptable_key(&key) => Err(ToolError::InvalidArguments(
            "an idempotency key must be 1 to 255 bytes long".to_owned(),
        )),
        key => Ok(key),
    }
}

fn key_text(value: Option<Value>, name: &str) -> Result<Option<String>, ToolError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(key)) => Ok(Some(key)),
        Some(_) => Err(ToolError::InvalidArguments(format!(
            "{name} must be a string"
        ))),
    }
}

/// Everything a tool call answers with other than success; the `code` is the HTTP
/// API's.
#[derive(Debug)]
enum ToolError {
    InvalidArguments(String),
    /// The `idempotency_key` argument and the `_meta` key differ.
    KeyConflict,
    MissingLookupParameter,
    Refused(Refusal),
    /// The client cancelled a call that was holding its answer back; nobody reads this.
    Cancelled,
}

impl From<LookupError> for ToolError {
    fn from(error: LookupError) -> Self {
        match error {
            LookupError::NoCriterion => ToolError::MissingLookupParameter,
            LookupError::DedupeRefNotEmails => {
                ToolError::InvalidArguments("dedupe_ref applies to emails only".to_owned())
            }
        }
    }
}

impl ToolError {
    /// An error result the model can read and act on (`isError: true`, the HTTP API's
    /// error body as `structuredContent`), or, for a provider failure, a JSON-RPC error.
    fn into_result(self) -> Result<CallToolResult, McpError> {
        let (code, detail) = match self {
            ToolError::InvalidArguments(detail) => ("invalid_request", Some(detail)),
            ToolError::KeyConflict => (
                "idempotency_key_conflict",
                Some(
                    "the idempotency_key argument and _meta[\"dev.oncegate/idempotency_key\"] \
                     differ"
                        .to_owned(),
                ),
            ),
            ToolError::MissingLookupParameter => (
                "missing_lookup_parameter",
                Some("give idempotency_key, order_id or dedupe_ref".to_owned()),
            ),
            ToolError::Refused(Refusal::CardDeclined) => ("card_declined", None),
            ToolError::Refused(Refusal::RateLimited) => ("rate_limited", None),
            ToolError::Refused(Refusal::KeyReused) => ("idempotency_key_reused", None),
            // The HTTP surface's 500: the provider failed, which is not the tool's answer.
            ToolError::Refused(Refusal::Internal) => {
                return Err(McpError::internal_error("internal_error", None));
            }
            ToolError::Cancelled => {
                return Err(McpError::internal_error("request cancelled", None));
            }
        };
        let body = match detail {
            Some(detail) => json!({ "error": code, "detail": detail }),
            None => json!({ "error": code }),
        };
        Ok(CallToolResult::structured_error(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_name_parses_back() {
        let names: Vec<_> = catalogue().into_iter().map(|tool| tool.name).collect();
        assert_eq!(names.len(), 10);
        for name in &names {
            assert!(ToolCall::parse(name).is_some(), "{name}");
        }
        assert_eq!(ToolCall::parse("create_charges"), None);
    }

    #[test]
    fn the_key_comes_from_the_argument_or_meta_and_both_must_agree() {
        let key = |argument: Option<Value>, meta: Option<Value>| {
            idempotency_key(argument, meta).map_err(|e| format!("{e:?}"))
        };
        assert_eq!(key(Some(json!("k")), None), Ok(Some("k".to_owned())));
        assert_eq!(key(None, Some(json!("k"))), Ok(Some("k".to_owned())));
        assert_eq!(
            key(Some(json!("k")), Some(json!("k"))),
            Ok(Some("k".to_owned()))
        );
        assert_eq!(key(Some(Value::Null), None), Ok(None));
        assert_eq!(
            key(Some(json!("k")), Some(json!("j"))),
            Err("KeyConflict".into())
        );
        assert!(key(Some(json!(7)), None).is_err());
        assert!(key(Some(json!("")), None).is_err());
        assert!(key(None, Some(json!("k".repeat(256)))).is_err());
    }
}
