//! The server's shared state: the Gate, the principals' tokens and the JWT verifier,
//! the upstream HTTP client, the metrics recorder and what is still running. Below the front door, the
//! routes, the MCP surface, the sweep and the accept loop, which all hold an
//! [`AppState`]; it knows no surface.

use std::sync::{Arc, OnceLock};

use axum::http::HeaderMap;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use oncegate_engine::Gate;
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::fronted::Fronted;
use crate::headers::bearer_token;
use crate::identity::Identity;
use crate::inflight::InFlight;
use crate::upstream::mcp::{RunningCalls, Sessions};

mod console_sessions;
mod principal;
mod recent_alerts;
mod request_seal;

pub(crate) use console_sessions::{ConsoleSessions, SESSION_COOKIE, SESSION_TTL, Session, secret};
pub use principal::Principal;
pub(crate) use recent_alerts::{Raised, RecentAlerts};
pub use request_seal::RequestSeal;
pub(crate) use request_seal::StateClaims;

/// The largest request body accepted (both surfaces).
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// Shared state of the server: one reference-counted pointer, so the clone every
/// extractor and middleware takes of it per request is one atomic increment (it was
/// about thirty, the gate's fields included, and shared cache lines between the cores).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// What [`AppState`] shares.
struct Shared {
    gate: Gate,
    tokens: Arc<Vec<(Vec<u8>, Principal)>>,
    /// `[identity]`: JWT access tokens from the issuers it trusts.
    identity: Option<Arc<Identity>>,
    http: reqwest::Client,
    metrics: PrometheusHandle,
    /// Calls and approvals whose effect may still be running (see [`InFlight`]).
    inflight: InFlight,
    /// Effects' MCP calls that have not ended yet (a timeout does not end them), so a
    /// reconciliation never concludes absence while one may still take effect.
    running: RunningCalls,
    /// Connected MCP upstream clients, reused across calls.
    mcp_upstreams: Sessions,
    /// Fronted MCP servers' tools, classified (see [`Fronted`]).
    fronted: Fronted,
    /// Cancelled at shutdown: ends MCP sessions and their open streams.
    mcp_shutdown: tokio_util::sync::CancellationToken,
    /// The console's signed-in browsers.
    console: ConsoleSessions,
    /// The alerts this process raised lately, for the console's "needs attention".
    console_alerts: RecentAlerts,
    /// Failed authentications per address and principal.
    auth_throttle: Arc<crate::throttle::AuthThrottle>,
    /// Seals the `requestState` of MCP calls held for approval.
    request_seal: RequestSeal,
}

impl AppState {
    /// Builds the state: tokens are read from the environment variables the registry
    /// names. A principal whose variable is unset cannot log in (and is reported).
    pub fn new(gate: Gate, http: reqwest::Client) -> (Self, Vec<String>) {
        let mut tokens = Vec::new();
        let mut missing = Vec::new();
        for p in &gate.registry().principals {
            match std::env::var(&p.token_env) {
                Ok(t) if !t.is_empty() => tokens.push((p.name.clone(), t)),
                _ => missing.push(format!("{} (${})", p.name, p.token_env)),
            }
        }
        (Self::with_tokens(gate, http, tokens), missing)
    }

    /// Builds the state with tokens given directly as (principal name, token), for an
    /// embedded gateway (the demo). Names not in the registry are ignored.
    pub fn with_tokens(gate: Gate, http: reqwest::Client, given: Vec<(String, String)>) -> Self {
        // Two principals sharing a token would make the login ambiguous: nobody gets it.
        let mut seen = std::collections::HashMap::new();
        for (_, t) in &given {
            *seen.entry(t.clone()).or_insert(0) += 1;
        }
        for (name, t) in &given {
            if seen.get(t).copied().unwrap_or(0) > 1 {
                tracing::error!(principal = %name, "this principal's token is shared with another principal; it cannot log in");
            }
        }
        let tokens = given
            .into_iter()
            .filter(|(_, t)| seen.get(t).copied() == Some(1))
            .filter(|(_, t)| !t.is_empty())
            .filter_map(|(name, t)| {
                let p = gate.registry().principal(&name)?;
                Some((
                    t.into_bytes(),
                    Principal {
                        name: p.name.clone(),
                        role: p.role,
                        issuer: None,
                    },
                ))
            })
            .collect();
        let identity = gate.registry().identity.as_ref().map(|settings| {
            let names = gate.registry().principals.iter().map(|p| p.name.clone());
            Arc::new(Identity::new(settings, names, http.clone()))
        });
        let metrics = metrics_handle();
        crate::metric_catalog::export_at_zero(gate.registry());
        let fronted = Fronted::new(gate.registry());
        let auth_throttle = Arc::new(crate::throttle::AuthThrottle::new(
            gate.registry().gateway.auth_failures_per_minute,
        ));
        let request_seal = RequestSeal::new(gate.store().chain_key());
        Self(Arc::new(Shared {
            gate,
            tokens: Arc::new(tokens),
            identity,
            http,
            metrics,
            inflight: InFlight::default(),
            running: RunningCalls::default(),
            mcp_upstreams: Sessions::default(),
            fronted,
            mcp_shutdown: tokio_util::sync::CancellationToken::new(),
            console: ConsoleSessions::default(),
            console_alerts: RecentAlerts::default(),
            auth_throttle,
            request_seal,
        }))
    }

