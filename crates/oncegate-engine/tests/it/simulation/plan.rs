//! One schedule, drawn from a seed: which intents, when agents call, what the provider
//! does with each request, when the gateway crashes and when the store is lost, and what
//! a principal that steals fencing tokens tries.
//!
//! The plan is data, printed whole when a schedule fails, so a reader sees the schedule
//! the seed stands for. Draws happen here, up front, except the provider's fault per
//! request and the approvers' clicks, which depend on what the engine does and are
//! drawn, in a deterministic order, while the schedule runs (see `world.rs`).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The capabilities of the simulated registry (see `REGISTRY` in `mod.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cap {
    /// keyed, reconciled; the provider honours the key (that is what keyed declares).
    Charge,
    /// non_idempotent, reconciled; the provider may honour or ignore the key.
    Email,
    /// keyed, reconciled, above 100.00 it needs an approver (two approvers race).
    Refund,
    /// keyed, `on_unknown = "retry"`, no reconciliation read: the provider's dedupe on
    /// the key is the only proof, so this provider always honours it.
    Upsert,
    /// keyed, `on_unknown = "escalate"` (no reconciliation read: a human decides every
    /// unknown attempt), under a binding limit of 12.50 an hour: one of the schedule's
    /// 12.50 payouts may be paid, the others are refused.
    Payout,
}

impl Cap {
    pub fn name(self) -> &'static str {
        match self {
            Cap::Charge => "charge",
            Cap::Email => "email",
            Cap::Refund => "refund",
            Cap::Upsert => "upsert",
            Cap::Payout => "payout",
        }
    }
}

/// One intent of the schedule and the agent calls that express it.
#[derive(Clone, Debug)]
pub struct IntentPlan {
    pub cap: Cap,
    pub order: String,
    pub amount: &'static str,
    /// Whether the provider dedupes this capability's requests on the key.
    pub provider_honours_key: bool,
    /// Executed by its callers through the two-phase API (claim, execute at the
    /// provider, complete) instead of by the gateway; approvals leave it for the next
    /// claim.
    pub two_phase: bool,
    pub calls: Vec<CallPlan>,
}

/// One agent call.
#[derive(Clone, Debug)]
pub struct CallPlan {
    pub at: Duration,
    pub agent: &'static str,
    pub run: Option<&'static str>,
    /// An undeclared argument that drifts between re-plans (never enters the key).
    pub memo: u32,
    /// What the caller's worker does with a claim it gets (two-phase intents only).
    pub worker: Worker,
    /// The gateway host the agent's request reaches (the next live one if it is down).
    pub host: usize,
}

/// The caller's own worker, holding a claim: it may stall (a GC pause, a slow SDK)
/// before the provider call or before completing, past its lease, and it may die
/// (SIGKILL) without completing.
#[derive(Clone, Debug, Default)]
pub struct Worker {
    pub stall_before: Duration,
    pub stall_after: Duration,
    /// Dies before calling the provider.
    pub dies_before: bool,
    /// Dies after the provider call, before completing.
    pub dies_after: bool,
    /// Lies: an effect the provider applied is completed as `not_sent` (a worker whose
    /// SDK wraps a read timeout in a connect error), on a capability with a
    /// reconciliation read (without one, the lie is a second effect nobody can see:
    /// documented, not simulated).
    pub lies: bool,
    /// Its claim's token leaks (its memory, its logs) to another principal, who uses
    /// it once per entry.
    pub leaks: Vec<Leak>,
}

/// Who steals: a principal other than the claimer, always. With the claimer's identity
/// too ([`Plan::thieves_hold_the_claimers_identity`]) the thief is the claimer as far
/// as the gateway can tell: the variant that shows what the principal check prevents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Thief {
    /// `mallory`, an agent of its own that never claims anything.
    Mallory,
    /// The other of the schedule's two agents (`agent1` steals `agent2`'s claims and
    /// the other way round), an agent that claims intents of its own.
    OtherAgent,
}

/// What a thief does with a fencing token it learnt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Theft {
    /// Completes it `not_sent`, to have the intent executed again: a second effect.
    NotSent,
    /// Completes it `applied` with an effect reference it made up: an intent applied
    /// with no effect (the real one suppressed).
    Applied,
    /// Completes it `unknown`: the intent sent to reconciliation, or to a human.
    Unknown,
    /// Heartbeats it: a dead worker's lease kept alive.
    Heartbeat,
}

