//! `Gate`: the engine's handle. What it holds (registry, store, clock, in-memory
//! caches), how it is opened, its accessors, and the small helpers every operation
//! shares. The operations live beside it: claim/ (claim), complete.rs (complete,
//! heartbeat, recording), invoke.rs (invoke), approvals.rs, controls.rs, sweep.rs.
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

use std::collections::HashMap;
use std::sync::Arc;

use oncegate_core::codes::Code;
use oncegate_core::config::{Capability, Role};
use oncegate_core::intent::{self, IntentRecord, Outcome, Reason, Status};
use oncegate_core::key::{CallScope, DerivedKey, IntentKey, derive};
use oncegate_core::{Registry, decide};
use rand::Rng;

use oncegate_store::{IntentsRead, OpenMode, Store, StoreError};

use crate::call::Call;
use crate::clock::Clock;
use crate::error::GateError;
use crate::kill_switches::KillSwitchCache;
use crate::process::Process;
use crate::storms::ReplayStorms;
use crate::who::Who;

/// How many lost races one call tolerates before giving up with `OG-0015`.
pub(crate) const MAX_RACES: usize = 256;

/// One lock per agent with a call at its approval queue now (entries nobody holds are
/// dropped as others come, so the map holds the agents queueing at this moment). Here,
/// beside the gate that holds it, so that queue.rs (which takes the turns) sits above.
pub(crate) type QueueTurns = Arc<std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>;

/// The engine. Cloning it is one reference count (its shared parts sit behind one
/// `Arc`): the gateway clones it for every call's task.
#[derive(Clone)]
pub struct Gate {
    shared: Arc<Shared>,
    /// Treat every policy as allow (only `oncegate verify`'s simulations, which test
    /// key recipes and controls, not policies).
    pub(crate) skip_policies: bool,
    /// The simulated process whose kill aborts this gate's effect tasks (`None`:
    /// plain `tokio::spawn`, the production case). See [`Process`].
    pub(crate) process: Option<Process>,
}

/// What every clone of a [`Gate`] shares (read through `Deref`).
#[doc(hidden)]
pub struct Shared {
    pub(crate) registry: Arc<Registry>,
    pub(crate) store: Store,
    pub(crate) clock: Arc<dyn Clock>,
    /// Who holds the leases this gate's claims take.
    pub(crate) owner: String,
    /// The store's kill switches, cached (see kill_switches.rs).
    pub(crate) kill_switches: Arc<KillSwitchCache>,
    /// Recent replays per intent, for the replay-storm alert.
    pub(crate) replays: Arc<std::sync::Mutex<ReplayStorms>>,
    /// Read rate cap: a token bucket per principal, (tokens, last refill).
    pub(crate) read_buckets: Arc<std::sync::Mutex<HashMap<String, (f64, jiff::Timestamp)>>>,
    /// The capabilities of fronted MCP servers' undeclared tools, by name, with the
    /// alias of their server: they come from the servers' tool lists, not the config.
    pub(crate) fronted: Arc<std::sync::RwLock<FrontedCapabilities>>,
    /// The read-back slot each capability was last looked at in (read_back.rs).
    pub(crate) read_backs: Arc<std::sync::Mutex<HashMap<String, i64>>>,
    /// When each agent's full approval queue was last alerted on (queue.rs).
    pub(crate) queue_alerts: Arc<std::sync::Mutex<HashMap<String, jiff::Timestamp>>>,
    /// One turn per agent at its approval queue, from the count to the commit (queue.rs).
    pub(crate) queue_turns: QueueTurns,
}

impl std::ops::Deref for Gate {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// The fronted servers' undeclared tools: those offered now, and those a server stopped
/// listing, kept so that what was started under them settles (sweeps, denials,
/// completions) though no new call reaches them.
#[derive(Default)]
pub(crate) struct FrontedCapabilities {
    /// A tool's name -> (its server's alias, the capability it is called through).
    current: HashMap<String, (String, Arc<Capability>)>,
    retired: HashMap<String, (String, Arc<Capability>)>,
}

impl Gate {
    /// The holder a new claim by `principal` asks for: this gate instance, a fresh
    /// 128-bit nonce which only the claim's holder learns (see [`crate::Fence`]; the
    /// lease stores its seal, never the nonce), and who claims.
    pub(crate) fn claim_holder(&self, principal: &str) -> String {
        decide::claim_owner(&self.owner, &random_hex(16), principal)
    }

    /// The owner of a background work claim (a reconciliation): this gate instance and
    /// a fresh nonce, so a call's read and the sweep of one process take turns too.
    pub(crate) fn work_holder(&self) -> String {
        format!("{}/{}", self.owner, random_hex(16))
    }

    /// Opens the existing store the registry names (relative SQLite paths resolve
    /// against the config file's directory); a missing or empty store is refused.
    pub async fn open(registry: Registry) -> Result<Self, GateError> {
        Self::open_with(registry, OpenMode::Existing).await
    }

    /// Opens the registry's store as `mode` says (`CreateIfMissing` for scratch
    /// stores), with the audit chain key from `[audit] chain_key_env`.
    pub async fn open_with(registry: Registry, mode: OpenMode) -> Result<Self, GateError> {
        let chain_key = crate::config::chain_key_from_env(&registry)?;
        let store = oncegate_store::open_registry_store(&registry, mode, chain_key).await?;
        Ok(Self::on_store(registry, store))
    }

    /// A gate over any store, deciding by the store's clock (`Store::clock`): the one
    /// time authority, whatever this host's clock says. What serving uses.
    pub fn on_store(registry: Registry, store: impl Into<Store>) -> Self {
        let store = store.into();
        let clock = store.clock();
        Self::with_store(registry, store, clock)
    }

