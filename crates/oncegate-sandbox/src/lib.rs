//! `oncegate sandbox`: a simulated payment / messaging / ledger provider.
//!
//! It is a real server (never a mock) that the demo, the tests and the benchmarks point
//! the gateway at, and then count effects on: every charge, refund, email and ledger
//! entry it ever committed is listed by `GET /v1/effects`. It behaves like the providers
//! the gateway has to cope with: it honours idempotency keys (or, per resource, ignores
//! them), and an admin API queues faults that make a request fail before commit, or
//! commit and then stall past the caller's timeout or never answer. Effects live in
//! memory only: the ledger survives nothing but its own process.
//!
//! One ledger, two surfaces: an HTTP JSON API under `/v1` (the `http` module) and an
//! MCP server at `/mcp` whose tools do the same things (the `mcp` module). Both call the
//! one create and lookup code (the `provider` module), so an effect is the same effect whichever surface
//! made it, and a queued fault breaks the next create of its resource on either.
//!
//! Both surfaces are documented on [`router`].
//!
//! It depends on no other oncegate crate and shares no code with the gateway: the
//! gateway knows it only over the wire, as it would a real provider.

mod conn;
mod faults;
mod http;
mod ledger;
mod mcp;
mod provider;
mod resource;

use std::sync::Arc;

use tokio::net::TcpListener;

use provider::Sandbox;

pub use provider::SandboxConfig;
pub use resource::{ParseResourceError, Resource};

