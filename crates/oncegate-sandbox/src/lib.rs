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
//! one create and lookup code here, so an effect is the same effect whichever surface
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

use std::{
    fmt,
    num::NonZeroUsize,
    str::FromStr,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use faults::{Fault, FaultKind, FaultQueue};
use ledger::{Commit, EffectFilter, KeyUse, Ledger, Lookup, NewEffect};

/// How a sandbox behaves; the defaults are a well-behaved provider without auth.
#[derive(Default, Clone)]
pub struct SandboxConfig {
    /// Resources whose creates (`POST` or MCP tool) ignore the idempotency key: every
    /// request is a new effect, and the key is not recorded, so a lookup by key finds
    /// nothing (`GET /v1/effects` still shows it as sent).
    pub ignore_idempotency_key: Vec<Resource>,
    /// When set, every `/v1` and `/mcp` request must carry `Authorization: Bearer <api_key>`.
    pub api_key: Option<String>,
}

// Written by hand so that logging a config never prints the API key.
impl fmt::Debug for SandboxConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SandboxConfig")
            .field("ignore_idempotency_key", &self.ignore_idempotency_key)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// A kind of resource the sandbox creates; each `POST` of one is an effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// `POST /v1/charges`.
    Charges,
    /// `POST /v1/refunds`.
    Refunds,
    /// `POST /v1/emails`.
    Emails,
    /// `POST /v1/ledger`.
    Ledger,
}

impl Resource {
    /// Every resource, in the order the API documents them.
    pub const ALL: [Resource; 4] = [
        Resource::Charges,
        Resource::Refunds,
        Resource::Emails,
        Resource::Ledger,
    ];

    /// The name used on the command line and in config (`charges`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Charges => "charges",
            Resource::Refunds => "refunds",
            Resource::Emails => "emails",
            Resource::Ledger => "ledger",
        }
    }

    /// The `POST` path that creates this resource.
    fn path(self) -> &'static str {
        match self {
            Resource::Charges => "/v1/charges",
            Resource::Refunds => "/v1/refunds",
            Resource::Emails => "/v1/emails",
            Resource::Ledger => "/v1/ledger",
        }
    }

    /// The `kind` of the effect a `POST` of this resource commits.
    fn effect_kind(self) -> &'static str {
        match self {
            Resource::Charges => "charge",
            Resource::Refunds => "refund",
            Resource::Emails => "email",
            Resource::Ledger => "ledger",
        }
    }

    /// The field that holds the object in a lookup answer (`{"found":true,"charge":..}`).
    fn lookup_field(self) -> &'static str {
        match self {
            Resource::Charges => "charge",
            Resource::Refunds => "refund",
            Resource::Emails => "email",
            Resource::Ledger => "entry",
        }
    }

    /// The prefix of the ids this resource is given, as real providers do (`ch_...`).
    fn id_prefix(self) -> &'static str {
        match self {
            Resource::Charges => "ch",
            Resource::Refunds => "re",
            Resource::Emails => "em",
            Resource::Ledger => "le",
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A resource name that is none of `charges`, `refunds`, `emails`, `ledger`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown sandbox resource {0:?}: expected one of charges, refunds, emails, ledger")]
pub struct ParseResourceError(String);

impl FromStr for Resource {
    type Err = ParseResourceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Resource::ALL
            .into_iter()
            .find(|resource| resource.as_str() == s)
            .ok_or_else(|| ParseResourceError(s.to_owned()))
    }
}

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

/// Longest accepted idempotency key, as at the providers the sandbox imitates.
const MAX_KEY_LEN: usize = 255;

/// Whether `key` can be an idempotency key. An empty or overlong one is refused rather
/// than taken as no key, since that would turn a retry into a second effect.
fn acceptable_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN
}

/// One sandbox's state, shared by every request on either surface.
struct Sandbox {
    config: SandboxConfig,
    ledger: Mutex<Ledger>,
    faults: Mutex<FaultQueue>,
    /// MCP tools taken out of the list (`PUT /_sandbox/mcp/hidden`).
    mcp_hidden: Mutex<std::collections::BTreeSet<String>>,
    /// MCP tools' descriptions replaced (`PUT /_sandbox/mcp/descriptions`).
    mcp_descriptions: Mutex<std::collections::BTreeMap<String, String>>,
    /// Told when the MCP tool list changes; every listening client hears it.
    tools_changed: tokio::sync::broadcast::Sender<()>,
}

