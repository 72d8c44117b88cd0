//! oncegate-gateway: the only crate that knows wire formats.
//!
//! Module map, from the accept loop and the surfaces down to what they all use. The
//! files form a tree (no circles: the `tidy` test checks it), though a folder may span
//! heights: `state` holds `fronted::classify`'s `Fronted`, and `fronted::watch` reads
//! the state.
//!
//! ```text
//! server         the public face (re-exports only): AppState, app, serve, sweep, ...
//! serve          hyper accept loop, header read timeout, graceful drain
//! connections    connection caps per address and overall, eviction under pressure,
//!                first-byte and idle timeouts, the open-file limit
//! router         app(state) -> Router: the routes, /mcp, /console, body limit, JSON
//!                rejections, RFC 9728 metadata and the 401 challenge naming it;
//!                null_app: the same with the null gateway's /v1/calls
//! null           the null gateway's /v1/calls (bench only): authenticate, forward
//!                through the executor, no decision, no store
//! openapi        the OpenAPI document from the route handlers (refusals, header rules)
//! routes/        JSON API handlers by resource: calls (and keys), claims, intents,
//!                approvals, audit, admin, findings (detection and limits), tools,
//!                health (health, readiness, metrics); answers: the 200 shapes
//! console/       /console: pages by section, access (who may see or post), page
//!                (the frame), session (cookies, CSRF)
//! mcp/           /mcp: auth (middleware), surface (rmcp handler), schema, sessions
//! ops/           the service layer both surfaces call: approvals (load, detail,
//!                decide), switches (kill switches), audit (verify the chain)
//! sweep          the reconciliation loop (executors from the front door)
//! detection_scheduler  the duplicate rules run at their frequency, one replica a slot
//! fronted/       fronted MCP servers: watch (lists kept current, pins checked),
//!                classify (what each tool is to agents; refusals of the rest)
//! door           the one front door: capability lookup, executor, the engine in its
//!                own task, alerts and metrics after (POST /v1/calls, tools/call, approvals)
//! alerts         alert webhook template rendering and delivery
//! webhook        one signed delivery of an event (signature, verify, backoff) that
//!                the alert outbox retries; reads errors with upstream's reader
//! state/         AppState, tokens and authentication, MAX_BODY_BYTES; below it
//!                principal, console_sessions (signed-in browsers), recent_alerts
//! throttle       failed authentications counted per address and principal; Peer
//! identity       JWT access tokens: issuers, JWKS caches, claims to principal and role
//! headers        bearer token and structural id headers
//! paging         listing cursors (opaque, keyset), the page size cap, the page's
//!                byte budget
//! trace          W3C trace context in (headers, MCP _meta) and out (upstream calls),
//!                the decision span and what it records
//! error          ApiError: the one error-to-wire table (HTTP and MCP forms)
//! wire/          the gateway's own wire types: envelope (the one outcome type: JSON
//!                envelope, MCP _meta + line), intent and approval (core's records as
//!                the JSON API and console show them)
//! upstream/      executors: render (templates, path check), executor, http, tool_call
//!                (MCP effects), answer (within limits), mcp (client, sessions), client
//! tool_result    reading stored MCP tool results (shared by upstream::mcp and wire)
//! inflight       detached tasks shutdown waits for
//! metric_catalog every metric family (type, labels, HELP): described at start, exported
//!                at zero where the labels are known; docs/guide/tracing.md's table
//! //! ```
//!
//! `probe` stands beside this tree (it uses `upstream`; nothing in it uses `probe`). The
//! simulated provider is its own crate (oncegate-sandbox), reached only over the wire;
//! `oncegate demo` and `oncegate verify` live in the CLI.

pub mod alerts;
pub mod clock;
pub mod connections;
pub mod console;
pub mod detection_scheduler;
mod door;
pub mod error;
pub mod fronted;
mod headers;
pub mod identity;
pub mod inflight;
pub mod mcp;
mod metric_catalog;
mod null;
mod openapi;
mod ops;
pub mod paging;
pub mod probe;
mod router;
mod routes;
pub mod serve;
pub mod server;
pub mod state;
pub mod sweep;
pub mod throttle;
pub mod tool_result;
mod trace;
pub mod upstream;
pub mod webhook;
pub mod wire;
