//! The one front door: how a call or an approval reaches the engine, from any surface.
//!
//! `POST /v1/calls`, MCP `tools/call`, `POST /v1/intents/claim` and the approval routes
//! each authenticate their own way (a header, the MCP middleware), then [`Door::open`]
//! looks the capability up and builds its executor, and [`Door::call`] / [`Door::claim`]
//! / [`Door::decide`] run the engine in a task of
//! their own: a caller that hangs up (a closed MCP stream is a cancel) never cancels a
//! claim or an effect half-way, and the outcome, its alerts and its metrics are recorded
//! whatever the caller does. The engine applies the read rate cap and the client-key
//! binding with its own clock. A task that panics or is cancelled is an internal error
//! (OG-0055), never a store failure.

use std::future::Future;
use std::sync::Arc;

use axum::http::StatusCode;
use oncegate_core::codes::Code;
use oncegate_core::config::{Capability, Category};
use oncegate_core::decide::Choice;
use oncegate_core::intent::{Outcome, Status};
use oncegate_engine::{Call, Claimed, Gate, GateError};
use tracing::{Instrument, Span};

use crate::error::ApiError;
use crate::state::{AppState, Principal};
use crate::trace::Parent;
use crate::upstream::UpstreamExecutor;

/// A capability looked up and its executor built, ready to take a call.
pub(crate) struct Door {
    state: AppState,
    capability: Arc<Capability>,
    executor: Arc<UpstreamExecutor>,
    /// The trace context the call arrived with: the parent of its decision span.
    parent: Parent,
}

impl Door {
    /// The door to `capability` (404 `OG-0016` when the registry has none and no fronted
    /// server lists it; a fronted server's tool its `undeclared` policy refuses, or one
    /// of a server whose tool list is not read yet, is refused with the reason).
    pub(crate) fn open(state: &AppState, capability: &str) -> Result<Self, ApiError> {
        let capability = match state.gate().find_capability(capability) {
            Some(cap) => cap,
            // A fronted server's tool that is not callable says why.
            None => {
                return Err(state.fronted().refusal(capability).unwrap_or_else(|| {
                    ApiError::Gate(GateError::UnknownCapability(capability.to_owned()))
                }));
            }
        };
        Ok(Self {
            executor: executor(state, Arc::clone(&capability)),
            state: state.clone(),
            capability,
            parent: Parent::default(),
        })
    }

    /// The door to what was started under `capability`, offered now or not (a fronted
    /// tool its server stopped listing): for settling it, never for a new call.
    pub(crate) fn settling(state: &AppState, capability: &str) -> Result<Self, ApiError> {
        let capability = state
            .gate()
            .settling_capability(capability)
            .ok_or_else(|| ApiError::Gate(GateError::UnknownCapability(capability.to_owned())))?;
        Ok(Self {
            executor: executor(state, Arc::clone(&capability)),
            state: state.clone(),
            capability,
            parent: Parent::default(),
        })
    }

    /// The door with the trace context its call arrived with (see [`crate::trace`]).
    pub(crate) fn traced(mut self, parent: Parent) -> Self {
        self.parent = parent;
        self
    }

    /// The capability behind the door.
    pub(crate) fn capability(&self) -> &Arc<Capability> {
        &self.capability
    }

    /// Decides and executes one call. A claim-only capability (no upstream here, and
    /// not a dry run) is refused with `OG-0025`: its callers execute it themselves,
    /// through [`Door::claim`].
    pub(crate) async fn call(self, principal: &Principal, call: Call) -> Result<Outcome, ApiError> {
        if self.capability.is_claim_only() {
            return Err(ApiError::Coded(
                StatusCode::CONFLICT,
                Code::ClaimOnly,
                format!(
                    "capability {} is executed by its callers (it has no upstream here): claim it with POST /v1/intents/claim, execute it, and complete the claim",
                    self.capability.name
                ),
            ));
        }
        let who = principal.clone();
        let span = self.span(principal, "call", Some(&call));
        self.spawn_in(span, principal, "call", move |gate, executor| async move {
            gate.invoke_with(who.who(), call, executor).await
        })
        .await
    }

    /// Decides and claims one call for its caller to execute (the two-phase API): the
    /// caller executes what is claimed and completes it. The upstream executor is only
    /// asked to admit the call and, for an unknown intent, for its reconciliation read.
    pub(crate) async fn claim(
        self,
        principal: &Principal,
        call: Call,
    ) -> Result<Claimed, ApiError> {
        let who = principal.clone();
        let span = self.span(principal, "claim", Some(&call));
        self.spawn_in(span, principal, "claim", move |gate, executor| async move {
            gate.claim_with(who.who(), call, executor).await
        })
        .await
    }