/// A create that committed, or that replayed the commit of an earlier one.
#[derive(Debug)]
struct Created {
    /// What the provider answers: the new object, or the first one for a replay.
    object: Value,
    replayed: bool,
    /// What the request's fault still asks for once the effect is committed; each
    /// surface acts it out its own way.
    after_commit: AfterCommit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterCommit {
    Answer,
    /// `stall_after_commit`: wait this long, then answer.
    Stall(Duration),
    /// `drop_after_commit`: never answer.
    Drop,
}

/// Why a create committed nothing. Each surface maps it to its wire once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// `fail_before_commit`, or a commit task that died: the same to the caller.
    Internal,
    /// `decline`.
    CardDeclined,
    /// `rate_limit`.
    RateLimited,
    /// The key was used before with another body.
    KeyReused,
}

/// What a lookup asks for (`GET /v1/charges?..`, `find_charge`); every given criterion
/// must match.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LookupParams {
    idempotency_key: Option<String>,
    order_id: Option<String>,
    dedupe_ref: Option<String>,
}

/// What an effect listing asks for (`GET /v1/effects?..`, `list_effects`); every given
/// criterion must match. `after` and `limit` page it (see [`Sandbox::effects`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EffectsParams {
    kind: Option<String>,
    order_id: Option<String>,
    idempotency_key: Option<String>,
    /// RFC 3339; parsed here rather than by serde, so that the caller is told what a
    /// timestamp looks like.
    since: Option<String>,
    after: Option<u64>,
    limit: Option<u64>,
}

/// The largest page an effect listing answers, and the page size once `after` is given
/// without a `limit`.
const MAX_EFFECTS_PAGE: usize = 1000;

/// Why an effect listing cannot be made; the text is shown to the caller.
#[derive(Debug, PartialEq, Eq)]
struct InvalidListing(String);

/// Why a lookup cannot be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LookupError {
    /// No criterion at all: a lookup would match everything.
    NoCriterion,
    /// `dedupe_ref` on a resource other than emails.
    DedupeRefNotEmails,
}

impl Sandbox {
    fn new(config: SandboxConfig) -> Sandbox {
        Sandbox {
            config,
            ledger: Mutex::default(),
            faults: Mutex::default(),
            mcp_hidden: Mutex::default(),
            mcp_descriptions: Mutex::default(),
            tools_changed: tokio::sync::broadcast::channel(16).0,
        }
    }

