//! The rmcp handler: `tools/list` (the capabilities a principal may call) and
//! `tools/call`, which takes the front door like `POST /v1/calls` and answers the
//! outcome's [`Envelope`] as a tool result: the model line first in `content`, the
//! envelope's MCP rendering in `_meta`, and its structured rendering in
//! `structuredContent.oncegate` (declared in every tool's `outputSchema`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use oncegate_core::codes::Code;
use oncegate_core::config::{Capability, Role, UpstreamKind};
use oncegate_core::intent::{IntentState, Outcome, Status};
use oncegate_engine::Call;
use rmcp::ServerHandler;
#[allow(deprecated)]
use rmcp::model::SetLevelRequestParams;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    CompleteRequestParams, CompleteResult, ContentBlock, ErrorData as McpError,
    GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult, Implementation,
    JsonObject, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, MetaObject, PaginatedRequestParams, PromptsCapability,
    ReadResourceRequestParams, ReadResourceResponse, ResourcesCapability, ResultType,
    ServerCapabilities, ServerConfig, TASKS_EXTENSION_ID, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};

use super::schema::{annotations, derived_schema, output_schema, strip_property};
use super::{in_band, passthrough, tasks};
use crate::door::Door;
use crate::error::ApiError;
use crate::headers::{header_string, invalid_header};
use crate::state::{AppState, Principal};
use crate::tool_result::all_text;
use crate::trace::Parent;
use crate::upstream::UpstreamExecutor;
use crate::upstream::mcp::log_rank;
use crate::wire::{Envelope, OUTCOME_META_KEY, structured_content};

/// The request `_meta` key of the orchestrator's run id.
pub const RUN_ID_META_KEY: &str = "dev.oncegate/run_id";
/// The request `_meta` key of the orchestrator's step id.
pub const STEP_ID_META_KEY: &str = "dev.oncegate/step_id";

/// An upstream tool's schema, or when reading it last failed.
type SchemaRead = Result<Arc<JsonObject>, std::time::Instant>;

/// The MCP server: one value per session (or per stateless request), sharing the state.
#[derive(Clone)]
pub struct McpSurface {
    state: AppState,
    /// Input schemas read from MCP upstreams' own tools/list, by capability (or when the
    /// last read failed).
    upstream_schemas: Arc<Mutex<HashMap<String, SchemaRead>>>,
    /// The least severe log level this session takes (`logging/setLevel`, ranked by
    /// [`log_rank`]); `None` until it asks.
    log_level: Arc<Mutex<Option<u8>>>,
}

impl McpSurface {
    /// The surface over `state`.
    pub fn new(state: AppState) -> Self {
        Self {
            state,
            upstream_schemas: Arc::default(),
            log_level: Arc::default(),
        }
    }

    /// The surface for one new session: the shared state, a log level of its own.
    pub fn session(&self) -> Self {
        Self {
            log_level: Arc::default(),
            ..self.clone()
        }
    }