    /// Approves or denies a held call (approving executes it, once; for a claim-only
    /// capability it leaves the call for its caller's next claim).
    /// `note` is the human's why, kept in the audit record (a deny's is what the agent
    /// is told); `run` and `step` are the held call's, for the decision span.
    pub(crate) async fn decide(
        self,
        principal: &Principal,
        approval_id: String,
        choice: Choice,
        note: Option<String>,
        (run, step): (Option<&str>, Option<&str>),
    ) -> Result<Outcome, ApiError> {
        let who = principal.clone();
        let span = self.span(principal, "approval", None);
        span.record("oncegate.run_id", run);
        span.record("oncegate.step_id", step);
        self.spawn_in(
            span,
            principal,
            "approval",
            move |gate, executor| async move {
                gate.decide_approval_noted(
                    who.who(),
                    &approval_id,
                    choice,
                    note.as_deref(),
                    executor,
                )
                .await
            },
        )
        .await
    }

    /// The decision span of `what` through this door (see [`crate::trace`]).
    fn span(&self, principal: &Principal, what: &'static str, call: Option<&Call>) -> Span {
        crate::trace::decision_span(what, &self.capability, &principal.name, call, &self.parent)
    }

    /// Runs `work` through [`spawn_in`], inside the decision span `span`: the task
    /// carries it, so the store commits, the upstream call and the reconciliation read
    /// are its children. Alerts and metrics are recorded in the task, so a caller that
    /// hangs up does not lose them.
    async fn spawn_in<W, F, T>(
        self,
        span: Span,
        principal: &Principal,
        what: &'static str,
        work: W,
    ) -> Result<T, ApiError>
    where
        W: FnOnce(Gate, Arc<UpstreamExecutor>) -> F + Send + 'static,
        F: Future<Output = Result<T, GateError>> + Send + 'static,
        T: Decided + Send + 'static,
    {
        let principal = principal.name.clone();
        let Door {
            state,
            capability,
            executor,
            parent: _,
        } = self;
        let outer = state.clone();
        spawn_in(&outer, span, what, async move {
            let decided = work(state.gate().clone(), executor).await;
            match decided.as_ref().map(Decided::outcome) {
                Ok(Some(o)) => {
                    state.console_alerts().record(
                        o,
                        &capability.name,
                        &principal,
                        state.gate().clock().now(),
                    );
                    crate::alerts::send(
                        &state.http(),
                        state.gate().registry().gateway.alert_webhook.as_ref(),
                        o,
                        &capability.name,
                        &principal,
                    );
                    let outcome = if capability.category == Category::Read {
                        "read"
                    } else {
                        o.status.as_str()
                    };
                    record_decision(outcome, o.status, &capability.name);
                }
                Ok(None) => record_decision("claimed", Status::InFlight, &capability.name),
                Err(_) => {}
            }
            let current = Span::current();
            match &decided {
                Ok(d) => crate::trace::record_decision(&current, d.status(), d.intent()),
                Err(_) => crate::trace::record_error(&current),
            }
            decided
        })
        .await
    }
}

/// The one spawning path: runs `work` in a task of its own, registered with the
/// in-flight count (so shutdown waits for it), inside `span`. A caller that hangs up (a
/// closed MCP stream is a cancel) never cancels a claim, an effect or a completion
/// half-way; a task that panics or is cancelled is an internal error (`OG-0055`) named
/// after `what`, never a store failure. The front door's decisions ([`Door::spawn_in`])
/// and the two-phase API's completions and heartbeats all run through it.
pub(crate) fn spawn_in<F, T>(
    state: &AppState,
    span: Span,
    what: &'static str,
    work: F,
) -> impl Future<Output = Result<T, ApiError>> + use<F, T>
where
    F: Future<Output = Result<T, GateError>> + Send + 'static,
    T: Send + 'static,
{
    let guard = state.inflight().enter();
    // Spawned here, not when the answer is first polled: only the task's handle is
    // held by the caller's future, never `work` itself.
    let task = tokio::spawn(
        async move {
            let _guard = guard;
            work.await
        }
        .instrument(span),
    );
    async move {
        task.await
            .map_err(|e| ApiError::internal(format!("the {what} task failed"), &e))?
            .map_err(ApiError::Gate)
    }
}

