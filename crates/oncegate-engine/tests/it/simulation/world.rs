//! The simulated world of one schedule: the provider, the executor the gateway calls it
//! with, gateway instances (a `Gate` on the shared in-memory store, its sweep, its
//! process), the agents and approvers, and the invariant checks.
//!
//! Why one file: the provider, the gateway instances and the checks share one world
//! state that every schedule mutates; plan.rs (what happens) is apart, and so is the
//! thief (world/thief.rs), an actor with a model of its own (what it can learn) that
//! only calls the gates and reports what they answered.
//!
//! Everything runs on one current-thread tokio runtime with a paused clock, so the only
//! sources of order are the plan, the seeded generators and tokio's deterministic
//! scheduler.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use oncegate_core::audit::verify_shard;
use oncegate_core::config::HoldOn;
use oncegate_core::decide::Choice;
use oncegate_core::intent::{ApprovalReason, ApprovalState, IntentState, Outcome, Status};
use oncegate_core::{EffectResult, IntentKey, ReconcileResult, Registry};
use oncegate_engine::{
    Call, Claim, Claimed, Clock, Executor, Gate, GateError, IntentHandle, Process, StoreClock,
    Ticks, TokioClock,
};
use oncegate_store::{AuditRead, IntentFilter, IntentsRead, LimitsRead, MemoryStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::plan::{CALM_AT, CallPlan, ControlKind, Host, IntentPlan, Plan, Worker};

mod thief;

pub use thief::{STEALS, STEALS_ACCEPTED, read_steals_accepted};

/// The stat that counts workers' lies (`not_sent` for an applied effect).
pub const LIES: &str = "two-phase completions that said not_sent for an applied effect (lies)";

/// Which clock the gates decide by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clocks {
    /// Today's engine on the PostgreSQL model: the store keeps its own time and judges
    /// leases, attempt ends, limit windows and approval deadlines by it; each gate
    /// decides by its estimate of the store's clock (a `StoreClock` sampled from the
    /// store, run on ticks no wall-clock step moves). The hosts' clocks decide nothing.
    Store,
    /// What the engine did before one clock decided: each gate decides by its host's
    /// wall clock (offsets and steps included), and the store takes the times it is
    /// given. Kept to show what the store-clock worlds prevent (a test counts it).
    Legacy,
}

/// The instant every world's true time starts at.
const EPOCH_SECOND: i64 = 1_800_000_000;

/// A host's wall clock: the true time plus the host's offset, stepping as planned.
struct HostClock {
    host: Host,
    start: Instant,
}

impl Clock for HostClock {
    fn now(&self) -> jiff::Timestamp {
        let elapsed = self.start.elapsed();
        let offset = jiff::SignedDuration::try_from_secs_f64(self.host.offset_at(elapsed))
            .unwrap_or(jiff::SignedDuration::ZERO);
        let truth = jiff::Timestamp::from_second(EPOCH_SECOND).expect("valid")
            + jiff::SignedDuration::try_from(elapsed).expect("short");
        truth.saturating_add(offset).unwrap_or(truth)
    }
}

/// The start of an execution: a request the gateway sent, or a claim a caller's worker
/// was given (its request may follow a stall later).
#[derive(Clone, Debug)]
pub struct Start {
    pub at: Duration,
    pub capability: String,
    pub business_ref: Option<String>,
    pub key: IntentKey,
}

/// A kill switch or hold as it was: certainly on from `on` (its commit returned) until
/// `off` (its clearing began), cleared at `cleared` at the latest (the clearing
/// returned). Two controls on one target are one switch: clearing either clears it.
#[derive(Clone, Debug)]
pub struct ControlWindow {
    pub kind: ControlKind,
    pub on: Duration,
    pub off: Duration,
    pub cleared: Duration,
}

/// How long a switch set on one gate may take to stop calls on the others: the cache's
/// freshness (500 ms) and a decision's store round trips, with room to spare.
const SWITCH_REACH: Duration = Duration::from_millis(1500);

/// How often each gateway instance sweeps (the gateway's `--sweep-every`).
const SWEEP_EVERY: Duration = Duration::from_secs(5);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the provider does with one request.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// Commits and answers within `latency`.
    Prompt { latency: Duration },
    /// Commits in time, but the answer arrives after the gateway's timeout.
    SlowReply { commit: Duration, reply: Duration },
    /// Commits (and answers) only after the gateway's timeout: the late commit.
    LateCommit { delay: Duration },
    /// Commits, then the connection drops before the answer.
    DropAfterCommit { latency: Duration },
    /// A 5xx before doing anything.
    ServerError { latency: Duration },
    /// A 4xx: the provider refuses the request and does nothing.
    Reject { latency: Duration },
    /// A 429: nothing done, try later.
    RateLimited { latency: Duration },
    /// The connection is refused: no byte left the gateway.
    Refused,
}

/// The provider's answer on the wire.
#[derive(Debug)]
enum Reply {
    Applied(String),
    Rejected,
    RateLimited,
    Reset,
    ServerError,
}

/// One effect in the provider's ledger.
#[derive(Clone, Debug)]
pub struct Effect {
    pub capability: String,
    pub key: IntentKey,
    pub generation: u32,
    pub upstream_key: String,
    pub effect_ref: String,
    pub at: Duration,
}

/// The provider's record of what happened, for the report of a failing schedule.
#[derive(Debug)]
pub enum Event {
    Request {
        at: Duration,
        upstream_key: String,
        fault: Fault,
    },
    Commit {
        at: Duration,
        upstream_key: String,
        effect_ref: String,
        deduped: bool,
    },
    Read {
        at: Duration,
        upstream_key: String,
        answer: String,
    },
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Request {
                at,
                upstream_key,
                fault,
            } => write!(
                f,
                "@{:.3}s request {upstream_key}: {fault:?}",
                at.as_secs_f64()
            ),
            Event::Commit {
                at,
                upstream_key,
                effect_ref,
                deduped,
            } => write!(
                f,
                "@{:.3}s {} {upstream_key} as {effect_ref}",
                at.as_secs_f64(),
                if *deduped {
                    "deduped on the key"
                } else {
                    "COMMITTED"
                }
            ),
            Event::Read {
                at,
                upstream_key,
                answer,
            } => write!(f, "@{:.3}s read {upstream_key}: {answer}", at.as_secs_f64()),
        }
    }
}

struct ProviderState {
    rng: StdRng,
    effects: Vec<Effect>,
    events: Vec<Event>,
    next_ref: u64,
    /// Keys of requests that will commit and have not yet: a key-honouring provider
    /// answers a second request for one of them "still processing" (Stripe's 409).
    pending: BTreeMap<String, u32>,
}