/// The sandbox as a router: its HTTP API, its MCP server and its admin API (all bodies
/// JSON, amounts in integer minor units).
///
/// Provider API (under `/v1`; with an `api_key`, each call needs `Authorization: Bearer`):
///
/// - `POST /v1/charges`, `POST /v1/refunds` `{order_id, amount_minor, currency, memo?}`,
///   `POST /v1/emails` `{order_id, to, template, body?, dedupe_ref?}`, `POST /v1/ledger`
///   (any object): create the resource and answer it with its id (`ch_`, `re_`, `em_`,
///   `le_`). A repeated `Idempotency-Key` answers the first result (header
///   `Idempotent-Replayed: true`) and commits nothing; with another body it is a 422
///   `idempotency_key_reused`. Resources in `ignore_idempotency_key` commit every `POST`.
/// - `GET /v1/{charges,refunds,emails,ledger}?idempotency_key=K` (also `order_id=O`, and
///   `dedupe_ref=D` for emails; every given parameter must match) →
///   `{"found":true,"charge":{..}}` with the first match, or `{"found":false}`.
/// - `GET /v1/orders/{order_id}` → `{"order_id","charges":[..],"refunds":[..]}`.
/// - `GET /v1/effects[?kind=charge&order_id=O&idempotency_key=K&since=T&after=S&limit=N]`
///   → `{"effects":[{seq,kind,id,order_id,amount_minor,currency,idempotency_key,at,
///   request,traceparent}..],"next":S|null}`, the committed effects that match, in commit
///   (`seq`) order, whichever surface committed them; `idempotency_key` there is the key
///   as sent, whether or not the provider honoured it, and `traceparent` the W3C trace
///   context the creating request carried (its `traceparent` header, or over MCP
///   `_meta.traceparent`), `null` without one. `since` (RFC 3339, a `+` sent as `%2B`)
///   keeps effects with `at >= since`; `after` keeps those with `seq > after`; `limit`
///   (1 to 1000) caps the page. With neither `after` nor `limit` the answer is every
///   match and `next` is `null`; otherwise a page of `limit` (default 1000) whose `next`
///   is its last `seq` when the page is full (there may be more), else `null`. So a
///   reader pages with `?since=T&limit=100`, then `&after=<next>` until `next` is `null`.
///   A bad parameter is a 400 `invalid_query`.
///
/// MCP server at `/mcp` (Streamable HTTP; the same `Authorization: Bearer` rule as `/v1`;
/// only loopback `Host` headers are accepted, against DNS rebinding). Clients of the
/// 2025-11-25 era initialize and get an `Mcp-Session-Id`; 2026-07-28 requests are served
/// statelessly. While a create tool runs it logs one line (`notifications/message`, info:
/// `accepted charges for order A-1`) and, to a caller that sent a `progressToken`,
/// reports `accepted` then `committed`. Tools, each the twin of an HTTP call above and
/// answering the same JSON as `structuredContent` (and as one text block):
///
/// - `create_charge`, `create_refund` `{order_id, amount_minor, currency, memo?,
///   idempotency_key?}`, `send_email` `{order_id, to, template, body?, dedupe_ref?,
///   idempotency_key?}`, `append_ledger` (any object, plus `idempotency_key?`). The key
///   is the `idempotency_key` argument or `_meta["dev.oncegate/idempotency_key"]` (both
///   given and different: `idempotency_key_conflict`); it is not part of the stored
///   body, so a call and a `POST` with the same key and body are one effect. A replay
///   answers the first result with `_meta["dev.oncegate/idempotent_replayed"] = true`.
/// - `find_charge`, `find_refund`, `find_email`, `find_ledger_entry` `{idempotency_key?,
///   order_id?, dedupe_ref? (emails)}` and `get_order` `{order_id}`: read-only lookups.
/// - `list_effects` `{kind?, order_id?, idempotency_key?, since?, after?, limit?}`
///   (`after` and `limit` integers): read-only, `GET /v1/effects` with those parameters.
///
/// A refusal is a tool result with `isError: true` and `structuredContent` `{"error":
/// code, "detail"?}`, with the codes of the HTTP API (`invalid_request`,
/// `idempotency_key_reused`, `card_declined`, `rate_limited`, ...); only a provider
/// failure (`fail_before_commit`) is a JSON-RPC internal error (-32603).
///
/// Admin API (no auth): `POST /_sandbox/faults` `{path, fault, times?, delay_ms?}` queues
/// a fault for the next `times` (default 1) creates of the resource at `path`, over
/// either surface; `GET` lists and `DELETE` clears the queue; `GET /_sandbox/health`;
/// `PUT /_sandbox/mcp/hidden` `{"tools": [..]}` takes those MCP tools out of the list
/// (and out of reach) and tells every listening MCP client the list changed (`GET`
/// shows them); `PUT /_sandbox/mcp/descriptions` `{"tools": {"<tool>": "<text>"}}`
/// replaces those tools' descriptions (an empty object restores the catalogue's) and
/// tells the listening clients the same way: a server changing under its callers. A
/// `Sandbox-Fault: <fault>` header (with an optional `Sandbox-Fault-Delay-Ms`) applies a
/// fault to one `POST` and leaves the queue alone. Faults: `fail_before_commit` (500),
/// `decline` (402), `rate_limit` (429) commit nothing; `slow` waits `delay_ms` (default
/// 2000) and then commits even if the caller has hung up; `slow_then_drop` waits the
/// same way, commits, and then never answers (as `drop_after_commit`); `stall_after_commit` commits
/// and then waits `delay_ms` (default 30000) before answering; `drop_after_commit`
/// commits and closes the connection unanswered (over MCP: holds the call unanswered
/// until the client cancels it or goes away). A commit never depends on the caller
/// staying: it runs on its own task.
///
/// `drop_after_commit` over HTTP needs the socket, which only [`serve`] has: a router
/// served some other way (or driven with `oneshot`) commits and answers 500
/// `drop_requires_serve`.
pub fn router(config: SandboxConfig) -> axum::Router {
    http::router(Arc::new(Sandbox::new(config)))
}

/// Serves the sandbox on `listener` until the process ends.
pub async fn serve(listener: TcpListener, config: SandboxConfig) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, ?config, "sandbox listening");
    }
    let app = router(config).into_make_service_with_connect_info::<conn::Severer>();
    axum::serve(conn::SeverableListener::new(listener), app).await
}
