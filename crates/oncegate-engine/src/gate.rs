//! `Gate`: the in-process engine. Load, decide, commit, execute, record.
//!
//! Why one file: one long file today: issue 10 moves the engine to oncegate-engine and
//! splits claim, complete and approvals.
//!
//! A Rust agent runtime uses it directly:
//!
//! ```no_run
//! # async fn demo(registry: oncegate_core::Registry) -> Result<(), oncegate_engine::GateError> {
//! use oncegate_core::EffectResult;
//! use oncegate_engine::{Call, Gate};
//!
//! let gate = Gate::open(registry).await?;
//! let call = Call::new("charge_card", serde_json::json!({"order_id": "A-1", "amount": "12.50"}));
//! let outcome = gate
//!     .invoke("planner", call, |intent| async move {
//!         // Call the provider with `intent.key` as its Idempotency-Key.
//!         EffectResult::Applied { effect_ref: Some("ch_1".into()), result: serde_json::json!({"id": "ch_1"}) }
//!     })
//!     .await?;
//! println!("{:?}", outcome.status);
//! # Ok(()) }
//! ```
//!
//! The effect runs in its own task: a caller that drops the `invoke` future never
//! aborts a side effect half-way, and the result is recorded regardless.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, RwLock};

use oncegate_core::codes::Code;
use oncegate_core::config::{Capability, Role};
use oncegate_core::decide::{
    self, Action, CallRequest, Choice, Decision, EffectResult, ReconcileResult, decide_approval,
};
use oncegate_core::intent::{IntentRecord, Outcome, Reason, Status};
use oncegate_core::key::{CallScope, DerivedKey, IntentKey, KeyError, derive};
use oncegate_core::policy::PolicyVerdict;
use oncegate_core::{Registry, intent};
use rand::Rng;
use serde_json::Value;

use oncegate_store::{Commit, OpenMode, Store, StoreError, StoreRead, StoreWrite};

use crate::clock::{Clock, SystemClock};
use crate::process::Process;

/// How many lost races one call tolerates before giving up with `OG-0015`.
const MAX_RACES: usize = 256;

/// A call as the agent made it.
#[derive(Clone, Debug)]
pub struct Call {
    /// The capability (tool) name.
    pub capability: String,
    /// The arguments.
    pub arguments: Value,
    /// The orchestrator's run id (never from the arguments).
    pub run_id: Option<String>,
    /// The orchestrator's step id.
    pub step_id: Option<String>,
    /// A coded orchestrator's own idempotency key (`Idempotency-Key`): bound to the
    /// intent it first names, for this principal and capability. Required by
    /// capabilities with `require_client_key`.
    pub client_key: Option<String>,
}

impl Call {
    /// A call without run or step ids.
    pub fn new(capability: impl Into<String>, arguments: Value) -> Self {
        Self {
            capability: capability.into(),
            arguments,
            run_id: None,
            step_id: None,
            client_key: None,
        }
    }

    /// Sets the client's own idempotency key.
    pub fn client_key(mut self, key: impl Into<String>) -> Self {
        self.client_key = Some(key.into());
        self
    }