/// The simulated provider: a ledger, a fault plan, and its own tasks, which a gateway
/// crash never kills (the request already left).
#[derive(Clone)]
pub struct Provider {
    state: Arc<Mutex<ProviderState>>,
    honours: Arc<BTreeMap<&'static str, bool>>,
    late_commits: bool,
    start: Instant,
}

impl Provider {
    fn new(plan: &Plan, start: Instant) -> Self {
        let honours = plan
            .intents
            .iter()
            .map(|i| (i.cap.name(), i.provider_honours_key))
            .collect();
        Self {
            state: Arc::new(Mutex::new(ProviderState {
                rng: StdRng::seed_from_u64(plan.seed ^ 0x005e_ed0f_9a7e),
                effects: Vec::new(),
                events: Vec::new(),
                next_ref: 1,
                pending: BTreeMap::new(),
            })),
            honours: Arc::new(honours),
            late_commits: plan.late_commits,
            start,
        }
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn calm(&self) -> bool {
        self.now() >= CALM_AT
    }

    fn draw(&self, timeout: Duration) -> Fault {
        let calm = self.calm();
        let mut st = lock(&self.state);
        let rng = &mut st.rng;
        let short = |rng: &mut StdRng| Duration::from_millis(rng.random_range(0..800));
        if calm {
            return Fault::Prompt {
                latency: short(rng),
            };
        }
        let t = timeout.as_secs_f64();
        match rng.random_range(0..20) {
            0..=7 => Fault::Prompt {
                latency: short(rng),
            },
            8..=9 => Fault::SlowReply {
                commit: Duration::from_secs_f64(rng.random_range(0.0..t * 0.9)),
                reply: Duration::from_secs_f64(rng.random_range(t * 1.05..t * 3.0)),
            },
            10..=12 if self.late_commits => Fault::LateCommit {
                // After the timeout: before or after the sweep's and the repeats'
                // reconciliation reads.
                delay: Duration::from_secs_f64(rng.random_range(t * 1.01..t * 6.0)),
            },
            10..=12 => Fault::Prompt {
                latency: Duration::from_secs_f64(rng.random_range(t * 0.3..t * 0.95)),
            },
            13..=14 => Fault::DropAfterCommit {
                latency: short(rng),
            },
            15 => Fault::ServerError {
                latency: short(rng),
            },
            16 => Fault::Reject {
                latency: short(rng),
            },
            17..=18 => Fault::RateLimited {
                latency: short(rng),
            },
            _ => Fault::Refused,
        }
    }

    /// Commits one effect (or finds the earlier one, if this provider honours keys).
    fn honours(&self, capability: &str) -> bool {
        self.honours.get(capability).copied().unwrap_or(true)
    }

    fn commit(&self, h: &IntentHandle) -> String {
        let honours = self.honours(&h.capability);
        let at = self.now();
        let mut st = lock(&self.state);
        if let Some(n) = st.pending.get_mut(&h.key) {
            *n -= 1;
            if *n == 0 {
                st.pending.remove(&h.key);
            }
        }
        if honours && let Some(e) = st.effects.iter().find(|e| e.upstream_key == h.key) {
            let effect_ref = e.effect_ref.clone();
            st.events.push(Event::Commit {
                at,
                upstream_key: h.key.clone(),
                effect_ref: effect_ref.clone(),
                deduped: true,
            });
            return effect_ref;
        }
        let effect_ref = format!("fx_{}", st.next_ref);
        st.next_ref += 1;
        st.effects.push(Effect {
            capability: h.capability.clone(),
            key: h.intent_key.clone(),
            generation: h.generation,
            upstream_key: h.key.clone(),
            effect_ref: effect_ref.clone(),
            at,
        });
        st.events.push(Event::Commit {
            at,
            upstream_key: h.key.clone(),
            effect_ref: effect_ref.clone(),
            deduped: false,
        });
        effect_ref
    }

    /// Sends one request; the provider works on it in its own task.
    fn request(&self, h: IntentHandle, timeout: Duration) -> Option<oneshot::Receiver<Reply>> {
        let mut fault = self.draw(timeout);
        // A provider that honours keys answers a key it has already committed from its
        // idempotency layer: the original success, never a refusal of the repeat.
        let known = self.honours(&h.capability)
            && lock(&self.state)
                .effects
                .iter()
                .any(|e| e.upstream_key == h.key);
        if let (true, Fault::Reject { latency } | Fault::RateLimited { latency }) = (known, fault) {
            fault = Fault::Prompt { latency };
        }
        // A key-honouring provider that is still working on this key neither commits a
        // second time nor refuses: it answers "still processing", which is unknown.
        let processing =
            !known && self.honours(&h.capability) && lock(&self.state).pending.contains_key(&h.key);
        if processing && !matches!(fault, Fault::Refused) {
            fault = Fault::ServerError {
                latency: Duration::from_millis(20),
            };
        }
        if matches!(
            fault,
            Fault::Prompt { .. }
                | Fault::SlowReply { .. }
                | Fault::LateCommit { .. }
                | Fault::DropAfterCommit { .. }
        ) {
            *lock(&self.state).pending.entry(h.key.clone()).or_default() += 1;
        }
        lock(&self.state).events.push(Event::Request {
            at: self.now(),
            upstream_key: h.key.clone(),
            fault,
        });
        if let Fault::Refused = fault {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let provider = self.clone();
        tokio::spawn(async move {
            let reply = match fault {
                Fault::Prompt { latency } => {
                    tokio::time::sleep(latency).await;
                    Some(Reply::Applied(provider.commit(&h)))
                }
                Fault::SlowReply { commit, reply } => {
                    tokio::time::sleep(commit).await;
                    let r = provider.commit(&h);
                    tokio::time::sleep(reply.saturating_sub(commit)).await;
                    Some(Reply::Applied(r))
                }
                Fault::LateCommit { delay } => {
                    tokio::time::sleep(delay).await;
                    Some(Reply::Applied(provider.commit(&h)))
                }
                Fault::DropAfterCommit { latency } => {
                    tokio::time::sleep(latency).await;
                    provider.commit(&h);
                    Some(Reply::Reset)
                }
                Fault::ServerError { latency } => {
                    tokio::time::sleep(latency).await;
                    Some(Reply::ServerError)
                }
                Fault::Reject { latency } => {
                    tokio::time::sleep(latency).await;
                    Some(Reply::Rejected)
                }
                Fault::RateLimited { latency } => {
                    tokio::time::sleep(latency).await;
                    Some(Reply::RateLimited)
                }
                Fault::Refused => None,
            };
            if let Some(reply) = reply {
                // The gateway may have stopped listening (timeout, crash): that is fine.
                let _ = tx.send(reply);
            }
        });
        Some(rx)
    }

    /// The reconciliation read: "is there an effect with this key?"
    async fn lookup(&self, h: &IntentHandle) -> ReconcileResult {
        let (latency, fails) = {
            let calm = self.calm();
            let mut st = lock(&self.state);
            (
                Duration::from_millis(st.rng.random_range(0..400)),
                !calm && st.rng.random_range(0..25) == 0,
            )
        };
        tokio::time::sleep(latency).await;
        let at = self.now();
        let mut st = lock(&self.state);
        let answer = if fails {
            ReconcileResult::Undecidable {
                message: "the provider's read answered 503".into(),
            }
        } else {
            match st.effects.iter().find(|e| e.upstream_key == h.key) {
                Some(e) => ReconcileResult::Found {
                    effect_ref: Some(e.effect_ref.clone()),
                    result: json!({"id": e.effect_ref}),
                },
                None => ReconcileResult::NotFound,
            }
        };
        st.events.push(Event::Read {
            at,
            upstream_key: h.key.clone(),
            answer: match &answer {
                ReconcileResult::Found { effect_ref, .. } => format!("found {effect_ref:?}"),
                ReconcileResult::NotFound => "not found".into(),
                ReconcileResult::Undecidable { .. } => "undecidable".into(),
            },
        });
        answer
    }

    pub fn effects(&self) -> Vec<Effect> {
        lock(&self.state).effects.clone()
    }

    /// Adds an effect behind the engine's back (the checks' own test).
    pub fn forge_effect(&self, effect: Effect) {
        lock(&self.state).effects.push(effect);
    }

    pub fn events_for(&self, upstream_key: &str) -> Vec<String> {
        lock(&self.state)
            .events
            .iter()
            .filter(|e| match e {
                Event::Request {
                    upstream_key: k, ..
                }
                | Event::Commit {
                    upstream_key: k, ..
                }
                | Event::Read {
                    upstream_key: k, ..
                } => k == upstream_key,
            })
            .map(|e| e.to_string())
            .collect()
    }
}

/// The executor a gateway instance calls the provider with. It classifies answers as
/// the gateway's `UpstreamExecutor` does: an answer applied or failed, a 429 or a refused
/// connection not sent, a timeout, a reset or a 5xx unknown. Like the MCP upstream, the
/// timeout stops the waiting, never the provider's work.
pub struct SimExecutor {
    provider: Provider,
    registry: Arc<Registry>,
    /// Effects between their start and their end (or their abort): how many a crash
    /// cut through.
    running: Arc<AtomicU64>,
    /// Every execution's start, for the checks of kill switches and holds.
    starts: Arc<Mutex<Vec<Start>>>,
}

/// Counts one running effect until dropped (an aborted task drops it too).
struct Running(Arc<AtomicU64>);

impl Running {
    fn start(counter: &Arc<AtomicU64>) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(counter.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl SimExecutor {
    fn started(&self, intent: &IntentHandle) {
        lock(&self.starts).push(Start {
            at: self.provider.now(),
            capability: intent.capability.clone(),
            business_ref: intent.business_ref.clone(),
            key: intent.intent_key.clone(),
        });
    }

    /// Sends the request and classifies the answer (the gateway's executor, and the
    /// caller's worker through the same provider).
    async fn send(&self, intent: IntentHandle) -> EffectResult {
        let _running = Running::start(&self.running);
        let timeout = self
            .registry
            .capability(&intent.capability)
            .and_then(|c| c.upstream.as_ref())
            .map_or(Duration::from_secs(10), |u| u.timeout.unsigned_abs());
        let Some(rx) = self.provider.request(intent, timeout) else {
            return EffectResult::NotSent {
                message: "connection refused".into(),
            };
        };
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Reply::Applied(effect_ref))) => EffectResult::Applied {
                result: json!({"id": effect_ref}),
                effect_ref: Some(effect_ref),
            },
            Ok(Ok(Reply::Rejected)) => EffectResult::Failed {
                result: json!({"error": "card_declined"}),
                message: "the provider answered 402".into(),
            },
            Ok(Ok(Reply::RateLimited)) => EffectResult::NotSent {
                message: "the provider answered 429".into(),
            },
            Ok(Ok(Reply::Reset)) | Ok(Err(_)) => EffectResult::Unknown {
                message: "the connection was reset after the request was sent".into(),
            },
            Ok(Ok(Reply::ServerError)) => EffectResult::Unknown {
                message: "the provider answered 503".into(),
            },
            Err(_) => EffectResult::Unknown {
                message: format!("no answer within {timeout:?}"),
            },
        }
    }
}

impl Executor for SimExecutor {
    async fn execute(&self, intent: IntentHandle) -> EffectResult {
        self.started(&intent);
        self.send(intent).await
    }

