//! One schedule, drawn from a seed: which intents, when agents call, what the provider
//! does with each request, when the gateway crashes and when the store is lost.
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
}

impl Cap {
    pub fn name(self) -> &'static str {
        match self {
            Cap::Charge => "charge",
            Cap::Email => "email",
            Cap::Refund => "refund",
            Cap::Upsert => "upsert",
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
}

/// A gateway crash: every task of the running instance dies at `at`; a new instance
/// starts on the same store `restart_after` later.
#[derive(Clone, Debug)]
pub struct Crash {
    pub at: Duration,
    pub restart_after: Duration,
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
    /// Maximum latency of one store operation.
    pub store_latency: Duration,
    /// Whether the provider may commit after the gateway's timeout.
    pub late_commits: bool,
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
        Plan {
            seed,
            intents,
            crashes,
            outage,
            store_latency,
            late_commits,
        }
    }
}