    /// The log level a call's upstream messages are relayed from: the request's own
    /// (`_meta["io.modelcontextprotocol/logLevel"]`), else its session's.
    fn log_from(&self, ctx: &RequestContext<RoleServer>) -> Option<u8> {
        #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, still what clients use.
        let asked = ctx.meta.log_level().map(log_rank);
        asked.or(*self
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
    }
}

/// The trace context of a `tools/call`: `_meta.traceparent` (the request's, or where
/// rmcp moved it, the context's), else the HTTP request's `traceparent` header.
fn trace_parent(request: &CallToolRequestParams, ctx: &RequestContext<RoleServer>) -> Parent {
    request
        .meta
        .as_ref()
        .and_then(|m| Parent::from_meta(m))
        .or_else(|| Parent::from_meta(&ctx.meta))
        .or_else(|| parts(ctx).map(|p| Parent::from_headers(&p.headers)))
        .unwrap_or_default()
}

fn parts(ctx: &RequestContext<RoleServer>) -> Option<&axum::http::request::Parts> {
    ctx.extensions.get::<axum::http::request::Parts>()
}

/// The principal the middleware authenticated.
fn principal(ctx: &RequestContext<RoleServer>) -> Result<Principal, ApiError> {
    parts(ctx)
        .and_then(|p| p.extensions.get::<Principal>())
        .cloned()
        .ok_or(ApiError::Unauthenticated)
}

/// A run or step id: the request's `_meta` first, then the HTTP header; never arguments.
/// Either must be a string of 1 to 255 visible ASCII characters (the header rule, so the
/// same id reaches the same key by either path); anything else is invalid params, never
/// dropped (a dropped id would collapse distinct steps onto one intent).
fn structural_id(
    request: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
    meta_key: &str,
    header: &str,
) -> Result<Option<String>, ApiError> {
    let from_meta = request
        .meta
        .as_ref()
        .and_then(|m| m.get(meta_key))
        .or_else(|| ctx.meta.get(meta_key));
    match from_meta {
        Some(Value::String(s)) => {
            let s = s.trim_matches([' ', '\t']);
            oncegate_core::limits::check_id(&format!("`_meta[\"{meta_key}\"]`"), s)
                .map_err(invalid_header)?;
            return Ok(Some(s.to_owned()));
        }
        Some(Value::Null) | None => {}
        Some(other) => {
            return Err(invalid_header(format!(
                "`_meta[\"{meta_key}\"]` must be a string, not {}",
                match other {
                    Value::Bool(_) => "a boolean",
                    Value::Number(_) => "a number",
                    Value::Array(_) => "an array",
                    _ => "an object",
                }
            )));
        }
    }
    match parts(ctx) {
        Some(p) => header_string(&p.headers, header),
        None => Ok(None),
    }
}

impl McpSurface {
    /// The capabilities this principal may call (approvers call none): the registry's,
    /// then fronted servers' undeclared tools (read or held for approval).
    fn callable(&self, principal: &Principal) -> Vec<Arc<Capability>> {
        if !matches!(principal.role, Role::Agent | Role::Admin) {
            return Vec::new();
        }
        let gate = self.state.gate();
        let mut caps: Vec<_> = gate
            .registry()
            .capabilities()
            .iter()
            .filter(|c| (c.upstream.is_some() || c.dry_run) && !c.require_client_key)
            .cloned()
            .collect();
        // Then the fronted servers' undeclared tools their policies offer.
        caps.extend(gate.fronted_capabilities());
        caps
    }

    /// The input schema: the registry's, else an MCP upstream's own (when arguments pass
    /// through unmapped; the key argument is the gateway's, so it is removed), else one
    /// derived from the key recipe.
    async fn input_schema(&self, cap: &Arc<Capability>) -> Arc<JsonObject> {
        /// How long a failed read of an upstream's schema is not retried: `tools/list`
        /// must not wait out an unreachable upstream's timeout on every call.
        const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(60);
        if let Some(Value::Object(s)) = &cap.input_schema {
            return Arc::new(s.clone());
        }
        if let Some(up) = cap
            .upstream
            .as_ref()
            .filter(|u| u.kind == UpstreamKind::Mcp && u.body.is_none())
        {
            let cached = self
                .upstream_schemas
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&cap.name)
                .cloned();
            let fetched = match cached {
                Some(Ok(schema)) => return schema,
                Some(Err(failed)) if failed.elapsed() < RETRY_AFTER => None,
                _ => Some(
                    UpstreamExecutor::new(self.state.http(), cap.clone())
                        .upstream_tool_schema(up)
                        .await,
                ),
            };
            if let Some(fetched) = fetched {
                let entry = match fetched {
                    Ok(mut schema) => {
                        if let Some(arg) = &up.idempotency_arg {
                            strip_property(&mut schema, arg);
                        }
                        Ok(Arc::new(schema))
                    }
                    Err(e) => {
                        tracing::warn!(capability = %cap.name, error = %e, "could not read the MCP upstream's tool schema; showing the derived one");
                        Err(std::time::Instant::now())
                    }
                };
                self.upstream_schemas
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(cap.name.clone(), entry.clone());
                if let Ok(schema) = entry {
                    return schema;
                }
            }
        }
        Arc::new(derived_schema(cap))
    }