    async fn reconcile(&self, intent: IntentHandle) -> ReconcileResult {
        let has_read = self
            .registry
            .capability(&intent.capability)
            .is_some_and(|c| c.reconcile.is_some());
        if !has_read {
            return ReconcileResult::Undecidable {
                message: "no reconciliation read".into(),
            };
        }
        self.provider.lookup(&intent).await
    }
}

/// The executor of a gateway for which a capability is claim-only: it reconciles like
/// the gateway's, and executes nothing (approvals leave the call for the next claim).
/// Counts what the gateway executed anyway (the checks want none).
struct ByClaim(Arc<SimExecutor>, Arc<AtomicU64>);

impl Executor for ByClaim {
    fn executes(&self) -> bool {
        false
    }

    async fn execute(&self, _intent: IntentHandle) -> EffectResult {
        self.1.fetch_add(1, Ordering::SeqCst);
        EffectResult::NotSent {
            message: "claim-only".into(),
        }
    }

    async fn reconcile(&self, intent: IntentHandle) -> ReconcileResult {
        self.0.reconcile(intent).await
    }
}

/// One running gateway: its gate and its process.
#[derive(Clone)]
struct Instance {
    gate: Gate,
    process: Process,
}

/// What someone heard from the gateway.
#[derive(Debug)]
pub struct Heard {
    pub at: Duration,
    pub who: String,
    pub outcome: Outcome,
}

/// The world of one schedule.
pub struct World {
    pub plan: Plan,
    pub clocks: Clocks,
    registry: Arc<Registry>,
    pub store: MemoryStore,
    /// The true time (the store's, in the store-clock worlds).
    clock: Arc<TokioClock>,
    pub provider: Provider,
    executor: Arc<SimExecutor>,
    /// The gateway running on each host, if any.
    hosts: Mutex<Vec<Option<Instance>>>,
    rng: Mutex<StdRng>,
    pub heard: Mutex<Vec<Heard>>,
    /// Gate errors (a valid call must always be decided).
    pub errors: Mutex<Vec<String>>,
    /// Calls and approvals being decided by an instance right now.
    calls_running: Arc<AtomicU64>,
    crashes_mid_effect: AtomicU64,
    crashes_mid_call: AtomicU64,
    /// Completions of two-phase workers refused as stale.
    stale_completions: AtomicU64,
    /// Two-phase completions that said `not_sent` for an effect the provider applied.
    lies: AtomicU64,
    /// The thief's attempts on other principals' claims, with the gateway's answers.
    steals: Mutex<Vec<thief::Steal>>,
    /// The thief's attempts no gateway answered (none up, the store down throughout).
    steals_unanswered: AtomicU64,
    /// Executions the gateway ran itself for a two-phase intent's approval (must be 0).
    claim_only_executed: Arc<AtomicU64>,
    /// When each approval was first heard of (it was asked no later).
    first_heard: Mutex<BTreeMap<String, Duration>>,
    /// Approvals whose clicks were drawn.
    clicked: Mutex<BTreeSet<String>>,
    /// Approvals every click of which came after the approval's time to live: none may
    /// ever be approved.
    late_approvals: Mutex<BTreeMap<String, Duration>>,
    /// Kill switches and holds as they were on.
    controls: Mutex<Vec<ControlWindow>>,
    start: Instant,
}

impl World {
    pub fn new(plan: Plan, registry: Registry, clocks: Clocks) -> Arc<World> {
        let start = Instant::now();
        let registry = Arc::new(registry);
        let provider = Provider::new(&plan, start);
        let executor = Arc::new(SimExecutor {
            provider: provider.clone(),
            registry: registry.clone(),
            running: Arc::default(),
            starts: Arc::default(),
        });
        let clock = Arc::new(TokioClock::starting_at(
            jiff::Timestamp::from_second(EPOCH_SECOND).expect("valid"),
        ));
        let store = MemoryStore::with_latency(plan.seed ^ 0x57_0e, plan.store_latency);
        let store = match clocks {
            Clocks::Store => store.with_clock(clock.clone()),
            Clocks::Legacy => store,
        };
        Arc::new(World {
            store,
            clock,
            clocks,
            rng: Mutex::new(StdRng::seed_from_u64(plan.seed ^ 0x00a9_910e)),
            hosts: Mutex::new(vec![None; plan.hosts.len()]),
            plan,
            registry,
            provider,
            executor,
            heard: Mutex::new(Vec::new()),
            errors: Mutex::new(Vec::new()),
            calls_running: Arc::default(),
            crashes_mid_effect: AtomicU64::new(0),
            crashes_mid_call: AtomicU64::new(0),
            stale_completions: AtomicU64::new(0),
            lies: AtomicU64::new(0),
            steals: Mutex::new(Vec::new()),
            steals_unanswered: AtomicU64::new(0),
            claim_only_executed: Arc::default(),
            first_heard: Mutex::new(BTreeMap::new()),
            clicked: Mutex::new(BTreeSet::new()),
            late_approvals: Mutex::new(BTreeMap::new()),
            controls: Mutex::new(Vec::new()),
            start,
        })
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    pub fn at(&self, offset: Duration) -> Instant {
        self.start + offset
    }

    /// The gateway an agent's request for `host` reaches: that host's, or the next live
    /// one (a load balancer skips a dead host).
    fn instance(&self, host: usize) -> Option<Instance> {
        let hosts = lock(&self.hosts);
        (0..hosts.len())
            .map(|i| (host + i) % hosts.len())
            .find_map(|i| hosts[i].clone())
    }

    /// The clock a gate on `host` decides by: its estimate of the store's clock (sampled
    /// from the store, which may be down: the gateway waits for it, as `serve` does), or
    /// in the legacy worlds the host's own wall clock.
    async fn gate_clock(&self, host: usize) -> (Arc<dyn Clock>, Option<Arc<StoreClock>>) {
        match self.clocks {
            Clocks::Legacy => (
                Arc::new(HostClock {
                    host: self.plan.hosts[host].clone(),
                    start: self.start,
                }),
                None,
            ),
            Clocks::Store => loop {
                let ticks = Ticks::tokio();
                let before = ticks.read();
                if let Ok(Some(at)) = self.store.store_now().await {
                    let clock = Arc::new(StoreClock::sampled(
                        "the simulated store",
                        ticks,
                        before,
                        at,
                        ticks.read(),
                    ));
                    break (clock.clone(), Some(clock));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            },
        }
    }

    /// Starts the gateway of `host` on the shared store, with its sweep (and its store
    /// clock's sampling), unless one runs there already.
    pub async fn start_instance(&self, host: usize) {
        if lock(&self.hosts)[host].is_some() {
            return;
        }
        let (clock, store_clock) = self.gate_clock(host).await;
        let process = Process::new();
        let gate = Gate::with_store((*self.registry).clone(), self.store.clone(), clock)
            .in_process(process.clone());
        {
            let mut hosts = lock(&self.hosts);
            if hosts[host].is_some() {
                return;
            }
            hosts[host] = Some(Instance {
                gate: gate.clone(),
                process: process.clone(),
            });
        }
        let executor = self.executor.clone();
        process.spawn(async move {
            loop {
                sweep_pass(&gate, &executor).await;
                tokio::time::sleep(SWEEP_EVERY).await;
            }
        });
        // The PostgreSQL store's sampling: `now()` every second.
        if let Some(clock) = store_clock {
            let store = self.store.clone();
            process.spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let before = clock.ticks();
                    if let Ok(Some(at)) = store.store_now().await {
                        clock.observe(before, at, clock.ticks());
                    }
                }
            });
        }
    }