/// The executor of `capability` for this gateway: its shared HTTP client, in-flight
/// count, running MCP calls, pooled MCP clients and answer limits (the sweep's
/// executors too).
pub(crate) fn executor(state: &AppState, capability: Arc<Capability>) -> Arc<UpstreamExecutor> {
    Arc::new(
        UpstreamExecutor::new(state.http(), capability)
            .with_inflight(state.inflight().clone())
            .with_running(state.running().clone())
            .with_sessions(state.mcp_upstreams().clone())
            .with_limits(state.gate().registry().gateway.limits),
    )
}

/// What a door's task answers: an outcome, or a claim handed to the caller (`None`:
/// nothing to alert on; counted as `claimed`).
pub(crate) trait Decided {
    /// The outcome decided, if the answer is one.
    fn outcome(&self) -> Option<&Outcome>;

    /// The status its trace span carries (`claimed` for a claim handed over).
    fn status(&self) -> &'static str {
        self.outcome().map_or("claimed", |o| o.status.as_str())
    }

    /// The intent it names, for its trace span: key, generation, attempt.
    fn intent(&self) -> Option<(&str, u32, u32)> {
        let o = self.outcome()?;
        Some((o.key.as_ref()?.as_str(), o.generation, o.attempt))
    }
}

impl Decided for Outcome {
    fn outcome(&self) -> Option<&Outcome> {
        Some(self)
    }
}

impl Decided for Claimed {
    fn outcome(&self) -> Option<&Outcome> {
        match self {
            Claimed::Settled(o) => Some(o),
            Claimed::Execute(_) | Claimed::Read(_) => None,
        }
    }

    fn intent(&self) -> Option<(&str, u32, u32)> {
        match self {
            Claimed::Settled(o) => Some((o.key.as_ref()?.as_str(), o.generation, o.attempt)),
            Claimed::Execute(c) => Some((c.intent_key.as_str(), c.generation, c.attempt)),
            Claimed::Read(_) => None,
        }
    }

    fn status(&self) -> &'static str {
        match self {
            Claimed::Settled(o) => o.status.as_str(),
            Claimed::Execute(_) => "claimed",
            Claimed::Read(_) => "read",
        }
    }
}

/// Counts a decision (every surface): `outcome` is the status, or `claimed` for a claim
/// handed to its caller.
fn record_decision(outcome: &'static str, status: Status, capability: &str) {
    metrics::counter!("oncegate_decisions_total", "capability" => capability.to_owned(), "outcome" => outcome).increment(1);
    if outcome != "claimed" && matches!(status, Status::Replayed | Status::InFlight) {
        metrics::counter!("oncegate_duplicates_prevented_total", "capability" => capability.to_owned()).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use oncegate_core::codes::Code;
    use oncegate_core::config::Role;

    use super::*;

    const REGISTRY: &str = r#"
[store]
url = "sqlite://gw.db"

[[principals]]
name = "agent"
role = "agent"
token_env = "UNUSED_TOKEN_AGENT"

[[capabilities]]
name = "charge"
category = "keyed"
key = { business_ref = "order_id" }

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:9/v1/charges"
"#;

    #[tokio::test]
    async fn a_call_task_that_panics_is_an_internal_error_never_a_store_failure() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("c.toml"), REGISTRY).unwrap();
        let registry = oncegate_engine::config::load_registry(&dir.path().join("c.toml")).unwrap();
        let gate = Gate::open_with(registry, oncegate_store::OpenMode::CreateIfMissing)
            .await
            .unwrap();
        let state = AppState::with_tokens(gate, crate::upstream::client::http_client(), vec![]);
        assert!(matches!(
            Door::open(&state, "nope"),
            Err(ApiError::Gate(GateError::UnknownCapability(_)))
        ));
        let principal = Principal {
            name: "agent".into(),
            role: Role::Agent,
            issuer: None,
        };
        let door = Door::open(&state, "charge").unwrap();
        let span = door.span(&principal, "call", None);
        let error = door
            .spawn_in::<_, _, Outcome>(span, &principal, "call", |_, _| async {
                panic!("secret detail")
            })
            .await
            .unwrap_err();
        let (status, code, message) = error.parts();
        assert_eq!((status.as_u16(), code), (500, Code::Internal), "{message}");
        assert!(
            !message.contains("secret"),
            "internals stay in the log: {message}"
        );
        // The task's in-flight registration ended with it.
        assert_eq!(state.inflight().drain(Duration::ZERO).await, 0);
    }
}
