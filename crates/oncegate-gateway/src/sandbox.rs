//! `oncegate sandbox`: a simulated payment / messaging / ledger provider.
//!
//! It is a real HTTP JSON server (never a mock) that the demo, the tests and the
//! benchmarks point the gateway at, and then count effects on: every charge, refund,
//! email and ledger entry it ever committed is listed by `GET /v1/effects`. It behaves
//! like the providers the gateway has to cope with: it honours `Idempotency-Key` (or,
//! per resource, ignores it), and an admin API queues faults that make a request fail
//! before commit, or commit and then stall past the caller's timeout or drop the
//! connection. Effects live in memory only: the ledger survives nothing but its own
//! process.
//!
//! The HTTP API is documented on [`router`].

mod conn;
mod faults;
mod http;
mod ledger;

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

/// How a sandbox behaves; the defaults are a well-behaved provider without auth.
#[derive(Default, Clone)]
pub struct SandboxConfig {
    /// Resources whose `POST` ignores `Idempotency-Key`: every request is a new effect,
    /// and the key is not recorded, so a lookup by key finds nothing.
    pub ignore_idempotency_key: Vec<Resource>,
    /// When set, every `/v1` request must carry `Authorization: Bearer <api_key>`.
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

/// The sandbox's HTTP API as a router (all bodies JSON, amounts in integer minor units).
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
/// - `GET /v1/effects[?kind=charge&order_id=O&idempotency_key=K]` → `{"effects":[..]}`,
///   every committed effect in commit order; `idempotency_key` there is the header as
///   sent, whether or not the provider honoured it.
///
/// Admin API (no auth): `POST /_sandbox/faults` `{path, fault, times?, delay_ms?}` queues
/// a fault for the next `times` (default 1) `POST`s to `path`; `GET` lists and `DELETE`
/// clears the queue; `GET /_sandbox/health`. A `Sandbox-Fault: <fault>` header (with an
/// optional `Sandbox-Fault-Delay-Ms`) applies a fault to one request and leaves the queue
/// alone. Faults: `fail_before_commit` (500), `decline` (402), `rate_limit` (429) commit
/// nothing; `slow` waits `delay_ms` (default 2000) and then commits even if the caller
/// has hung up; `stall_after_commit` commits and then waits `delay_ms` (default 30000)
/// before answering; `drop_after_commit` commits and closes the connection unanswered.
///
/// `drop_after_commit` needs the socket, which only [`serve`] has: a router served some
/// other way (or driven with `oneshot`) commits and answers 500 `drop_requires_serve`.
pub fn router(config: SandboxConfig) -> axum::Router {
    http::router(config)
}

/// Serves the sandbox on `listener` until the process ends.
pub async fn serve(listener: TcpListener, config: SandboxConfig) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, ?config, "sandbox listening");
    }
    let app = router(config).into_make_service_with_connect_info::<conn::Severer>();
    axum::serve(conn::SeverableListener::new(listener), app).await
}