    /// SIGKILL: every task of the gateway on `host` stops where it is.
    pub fn crash(&self, host: usize) {
        let Some(instance) = lock(&self.hosts)[host].take() else {
            return;
        };
        if self.executor.running.load(Ordering::SeqCst) > 0 {
            self.crashes_mid_effect.fetch_add(1, Ordering::SeqCst);
        }
        if self.calls_running.load(Ordering::SeqCst) > 0 {
            self.crashes_mid_call.fetch_add(1, Ordering::SeqCst);
        }
        instance.process.kill();
    }

    /// Starts every host's gateway that is down.
    pub async fn ensure_running(&self) {
        for host in 0..self.plan.hosts.len() {
            self.start_instance(host).await;
        }
    }

    pub fn stop(&self) {
        for host in 0..self.plan.hosts.len() {
            self.crash(host);
        }
    }

    fn arguments(intent: &IntentPlan, memo: u32) -> serde_json::Value {
        json!({"order_id": intent.order, "amount": intent.amount, "memo": format!("attempt {memo}")})
    }

    /// One agent call through the host it reaches (none up: connection refused, the
    /// agent's harness simply calls again later).
    pub async fn call(self: &Arc<Self>, intent: usize, call: &CallPlan) {
        let Some(instance) = self.instance(call.host) else {
            return;
        };
        let plan = &self.plan.intents[intent];
        let mut c = Call::new(plan.cap.name(), Self::arguments(plan, call.memo));
        if let Some(run) = call.run {
            c = c.run(run);
        }
        let (gate, executor, agent) = (instance.gate.clone(), self.executor.clone(), call.agent);
        let running = self.calls_running.clone();
        if plan.two_phase {
            let task = instance.process.spawn(async move {
                let _running = Running::start(&running);
                gate.claim_with(agent, c, executor).await
            });
            match task.await {
                Ok(Ok(Claimed::Execute(claim))) => self.work(claim, call).await,
                Ok(Ok(Claimed::Settled(outcome))) => {
                    let pending = (outcome.status == Status::PendingApproval)
                        .then(|| outcome.approval_id.clone())
                        .flatten();
                    self.hear(agent, outcome);
                    if let Some(id) = pending {
                        self.clicks(id, true).await;
                    }
                }
                Ok(Ok(Claimed::Read(_))) => lock(&self.errors)
                    .push(format!("{agent}: a consequential claim passed through")),
                Ok(Err(e)) => {
                    lock(&self.errors).push(format!("{agent} claim failed to decide: {e}"))
                }
                Err(_) => {}
            }
            return;
        }
        let task = instance.process.spawn(async move {
            let _running = Running::start(&running);
            gate.invoke_with(agent, c, executor).await
        });
        match task.await {
            Ok(Ok(outcome)) => {
                let pending = (outcome.status == Status::PendingApproval)
                    .then(|| outcome.approval_id.clone())
                    .flatten();
                self.hear(agent, outcome);
                if let Some(id) = pending {
                    self.clicks(id, false).await;
                }
            }
            Ok(Err(e)) => lock(&self.errors).push(format!("{agent} call failed to decide: {e}")),
            // The gateway died under the call: the agent saw a reset.
            Err(_) => {}
        }
    }