    /// Sets the run id.
    pub fn run(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// Sets the step id.
    pub fn step(mut self, step_id: impl Into<String>) -> Self {
        self.step_id = Some(step_id.into());
        self
    }
}

/// What an effect receives: the key to thread upstream and the call to make.
#[derive(Clone, Debug)]
pub struct IntentHandle {
    /// Thread this upstream (`Idempotency-Key`).
    pub key: String,
    /// The intent key.
    pub intent_key: IntentKey,
    /// The generation.
    pub generation: u32,
    /// The capability.
    pub capability: String,
    /// The arguments of the call that created this generation.
    pub arguments: Value,
    /// The normalised significant arguments.
    pub normalised: Value,
    /// The business reference.
    pub business_ref: Option<String>,
    /// The run id.
    pub run_id: Option<String>,
    /// The step id.
    pub step_id: Option<String>,
}

impl IntentHandle {
    fn of(record: &IntentRecord) -> Self {
        Self {
            key: record.upstream_key(),
            intent_key: record.key.clone(),
            generation: record.generation,
            capability: record.capability.clone(),
            arguments: record.arguments.clone(),
            normalised: record.normalised.clone(),
            business_ref: record.business_ref.clone(),
            run_id: record.run_id.clone(),
            step_id: record.step_id.clone(),
        }
    }
}

/// What one execution said, and, when its call outlived the answer it gave (an MCP
/// `tools/call` left running past its timeout), the call's real end still to come.
pub struct Attempt {
    /// What the gate records now (`unknown` for a call left running).
    pub result: EffectResult,
    /// The late answer, recorded through the same path when it arrives.
    pub late: Option<LateAnswer>,
}

impl Attempt {
    /// An attempt that ended with its answer.
    pub fn ended(result: EffectResult) -> Self {
        Self { result, late: None }
    }
}

/// The late end of a call that is still running.
pub struct LateAnswer {
    /// Resolves with what the call finally said (or `unknown` if it was given up).
    pub answer: std::pin::Pin<Box<dyn Future<Output = EffectResult> + Send>>,
    /// Kept alive until the late answer is recorded (e.g. a shutdown guard, so the
    /// process waits for the record, not only for the answer).
    pub hold: Option<Box<dyn std::any::Any + Send>>,
}

/// Runs effects and reconciliation reads for a gate.
pub trait Executor: Send + Sync + 'static {
    /// Executes the effect, threading `intent.key` upstream.
    fn execute(&self, intent: IntentHandle) -> impl Future<Output = EffectResult> + Send;
    /// Executes the effect like [`Executor::execute`], and hands over the late end of a
    /// call that keeps running after its answer (the gate records it when it comes).
    /// The default: every call ends with its answer.
    fn execute_attempt(&self, intent: IntentHandle) -> impl Future<Output = Attempt> + Send {
        let run = self.execute(intent);
        async move { Attempt::ended(run.await) }
    }
    /// Whether oncegate's own call for this intent's attempt (by `intent.key`) is still
    /// running in this process. While it is, the attempt may still take effect, so a
    /// reconciliation read's "not found" proves nothing (see
    /// `oncegate_core::decide::absence_unproven`). The default: calls end with their
    /// answer, so none is ever left running.
    fn attempt_running(&self, intent: &IntentHandle) -> bool {
        let _ = intent;
        false
    }
    /// Whether the call may proceed at all, checked after the key is derived and before
    /// anything is decided or claimed (`Err`: why not, answered as invalid arguments).
    /// The gateway renders the upstream URLs here and refuses `.`/`..` path segments.
    fn admit(&self, intent: &IntentHandle) -> Result<(), String> {
        let _ = intent;
        Ok(())
    }
    /// Asks the upstream whether the intent already took effect.
    fn reconcile(&self, intent: IntentHandle) -> impl Future<Output = ReconcileResult> + Send {
        let _ = intent;
        async {
            ReconcileResult::Undecidable {
                message: "no reconciliation read is available in this process".into(),
            }
        }
    }
}

struct FnExecutor<F>(F);

impl<F, Fut> Executor for FnExecutor<F>
where
    F: Fn(IntentHandle) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = EffectResult> + Send + 'static,
{
    fn execute(&self, intent: IntentHandle) -> impl Future<Output = EffectResult> + Send {
        (self.0)(intent)
    }
}