/// A worker's token in another principal's hands, used `after` the claim.
#[derive(Clone, Debug)]
pub struct Leak {
    pub thief: Thief,
    pub after: Duration,
    pub theft: Theft,
}

/// The thief reads the intents in flight through the read API, as an approver can (the
/// lease's owner: the gate and the claim's seal, never its nonce), rebuilds a token for
/// each from what it read, and tries `theft` with it at `at`, through host `host`.
#[derive(Clone, Debug)]
pub struct Snoop {
    pub at: Duration,
    pub host: usize,
    pub theft: Theft,
}

/// A gateway crash: every task of the running instance dies at `at`; a new instance
/// starts on the same store `restart_after` later.
#[derive(Clone, Debug)]
pub struct Crash {
    /// The host that dies.
    pub host: usize,
    pub at: Duration,
    pub restart_after: Duration,
}

/// One gateway host: its wall clock's offset from the true time when the schedule
/// starts, and the steps it takes (an NTP correction, a VM resumed). In the store-clock
/// worlds (today's engine) a gate decides by the store's clock and these change no
/// decision; in the legacy worlds each gate decides by this clock.
#[derive(Clone, Debug)]
pub struct Host {
    pub offset_secs: f64,
    /// (when, by how much): the clock jumps by `by` seconds at `when`.
    pub steps: Vec<(Duration, f64)>,
}

impl Host {
    /// The host clock's offset from the true time at `at`.
    pub fn offset_at(&self, at: Duration) -> f64 {
        self.offset_secs
            + self
                .steps
                .iter()
                .filter(|(when, _)| *when <= at)
                .map(|(_, by)| by)
                .sum::<f64>()
    }
}

/// What an operator switches on mid-run, through one host, and off again later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlKind {
    /// `capability:NAME` kill switch.
    KillSwitch(Cap),
    /// A hold on one business reference (`order_id`) of a capability.
    Hold(Cap, String),
}

/// A control set at `at` through host `host` and cleared `length` later.
#[derive(Clone, Debug)]
pub struct Control {
    pub at: Duration,
    pub length: Duration,
    pub host: usize,
    pub kind: ControlKind,
}

/// The store is unavailable from `from` for `length`.
#[derive(Clone, Debug)]
pub struct Outage {
    pub from: Duration,
    pub length: Duration,
}

/// The whole schedule.
#[derive(Clone, Debug)]
pub struct Plan {
    pub seed: u64,
    pub intents: Vec<IntentPlan>,
    pub crashes: Vec<Crash>,
    pub outage: Option<Outage>,
    /// The gateway hosts on the one store (two or three), each with its own clock.
    pub hosts: Vec<Host>,
    /// Kill switches and holds set and cleared mid-run.
    pub controls: Vec<Control>,
    /// Maximum latency of one store operation.
    pub store_latency: Duration,
    /// Whether the provider may commit after the gateway's timeout.
    pub late_commits: bool,
    /// When `mallory` rebuilds tokens from the intents it reads, and tries them.
    pub snoops: Vec<Snoop>,
    /// The thieves of leaked tokens present the claimer's own identity (its bearer
    /// token stolen too), which no gateway can tell from the claimer: set by the test
    /// that shows what the principal check prevents, never drawn.
    pub thieves_hold_the_claimers_identity: bool,
}

/// Faults stop here (virtual time from the start); afterwards the provider answers
/// promptly, the store stays up and the gateway stays alive, so the horizon checks see
/// what the engine makes of the chaos.
pub const CALM_AT: Duration = Duration::from_secs(90);

fn secs(rng: &mut StdRng, from: f64, to: f64) -> Duration {
    Duration::from_secs_f64(rng.random_range(from..to))
}

impl Worker {
    fn draw(rng: &mut StdRng) -> Worker {
        // Mostly prompt; sometimes a stall past the 30 s lease. Stalls stay well inside
        // the settle horizon: a worker that starts its provider call after its lease
        // AND the horizon have run out can make a second effect, which is the limit of
        // the two-phase API (documented), not something the gateway can see.
        let stall = |rng: &mut StdRng| match rng.random_range(0..10) {
            0..=5 => Duration::ZERO,
            6..=7 => secs(rng, 0.0, 5.0),
            _ => secs(rng, 25.0, 45.0),
        };
        Worker {
            stall_before: stall(rng),
            stall_after: stall(rng),
            dies_before: rng.random_bool(0.05),
            dies_after: rng.random_bool(0.1),
            // Drawn from a copy, so the seeds' other draws stay what they were.
            lies: rng.clone().random_bool(0.15),
            // Drawn by `Plan::draw_thefts`, from a generator of its own.
            leaks: Vec::new(),
        }
    }
}