    async fn tool(&self, cap: &Arc<Capability>) -> Tool {
        let description = cap
            .description
            .clone()
            .unwrap_or_else(|| format!("{} (through oncegate)", cap.name));
        let mut tool = Tool::new(cap.name.clone(), description, self.input_schema(cap).await)
            .with_annotations(annotations(cap));
        // Every answer carries the outcome in `structuredContent`; clients that validate
        // structured results against this schema (the Python and TypeScript SDKs) find
        // it declared, and the upstream's own fields allowed beside it.
        tool.output_schema = Some(Arc::new(output_schema()));
        let mut meta = MetaObject::new();
        meta.insert("dev.oncegate/category".into(), json!(cap.category));
        tool.meta = Some(meta);
        tool
    }

    /// One `tools/call`, through the front door. Every error goes through the one
    /// table's MCP form ([`ApiError::into_mcp`]). A call held for approval is answered
    /// in-band where the client can take it ([`in_band`]); a retry carrying a
    /// `requestState` has it checked and used up first.
    async fn call(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let base = in_band::console_base(&ctx);
        let wants_task = tasks::declared(&ctx);
        let caller = principal(&ctx).ok();
        let now = self.state.gate().clock().now();
        let mut declined = false;
        if let Some(sealed) = &request.request_state {
            let Some(caller) = &caller else {
                return ApiError::Unauthenticated.into_mcp().map(Into::into);
            };
            if let Err(e) = in_band::resume(&self.state, caller, &request, sealed, now).await {
                return e.into_mcp().map(Into::into);
            }
            declined = in_band::declined(&request);
        }
        let asked = (base.is_some() && !declined).then(|| request.clone());
        let long = wants_task
            .then(|| self.long_running_key(&request, &ctx))
            .flatten();
        let decided = self.decided(request, ctx);
        let decided = match long {
            // The decision and the effect run in a task of their own (the door's), so
            // answering a task here leaves them running.
            Some(key) => match tasks::or_task(decided, &key, now).await {
                Ok(decided) => decided,
                Err(task) => return Ok(task.into()),
            },
            None => decided.await,
        };
        match decided {
            Ok((outcome, cap)) => {
                if outcome.status == Status::PendingApproval
                    && let (Some(base), Some(asked), Some(caller)) = (&base, &asked, &caller)
                    && let Some(input) =
                        in_band::held(&self.state, base, caller, asked, &outcome, now)
                {
                    return Ok(input.into());
                }
                if wants_task && let Some(task) = tasks::task_for(&outcome, now) {
                    return Ok(task.into());
                }
                Ok(tool_result(&outcome, &cap).into())
            }
            Err(e) => e.into_mcp().map(Into::into),
        }
    }