    /// A gate over any store, with an injected clock (tests and simulations that move
    /// time themselves; serving uses [`Gate::on_store`]).
    pub fn with_store(registry: Registry, store: impl Into<Store>, clock: Arc<dyn Clock>) -> Self {
        let owner = format!("pid{}-{}", std::process::id(), random_hex(4));
        Self {
            shared: Arc::new(Shared {
                registry: Arc::new(registry),
                store: store.into(),
                clock,
                owner,
                kill_switches: Arc::default(),
                replays: Arc::default(),
                read_buckets: Arc::default(),
                fronted: Arc::default(),
                read_backs: Arc::default(),
                queue_alerts: Arc::default(),
                queue_turns: Arc::default(),
            }),
            skip_policies: false,
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

    /// The gate's clock (everything it decides is timed by it): the store's, unless a
    /// test injected another.
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

    pub(crate) fn capability(&self, name: &str) -> Result<Arc<Capability>, GateError> {
        self.settling_capability(name)
            .ok_or_else(|| GateError::UnknownCapability(name.to_owned()))
    }

    /// A capability that is offered now, by name: the registry's, else a fronted
    /// server's undeclared tool (the registry always wins).
    pub fn find_capability(&self, name: &str) -> Option<Arc<Capability>> {
        if let Some(cap) = self.registry.capability(name) {
            return Some(Arc::clone(cap));
        }
        self.fronted
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .current
            .get(name)
            .map(|(_, cap)| Arc::clone(cap))
    }

    /// A capability to settle what was started under it: one offered now, else a
    /// fronted tool its server has stopped listing (since this process read it).
    pub fn settling_capability(&self, name: &str) -> Option<Arc<Capability>> {
        self.find_capability(name).or_else(|| {
            self.fronted
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retired
                .get(name)
                .map(|(_, cap)| Arc::clone(cap))
        })
    }

    /// Replaces the undeclared tools of the fronted server `alias` (its tool list was
    /// read, or changed): calls to a tool no longer listed are unknown from now on.
    /// Names the registry declares are skipped: the registry always wins; so are names
    /// another server holds (a name never moves from one server to another under a
    /// call or an approval).
    pub fn set_fronted(&self, alias: &str, capabilities: Vec<Arc<Capability>>) {
        let mut fronted = self
            .fronted
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let FrontedCapabilities { current, retired } = &mut *fronted;
        let (gone, kept): (HashMap<_, _>, HashMap<_, _>) = current
            .drain()
            .partition(|(_, (server, _))| server == alias);
        *current = kept;
        for cap in capabilities {
            let held = current.get(&cap.name).is_some_and(|(s, _)| s != alias);
            if self.registry.capability(&cap.name).is_none() && !held {
                retired.remove(&cap.name);
                current.insert(cap.name.clone(), (alias.to_owned(), cap));
            }
        }
        for (name, entry) in gone {
            if !current.contains_key(&name) {
                retired.insert(name, entry);
            }
        }
    }

    /// The fronted servers' undeclared tools, by name.
    pub fn fronted_capabilities(&self) -> Vec<Arc<Capability>> {
        let mut caps: Vec<_> = self
            .fronted
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .current
            .values()
            .map(|(_, cap)| Arc::clone(cap))
            .collect();
        caps.sort_by(|a, b| a.name.cmp(&b.name));
        caps
    }

    /// The principal's role: as proved, else the registry's (`Forbidden` for a name the
    /// registry does not know).
    pub(crate) fn role_of(&self, who: Who<'_>) -> Result<Role, GateError> {
        who.role(&self.registry)
            .ok_or_else(|| GateError::Forbidden(format!("unknown principal `{}`", who.name())))
    }

    /// The principal's role, if it may call capabilities (agents and admins).
    pub(crate) fn caller(&self, who: Who<'_>) -> Result<Role, GateError> {
        let principal = who.name();
        let role = self.role_of(who)?;
        if role != Role::Agent && role != Role::Admin {
            return Err(GateError::Forbidden(format!(
                "`{principal}` is an {} and cannot call capabilities",
                role.as_str()
            )));
        }
        Ok(role)
    }

    pub(crate) async fn load_generation(
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
}

pub(crate) fn random_hex(bytes: usize) -> String {
    let mut rng = rand::rng();
    (0..bytes)
        .map(|_| format!("{:02x}", rng.random::<u8>()))
        .collect()
}

pub(crate) fn store_down(
    record: Option<&IntentRecord>,
    key: Option<&IntentKey>,
    e: &StoreError,
) -> Outcome {
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

pub(crate) fn contention(key: &IntentKey) -> Outcome {
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

/// The stored version after a commit of `record`.
pub(crate) fn bump(mut record: IntentRecord) -> IntentRecord {
    record.version += 1;
    record
}

pub(crate) fn log_alerts(outcome: &Outcome, cap: &Capability) {
    for alert in &outcome.alerts {
        let kind = match alert {
            intent::Alert::CrossRun { .. } => "cross_run",
            intent::Alert::BreakerTripped { .. } => "breaker_tripped",
            intent::Alert::ReplayStorm { .. } => "replay_storm",
            intent::Alert::ApprovalQueueFull { .. } => "approval_queue_full",
        };
        metrics::counter!("oncegate_alerts_total", "capability" => cap.name.clone(), "kind" => kind).increment(1);
        tracing::warn!(capability = %cap.name, key = ?outcome.key, alert = ?alert, "oncegate alert");
    }
}
