//! The one front door: how a call or an approval reaches the engine, from any surface.
//!
//! `POST /v1/calls`, MCP `tools/call` and the approval routes each authenticate their own
//! way (a header, the MCP middleware), then [`Door::open`] looks the capability up and
//! builds its executor, and [`Door::call`] / [`Door::decide`] run the engine in a task of
//! their own: a caller that hangs up (a closed MCP stream is a cancel) never cancels a
//! claim or an effect half-way, and the outcome, its alerts and its metrics are recorded
//! whatever the caller does. The engine applies the read rate cap and the client-key
//! binding with its own clock. A task that panics or is cancelled is an internal error
//! (OG-0055), never a store failure.

use std::future::Future;
use std::sync::Arc;

use oncegate_core::config::Capability;
use oncegate_core::decide::Choice;
use oncegate_core::intent::{Outcome, Status};
use oncegate_engine::{Call, Gate, GateError};

use crate::error::ApiError;
use crate::state::{AppState, Principal};
use crate::upstream::UpstreamExecutor;

/// A capability looked up and its executor built, ready to take a call.
pub(crate) struct Door {
    state: AppState,
    capability: Arc<Capability>,
    executor: Arc<UpstreamExecutor>,
}

impl Door {
    /// The door to `capability` (404 `OG-0016` when the registry has none).
    pub(crate) fn open(state: &AppState, capability: &str) -> Result<Self, ApiError> {
        let capability = state
            .gate()
            .registry()
            .capability(capability)
            .cloned()
            .ok_or_else(|| ApiError::Gate(GateError::UnknownCapability(capability.to_owned())))?;
        Ok(Self {
            executor: executor(state, Arc::clone(&capability)),
            state: state.clone(),
            capability,
        })
    }

    /// The capability behind the door.
    pub(crate) fn capability(&self) -> &Arc<Capability> {
        &self.capability
    }

    /// Decides and executes one call.
    pub(crate) async fn call(self, principal: &Principal, call: Call) -> Result<Outcome, ApiError> {
        let name = principal.name.clone();
        self.spawn(principal, "call", move |gate, executor| async move {
            gate.invoke_with(&name, call, executor).await
        })
        .await
    }

    /// Approves or denies a held call (approving executes it, once).
    pub(crate) async fn decide(
        self,
        principal: &Principal,
        approval_id: String,
        choice: Choice,
    ) -> Result<Outcome, ApiError> {
        let name = principal.name.clone();
        self.spawn(principal, "approval", move |gate, executor| async move {
            gate.decide_approval(&name, &approval_id, choice, executor)
                .await
        })
        .await
    }

    /// Runs `work` in its own task, registered with the in-flight count; alerts and
    /// metrics are recorded in the task, so a caller that hangs up does not lose them.
    async fn spawn<W, F>(
        self,
        principal: &Principal,
        what: &'static str,
        work: W,
    ) -> Result<Outcome, ApiError>
    where
        W: FnOnce(Gate, Arc<UpstreamExecutor>) -> F + Send + 'static,
        F: Future<Output = Result<Outcome, GateError>> + Send + 'static,
    {
        let guard = self.state.inflight().enter();
        let principal = principal.name.clone();
        let Door {
            state,
            capability,
            executor,
        } = self;
        let task = tokio::spawn(async move {
            let _guard = guard;
            let outcome = work(state.gate().clone(), executor).await;
            if let Ok(o) = &outcome {
                crate::alerts::send(
                    &state.http(),
                    state.gate().registry().gateway.alert_webhook.as_ref(),
                    o,
                    &capability.name,
                    &principal,
                );
                record_decision(o, &capability.name);
            }
            outcome
        });
        task.await
            .map_err(|e| ApiError::internal(format!("the {what} task failed"), &e))?
            .map_err(ApiError::Gate)
    }
}

/// The executor of `capability` for this gateway: its shared HTTP client, in-flight
/// count, running MCP calls and answer limits (the sweep's executors too).
pub(crate) fn executor(state: &AppState, capability: Arc<Capability>) -> Arc<UpstreamExecutor> {
    Arc::new(
        UpstreamExecutor::new(state.http(), capability)
            .with_inflight(state.inflight().clone())
            .with_running(state.running().clone())
            .with_limits(state.gate().registry().gateway.limits),
    )
}

/// Counts a decision (every surface).
fn record_decision(o: &Outcome, capability: &str) {
    metrics::counter!("oncegate_decisions_total", "capability" => capability.to_owned(), "outcome" => o.status.as_str()).increment(1);
    if matches!(o.status, Status::Replayed | Status::InFlight) {
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
        let registry = oncegate_store::load_registry(&dir.path().join("c.toml")).unwrap();
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
        };
        let door = Door::open(&state, "charge").unwrap();
        let error = door
            .spawn(&principal, "call", |_, _| async { panic!("secret detail") })
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