    /// The caller's worker with its claim: the provider call (through the same
    /// simulated provider and its faults), then the completion, through whichever
    /// gateway instance is up when it gets there. It runs in the agent's process, not
    /// the gateway's: a gateway crash does not stop it. Its completion is retried while
    /// no gateway answers (the client's retry); a stale claim's completion is refused,
    /// which the checks then prove changed nothing.
    async fn work(self: &Arc<Self>, claim: Claim, call: &CallPlan) {
        lock(&self.executor.starts).push(Start {
            at: self.now(),
            capability: claim.intent.capability.clone(),
            business_ref: claim.intent.business_ref.clone(),
            key: claim.intent.intent_key.clone(),
        });
        // Past the calm point workers behave too (the horizon checks what the engine
        // made of the chaos, and repeats reuse the plan's calls).
        let calm = Worker::default();
        let worker = if self.provider.calm() {
            &calm
        } else {
            &call.worker
        };
        for leak in &worker.leaks {
            self.leak(&claim, leak, call.host);
        }
        tokio::time::sleep(worker.stall_before).await;
        // A worker checks its lease before it sends anything (the Python client does,
        // by the lease left, which the gateway answers): a claim whose lease ran out may
        // already be someone else's, and a provider request sent after that is an
        // effect the fence cannot stop (a provider that keeps no record of a refused key
        // would carry it out). A pause between this check and the send is within the
        // lease, which is what the lease is for.
        if worker.dies_before || self.clock.now() >= claim.lease_expires_at {
            return;
        }
        let mut result = self.executor.send(claim.intent.clone()).await;
        let readable = self
            .registry
            .capability(&claim.intent.capability)
            .is_some_and(|c| c.reconcile.is_some());
        if worker.lies && readable && matches!(result, EffectResult::Applied { .. }) {
            self.lies.fetch_add(1, Ordering::SeqCst);
            result = EffectResult::NotSent {
                message: "connect error (the worker lies: the provider applied it)".into(),
            };
        }
        tokio::time::sleep(worker.stall_after).await;
        if worker.dies_after {
            return;
        }
        for _ in 0..10 {
            if let Some(instance) = self.instance(call.host) {
                match instance.gate.complete(&claim, result.clone()).await {
                    Ok(outcome) => {
                        self.hear(&claim.principal, outcome);
                        return;
                    }
                    Err(GateError::StaleClaim(_)) => {
                        self.stale_completions.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    Err(_) => {}
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    fn hear(&self, who: &str, outcome: Outcome) {
        let at = self.now();
        if let (Status::PendingApproval, Some(id)) = (outcome.status, &outcome.approval_id) {
            lock(&self.first_heard).entry(id.clone()).or_insert(at);
        }
        lock(&self.heard).push(Heard {
            at,
            who: who.to_owned(),
            outcome,
        });
    }

    /// Approvers race on an approval: one to three clicks by alice and bob at nearly
    /// the same time (double clicks, two approvers), once per approval. A policy
    /// approval is mostly approved. An approval asking about an unknown first attempt
    /// is approved where the provider dedupes on the key (the human checked: running
    /// it again cannot make a second effect); the email's is left alone (a human would
    /// read the provider's record, which is outside the engine). Before the calm point,
    /// one approval in four with a short time to live is decided only after it expired:
    /// none of those may ever execute.
    async fn clicks(self: &Arc<Self>, approval_id: String, two_phase: bool) {
        if !lock(&self.clicked).insert(approval_id.clone()) {
            return;
        }
        let Ok(Some(approval)) = self.store.approval(&approval_id).await else {
            return;
        };
        let always_approve = match approval.reason {
            ApprovalReason::Policy => false,
            ApprovalReason::UnknownFirstAttempt if approval.capability != "email" => true,
            _ => return,
        };
        let ttl = self
            .registry
            .capability(&approval.capability)
            .map_or(Duration::MAX, |c| c.approval_ttl.unsigned_abs());
        let calm = self.provider.calm();
        let (late, clicks): (bool, Vec<(Duration, &'static str, Choice)>) = {
            let mut rng = lock(&self.rng);
            let late = !calm && ttl < Duration::from_secs(60) && rng.random_bool(0.25);
            let clicks = (0..rng.random_range(1..=3))
                .map(|_| {
                    let delay = Duration::from_millis(rng.random_range(0..3000));
                    (
                        if late {
                            ttl + Duration::from_secs(1) + delay * 8
                        } else {
                            delay
                        },
                        if rng.random_bool(0.5) { "alice" } else { "bob" },
                        if always_approve || rng.random_bool(0.8) {
                            Choice::Approve
                        } else {
                            Choice::Deny
                        },
                    )
                })
                .collect();
            (late, clicks)
        };
        if late {
            lock(&self.late_approvals).insert(approval_id.clone(), ttl);
        }
        for (delay, who, choice) in clicks {
            let world = self.clone();
            let id = approval_id.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                world.click(who, &id, choice, two_phase).await;
            });
        }
    }

    /// `two_phase`: the held call came from a claim (its capability is claim-only for
    /// this caller), so the approval leaves it for the next claim.
    async fn click(&self, who: &'static str, approval_id: &str, choice: Choice, two_phase: bool) {
        let host = lock(&self.rng).random_range(0..self.plan.hosts.len());
        let Some(instance) = self.instance(host) else {
            return;
        };
        let (gate, executor, id) = (
            instance.gate.clone(),
            self.executor.clone(),
            approval_id.to_owned(),
        );
        let running = self.calls_running.clone();
        let executed = self.claim_only_executed.clone();
        let task = instance.process.spawn(async move {
            let _running = Running::start(&running);
            if two_phase {
                gate.decide_approval(who, &id, choice, Arc::new(ByClaim(executor, executed)))
                    .await
            } else {
                gate.decide_approval(who, &id, choice, executor).await
            }
        });
        // A store outage surfaces as an error, a crash as a cancelled task: the approver
        // sees an error page and nothing is heard.
        if let Ok(Ok(outcome)) = task.await {
            self.hear(who, outcome);
        }
    }

    /// An operator's kill switch or hold through `host`'s gateway, on at `control.at`
    /// and cleared `control.length` later; each change retried until a gateway and the
    /// store take it (a switch that cannot be written is not on).
    async fn control(&self, control: super::plan::Control) {
        tokio::time::sleep_until(self.at(control.at)).await;
        let mut hold_id = None;
        let on = loop {
            if let Some(instance) = self.instance(control.host) {
                let set = match &control.kind {
                    ControlKind::KillSwitch(cap) => instance
                        .gate
                        .set_kill_switch(
                            "ops",
                            &format!("capability:{}", cap.name()),
                            Some("the simulation's operator".into()),
                        )
                        .await
                        .is_ok(),
                    ControlKind::Hold(cap, order) => {
                        match instance
                            .gate
                            .place_hold(
                                "ops",
                                cap.name(),
                                &HoldOn::BusinessRef,
                                Some(&json!(order)),
                                "the simulation's operator",
                                json!({}),
                            )
                            .await
                        {
                            Ok(hold) => {
                                hold_id = Some(hold.id);
                                true
                            }
                            Err(_) => false,
                        }
                    }
                };
                if set {
                    break self.now();
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        tokio::time::sleep(control.length).await;
        let off = self.now();
        loop {
            if let Some(instance) = self.instance(control.host) {
                let cleared = match &control.kind {
                    ControlKind::KillSwitch(cap) => instance
                        .gate
                        .set_kill_switch("ops", &format!("capability:{}", cap.name()), None)
                        .await
                        .is_ok(),
                    ControlKind::Hold(..) => instance
                        .gate
                        .clear_hold("ops", hold_id.as_deref().unwrap_or(""), "over")
                        .await
                        .is_ok(),
                };
                if cleared {
                    lock(&self.controls).push(ControlWindow {
                        kind: control.kind.clone(),
                        on,
                        off,
                        cleared: self.now(),
                    });
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// One sweep pass on every running gateway (the horizon phase).
    pub async fn sweep_now(&self) {
        let instances: Vec<Instance> = lock(&self.hosts).iter().flatten().cloned().collect();
        for instance in instances {
            sweep_pass(&instance.gate, &self.executor).await;
        }
    }

    /// The agents' repeat of every intent after the chaos (as their harness would
    /// retry an unknown answer): once per run id the intent was called with, since a
    /// run-scoped capability makes each run its own intent.
    pub async fn repeat_all(self: &Arc<Self>) {
        for i in 0..self.plan.intents.len() {
            let mut seen = Vec::new();
            let calls = self.plan.intents[i].calls.clone();
            for call in calls {
                if !seen.contains(&call.run) {
                    seen.push(call.run);
                    self.call(i, &call).await;
                }
            }
        }
    }
    /// Intents still in flight or unknown.
    pub async fn unsettled(&self) -> usize {
        let all = self
            .store
            .list_intents(&IntentFilter {
                limit: 10_000,
                ..Default::default()
            })
            .await
            .unwrap_or_default()
            .items;
        all.iter()
            .filter(|r| matches!(r.state, IntentState::InFlight | IntentState::Unknown))
            .count()
    }

    /// The invariants. Returns every violation, with the evidence for each.
    pub async fn check(&self) -> Vec<String> {
        let mut bad = lock(&self.errors).clone();
        let executed = self.claim_only_executed.load(Ordering::SeqCst);
        if executed > 0 {
            bad.push(format!(
                "GATEWAY EXECUTED A CLAIM-ONLY CALL: {executed} approval(s) of two-phase intents executed in the gateway"
            ));
        }
        let records = match self
            .store
            .list_intents(&IntentFilter {
                limit: 10_000,
                ..Default::default()
            })
            .await
        {
            Ok(r) => r.items,
            Err(e) => return vec![format!("the store cannot list intents at the end: {e}")],
        };
        let effects = self.provider.effects();
        let mut per_intent: BTreeMap<(String, u32), Vec<&Effect>> = BTreeMap::new();
        for e in &effects {
            per_intent
                .entry((e.key.as_str().to_owned(), e.generation))
                .or_default()
                .push(e);
        }
        for ((key, generation), list) in &per_intent {
            if list.len() > 1 {
                bad.push(format!(
                    "DUPLICATE EFFECT: intent {key} generation {generation} has {} effects in the provider's ledger: {:?}",
                    list.len(),
                    list.iter()
                        .map(|e| format!("{} at {:?}", e.effect_ref, e.at))
                        .collect::<Vec<_>>()
                ));
            }
        }
        for r in &records {
            let list = per_intent
                .get(&(r.key.as_str().to_owned(), r.generation))
                .map_or(&[][..], Vec::as_slice);
            match r.state {
                IntentState::Applied => {
                    if list.len() != 1 {
                        bad.push(format!(
                            "APPLIED WITHOUT ONE EFFECT: intent {} ({}) is applied but the provider has {} effects",
                            r.key, r.capability, list.len()
                        ));
                    } else if r.effect_ref.as_deref() != Some(list[0].effect_ref.as_str()) {
                        bad.push(format!(
                            "WRONG EFFECT REF: intent {} records {:?}, the provider has {}",
                            r.key, r.effect_ref, list[0].effect_ref
                        ));
                    }
                }
                IntentState::InFlight | IntentState::Unknown => bad.push(format!(
                    "NOT SETTLED: intent {} ({}) is {} past the horizon (sweep and repeats ran)",
                    r.key,
                    r.capability,
                    r.state.as_str()
                )),
                IntentState::PendingApproval => {}
                IntentState::Failed | IntentState::NotApplied | IntentState::Denied
                    if !list.is_empty() =>
                {
                    bad.push(format!(
                        "STORE DISAGREES WITH PROVIDER: intent {} ({}) is {} but the provider has effect {}",
                        r.key,
                        r.capability,
                        r.state.as_str(),
                        list[0].effect_ref
                    ));
                }
                IntentState::Failed | IntentState::NotApplied | IntentState::Denied => {}
            }
        }
        // The charge budget holds exactly the applied charges and those held for a human
        // after an unknown attempt (which may have happened): every claim reserved, every
        // settlement without an effect released, no repeat reserved twice.
        let applied_charges = records
            .iter()
            .filter(|r| {
                r.capability == "charge"
                    && (r.state == IntentState::Applied
                        || (r.state == IntentState::PendingApproval && r.executions > 0))
            })
            .count();
        match self.store.limit_used("charge_count", jiff::Timestamp::UNIX_EPOCH).await {
            Ok(used) if used == applied_charges as i64 => {}
            Ok(used) => bad.push(format!(
                "LIMIT LEDGER DRIFT: the charge budget holds {used} reservation(s) for {applied_charges} applied charge(s)"
            )),
            Err(e) => bad.push(format!("the store cannot sum the charge budget: {e}")),
        }
        for h in lock(&self.heard).iter() {
            let o = &h.outcome;
            let told_applied = matches!(o.status, Status::Applied | Status::Replayed)
                && o.state == Some(IntentState::Applied);
            if let (true, Some(key), Some(r)) = (told_applied, &o.key, &o.effect_ref)
                && !effects
                    .iter()
                    .any(|e| &e.key == key && e.generation == o.generation && &e.effect_ref == r)
            {
                bad.push(format!(
                    "TOLD APPLIED WITHOUT THE EFFECT: {} heard {} {r} for {key} at {:?}",
                    h.who,
                    o.status.as_str(),
                    h.at
                ));
            }
        }
        // The binding limit: 12.50 of payouts an hour, one 12.50 effect, whatever the
        // clocks said and however many were unknown.
        let payouts = effects.iter().filter(|e| e.capability == "payout").count();
        if payouts > 1 {
            bad.push(format!(
                "BUDGET OVERSPENT: {payouts} payouts of 12.50 against a limit of 12.50 an hour: {:?}",
                effects
                    .iter()
                    .filter(|e| e.capability == "payout")
                    .map(|e| format!("{} for {} at {:?}", e.effect_ref, e.key, e.at))
                    .collect::<Vec<_>>()
            ));
        }
        // No approval decided only after its time to live (by the true time, which is
        // the store's) was ever approved.
        let late: Vec<(String, Duration)> = lock(&self.late_approvals)
            .iter()
            .map(|(id, ttl)| (id.clone(), *ttl))
            .collect();
        for (id, ttl) in late {
            if let Ok(Some(a)) = self.store.approval(&id).await
                && a.state == ApprovalState::Approved
            {
                bad.push(format!(
                    "APPROVED AFTER ITS TTL: approval {id} ({} {}) was approved by {:?}, though every click came more than {ttl:?} after it was asked",
                    a.capability, a.key, a.decided_by
                ));
            }
        }
        // Nothing started past a kill switch or a hold that every gate had had time to see.
        let starts = lock(&self.executor.starts).clone();
        let windows = lock(&self.controls).clone();
        for w in &windows {
            // Another control on the same target cleared it from its clearing's start.
            let off = windows
                .iter()
                .filter(|o| o.kind == w.kind && o.cleared >= w.on)
                .map(|o| o.off)
                .min()
                .unwrap_or(w.off);
            for s in &starts {
                let covered = match &w.kind {
                    ControlKind::KillSwitch(cap) => s.capability == cap.name(),
                    ControlKind::Hold(cap, order) => {
                        s.capability == cap.name()
                            && s.business_ref.as_deref() == Some(order.as_str())
                    }
                };
                if covered && s.at > w.on + SWITCH_REACH && s.at < off {
                    bad.push(format!(
                        "EXECUTED PAST A CONTROL: {} ({}) started at {:?} under {:?}, on from {:?} to {off:?}",
                        s.key, s.capability, s.at, w.kind, w.on
                    ));
                }
            }
        }
        match self.store.audit_shards().await {
            Ok(shards) => {
                for shard in shards {
                    let records = self.store.audit_shard(shard).await.unwrap_or_default();
                    if let Err(b) = verify_shard(shard, &records) {
                        bad.push(format!("AUDIT CHAIN BROKEN: shard {shard}: {b:?}"));
                    }
                }
            }
            Err(e) => bad.push(format!("the audit cannot be read at the end: {e}")),
        }
        // Last, so a schedule's first line names what a taken steal broke, if anything.
        bad.extend(self.stolen());
        bad
    }

    /// The timeline of the intents a violation names: provider events and audit records.
    pub async fn evidence(&self) -> String {
        let mut out = String::new();
        let records = self
            .store
            .list_intents(&IntentFilter {
                limit: 10_000,
                oldest_first: true,
                ..Default::default()
            })
            .await
            .unwrap_or_default()
            .items;
        let audit = self
            .store
            .audit_after(0, 1_000_000)
            .await
            .unwrap_or_default();
        for r in records {
            out.push_str(&format!(
                "\n  intent {} gen {} ({}) ends {} (attempts {}, executions {})\n",
                r.key,
                r.generation,
                r.capability,
                r.state.as_str(),
                r.attempts,
                r.executions
            ));
            for e in self.provider.events_for(&r.upstream_key()) {
                out.push_str(&format!("    provider: {e}\n"));
            }
            for (_, a) in audit
                .iter()
                .filter(|(_, a)| a.event.key.as_ref() == Some(&r.key))
            {
                let t = a
                    .event
                    .at
                    .duration_since(jiff::Timestamp::from_second(EPOCH_SECOND).expect("valid"));
                out.push_str(&format!(
                    "    audit @{:.3}s {:?} by {}: {:?} -> {:?} ({}) {}\n",
                    t.as_secs_f64(),
                    a.event.kind,
                    a.event.actor,
                    a.event.from,
                    a.event.to,
                    a.event.status.map_or("-", |s| s.as_str()),
                    a.event.detail
                ));
            }
        }
        out
    }
}

/// One pass of the gateway's background sweep (`oncegate_gateway::server::sweep`, which
/// this crate cannot depend on): unknown intents and expired claims, oldest first,
/// reconciled and recorded, never executed.
async fn sweep_pass(gate: &Gate, executor: &Arc<SimExecutor>) {
    for state in [IntentState::Unknown, IntentState::InFlight] {
        let Ok(list) = gate
            .store()
            .list_intents(&IntentFilter {
                state: Some(state),
                limit: 500,
                oldest_first: true,
                ..Default::default()
            })
            .await
        else {
            continue;
        };
        for record in list.items {
            let _ = gate.sweep_one(&record, executor.clone()).await;
        }
    }
}

/// What a schedule exercised, summed over a run so the summary shows the faults were
/// really injected and the engine really took each path.
pub type Stats = BTreeMap<String, u64>;

impl World {
    async fn stats(&self, stats: &mut Stats) {
        let mut bump = |k: String| *stats.entry(k).or_default() += 1;
        for e in &lock(&self.provider.state).events {
            match e {
                Event::Request { fault, .. } => {
                    let name = format!("{fault:?}");
                    bump(format!(
                        "provider {}",
                        name.split([' ', '{']).next().unwrap_or_default()
                    ));
                }
                Event::Commit { deduped: true, .. } => bump("provider deduped on key".into()),
                Event::Commit { .. } => bump("provider effects".into()),
                Event::Read { answer, .. } => bump(format!(
                    "reconcile read {}",
                    if answer.starts_with("found") {
                        "found"
                    } else {
                        answer
                    }
                )),
            }
        }
        for h in lock(&self.heard).iter() {
            bump(format!("heard {}", h.outcome.status.as_str()));
            if let Some(r) = &h.outcome.reason {
                bump(format!("heard code {}", r.code.as_str()));
            }
        }
        let records = self
            .store
            .list_intents(&IntentFilter {
                limit: 10_000,
                ..Default::default()
            })
            .await
            .unwrap_or_default()
            .items;
        for r in records {
            bump(format!("intent ends {}", r.state.as_str()));
        }
        bump(format!(
            "schedules with {} crashes",
            self.plan.crashes.len()
        ));
        if self.plan.outage.is_some() {
            bump("store outages".into());
        }
        bump(format!(
            "schedules with {} gateway hosts",
            self.plan.hosts.len()
        ));
        for host in &self.plan.hosts {
            for _ in &host.steps {
                bump("host clock steps".into());
            }
            if host.offset_secs.abs() >= 3600.0 {
                bump("hosts an hour or more off".into());
            }
        }
        for w in lock(&self.controls).iter() {
            bump(match w.kind {
                ControlKind::KillSwitch(_) => "kill switches set mid-run".into(),
                ControlKind::Hold(..) => "holds set mid-run".into(),
            });
        }
        for _ in lock(&self.late_approvals).iter() {
            bump("approvals decided after their ttl".into());
        }
        for i in &self.plan.intents {
            if i.cap.name() == "payout" {
                bump("payout intents".into());
            }
        }
        *stats
            .entry("crashes cutting through an effect".into())
            .or_default() += self.crashes_mid_effect.load(Ordering::SeqCst);
        *stats
            .entry("crashes cutting through a call's decision".into())
            .or_default() += self.crashes_mid_call.load(Ordering::SeqCst);
        *stats
            .entry("two-phase completions refused as stale".into())
            .or_default() += self.stale_completions.load(Ordering::SeqCst);
        *stats.entry(LIES.into()).or_default() += self.lies.load(Ordering::SeqCst);
        self.steal_stats(stats);
        let two_phase = self.plan.intents.iter().filter(|i| i.two_phase).count();
        *stats.entry("two-phase intents".into()).or_default() += two_phase as u64;
    }
}

/// Runs one schedule to its horizon and checks it. `Err` carries the report.
pub async fn run(
    plan: Plan,
    registry: Registry,
    clocks: Clocks,
    stats: &mut Stats,
) -> Result<(), String> {
    let world = drive(plan, registry, clocks).await;
    world.stats(stats).await;
    let bad = world.check().await;
    let report = if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}\n  plan: {:#?}\n  timeline:{}",
            bad.join("\n  "),
            world.plan,
            world.evidence().await
        ))
    };
    world.stop();
    report
}

/// What a schedule did, as text that does not depend on random ids: the provider's
/// events and the answers heard (for the determinism test).
pub async fn trace(plan: Plan, registry: Registry) -> String {
    let world = drive(plan, registry, Clocks::Store).await;
    let mut out = String::new();
    for e in &lock(&world.provider.state).events {
        out.push_str(&format!("{e}\n"));
    }
    for h in lock(&world.heard).iter() {
        out.push_str(&format!(
            "{:?} {} {} {:?} {:?}\n",
            h.at,
            h.who,
            h.outcome.status.as_str(),
            h.outcome.key,
            h.outcome.effect_ref
        ));
    }
    world.stop();
    out
}

/// Plays the schedule up to its horizon.
async fn drive(plan: Plan, registry: Registry, clocks: Clocks) -> Arc<World> {
    let world = World::new(plan.clone(), registry, clocks);
    world.ensure_running().await;
    for (i, intent) in plan.intents.iter().enumerate() {
        for call in &intent.calls {
            let (w, call) = (world.clone(), call.clone());
            tokio::spawn(async move {
                tokio::time::sleep_until(w.at(call.at)).await;
                w.call(i, &call).await;
            });
        }
    }
    for crash in &plan.crashes {
        let (w, crash) = (world.clone(), crash.clone());
        tokio::spawn(async move {
            tokio::time::sleep_until(w.at(crash.at)).await;
            w.crash(crash.host);
            tokio::time::sleep(crash.restart_after).await;
            w.start_instance(crash.host).await;
        });
    }
    for control in &plan.controls {
        let (w, control) = (world.clone(), control.clone());
        tokio::spawn(async move { w.control(control).await });
    }
    for snoop in &plan.snoops {
        let (w, snoop) = (world.clone(), snoop.clone());
        tokio::spawn(async move { w.snoop(snoop).await });
    }
    if let Some(outage) = plan.outage.clone() {
        let w = world.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(w.at(outage.from)).await;
            w.store.set_unavailable(true);
            tokio::time::sleep(outage.length).await;
            w.store.set_unavailable(false);
        });
    }
    // The horizon: every fault is over, every late commit has landed; the sweep runs and
    // the agents repeat (past each lease) until nothing is in flight or unknown.
    tokio::time::sleep_until(world.at(CALM_AT + Duration::from_secs(40))).await;
    world.ensure_running().await;
    for _ in 0..6 {
        world.sweep_now().await;
        world.repeat_all().await;
        tokio::time::sleep(Duration::from_secs(35)).await;
        if world.unsettled().await == 0 {
            break;
        }
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    world
}

/// The checks' own test: a forged second effect must be reported.
pub async fn run_with_forged_duplicate(plan: Plan, registry: Registry) -> Vec<String> {
    let world = World::new(plan.clone(), registry, Clocks::Store);
    world.ensure_running().await;
    // After the calm point the provider answers promptly: one effect, for sure.
    tokio::time::sleep_until(world.at(CALM_AT)).await;
    let intent = &plan.intents[0];
    world.call(0, &intent.calls[0]).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    world.repeat_all().await;
    let first = world.provider.effects().first().cloned();
    if let Some(mut e) = first {
        e.effect_ref = "fx_forged".into();
        world.provider.forge_effect(e);
    }
    let bad = world.check().await;
    world.stop();
    bad
}
