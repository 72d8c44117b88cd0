//! `POST /mcp`: the capabilities as MCP tools, over Streamable HTTP (rmcp).
//!
//! Both protocol eras are served: 2026-07-28 clients (`server/discover`, per-request
//! `_meta`, no session) and 2025-11-25 clients (`initialize`, `Mcp-Session-Id`). The
//! bearer token authenticates exactly as on the JSON API (401 with `WWW-Authenticate`
//! before any JSON-RPC is read); the principal travels to the handler in the request's
//! extensions.
//!
//! `tools/call` takes the same path as `POST /v1/calls`: the decision and the effect run
//! in their own task, so an agent that closes its stream never aborts an effect
//! half-way, and the result is recorded whatever the caller does. Every answer carries
//! `_meta["dev.oncegate/outcome"]` and, first in `content`, one plain line the model can
//! act on (several agent frameworks drop `_meta`), and `structuredContent.oncegate` (others
//! hand the model only structured output). Applied and replayed calls return the
//! upstream's own result after that line (`content` untouched, `structuredContent` with
//! its fields untouched);
//! denied, refused, unknown, in-flight, pending approval and failed calls are tool
//! execution errors (`isError: true`). JSON-RPC errors are kept for malformed requests
//! and unknown tools.
//!
//! Modules: [`auth`] (the middleware: bearer token, session binding, body checks before
//! rmcp reads anything), [`surface`] (the rmcp handler: tools/list, tools/call through
//! the front door, the outcome as a tool result), [`schema`] (tool input schemas and
//! annotations from the registry), [`sessions`] (who opened each session, and rmcp's session state, in the store),
//! [`in_band`] (a held call answered `input_required` with the approval page, and its
//! retry's `requestState` checked and used once), [`tasks`] (in-flight and unknown
//! outcomes as tasks of the Tasks extension, polled with `tasks/get`).

pub mod auth;
pub mod in_band;
pub mod passthrough;
pub mod schema;
pub mod sessions;
pub mod surface;
pub mod tasks;

use std::sync::Arc;

use axum::Router;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

pub use self::auth::authenticate;
pub use self::schema::derived_schema;
pub use self::sessions::Sessions;
pub use self::surface::{McpSurface, RUN_ID_META_KEY, STEP_ID_META_KEY, tool_result};
use crate::state::{AppState, MAX_BODY_BYTES};
pub use crate::wire::OUTCOME_META_KEY;

/// `/mcp`, authenticated by [`authenticate`] before rmcp reads anything; merged into the
/// gateway's router.
pub fn router<S: Clone + Send + Sync + 'static>(state: AppState) -> Router<S> {
    let sessions = Sessions::of(state.gate(), Arc::new(LocalSessionManager::default()));
    let mcp = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn_with_state(
            auth::Auth {
                state: state.clone(),
                sessions: sessions.clone(),
            },
            authenticate,
        ))
        .service(service(state, &sessions));
    Router::new().nest_service("/mcp", mcp)
}

/// The Streamable HTTP service to nest at `/mcp`.
pub fn service(
    state: AppState,
    sessions: &Sessions,
) -> StreamableHttpService<McpSurface, LocalSessionManager> {
    let settings = &state.gate().registry().gateway;
    let mut config = StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(state.mcp_shutdown().child_token())
        .with_allowed_hosts(settings.mcp_allowed_hosts.clone());
    config = if settings.mcp_allowed_origins.is_empty() {
        // Agents and SDKs send no Origin; a browser page does. Without a list, none.
        config.enforce_origin_validation()
    } else {
        config.with_allowed_origins(settings.mcp_allowed_origins.clone())
    };
    // Sessions live in the store: one opened on another replica (or before a restart)
    // is restored from its `initialize` parameters.
    config.session_store = Some(Arc::new(sessions.clone()));
    let surface = McpSurface::new(state);
    StreamableHttpService::new(move || Ok(surface.session()), sessions.manager(), config)
}