    // A handler that panicked under a lock cannot leave the ledger half-written (every
    // mutation is a single push/insert), so a poisoned lock is still safe to use.
    fn hidden(&self) -> MutexGuard<'_, std::collections::BTreeSet<String>> {
        self.mcp_hidden
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn descriptions(&self) -> MutexGuard<'_, std::collections::BTreeMap<String, String>> {
        self.mcp_descriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn faults(&self) -> MutexGuard<'_, FaultQueue> {
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates `effect` as the provider does, from either surface: applies `fault` (the
    /// one the request asked for itself, else the next queued for the resource), then
    /// commits unless `key` says it already happened.
    ///
    /// Call it only for a request that is otherwise valid, so that a test's queued fault
    /// is not used up by some malformed call.
    async fn create(
        self: &Arc<Self>,
        effect: NewEffect,
        key: Option<String>,
        fault: Option<Fault>,
    ) -> Result<Created, Refusal> {
        let resource = effect.resource();
        let fault = fault.or_else(|| self.faults().take(resource));
        if let Some(fault) = fault {
            tracing::debug!(
                %resource,
                fault = fault.kind.as_str(),
                delay_ms = u64::try_from(fault.delay.as_millis()).unwrap_or(u64::MAX),
                "sandbox fault applied"
            );
        }
        match fault.map(|f| f.kind) {
            Some(FaultKind::FailBeforeCommit) => return Err(Refusal::Internal),
            Some(FaultKind::Decline) => return Err(Refusal::CardDeclined),
            Some(FaultKind::RateLimit) => return Err(Refusal::RateLimited),
            _ => {}
        }

        // The commit runs on its own task: a provider finishes a request whose caller hung
        // up, and a slow request that commits after the caller's timeout is exactly the
        // ambiguity the gateway has to survive. Dropping this future (an HTTP client that
        // disconnects, an MCP call that is cancelled) detaches the task; it never aborts
        // an effect half-way.
        let slow = fault
            .filter(|f| matches!(f.kind, FaultKind::Slow | FaultKind::SlowThenDrop))
            .map(|f| f.delay);
        let honoured = !self.config.ignore_idempotency_key.contains(&resource);
        let commit = tokio::spawn({
            let sandbox = Arc::clone(self);
            async move {
                if let Some(delay) = slow {
                    tokio::time::sleep(delay).await;
                }
                let key = KeyUse {
                    key: key.as_deref(),
                    honoured,
                };
                sandbox.ledger().commit(effect, key, Timestamp::now())
            }
        })
        .await
        .map_err(|_| Refusal::Internal)?;

        let (object, replayed) = match commit {
            Commit::Created(object) => (object, false),
            Commit::Replayed(object) => (object, true),
            Commit::KeyReused => return Err(Refusal::KeyReused),
        };
        let after_commit = match fault {
            Some(Fault {
                kind: FaultKind::StallAfterCommit,
                delay,
            }) => AfterCommit::Stall(delay),
            Some(Fault {
                kind: FaultKind::DropAfterCommit | FaultKind::SlowThenDrop,
                ..
            }) => AfterCommit::Drop,
            _ => AfterCommit::Answer,
        };
        Ok(Created {
            object,
            replayed,
            after_commit,
        })
    }

    /// `{"found":true,"charge":{..}}` with the first object of `resource` that matches
    /// `params`, or `{"found":false}`.
    fn lookup(&self, resource: Resource, params: &LookupParams) -> Result<Value, LookupError> {
        if params.dedupe_ref.is_some() && resource != Resource::Emails {
            return Err(LookupError::DedupeRefNotEmails);
        }
        let lookup = Lookup {
            idempotency_key: params.idempotency_key.as_deref(),
            order_id: params.order_id.as_deref(),
            dedupe_ref: params.dedupe_ref.as_deref(),
        };
        if lookup.idempotency_key.is_none()
            && lookup.order_id.is_none()
            && lookup.dedupe_ref.is_none()
        {
            return Err(LookupError::NoCriterion);
        }
        let found = self.ledger().find(resource, &lookup).cloned();
        Ok(match found {
            Some(object) => json!({ "found": true, resource.lookup_field(): object }),
            None => json!({ "found": false }),
        })
    }

    /// `{"effects":[..],"next":seq|null}`: the effects that match `params`, in commit
    /// order. With neither `after` nor `limit` that is every match (as callers from before
    /// paging expect); otherwise a page of `limit` (default and most
    /// [`MAX_EFFECTS_PAGE`]) after the `after` seq, whose `next` is the `after` of the
    /// following page when this one is full, else `null`.
    fn effects(&self, params: &EffectsParams) -> Result<Value, InvalidListing> {
        let resource = match params.kind.as_deref() {
            None => None,
            Some(kind) => Some(
                Resource::ALL
                    .into_iter()
                    .find(|r| r.effect_kind() == kind)
                    .ok_or_else(|| {
                        InvalidListing(format!(
                            "kind {kind:?} is not one of charge, refund, email, ledger"
                        ))
                    })?,
            ),
        };
        let since = match params.since.as_deref() {
            None => None,
            Some(text) => Some(text.parse::<Timestamp>().map_err(|e| {
                // A `+` in a query string arrives as a space: say so, it is the usual
                // reason a correct-looking offset is refused.
                let plus = if text.contains(' ') {
                    " (send a '+' offset as %2B in a query string)"
                } else {
                    ""
                };
                InvalidListing(format!(
                    "since must be an RFC 3339 timestamp such as 2026-01-31T09:30:00Z, \
                     not {text:?}{plus}: {e}"
                ))
            })?),
        };
        let limit = match (params.limit, params.after) {
            (None, None) => None,
            (None, Some(_)) => NonZeroUsize::new(MAX_EFFECTS_PAGE),
            (Some(limit), _) => Some(
                usize::try_from(limit)
                    .ok()
                    .filter(|limit| *limit <= MAX_EFFECTS_PAGE)
                    .and_then(NonZeroUsize::new)
                    .ok_or_else(|| {
                        InvalidListing(format!(
                            "limit must be from 1 to {MAX_EFFECTS_PAGE}, not {limit}"
                        ))
                    })?,
            ),
        };
        let filter = EffectFilter {
            resource,
            order_id: params.order_id.as_deref(),
            idempotency_key: params.idempotency_key.as_deref(),
            since,
            // A cursor past any `seq` there can be is an empty page, not an error.
            after: params
                .after
                .map_or(0, |after| usize::try_from(after).unwrap_or(usize::MAX)),
        };
        let page = self.ledger().effects(&filter, limit);
        Ok(json!({ "effects": page.effects, "next": page.next }))
    }

    /// `{"order_id","charges":[..],"refunds":[..]}`. The sandbox has no order catalogue:
    /// any order exists, with whatever was done to it.
    fn order(&self, order_id: &str) -> Value {
        let ledger = self.ledger();
        json!({
            "order_id": order_id,
            "charges": ledger.for_order(Resource::Charges, order_id),
            "refunds": ledger.for_order(Resource::Refunds, order_id),
        })
    }
}
