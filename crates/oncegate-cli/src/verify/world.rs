//! What every `oncegate verify` scenario of one capability runs over: the registry, the
//! capability, the principal calling, sample arguments and their drifted spellings,
//! and how to get a scratch gate and a simulated provider for one scenario.

use std::sync::Arc;

use jiff::Timestamp;
use oncegate_core::config::{Capability, Category, KeyThreading, Registry};
use oncegate_core::intent::Outcome;
use oncegate_core::normalise::ArgPath;
use oncegate_engine::{Call, Gate, ManualClock};
use oncegate_store::{OpenMode, StoreOptions};
use serde_json::Value;

use super::samples::samples;
use super::simulated::Simulated;

/// One capability's verification world.
pub(super) struct World<'a> {
    pub(super) registry: &'a Registry,
    pub(super) cap: &'a Capability,
    pub(super) principal: &'a str,
    /// The simulated provider dedupes on the key only where the capability says it may
    /// (keyed or idempotent) and the key actually reaches it.
    pub(super) honours_key: bool,
    /// Sample 0's arguments.
    pub(super) args: Value,
    /// The drifted spellings of each significant argument of `args`.
    pub(super) drifts: Vec<(ArgPath, Value)>,
}

impl<'a> World<'a> {
    /// The world for `cap` of `registry`, called as `principal`.
    pub(super) fn new(registry: &'a Registry, cap: &'a Capability, principal: &'a str) -> Self {
        let threaded = cap
            .upstream
            .as_ref()
            .is_none_or(|u| u.idempotency != KeyThreading::None);
        let honours_key =
            threaded && matches!(cap.category, Category::Keyed | Category::IdempotentWrite);
        let (args, drifts) = samples(cap, 0);
        Self {
            registry,
            cap,
            principal,
            honours_key,
            args,
            drifts,
        }
    }

    /// A call of the capability with `args`, in the verification's run and step.
    pub(super) fn call(&self, args: Value) -> Call {
        Call {
            capability: self.cap.name.clone(),
            client_key: client_key_for(self.cap, &args),
            arguments: args,
            run_id: Some("verify-run".into()),
            step_id: Some("verify-step".into()),
        }
    }

    /// A fresh simulated provider, honouring the key as the capability's would.
    pub(super) fn sim(&self) -> Arc<Simulated> {
        Arc::new(Simulated::new(self.honours_key))
    }

    /// Calls the capability with `args` through `gate`, executed by `up`.
    pub(super) async fn invoke(
        &self,
        gate: &Gate,
        args: Value,
        up: &Arc<Simulated>,
    ) -> Result<Outcome, String> {
        gate.invoke_with(self.principal, self.call(args), up.clone())
            .await
            .map_err(|e| e.to_string())
    }

    /// A gate on a scratch store of its own (kept while the directory lives), timed by
    /// `clock`, that treats every policy as allow.
    pub(super) async fn scratch_gate(
        &self,
        clock: ManualClock,
    ) -> Result<(Gate, tempfile::TempDir), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let store = oncegate_store::open(
            "sqlite://verify.db",
            dir.path(),
            OpenMode::Create,
            StoreOptions::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok((
            Gate::with_store(self.registry.clone(), store, Arc::new(clock)).without_policies(),
            dir,
        ))
    }

    /// A scratch gate whose clock stands still at now.
    pub(super) async fn fresh_gate(&self) -> Result<(Gate, tempfile::TempDir), String> {
        self.scratch_gate(ManualClock::new(Timestamp::now())).await
    }
}

/// The client key a coded orchestrator would send for a capability that requires one:
/// one per distinct request (a drifted re-plan of the same intent may carry a new key;
/// the key only must never name two intents).
fn client_key_for(cap: &Capability, args: &Value) -> Option<String> {
    cap.require_client_key
        .then(|| format!("verify-{}", oncegate_core::key::digest(args)))
}