    /// The gate.
    pub fn gate(&self) -> &Gate {
        &self.0.gate
    }

    /// How many principals can log in.
    pub fn principal_count(&self) -> usize {
        self.0.tokens.len()
    }

    /// The upstream HTTP client (shared connection pool).
    pub(crate) fn http(&self) -> reqwest::Client {
        self.0.http.clone()
    }

    /// The Prometheus recorder's handle.
    pub(crate) fn metrics(&self) -> &PrometheusHandle {
        &self.0.metrics
    }

    /// The detached tasks shutdown waits for.
    pub(crate) fn inflight(&self) -> &InFlight {
        &self.0.inflight
    }

    /// The effects' MCP calls still running.
    pub(crate) fn running(&self) -> &RunningCalls {
        &self.0.running
    }

    /// The connected MCP upstream clients.
    pub(crate) fn mcp_upstreams(&self) -> &Sessions {
        &self.0.mcp_upstreams
    }

    /// Fronted MCP servers' tools, as last read.
    pub fn fronted(&self) -> &Fronted {
        &self.0.fronted
    }

    /// Cancelled when the server shuts down.
    pub(crate) fn mcp_shutdown(&self) -> &tokio_util::sync::CancellationToken {
        &self.0.mcp_shutdown
    }

    /// The console's sessions.
    pub(crate) fn console(&self) -> &ConsoleSessions {
        &self.0.console
    }

    /// The alerts this process raised lately.
    pub(crate) fn console_alerts(&self) -> &RecentAlerts {
        &self.0.console_alerts
    }

    /// The seal on MCP `requestState` values.
    pub(crate) fn request_seal(&self) -> &RequestSeal {
        &self.0.request_seal
    }

    /// The JWT verifier, when `[identity]` is configured.
    pub(crate) fn identity(&self) -> Option<&Identity> {
        self.0.identity.as_deref()
    }

    /// The principal whose token the request carries: a static token of the registry,
    /// else a JWT an `[identity]` issuer signed (401 otherwise; 503 when the issuer's
    /// keys cannot be loaded).
    pub(crate) async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, ApiError> {
        let token = bearer_token(headers)?;
        Ok(self.authenticate_token(token).await?.0)
    }

    /// The principal `token` proves (as [`AppState::authenticate`]), and when the proof
    /// expires (a JWT's `exp`; `None` for a static token).
    ///
    /// Failed attempts are counted ([`crate::throttle`]): a new connection from an
    /// address with too many is refused (429 `OG-0057`) before its token is checked.
    pub(crate) async fn authenticate_token(
        &self,
        token: &str,
    ) -> Result<(Principal, Option<jiff::Timestamp>), ApiError> {
        let peer = crate::throttle::current_peer();
        if let Err(t) = self.0.auth_throttle.admit(peer.as_ref()) {
            return Err(throttled(t));
        }
        let checked = self.check_token(token).await;
        match &checked {
            Ok(_) => self.0.auth_throttle.succeeded(peer.as_ref()),
            Err(ApiError::Unauthenticated | ApiError::InvalidToken(_)) => {
                let named = self.0.identity.as_ref().and_then(|i| i.claimed_name(token));
                // The token is never logged; the name it claims is only a claim.
                tracing::info!(
                    address = ?peer.as_ref().map(|p| p.addr.ip()),
                    claimed = named.as_deref().unwrap_or("-"),
                    "authentication failed"
                );
                if let Err(t) = self.0.auth_throttle.failed(peer.as_ref(), named.as_deref()) {
                    return Err(throttled(t));
                }
            }
            Err(_) => {}
        }
        checked
    }

    async fn check_token(
        &self,
        token: &str,
    ) -> Result<(Principal, Option<jiff::Timestamp>), ApiError> {
        // Compare against every token in constant time; do not stop at the first match.
        let mut found = None;
        for (candidate, principal) in self.0.tokens.iter() {
            if bool::from(candidate.as_slice().ct_eq(token.as_bytes())) {
                found = Some(principal.clone());
            }
        }
        if let Some(principal) = found {
            return Ok((principal, None));
        }
        match &self.0.identity {
            Some(identity) if Identity::looks_like_jwt(token) => {
                let v = identity.verify(token).await?;
                let principal = Principal {
                    name: v.name,
                    role: v.role,
                    issuer: Some(v.issuer),
                };
                Ok((principal, v.expires))
            }
            _ => Err(ApiError::Unauthenticated),
        }
    }
}

fn throttled(t: crate::throttle::Throttled) -> ApiError {
    ApiError::Coded(
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        oncegate_core::codes::Code::AuthThrottled,
        format!(
            "too many failed authentication attempts; retry in {} s",
            t.retry_after.as_secs()
        ),
    )
}

fn metrics_handle() -> PrometheusHandle {
    // The recorder is global to the process; tests build the app many times.
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            let _ = metrics::set_global_recorder(recorder);
            crate::metric_catalog::describe();
            handle
        })
        .clone()
}