/// Why a call could not be decided at all (as opposed to an outcome such as `denied`).
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// No such capability.
    #[error("unknown capability `{0}`")]
    UnknownCapability(String),
    /// No such principal, or the wrong role.
    #[error("{0}")]
    Forbidden(String),
    /// The arguments do not make a key.
    #[error("invalid arguments: {0}")]
    InvalidArguments(#[from] KeyError),
    /// The executor refused the call before anything was claimed (e.g. an argument
    /// would change the upstream URL's path).
    #[error("invalid arguments: {0}")]
    Inadmissible(String),
    /// The arguments exceed a configured limit (`gateway.max_argument_*`).
    #[error(transparent)]
    Limit(#[from] oncegate_core::limits::LimitError),
    /// No such approval.
    #[error("unknown approval `{0}`")]
    UnknownApproval(String),
    /// No such intent.
    #[error("unknown intent `{0}`")]
    UnknownIntent(String),
    /// The capability requires a client idempotency key and the call has none.
    #[error("{0}")]
    ClientKeyMissing(String),
    /// The client key was first used for another intent.
    #[error("{0}")]
    ClientKeyReused(String),
    /// The principal's read rate cap (`gateway.read_rate_per_second`) is used up.
    #[error("{0}")]
    RateLimited(String),
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl GateError {
    /// The stable code.
    pub fn code(&self) -> Code {
        match self {
            GateError::UnknownCapability(_) => Code::UnknownCapability,
            GateError::Forbidden(_) => Code::Forbidden,
            GateError::InvalidArguments(_) | GateError::Inadmissible(_) => Code::InvalidArguments,
            GateError::Limit(e) => e.code(),
            GateError::UnknownApproval(_) | GateError::UnknownIntent(_) => Code::NotFound,
            GateError::ClientKeyMissing(_) => Code::ClientKeyMissing,
            GateError::ClientKeyReused(_) => Code::ClientKeyReused,
            GateError::RateLimited(_) => Code::RateLimited,
            GateError::Store(e) => e.code(),
        }
    }
}

/// The engine.
pub struct Gate {
    registry: Arc<Registry>,
    store: Store,
    clock: Arc<dyn Clock>,
    owner: String,
    /// Kill switches by target (`capability:NAME`, `agent:NAME`) with their reason.
    kill_switches: Arc<RwLock<HashMap<String, String>>>,
    /// Treat every policy as allow (only `oncegate verify`'s simulations, which test
    /// key recipes and controls, not policies).
    skip_policies: bool,
    /// Recent replays per intent, for the replay-storm alert.
    replays: Arc<std::sync::Mutex<ReplayStorms>>,
    /// Read rate cap: a token bucket per principal, (tokens, last refill).
    read_buckets: Arc<std::sync::Mutex<HashMap<String, (f64, jiff::Timestamp)>>>,
    /// The simulated process whose kill aborts this gate's effect tasks (`None`:
    /// plain `tokio::spawn`, the production case). See [`Process`].
    process: Option<Process>,
}

/// How long the replay-storm count runs.
const STORM_WINDOW: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);
/// Replays of one intent inside the window that raise the alert, for capabilities
/// without an attempt ceiling (otherwise the ceiling is the threshold).
const STORM_REPLAYS: u32 = 10;
/// Intents tracked at most; older windows are dropped first.
const STORM_TRACKED: usize = 10_000;

/// Replays are answered from the stored record without any write, so their count lives
/// in memory: it raises an alert, it controls nothing.
#[derive(Default)]
struct ReplayStorms {
    seen: HashMap<IntentKey, (jiff::Timestamp, u32)>,
}

impl ReplayStorms {
    /// Counts one replay; `Some(n)` exactly when the count reaches `threshold` (once per
    /// window, so a storm alerts once a minute, not on every call).
    fn note(&mut self, key: &IntentKey, now: jiff::Timestamp, threshold: u32) -> Option<u32> {
        if self.seen.len() >= STORM_TRACKED && !self.seen.contains_key(key) {
            self.seen
                .retain(|_, (start, _)| now < *start + STORM_WINDOW);
            if self.seen.len() >= STORM_TRACKED {
                return None;
            }
        }
        let entry = self.seen.entry(key.clone()).or_insert((now, 0));
        if now >= entry.0 + STORM_WINDOW {
            *entry = (now, 0);
        }
        entry.1 += 1;
        (entry.1 == threshold).then_some(entry.1)
    }
}

impl Clone for Gate {
    fn clone(&self) -> Self {
        Self {
            registry: self.registry.clone(),
            store: self.store.clone(),
            clock: self.clock.clone(),
            owner: self.owner.clone(),
            kill_switches: self.kill_switches.clone(),
            skip_policies: self.skip_policies,
            replays: self.replays.clone(),
            read_buckets: self.read_buckets.clone(),
            process: self.process.clone(),
        }
    }
}

impl Gate {
    /// Opens the existing store the registry names (relative SQLite paths resolve
    /// against the config file's directory); a missing or empty store is refused.
    pub async fn open(registry: Registry) -> Result<Self, GateError> {
        Self::open_with(registry, OpenMode::Existing).await
    }

    /// Opens the registry's store as `mode` says (`CreateIfMissing` for scratch
    /// stores), with the audit chain key from `[audit] chain_key_env`.
    pub async fn open_with(registry: Registry, mode: OpenMode) -> Result<Self, GateError> {
        let store = oncegate_store::open_registry_store(&registry, mode).await?;
        Ok(Self::with_store(registry, store, Arc::new(SystemClock)))
    }
}

fn random_hex(bytes: usize) -> String {
    let mut rng = rand::rng();
    (0..bytes)
        .map(|_| format!("{:02x}", rng.random::<u8>()))
        .collect()
}

fn store_down(record: Option<&IntentRecord>, key: Option<&IntentKey>, e: &StoreError) -> Outcome {
    Outcome {
        status: Status::Refused,
        key: key.cloned().or_else(|| record.map(|r| r.key.clone())),
        generation: record.map_or(1, |r| r.generation),
        attempt: record.map_or(1, |r| r.attempts),
        state: record.map(|r| r.state),
        effect_ref: None,
        result: None,
        approval_id: None,
        reason: Some(match e {
            StoreError::Integrity(_) => Reason::new(
                Code::StoreIntegrity,
                format!(
                    "the stored intent does not match the audit chain, so this call is refused and nothing is executed (fail closed); an operator must settle it: {e}"
                ),
            ),
            _ => Reason::new(
                e.code(),
                format!(
                    "the intent store is unavailable, so consequential calls are refused (fail closed): {e}"
                ),
            ),
        }),
        alerts: Vec::new(),
    }
}

fn contention(key: &IntentKey) -> Outcome {
    Outcome {
        status: Status::Refused,
        key: Some(key.clone()),
        generation: 1,
        attempt: 0,
        state: None,
        effect_ref: None,
        result: None,
        approval_id: None,
        reason: Some(Reason::new(
            Code::Contention,
            "too many concurrent writers on this intent; poll and do not re-issue",
        )),
        alerts: Vec::new(),
    }
}

impl Gate {
    /// A gate over any store, with an injected clock.
    pub fn with_store(registry: Registry, store: impl Into<Store>, clock: Arc<dyn Clock>) -> Self {
        let owner = format!("pid{}-{}", std::process::id(), random_hex(4));
        Self {
            registry: Arc::new(registry),
            store: store.into(),
            clock,
            owner,
            kill_switches: Arc::default(),
            skip_policies: false,
            replays: Arc::default(),
            read_buckets: Arc::default(),
            process: None,
        }
    }

    /// Spawns this gate's effect tasks as tasks of `process`, so that killing the
    /// process (a simulated crash) aborts them at whatever await point they reached,
    /// as a real crash would. Only the simulation needs this.
    pub fn in_process(mut self, process: Process) -> Self {
        self.process = Some(process);
        self
    }

    /// A gate that treats every policy as allow: for simulations that test key recipes
    /// and controls (`oncegate verify`), never for serving.
    pub fn without_policies(mut self) -> Self {
        self.skip_policies = true;
        self
    }

    /// Switches a capability or an agent off (`reason` Some) or on again (None), and
    /// appends the change to the audit chain first (it is refused if the store is down).
    /// `target` is `capability:NAME` or `agent:NAME`.
    pub async fn set_kill_switch(
        &self,
        actor: &str,
        target: &str,
        reason: Option<String>,
    ) -> Result<(), StoreError> {
        let event = oncegate_core::audit::AuditEvent {
            at: self.clock.now(),
            kind: oncegate_core::audit::AuditKind::Admin,
            key: None,
            generation: 0,
            capability: target.strip_prefix("capability:").map(str::to_owned),
            actor: actor.to_owned(),
            run_id: None,
            from: None,
            to: None,
            status: None,
            code: Some(Code::KillSwitch),
            detail: serde_json::json!({"kill_switch": target, "on": reason.is_some(), "reason": reason}),
        };
        self.store
            .commit(Commit {
                record: None,
                approval: None,
                event,
            })
            .await?;
        let mut map = self
            .kill_switches
            .write()
            .unwrap_or_else(|e| e.into_inner());
        match reason {
            Some(r) => map.insert(target.to_owned(), r),
            None => map.remove(target),
        };
        Ok(())
    }

    /// Counts a replay and raises the replay-storm alert when an intent that settled
    /// keeps being repeated.
    fn note_replay(&self, outcome: &mut Outcome, cap: &Capability) {
        let Some(key) = outcome.key.as_ref() else {
            return;
        };
        let threshold = cap.attempt_ceiling.unwrap_or(STORM_REPLAYS).max(2);
        let now = self.clock.now();
        let storm = self
            .replays
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .note(key, now, threshold);
        if let Some(replays) = storm {
            outcome.alerts.push(intent::Alert::ReplayStorm {
                replays,
                window_seconds: STORM_WINDOW.as_secs() as u32,
            });
        }
    }

    /// The kill switches that are on.
    pub fn kill_switches(&self) -> HashMap<String, String> {
        self.kill_switches
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn kill_switch_for(&self, capability: &str, principal: &str) -> Option<String> {
        let map = self.kill_switches.read().unwrap_or_else(|e| e.into_inner());
        map.get(&format!("capability:{capability}"))
            .or_else(|| map.get(&format!("agent:{principal}")))
            .map(|r| format!("switched off by an admin: {r}"))
    }

    /// A token bucket per principal for read capabilities (reads claim nothing, so this
    /// is what keeps a looping agent from hammering the upstream). Timed by the gate's
    /// clock.
    fn take_read_token(&self, principal: &str) -> Result<(), GateError> {
        let rate = f64::from(self.registry.gateway.read_rate_per_second);
        let now = self.clock.now();
        let mut buckets = self.read_buckets.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, last) = buckets.entry(principal.to_owned()).or_insert((rate, now));
        let elapsed = now.duration_since(*last).as_secs_f64().max(0.0);
        *tokens = (*tokens + elapsed * rate).min(rate);
        *last = now;
        if *tokens < 1.0 {
            return Err(GateError::RateLimited(format!(
                "more than {rate} reads per second"
            )));
        }
        *tokens -= 1.0;
        Ok(())
    }

    /// A coded orchestrator's own key names exactly one intent for this principal and
    /// capability: the first one it was sent with.
    async fn bind_client_key(
        &self,
        principal: &str,
        cap: &Capability,
        call: &Call,
        derived: &DerivedKey,
        now: jiff::Timestamp,
    ) -> Result<(), GateError> {
        let Some(client_key) = call.client_key.as_deref() else {
            return Err(GateError::ClientKeyMissing(format!(
                "capability {} requires an Idempotency-Key header",
                call.capability
            )));
        };
        let binding = oncegate_store::ClientKeyBinding {
            principal: principal.to_owned(),
            capability: cap.name.clone(),
            client_key: client_key.to_owned(),
            intent_key: derived.key.clone(),
            args_digest: derived.args_digest.clone(),
            created_at: now,
        };
        let held = self.store.bind_client_key(binding).await?;
        if held.intent_key != derived.key {
            return Err(GateError::ClientKeyReused(format!(
                "this Idempotency-Key was first used for intent {} with other significant arguments",
                held.intent_key
            )));
        }
        Ok(())
    }

    /// Resolves an unknown (or lease-expired) intent nobody is waiting for, from the
    /// upstream's record. Executes nothing. Used by the gateway's background sweep.
    pub async fn sweep_one<E: Executor>(
        &self,
        record: &IntentRecord,
        executor: Arc<E>,
    ) -> Result<Option<Outcome>, StoreError> {
        let Some(cap) = self.registry.capability(&record.capability).cloned() else {
            return Ok(None);
        };
        let handle = IntentHandle::of(record);
        // Sampled before the read: a call that had ended by then committed (if at all)
        // before it answered, so the read sees its effect.
        let running = executor.attempt_running(&handle);
        // The horizon is judged at the moment the read was asked: a read that reached the
        // provider before the horizon ended proves nothing about a commit just after it.
        let asked_at = self.clock.now();
        let answer = executor.reconcile(handle).await;
        let Some(d) = decide::after_sweep(record, answer, &cap, running, asked_at) else {
            return Ok(None);
        };
        self.store
            .commit(Commit {
                record: d.record,
                approval: None,
                event: d.event,
            })
            .await?;
        Ok(Some(d.outcome))
    }

    /// The intent key a call derives to now (the gate's clock), with its explanation;
    /// decides and writes nothing (`POST /v1/keys/derive`, `oncegate keys derive`).
    pub fn derive_key(&self, principal: &str, call: &Call) -> Result<DerivedKey, GateError> {
        let cap = self.capability(&call.capability)?;
        let scope = CallScope {
            run_id: call.run_id.as_deref(),
            step_id: call.step_id.as_deref(),
        };
        Ok(derive(
            &self.registry.gateway.tenant,
            principal,
            &cap,
            &call.arguments,
            &scope,
            self.clock.now(),
            &self.registry.gateway.time_zone,
        )?)
    }

    /// The gate's clock (everything it decides is timed by it).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn capability(&self, name: &str) -> Result<Arc<Capability>, GateError> {
        self.registry
            .capability(name)
            .cloned()
            .ok_or_else(|| GateError::UnknownCapability(name.to_owned()))
    }

    /// Invokes a capability with an effect closure that receives the intent.
    pub async fn invoke<F, Fut>(
        &self,
        principal: &str,
        call: Call,
        effect: F,
    ) -> Result<Outcome, GateError>
    where
        F: Fn(IntentHandle) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = EffectResult> + Send + 'static,
    {
        self.invoke_with(principal, call, Arc::new(FnExecutor(effect)))
            .await
    }

    /// Invokes a capability with an executor that can also reconcile.
    pub async fn invoke_with<E: Executor>(
        &self,
        principal: &str,
        call: Call,
        executor: Arc<E>,
    ) -> Result<Outcome, GateError> {
        let cap = self.capability(&call.capability)?;
        let killed = self.kill_switch_for(&cap.name, principal);
        let who = self
            .registry
            .principal(principal)
            .ok_or_else(|| GateError::Forbidden(format!("unknown principal `{principal}`")))?;
        if who.role != Role::Agent && who.role != Role::Admin {
            return Err(GateError::Forbidden(format!(
                "`{principal}` is an {} and cannot call capabilities",
                who.role.as_str()
            )));
        }
        if cap.category == oncegate_core::Category::Read {
            self.take_read_token(principal)?;
        }
        // Before anything is parsed further: a record must stay readable and replays small.
        oncegate_core::limits::check_arguments(&call.arguments, &self.registry.gateway.limits)?;
        let now = self.clock.now();
        let scope = CallScope {
            run_id: call.run_id.as_deref(),
            step_id: call.step_id.as_deref(),
        };
        let tenant = &self.registry.gateway.tenant;
        let derived = derive(
            tenant,
            principal,
            &cap,
            &call.arguments,
            &scope,
            now,
            &self.registry.gateway.time_zone,
        )?;
        let verdict = match &cap.policy {
            Some(_) if self.skip_policies => PolicyVerdict::Allow,
            Some(engine) => engine.evaluate(
                principal,
                who.role,
                tenant,
                &cap,
                derived.business_ref.as_deref(),
                &derived.normalised,
            ),
            None => PolicyVerdict::Allow,
        };
        executor
            .admit(&IntentHandle {
                key: intent::upstream_key(&derived.key, 1),
                intent_key: derived.key.clone(),
                generation: 1,
                capability: cap.name.clone(),
                arguments: call.arguments.clone(),
                normalised: Value::Object(derived.normalised.clone()),
                business_ref: derived.business_ref.clone(),
                run_id: call.run_id.clone(),
                step_id: call.step_id.clone(),
            })
            .map_err(GateError::Inadmissible)?;
        if call.client_key.is_some() || cap.require_client_key {
            // After every check that refuses the call (binding is a durable write), and
            // with the key derived above at the same `now`.
            self.bind_client_key(principal, &cap, &call, &derived, now)
                .await?;
        }

        for _ in 0..MAX_RACES {
            let now = self.clock.now();
            let loaded = async {
                let existing = self.store.load(&derived.key).await?;
                let approval = match existing.as_ref().and_then(|r| r.approval_id.as_deref()) {
                    Some(id) => self.store.approval(id).await?,
                    None => None,
                };
                let other_run = match (&existing, &derived.cross_key) {
                    (None, Some(cross)) => {
                        self.store
                            .find_other_run(cross, call.run_id.as_deref())
                            .await?
                    }
                    _ => None,
                };
                Ok::<_, StoreError>((existing, approval, other_run))
            }
            .await;
            let (existing, approval, other_run) = match loaded {
                Ok(l) => l,
                Err(e) if cap.category.is_consequential() => {
                    return Ok(store_down(None, Some(&derived.key), &e));
                }
                Err(_) => (None, None, None),
            };
            let approval_id = format!("ap_{}", random_hex(8));
            let req = CallRequest {
                principal,
                tenant,
                derived: &derived,
                arguments: &call.arguments,
                run_id: call.run_id.as_deref(),
                step_id: call.step_id.as_deref(),
                owner: &self.owner,
                approval: approval.as_ref(),
                other_run: other_run.as_ref(),
                kill_switch: killed.as_deref(),
                new_approval_id: &approval_id,
            };
            let decision = decide::decide(existing.as_ref(), &req, &cap, &verdict, now);
            if decision.action == Action::PassThrough {
                // Reads claim nothing; their audit entry is best effort.
                let _ = self
                    .store
                    .commit(Commit {
                        record: None,
                        approval: None,
                        event: decision.event,
                    })
                    .await;
                let mut outcome = decision.outcome;
                let handle = IntentHandle {
                    key: String::new(),
                    intent_key: derived.key.clone(),
                    generation: 0,
                    capability: cap.name.clone(),
                    arguments: call.arguments.clone(),
                    normalised: Value::Object(derived.normalised.clone()),
                    business_ref: derived.business_ref.clone(),
                    run_id: call.run_id.clone(),
                    step_id: call.step_id.clone(),
                };
                match executor.execute(handle).await {
                    EffectResult::Applied { effect_ref, result } => {
                        outcome.effect_ref = effect_ref;
                        outcome.result = Some(result);
                    }
                    EffectResult::Failed { message, result } => {
                        outcome.status = Status::Failed;
                        outcome.result = Some(result);
                        outcome.reason = Some(Reason::new(Code::UpstreamRejected, message));
                    }
                    EffectResult::Unknown { message } | EffectResult::NotSent { message } => {
                        // A read changes nothing: the agent may simply read again.
                        outcome.status = Status::Failed;
                        outcome.reason = Some(Reason::new(
                            Code::UpstreamRejected,
                            format!("the read did not complete: {message}"),
                        ));
                    }
                }
                return Ok(outcome);
            }
            let mut decision = decision;
            if decision.action == Action::Replay {
                self.note_replay(&mut decision.outcome, &cap);
            }
            match self
                .apply(
                    decision,
                    &cap,
                    principal,
                    executor.clone(),
                    Some(&call.arguments),
                )
                .await
            {
                Ok(outcome) => return Ok(outcome),
                Err(StoreError::Conflict) => {
                    tokio::task::yield_now().await;
                    continue;
                }
                Err(e) => return Ok(store_down(existing.as_ref(), Some(&derived.key), &e)),
            }
        }
        Ok(contention(&derived.key))
    }

    /// Commits a decision and carries out its action. `Conflict` means re-decide.
    /// `arguments`: the call that asked, when there is one; an intent reconciled absent
    /// re-executes with them (its significant arguments are the same by key; a
    /// corrected free-text argument is what the caller means now).
    async fn apply<E: Executor>(
        &self,
        decision: Decision,
        cap: &Arc<Capability>,
        actor: &str,
        executor: Arc<E>,
        arguments: Option<&Value>,
    ) -> Result<Outcome, StoreError> {
        let Decision {
            action,
            record,
            approval,
            outcome,
            event,
        } = decision;
        if action != Action::Replay {
            self.store
                .commit(Commit {
                    record: record.clone(),
                    approval,
                    event,
                })
                .await?;
        }
        log_alerts(&outcome, cap);
        match action {
            Action::Respond | Action::PassThrough | Action::Replay => Ok(outcome),
            Action::Execute => {
                let claimed = bump(record.expect("an Execute decision writes the claim"));
                Ok(self
                    .execute(claimed, cap.clone(), actor.to_owned(), executor)
                    .await)
            }
            Action::Reconcile => {
                let current = bump(record.expect("a Reconcile decision writes the record"));
                let handle = IntentHandle::of(&current);
                // Sampled before the read (see `sweep_one`).
                let running = executor.attempt_running(&handle);
                // Judged at the moment the read was asked (see `sweep_one`).
                let asked_at = self.clock.now();
                let answer = executor.reconcile(handle).await;
                // Apply the one answer; a lost race re-reads this generation and applies
                // it again (after_reconcile answers with the standing outcome once someone
                // else has resolved the intent) instead of re-deciding the whole call,
                // which would commit another reconcile and burn an attempt.
                let mut latest = current.clone();
                let mut outcome = None;
                for _ in 0..MAX_RACES {
                    let approval_id = format!("ap_{}", random_hex(8));
                    let mut next = decide::after_reconcile(
                        &latest,
                        answer.clone(),
                        cap,
                        actor,
                        &self.owner,
                        &approval_id,
                        running,
                        asked_at,
                    );
                    // A provider that dedupes on the key compares a repeated key's body
                    // with the first one: it gets the first arguments again.
                    if let (Action::Execute, Some(record), Some(args)) =
                        (next.action, next.record.as_mut(), arguments)
                        && !decide::dedupe_is_proof(cap)
                    {
                        record.arguments = args.clone();
                    }
                    match Box::pin(self.apply(next, cap, actor, executor.clone(), arguments)).await
                    {
                        Err(StoreError::Conflict) => match self
                            .store
                            .load_generation(&current.key, current.generation)
                            .await?
                        {
                            // A newer execution started since the read was asked: the
                            // answer speaks of the older attempt only, so it settles
                            // nothing; the caller hears where the intent stands now.
                            Some(fresh) if fresh.executions != current.executions => {
                                outcome = Some(decide::standing_outcome(&fresh));
                                break;
                            }
                            Some(fresh) => latest = fresh,
                            None => return Err(StoreError::Conflict),
                        },
                        other => {
                            outcome = Some(other?);
                            break;
                        }
                    }
                }
                let mut outcome = outcome.ok_or(StoreError::Conflict)?;
                outcome.attempt = current.attempts;
                Ok(outcome)
            }
        }
    }

    /// Runs the effect in its own task and records its result there, so nothing the
    /// caller does (dropping this future included) can lose it.
    async fn execute<E: Executor>(
        &self,
        claimed: IntentRecord,
        cap: Arc<Capability>,
        actor: String,
        executor: Arc<E>,
    ) -> Outcome {
        let gate = self.clone();
        let held = claimed.clone();
        let spawner = self.process.clone();
        let effect = async move {
            let attempt = executor.execute_attempt(IntentHandle::of(&held)).await;
            let outcome = gate.record(&held, attempt.result, &cap, &actor).await;
            if let Some(LateAnswer { answer, hold }) = attempt.late {
                // The call outlived its answer: its real end is recorded the same way
                // (a late `applied` settles the intent with its effect reference; a
                // late `unknown` moves the attempt's end, and the settle horizon, later).
                let late = async move {
                    let result = answer.await;
                    tracing::info!(key = %held.key, result = ?result, "an attempt's late answer arrived; recording it");
                    gate.record(&held, result, &cap, &actor).await;
                    drop(hold);
                };
                match &spawner {
                    Some(process) => drop(process.spawn(late)),
                    None => drop(tokio::spawn(late)),
                }
            }
            outcome
        };
        let task = match &self.process {
            Some(process) => process.spawn(effect),
            None => tokio::spawn(effect),
        };
        match task.await {
            Ok(outcome) => outcome,
            Err(e) => {
                // Panicked, or aborted with its process (a simulated crash).
                tracing::error!(key = %claimed.key, error = %e, "effect task ended without recording; the intent reads unknown once its lease expires");
                decide::outcome_of(
                    &claimed,
                    Status::Unknown,
                    Some(Reason::new(
                        Code::UpstreamUnknown,
                        "the effect task failed; the outcome is unknown; do not re-issue",
                    )),
                )
            }
        }
    }

    /// Records an effect's result, re-reading on lost races and retrying a store that
    /// is briefly unavailable: a result that happened must not be dropped.
    async fn record(
        &self,
        claimed: &IntentRecord,
        result: EffectResult,
        cap: &Capability,
        actor: &str,
    ) -> Outcome {
        let mut current = claimed.clone();
        let mut outage = 0u32;
        for _ in 0..MAX_RACES {
            let decision = decide::record_claim_effect(
                &current,
                claimed.executions,
                result.clone(),
                cap,
                actor,
                self.clock.now(),
            );
            let outcome = decision.outcome.clone();
            let error = match self
                .store
                .commit(Commit {
                    record: decision.record,
                    approval: None,
                    event: decision.event,
                })
                .await
            {
                Ok(()) => {
                    let mut outcome = outcome;
                    outcome.attempt = current.attempts;
                    return outcome;
                }
                Err(StoreError::Conflict) => None,
                Err(e) => Some(e),
            };
            if let Some(e) = error {
                outage += 1;
                if outage > 5 {
                    tracing::error!(key = %claimed.key, error = %e, "could not record an effect's result; the intent reads unknown after its lease and is reconciled");
                    return decide::outcome_of(
                        claimed,
                        Status::Unknown,
                        Some(Reason::new(
                            Code::StoreUnavailable,
                            format!(
                                "the effect ran but its result could not be recorded ({e}); do not re-issue"
                            ),
                        )),
                    );
                }
                tokio::time::sleep(std::time::Duration::from_millis(50 << outage)).await;
            }
            match self
                .store
                .load_generation(&claimed.key, claimed.generation)
                .await
            {
                Ok(Some(fresh)) => current = fresh,
                Ok(None) => break,
                Err(_) => {
                    outage += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(50 << outage.min(6))).await;
                }
            }
        }
        decide::outcome_of(
            claimed,
            Status::Unknown,
            Some(Reason::new(
                Code::Contention,
                "the result could not be recorded after repeated races; do not re-issue",
            )),
        )
    }

    /// A human approves or denies. Approving executes the held intent once, here.
    pub async fn decide_approval<E: Executor>(
        &self,
        actor: &str,
        approval_id: &str,
        choice: Choice,
        executor: Arc<E>,
    ) -> Result<Outcome, GateError> {
        let who = self
            .registry
            .principal(actor)
            .ok_or_else(|| GateError::Forbidden(format!("unknown principal `{actor}`")))?;
        for _ in 0..MAX_RACES {
            let approval = self
                .store
                .approval(approval_id)
                .await?
                .ok_or_else(|| GateError::UnknownApproval(approval_id.to_owned()))?;
            let cap = self.capability(&approval.capability)?;
            let record = self
                .load_generation(&approval.key, approval.generation)
                .await?;
            let Some(record) = record else {
                return Err(GateError::UnknownApproval(approval_id.to_owned()));
            };
            if choice == Choice::Approve
                && let Some(why) = self.kill_switch_for(&cap.name, &record.principal)
            {
                // An approval does not outrank a kill switch; the approval stays pending.
                let mut o = decide::standing_outcome(&record);
                o.status = Status::Refused;
                o.reason = Some(Reason::new(Code::KillSwitch, why));
                return Ok(o);
            }
            match decide_approval(
                &record,
                &approval,
                actor,
                who.role,
                choice,
                &cap,
                &self.owner,
                self.clock.now(),
            ) {
                decide::ApprovalDecision::Rejected(reason) => {
                    if reason.code == Code::Forbidden {
                        return Err(GateError::Forbidden(reason.message));
                    }
                    let mut o = decide::standing_outcome(&record);
                    o.status = Status::Denied;
                    o.reason = Some(reason);
                    return Ok(o);
                }
                decide::ApprovalDecision::Decided {
                    action,
                    record: next,
                    approval,
                    outcome,
                    event,
                } => {
                    let d = Decision {
                        action,
                        record: next,
                        approval,
                        outcome,
                        event,
                    };
                    match self.apply(d, &cap, actor, executor.clone(), None).await {
                        // A second click while the first one's execution runs: wait for
                        // it, so every click answers with the one result.
                        Ok(o) if o.status == Status::InFlight => {
                            return Ok(self.settled(&record, &cap, o).await);
                        }
                        Ok(o) => return Ok(o),
                        Err(StoreError::Conflict) => continue,
                        Err(e) => return Ok(store_down(Some(&record), None, &e)),
                    }
                }
            }
        }
        Err(GateError::Store(StoreError::Conflict))
    }

    async fn load_generation(
        &self,
        key: &IntentKey,
        generation: u32,
    ) -> Result<Option<IntentRecord>, StoreError> {
        Ok(self
            .store
            .load(key)
            .await?
            .filter(|r| r.generation == generation))
    }

    /// Polls an in-flight intent until it settles or its lease runs out.
    async fn settled(&self, record: &IntentRecord, cap: &Capability, fallback: Outcome) -> Outcome {
        let deadline = tokio::time::Instant::now() + cap.lease.unsigned_abs();
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            match self
                .store
                .load_generation(&record.key, record.generation)
                .await
            {
                Ok(Some(r)) if r.state != intent::IntentState::InFlight => {
                    return decide::standing_outcome(&r);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        fallback
    }

    /// An admin resets a tripped breaker.
    pub async fn reset_breaker(&self, actor: &str, key: &IntentKey) -> Result<Outcome, GateError> {
        let who = self
            .registry
            .principal(actor)
            .ok_or_else(|| GateError::Forbidden(format!("unknown principal `{actor}`")))?;
        if who.role != Role::Admin {
            return Err(GateError::Forbidden("only admins reset breakers".into()));
        }
        for _ in 0..MAX_RACES {
            let Some(record) = self.store.load(key).await? else {
                return Err(GateError::UnknownIntent(key.to_string()));
            };
            let cap = self.capability(&record.capability)?;
            let d = decide::reset_breaker(&record, actor, &cap, self.clock.now());
            match self
                .store
                .commit(Commit {
                    record: d.record,
                    approval: None,
                    event: d.event,
                })
                .await
            {
                Ok(()) => return Ok(d.outcome),
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(GateError::Store(StoreError::Conflict))
    }
}

/// The stored version after a commit of `record`.
fn bump(mut record: IntentRecord) -> IntentRecord {
    record.version += 1;
    record
}

fn log_alerts(outcome: &Outcome, cap: &Capability) {
    for alert in &outcome.alerts {
        let kind = match alert {
            intent::Alert::CrossRun { .. } => "cross_run",
            intent::Alert::BreakerTripped { .. } => "breaker_tripped",
            intent::Alert::ReplayStorm { .. } => "replay_storm",
        };
        metrics::counter!("oncegate_alerts_total", "capability" => cap.name.clone(), "kind" => kind).increment(1);
        tracing::warn!(capability = %cap.name, key = ?outcome.key, alert = ?alert, "oncegate alert");
    }
}