impl Theft {
    fn draw(rng: &mut StdRng) -> Theft {
        match rng.random_range(0..4) {
            0 => Theft::NotSent,
            1 => Theft::Applied,
            2 => Theft::Unknown,
            _ => Theft::Heartbeat,
        }
    }
}

impl Plan {
    pub fn draw(seed: u64, late_commits: bool) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed);
        // The two-phase draws come from a generator of their own, so adding them kept
        // every earlier schedule's draws (and their regression value) as they were.
        let mut workers = StdRng::seed_from_u64(seed ^ 0x2fa5_e000);
        let n_intents = rng.random_range(1..=3);
        let mut intents = Vec::new();
        for i in 0..n_intents {
            let cap = match rng.random_range(0..10) {
                0..=2 => Cap::Charge,
                3..=5 => Cap::Email,
                6..=7 => Cap::Refund,
                _ => Cap::Upsert,
            };
            let amount = match cap {
                Cap::Refund if rng.random_bool(0.7) => "250.00",
                _ => "12.50",
            };
            // `keyed` declares that the provider dedupes on the key (`verify` checks it): only
            // the non_idempotent email's provider may ignore it.
            let provider_honours_key = cap != Cap::Email || rng.random_bool(0.5);
            let mut calls = Vec::new();
            let mut at = secs(&mut rng, 0.0, 5.0);
            for _ in 0..rng.random_range(1..=6) {
                // Parallel repeats (the same instant), quick re-plans and late repeats.
                at += match rng.random_range(0..4) {
                    0 => Duration::ZERO,
                    1 => secs(&mut rng, 0.0, 2.0),
                    2 => secs(&mut rng, 2.0, 12.0),
                    _ => secs(&mut rng, 12.0, 40.0),
                };
                calls.push(CallPlan {
                    at: at.min(CALM_AT - Duration::from_secs(1)),
                    agent: if rng.random_bool(0.5) {
                        "agent1"
                    } else {
                        "agent2"
                    },
                    run: match rng.random_range(0..3) {
                        0 => None,
                        1 => Some("run-1"),
                        _ => Some("run-2"),
                    },
                    memo: rng.random_range(0..1000),
                    worker: Worker::draw(&mut workers),
                    host: 0,
                });
            }
            intents.push(IntentPlan {
                cap,
                order: format!("O-{i}"),
                amount,
                provider_honours_key,
                two_phase: workers.random_bool(0.35),
                calls,
            });
        }
        let call_times: Vec<Duration> = intents
            .iter()
            .flat_map(|i| i.calls.iter().map(|c| c.at))
            .collect();
        let crashes = (0..rng.random_range(0..=2))
            .map(|_| {
                // Half the crashes land just after a call, between its claim and its
                // record (store and provider latencies spread those awaits over this
                // window); the rest anywhere.
                let at = if rng.random_bool(0.5) {
                    let call = call_times[rng.random_range(0..call_times.len())];
                    call + Duration::from_millis(rng.random_range(0..1500))
                } else {
                    secs(&mut rng, 0.0, 70.0)
                };
                Crash {
                    host: 0,
                    at: at.min(Duration::from_secs(75)),
                    restart_after: secs(&mut rng, 0.0, 10.0),
                }
            })
            .collect();
        let outage = rng.random_bool(0.35).then(|| Outage {
            from: secs(&mut rng, 0.0, 70.0),
            length: secs(&mut rng, 0.05, 15.0),
        });
        let store_latency = Duration::from_millis(rng.random_range(0..=30));
        let mut plan = Plan {
            seed,
            intents,
            crashes,
            outage,
            hosts: Vec::new(),
            controls: Vec::new(),
            store_latency,
            late_commits,
            snoops: Vec::new(),
            thieves_hold_the_claimers_identity: false,
        };
        plan.draw_hosts_and_controls();
        plan.draw_thefts();
        plan
    }

    /// The thief's moments: leaks of two-phase workers' tokens and reads of the intents
    /// in flight. From a generator of their own, so adding them kept every earlier draw.
    fn draw_thefts(&mut self) {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x7e_f700);
        for intent in self.intents.iter_mut().filter(|i| i.two_phase) {
            for call in &mut intent.calls {
                if !rng.random_bool(0.4) {
                    continue;
                }
                call.worker.leaks = (0..rng.random_range(1..=2))
                    .map(|_| Leak {
                        thief: if rng.random_bool(0.5) {
                            Thief::Mallory
                        } else {
                            Thief::OtherAgent
                        },
                        // Mostly while the claim is live (its worker is calling the
                        // provider or stalling), sometimes after its lease ran out.
                        after: match rng.random_range(0..10) {
                            0..=4 => secs(&mut rng, 0.0, 1.0),
                            5..=7 => secs(&mut rng, 1.0, 10.0),
                            _ => secs(&mut rng, 10.0, 45.0),
                        },
                        theft: Theft::draw(&mut rng),
                    })
                    .collect();
            }
        }
        let hosts = self.hosts.len();
        let call_times: Vec<Duration> = self
            .intents
            .iter()
            .flat_map(|i| i.calls.iter().map(|c| c.at))
            .collect();
        self.snoops = (0..rng.random_range(0..=4))
            .map(|_| Snoop {
                // Half just after a call, while its claim is likely in flight; the rest
                // anywhere before the calm point.
                at: if rng.random_bool(0.5) {
                    call_times[rng.random_range(0..call_times.len())]
                        + Duration::from_millis(rng.random_range(0..1500))
                } else {
                    secs(&mut rng, 0.0, CALM_AT.as_secs_f64())
                }
                .min(CALM_AT - Duration::from_secs(1)),
                host: rng.random_range(0..hosts),
                theft: Theft::draw(&mut rng),
            })
            .collect();
    }

    /// The hosts, their clocks, the routing of calls and crashes, payouts and the
    /// controls: from a generator of their own, so adding them kept every earlier draw.
    fn draw_hosts_and_controls(&mut self) {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x00c1_0c45);
        let signed = |rng: &mut StdRng, from: f64, to: f64| {
            let v = rng.random_range(from..to);
            if rng.random_bool(0.5) { v } else { -v }
        };
        // Clocks as they really are: mostly right, some off by seconds or minutes (a
        // VM resumed, NTP not yet synced), some by hours or a day (a bad host clock).
        let clock_error = |rng: &mut StdRng| match rng.random_range(0..8) {
            0..=3 => signed(rng, 0.0, 0.05),
            4..=5 => signed(rng, 5.0, 700.0),
            _ => signed(rng, 3600.0, 26.0 * 3600.0),
        };
        let n_hosts = rng.random_range(2..=3);
        self.hosts = (0..n_hosts)
            .map(|_| {
                let offset_secs = clock_error(&mut rng);
                let mut steps = Vec::new();
                for _ in 0..rng.random_range(0..=2) {
                    if rng.random_bool(0.5) {
                        steps.push((secs(&mut rng, 0.0, 85.0), clock_error(&mut rng)));
                    }
                }
                Host { offset_secs, steps }
            })
            .collect();
        for intent in &mut self.intents {
            // About one intent in three pays out under the binding limit instead.
            if rng.random_bool(0.3) {
                intent.cap = Cap::Payout;
                intent.amount = "12.50";
                intent.provider_honours_key = true;
            }
            for call in &mut intent.calls {
                call.host = rng.random_range(0..n_hosts);
            }
        }
        for crash in &mut self.crashes {
            crash.host = rng.random_range(0..n_hosts);
        }
        let caps: Vec<(Cap, String)> = self
            .intents
            .iter()
            .map(|i| (i.cap, i.order.clone()))
            .collect();
        self.controls = Vec::new();
        for _ in 0..rng.random_range(0..=2) {
            if rng.random_bool(0.3) {
                let (cap, order) = caps[rng.random_range(0..caps.len())].clone();
                self.controls.push(Control {
                    at: secs(&mut rng, 0.0, 60.0),
                    length: secs(&mut rng, 1.0, 20.0),
                    host: rng.random_range(0..n_hosts),
                    kind: if rng.random_bool(0.5) {
                        ControlKind::KillSwitch(cap)
                    } else {
                        ControlKind::Hold(cap, order)
                    },
                });
            }
        }
    }
}