    /// The intent key of a call to a `long_running` capability (which a client that
    /// declared tasks is answered a task for, if it runs a while).
    fn long_running_key(
        &self,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Option<String> {
        let gate = self.state.gate();
        gate.registry()
            .capability(&request.name)
            .filter(|c| c.long_running)?;
        let principal = principal(ctx).ok()?;
        let call = Call {
            capability: request.name.to_string(),
            arguments: Value::Object(request.arguments.clone().unwrap_or_default()),
            run_id: structural_id(request, ctx, RUN_ID_META_KEY, "oncegate-run-id").ok()?,
            step_id: structural_id(request, ctx, STEP_ID_META_KEY, "oncegate-step-id").ok()?,
            client_key: None,
        };
        let derived = gate.derive_key(&principal.name, &call).ok()?;
        Some(derived.key.as_str().to_owned())
    }

    async fn decided(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(Outcome, Arc<Capability>), ApiError> {
        let principal = principal(&ctx)?;
        let name = request.name.to_string();
        let door = Door::open(&self.state, &name)?.traced(trace_parent(&request, &ctx));
        let call = Call {
            capability: name.clone(),
            arguments: Value::Object(request.arguments.clone().unwrap_or_default()),
            run_id: structural_id(&request, &ctx, RUN_ID_META_KEY, "oncegate-run-id")?,
            step_id: structural_id(&request, &ctx, STEP_ID_META_KEY, "oncegate-step-id")?,
            client_key: None,
        };
        if door.capability().require_client_key {
            // A coded orchestrator's own key has no place in MCP: use /v1/calls.
            return Err(ApiError::Coded(
                axum::http::StatusCode::BAD_REQUEST,
                Code::ClientKeyMissing,
                format!(
                    "{name} requires a client Idempotency-Key and is only callable on POST /v1/calls"
                ),
            ));
        }
        let cap = Arc::clone(door.capability());
        // Progress the upstream reports while this request waits reaches the agent (a
        // request without a progressToken asked for none), and so do its log messages
        // from the level the request (`_meta` logLevel) or the session asked for.
        let progress = ctx.meta.get_progress_token();
        let log_from = self.log_from(&ctx);
        let _route = match (&progress, log_from) {
            (None, None) => None,
            _ => self
                .state
                .gate()
                .derive_key(&principal.name, &call)
                .ok()
                .map(|d| {
                    self.state.mcp_upstreams().progress().route(
                        d.key.as_str(),
                        ctx.peer.clone(),
                        progress,
                        log_from,
                    )
                }),
        };
        let outcome = door.call(&principal, call).await?;
        Ok((outcome, cap))
    }
}

/// The answer to one decided call.
pub fn tool_result(o: &Outcome, cap: &Capability) -> CallToolResult {
    // The renderings of the one wire type: its model line first in `content`, its MCP
    // form in `_meta`, its structured form in `structuredContent` (pydantic-ai, among
    // others, hands the model only that).
    let envelope = Envelope::from(o);
    let line = ContentBlock::text(envelope.message.clone());
    let upstream_is_mcp = cap
        .upstream
        .as_ref()
        .is_some_and(|u| u.kind == UpstreamKind::Mcp);
    // The upstream's own answer, as a tool result.
    let upstream = o.result.as_ref().map(|r| {
        let shaped = upstream_is_mcp && r.get("content").is_some_and(Value::is_array);
        match shaped.then(|| serde_json::from_value::<CallToolResult>(r.clone())) {
            Some(Ok(mut t)) => {
                t.is_error = None;
                // Stored results may predate 2026-07-28; rmcp clears this for older peers.
                t.result_type = Some(ResultType::COMPLETE);
                // The protocol's own keys describe the upstream's server, not oncegate.
                if let Some(meta) = t.meta.as_mut() {
                    meta.retain(|k, _| !k.starts_with("io.modelcontextprotocol/"));
                }
                // Text only, no structured value: the text becomes the upstream's value,
                // since a client that prefers `structuredContent` (pydantic-ai) would
                // otherwise see the outcome alone and never the provider's answer.
                if t.structured_content.is_none()
                    && !t.content.is_empty()
                    && t.content.iter().all(|c| c.as_text().is_some())
                {
                    let text = all_text(&t);
                    t.structured_content =
                        Some(serde_json::from_str(&text).unwrap_or(Value::String(text)));
                }
                t
            }
            _ => {
                let mut t = CallToolResult::success(vec![ContentBlock::text(r.to_string())]);
                // Not an object: `structured_content` keeps it whole under `result`.
                t.structured_content = Some(r.clone());
                t
            }
        }
    });
    let success = match o.status {
        Status::Applied | Status::DryRun => true,
        Status::Replayed => o.state != Some(IntentState::Failed),
        _ => false,
    };
    let mut result = match (success, upstream) {
        (true, Some(mut up)) => {
            up.content.insert(0, line);
            up
        }
        (true, None) => CallToolResult::success(vec![line]),
        (false, up) => {
            let mut content = vec![line];
            let mut structured = None;
            // A definite refusal by the provider: show the model what it said.
            if matches!(o.status, Status::Failed | Status::Replayed)
                && let Some(up) = up
            {
                content.extend(up.content);
                structured = up.structured_content;
            }
            let mut t = CallToolResult::error(content);
            t.structured_content = structured;
            t
        }
    };
    let mut meta = result.meta.take().unwrap_or_default();
    meta.insert(OUTCOME_META_KEY.into(), envelope.mcp_meta());
    result.meta = Some(meta);
    result.structured_content = Some(structured_content(
        result.structured_content.take(),
        &envelope,
    ));
    result
}

impl ServerHandler for McpSurface {
    fn get_info(&self) -> ServerConfig {
        #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, still what clients use.
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .build();
        if passthrough::any(&self.state) {
            // A fronted server's tool list changes with it; its reads: its resources,
            // prompts and their completions.
            if let Some(tools) = capabilities.tools.as_mut() {
                tools.list_changed = Some(true);
            }
            capabilities.resources = Some(ResourcesCapability::default());
            capabilities.prompts = Some(PromptsCapability::default());
            capabilities.completions = Some(JsonObject::new());
        }
        // Long outcomes (in flight, unknown) become tasks for clients that declare the
        // extension too.
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("oncegate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Every tool goes through oncegate: calling a tool twice for one intent has the effect of calling it once. \
                 Read the first line of each result and follow it; a result that says \"do not call again\" means exactly that.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let principal = principal(&ctx)
            .map_err(|_| McpError::internal_error("the request was not authenticated", None))?;
        let mut tools = Vec::new();
        for cap in self.callable(&principal) {
            tools.push(self.tool(&cap).await);
        }
        Ok(ListToolsResult {
            tools,
            ..Default::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, ctx).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let principal = principal(&ctx)
            .map_err(|_| McpError::internal_error("the request was not authenticated", None))?;
        tasks::get(&self.state, &principal, &request.task_id, tool_result).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Err(McpError::invalid_request(
            format!(
                "task `{}`: an effect that may already have reached the provider cannot be cancelled; poll tasks/get for its outcome",
                request.task_id
            ),
            None,
        ))
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        // A 2025-11-25 session hears a fronted server's list changes on its own stream,
        // until it ends.
        if !passthrough::any(&self.state) {
            return;
        }
        let mut changes = self.state.fronted().changes();
        let peer = context.peer;
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            // A lagged receiver missed changes: one notification covers them all.
            while let Ok(()) | Err(RecvError::Lagged(_)) = changes.recv().await {
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
        (passthrough::any(&self.state) && requested.tools_list_changed == Some(true)).then(|| {
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build()
        })
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), McpError> {
        // A 2026-07-28 subscription hears the list changes until the client cancels it.
        let mut changes = self.state.fronted().changes();
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

    #[allow(deprecated)] // MCP logging: deprecated by SEP-2577, still what clients use.
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        *self
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(log_rank(request.level));
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        if !self.reads_fronted(&ctx)? {
            return Ok(ListPromptsResult::default());
        }
        Ok(passthrough::list_prompts(&self.state).await)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let principal = self.reads_fronted_or_refuse(&ctx)?;
        passthrough::get_prompt(&self.state, &principal, request)
            .await
            .map(GetPromptResponse::from)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        if !self.reads_fronted(&ctx)? {
            return Ok(ListResourcesResult::default());
        }
        Ok(passthrough::list_resources(&self.state).await)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        if !self.reads_fronted(&ctx)? {
            return Ok(ListResourceTemplatesResult::default());
        }
        Ok(passthrough::list_resource_templates(&self.state).await)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let principal = self.reads_fronted_or_refuse(&ctx)?;
        passthrough::read_resource(&self.state, &principal, request)
            .await
            .map(ReadResourceResponse::from)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let principal = self.reads_fronted_or_refuse(&ctx)?;
        passthrough::complete(&self.state, &principal, request).await
    }
}

impl McpSurface {
    /// Whether this request's principal sees fronted servers' resources and prompts:
    /// those who see tools (agents and admins).
    fn reads_fronted(&self, ctx: &RequestContext<RoleServer>) -> Result<bool, McpError> {
        let principal = principal(ctx)
            .map_err(|_| McpError::internal_error("the request was not authenticated", None))?;
        Ok(matches!(principal.role, Role::Agent | Role::Admin))
    }

    fn reads_fronted_or_refuse(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Principal, McpError> {
        if self.reads_fronted(ctx)? {
            principal(ctx)
                .map_err(|_| McpError::internal_error("the request was not authenticated", None))
        } else {
            Err(McpError::invalid_request(
                "approvers read no fronted server's resources or prompts",
                None,
            ))
        }
    }
}
