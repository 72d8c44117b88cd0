//! The deterministic simulation: thousands of seeded schedules of faults, each run
//! through the real engine (`Gate` driving `oncegate_core::decide`) on the in-memory
//! store, against a simulated provider, and checked against the promise: at most one
//! effect per intent, exactly one where the intent is applied, nothing left in flight
//! or unknown past the horizon, no budget overspent, no approval executed after its
//! TTL, nothing started past a kill switch or hold, the audit chain intact.
//!
//! People who should not be trusted, beside the faults: about a third of the intents
//! are executed by their callers' own workers (claim, provider call, complete), and
//! some of those workers lie (`not_sent` for an effect the provider applied, on a
//! capability with a reconciliation read; `world::LIES`). A thief, a principal other
//! than the claimer's (`mallory`, an agent that never claims, or the other of the two
//! agents), learns real fencing tokens and tries them at seeded moments: tokens it
//! rebuilds from the intents in flight as the read API shows them to an approver, and
//! the stronger model, a worker's own token leaked from its memory or logs. With them
//! it completes other principals' claims `not_sent` (to provoke a second execution),
//! `applied` with a made-up effect reference (to suppress the real one) or `unknown`,
//! and heartbeats them (world/thief.rs). Every attempt must be refused (`world::STEALS`
//! counts them, `world::STEALS_ACCEPTED` must stay 0), and the promise checks hold
//! around them. `simulation_stolen_identity_breaks_the_promise` keeps showing that the
//! principal check is what holds: a thief that presents the claimer's identity along
//! with a leaked token breaks the promise.
//!
//! Time as it really is: each world runs two or three gateway hosts on one store, each
//! host with its own wall clock (off by milliseconds, minutes or a day, and stepping
//! mid-run). The store keeps its own time (the PostgreSQL model), and every gate
//! decides by its estimate of the store's clock, as `serve` does; the hosts' clocks
//! decide nothing. `Clocks::Legacy` makes each gate decide by its host's clock instead,
//! which is what the engine did before; `simulation_legacy_clocks_break_the_promise`
//! keeps showing what that breaks.
//!
//! Why tokio's paused clock with seeded fault plans, and not `turmoil` (or `madsim`):
//! the engine's only I/O is behind two seams it already has, the store traits and the
//! `Executor` trait, so the whole world (store, provider, gateway instances, agents,
//! approvers) fits in one process without a simulated network. A current-thread runtime
//! started paused is deterministic (one thread, FIFO scheduling, a timer wheel that
//! jumps straight to the next deadline when every task waits), so minutes of timeouts,
//! leases and sweeps cost microseconds and a seed replays exactly. turmoil's value is
//! simulated TCP between hosts; the gateway's real executors use reqwest and rmcp over
//! tokio's own sockets, which turmoil cannot intercept, so it would have bought a second
//! network layer and a dependency without putting more of the real code under test.
//! `madsim` replaces tokio wholesale, which the SQLite writer and rmcp do not support.
//! A crash is the abort of every task of one gateway instance (`oncegate_engine::Process`,
//! the one hook the `Gate` has for this), which reaches the same await points SIGKILL
//! does; the store and the provider's own tasks survive it, as they would.
//!
//! Knobs (environment):
//! - `ONCEGATE_SIM_SEED=N`: run only schedule N (the replay command a failure prints).
//! - `ONCEGATE_SIM_SCHEDULES=N`: how many schedules (default 5000, the CI run); the long
//!   mode is e.g. `ONCEGATE_SIM_SCHEDULES=1000000`, outside CI.
//! - `ONCEGATE_SIM_FIRST_SEED=N`: where the seeds start (default 0).

mod plan;
mod world;

use std::path::Path;
use std::time::Instant;

use oncegate_core::Registry;
use oncegate_core::config::ConfigEnv;

use plan::{Cap, Plan};

/// LATE COMMITS (issue 9 section 1): the provider commits after the gateway's timeout,
/// before or after the sweep's and the repeats' reconciliation reads.
///
/// Before the settle horizon, a "not found" read while the first attempt could still
/// land was taken as proof of absence, and this fault class found duplicate effects in
/// about one schedule in 25, the first being seed 0: an email sent at 38.8 s whose
/// provider commits 21 s later; the gateway answers `unknown` at its 5 s timeout; the
/// sweep reads "not found" at 45.4 s and marks it `not_applied`; the provider commits at
/// 59.9 s; the agent's repeat at 69.7 s sends a second email and is told `applied`. It
/// stays on as the regression guard of that fix.
const LATE_COMMITS_ENABLED: bool = true;

/// TWO-PHASE CALLERS (issue 12): about a third of the intents are executed by their
/// callers' own workers (claim, provider call, complete) instead of by the gateway; a
/// worker may stall past its lease before its provider call or before completing, or
/// die, and approvals of those intents leave the call for the next claim.
///
/// The first run found the limit of the fence, on seed 1819: a worker stalled 32 s
/// after its claim and before its provider call; its lease expired, the next claim
/// re-executed with the same key, the provider declined it (and kept no record of a
/// declined key), the intent settled `failed`, and then the stalled worker's request
/// went out and was charged. Its completion was refused (stale), as it must be, but the
/// effect was real. The gateway cannot stop a request it never sees, so a worker checks
/// its lease before it sends (the Python client does, and the world's workers do); a
/// stale completion that reports an effect the intent does not record is logged as an
/// error (`alert=stale_effect`) and counted in `oncegate_stale_effects_total`.
///
/// The registry every schedule runs: one capability per recovery path.
const REGISTRY: &str = r#"
[gateway]
tenant = "acme"
time_zone = "UTC"

[store]
url = "sqlite://unused-by-the-simulation.db"

[[principals]]
name = "agent1"
role = "agent"
token_env = "SIM_T1"

[[principals]]
name = "agent2"
role = "agent"
token_env = "SIM_T2"

[[principals]]
name = "alice"
role = "approver"
token_env = "SIM_T3"

[[principals]]
name = "bob"
role = "approver"
token_env = "SIM_T4"

# The thief of world/thief.rs: an agent that never claims, only steals.
[[principals]]
name = "mallory"
role = "agent"
token_env = "SIM_T5"

[[capabilities]]
name = "charge"
category = "keyed"
attempt_ceiling = 100
lease = "30s"
on_unknown = "reconcile"
cross_run = "allow"
key = { business_ref = "order_id", significant = [{ arg = "amount", type = "money", default_currency = "USD" }] }

# Never binding: its reservations are checked at the end (one per applied charge,
# none left by a failed or not-applied one, none counted twice by a repeat).
[[capabilities.limits]]
name = "charge_count"
max = 1000000000
window = "24h"

[capabilities.upstream]
kind = "http"
url = "http://provider.sim/v1/charges"
timeout = "5s"
effect_ref = "/id"

[capabilities.reconcile]
kind = "http"
url = "http://provider.sim/v1/charges?idempotency_key={key}"
found = "/found"
effect_ref = "/charge/id"

[[capabilities]]
name = "email"
category = "non_idempotent"
attempt_ceiling = 100
lease = "30s"
on_unknown = "reconcile"
cross_run = "allow"
key = { business_ref = "order_id", scope = "run" }

[capabilities.upstream]
kind = "http"
url = "http://provider.sim/v1/emails"
timeout = "5s"
effect_ref = "/id"

[capabilities.reconcile]
kind = "http"
url = "http://provider.sim/v1/emails?dedupe_ref={key}"
found = "/found"
effect_ref = "/email/id"

[[capabilities]]
name = "refund"
category = "keyed"
attempt_ceiling = 100
lease = "30s"
on_unknown = "reconcile"
cross_run = "allow"
approval_ttl = "20s"
policy = "sim.cedar"
key = { business_ref = "order_id", significant = [{ arg = "amount", type = "money", default_currency = "USD" }] }

[capabilities.upstream]
kind = "http"
url = "http://provider.sim/v1/refunds"
timeout = "5s"
effect_ref = "/id"

[capabilities.reconcile]
kind = "http"
url = "http://provider.sim/v1/refunds?idempotency_key={key}"
found = "/found"
effect_ref = "/refund/id"

[[capabilities]]
name = "upsert"
category = "keyed"
attempt_ceiling = 100
lease = "30s"
on_unknown = "retry"
cross_run = "allow"
key = { business_ref = "order_id" }

[capabilities.upstream]
kind = "http"
url = "http://provider.sim/v1/records"
timeout = "5s"
effect_ref = "/id"

# Every unknown attempt goes to a human (no reconciliation read), under a binding spend
# limit: one of the schedules' 12.50 payouts an hour, whatever the clocks say.
[[capabilities]]
name = "payout"
category = "keyed"
attempt_ceiling = 100
lease = "30s"
on_unknown = "escalate"
cross_run = "allow"
approval_ttl = "20s"
key = { business_ref = "order_id", significant = [{ arg = "amount", type = "money", default_currency = "USD" }] }

[[capabilities.limits]]
name = "payout_spend"
argument = "amount"
max = "12.50"
window = "1h"

[capabilities.upstream]
kind = "http"
url = "http://provider.sim/v1/payouts"
timeout = "5s"
effect_ref = "/id"
"#;

const POLICIES: &str = r#"
permit (principal, action, resource) when { principal.role == "agent" };
@id("big-refund")
@oncegate("require_approval")
permit (principal, action == Action::"refund", resource) when { context.amount > 10000 };
"#;

struct SimEnv;

impl ConfigEnv for SimEnv {
    fn read_file(&self, _path: &Path) -> std::io::Result<String> {
        Ok(POLICIES.to_owned())
    }

    fn time_zone(&self, name: &str) -> Option<jiff::tz::TimeZone> {
        (name == "UTC").then_some(jiff::tz::TimeZone::UTC)
    }
}

fn registry() -> Registry {
    Registry::parse(Path::new("simulation.toml"), REGISTRY, &SimEnv)
        .unwrap_or_else(|e| panic!("the simulation's registry: {e}"))
}

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}=`{text}` is not a number")),
    )
}

fn late_commits() -> bool {
    LATE_COMMITS_ENABLED
}

/// The command that replays one seed exactly.
fn replay_command(seed: u64) -> String {
    format!(
        "ONCEGATE_SIM_SEED={seed} cargo test -p oncegate-engine --test it simulation_explores_seeded_schedules -- --nocapture"
    )
}

/// What the worlds of one run are: today's engine, or a variant that shows what one of
/// its guards prevents.
#[derive(Clone, Copy)]
struct Worlds {
    clocks: world::Clocks,
    /// Thieves present the claimer's identity along with a leaked token
    /// (`Plan::thieves_hold_the_claimers_identity`).
    stolen_identity: bool,
}

impl Worlds {
    /// Today's engine.
    const TODAY: Worlds = Worlds {
        clocks: world::Clocks::Store,
        stolen_identity: false,
    };
}

/// One schedule on its own paused current-thread runtime.
fn run_seed(
    seed: u64,
    registry: &Registry,
    worlds: Worlds,
    stats: &mut world::Stats,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let mut plan = Plan::draw(seed, late_commits());
    plan.thieves_hold_the_claimers_identity = worlds.stolen_identity;
    runtime.block_on(world::run(plan, registry.clone(), worlds.clocks, stats))
}

/// Runs `seeds` on two threads (each its own runtimes: schedules are independent, and
/// each one is deterministic on its own thread), each thread stopping at `stop_at`
/// failures. Answers the failures, sorted by seed, and what the schedules exercised.
fn explore(seeds: &[u64], worlds: Worlds, stop_at: usize) -> (Vec<(u64, String)>, world::Stats) {
    let threads = 2usize;
    let (mut failures, stats): (Vec<(u64, String)>, world::Stats) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let seeds = &seeds;
                scope.spawn(move || {
                    let registry = registry();
                    let mut failures = Vec::new();
                    let mut stats = world::Stats::new();
                    for &seed in seeds.iter().skip(t).step_by(threads) {
                        if let Err(report) = run_seed(seed, &registry, worlds, &mut stats) {
                            failures.push((seed, report));
                            if failures.len() >= stop_at {
                                break;
                            }
                        }
                    }
                    (failures, stats)
                })
            })
            .collect();
        let mut all = (Vec::new(), world::Stats::new());
        for h in handles {
            let (failures, stats) = h.join().expect("a simulation thread");
            all.0.extend(failures);
            for (k, v) in stats {
                *all.1.entry(k).or_default() += v;
            }
        }
        all
    });
    failures.sort_by_key(|(seed, _)| *seed);
    (failures, stats)
}

#[test]
fn simulation_explores_seeded_schedules() {
    let seeds: Vec<u64> = match env_u64("ONCEGATE_SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let first = env_u64("ONCEGATE_SIM_FIRST_SEED").unwrap_or(0);
            let count = env_u64("ONCEGATE_SIM_SCHEDULES").unwrap_or(5000);
            (first..first + count).collect()
        }
    };
    let started = Instant::now();
    let (failures, stats) = explore(&seeds, Worlds::TODAY, 20);
    let elapsed = started.elapsed();
    eprintln!(
        "simulation: {} schedules in {:.1}s (late commits {}), {} failing",
        seeds.len(),
        elapsed.as_secs_f64(),
        if late_commits() { "on" } else { "off" },
        failures.len()
    );
    for (what, count) in &stats {
        eprintln!("  {what}: {count}");
    }
    if seeds.len() >= 100 {
        assert!(
            stats.get(world::LIES).is_some_and(|n| *n > 0),
            "the schedules had lying workers: {stats:?}"
        );
        assert!(
            stats.get(world::STEALS).is_some_and(|n| *n > 0),
            "the schedules had a thief trying other principals' claims: {stats:?}"
        );
    }
    let shown: Vec<String> = failures
        .iter()
        .take(3)
        .map(|(seed, report)| {
            format!(
                "schedule {seed} broke the promise:\n  {report}\n  replay: {}",
                replay_command(*seed)
            )
        })
        .collect();
    let index: Vec<String> = failures
        .iter()
        .map(|(seed, report)| format!("  seed {seed}: {}", report.lines().next().unwrap_or("")))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} schedules failed (each thread stops at 20):\n{}\n\nthe first in full:\n\n{}",
        failures.len(),
        seeds.len(),
        index.join("\n"),
        shown.join("\n\n")
    );
    // Each accepted steal failed its schedule already ("STOLEN CLAIM ACCEPTED"): the
    // same, said as the count the issue asks for.
    assert_eq!(
        stats.get(world::STEALS_ACCEPTED).copied().unwrap_or(0),
        0,
        "no steal may be accepted: {stats:?}"
    );
}

/// A seed replays exactly: the same plan, the same provider trace, the same answers.
#[test]
fn simulation_replays_a_seed_exactly() {
    let registry = registry();
    let trace = |seed: u64| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
        runtime.block_on(world::trace(Plan::draw(seed, true), registry.clone()))
    };
    for seed in [3, 17, 4242] {
        let first = trace(seed);
        assert!(!first.is_empty(), "schedule {seed} did something");
        assert_eq!(first, trace(seed), "schedule {seed} must replay exactly");
    }
}

/// The checks can fail: a second effect forged into the provider's ledger is reported.
#[test]
fn simulation_checks_report_a_forged_duplicate() {
    let registry = registry();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    // A calm schedule: one charge, no faults beyond the provider's plan.
    let mut plan = Plan::draw(0, false);
    plan.intents.truncate(1);
    plan.intents[0].cap = Cap::Charge;
    plan.crashes.clear();
    plan.controls.clear();
    plan.snoops.clear();
    plan.outage = None;
    let bad = runtime.block_on(world::run_with_forged_duplicate(plan, registry));
    assert!(
        bad.iter().any(|b| b.starts_with("DUPLICATE EFFECT")),
        "a forged duplicate must be reported, got {bad:?}"
    );
}

/// The same schedules with each gate deciding by its own host's wall clock, as the
/// engine did before one clock decided: the checks find second effects, overspent
/// budgets and approvals executed after their time to live, which the store-clock
/// worlds above never show. How often is printed (and recorded in the issue's note);
/// the test fails if the legacy worlds stop finding the settle-horizon duplicate, which
/// would mean the simulation no longer exercises what clocks can break.
#[test]
fn simulation_legacy_clocks_break_the_promise() {
    let count = env_u64("ONCEGATE_SIM_LEGACY_SCHEDULES").unwrap_or(1000);
    let seeds: Vec<u64> = (0..count).collect();
    let started = Instant::now();
    let worlds = Worlds {
        clocks: world::Clocks::Legacy,
        stolen_identity: false,
    };
    let (failures, _) = explore(&seeds, worlds, usize::MAX);
    let mut kinds: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for (_, report) in &failures {
        for kind in [
            "DUPLICATE EFFECT",
            "BUDGET OVERSPENT",
            "APPROVED AFTER ITS TTL",
            "EXECUTED PAST A CONTROL",
            "NOT SETTLED",
            "STORE DISAGREES WITH PROVIDER",
        ] {
            if report.contains(kind) {
                *kinds.entry(kind).or_default() += 1;
            }
        }
    }
    eprintln!(
        "simulation, legacy clocks: {} of {count} schedules broke the promise in {:.1}s",
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    for (kind, n) in &kinds {
        eprintln!("  {kind}: {n} schedules");
    }
    if let Some((seed, report)) = failures
        .iter()
        .find(|(_, r)| r.starts_with("DUPLICATE EFFECT"))
    {
        eprintln!(
            "  the first duplicate, seed {seed}: {}",
            report.lines().next().unwrap_or("")
        );
    }
    assert!(
        kinds.get("DUPLICATE EFFECT").copied().unwrap_or(0) > 0,
        "gates deciding by their own wrong clocks must make a second effect in some of {count} schedules; kinds found: {kinds:?}"
    );
}

/// The schedules where a token leaks, with the thieves presenting the claimer's own
/// identity along with it (its bearer token stolen too), which no gateway can tell from
/// the claimer: the principal check is out of the way, and the thieves' completions are
/// taken. They break the promise (an intent applied with a made-up reference and no
/// effect, a second effect, ...), which the worlds above never show: the principal check
/// is what holds there, not the schedules' luck. How often is printed; the test fails
/// if no schedule breaks, which would mean the thief no longer reaches live claims. The
/// thief's tokens rebuilt from reads stay refused here too (the lease holds a seal).
#[test]
fn simulation_stolen_identity_breaks_the_promise() {
    let count = env_u64("ONCEGATE_SIM_STOLEN_SCHEDULES").unwrap_or(1000);
    // Only the schedules where a token leaks: the others are the worlds above.
    let seeds: Vec<u64> = (0..count)
        .filter(|&seed| {
            Plan::draw(seed, late_commits())
                .intents
                .iter()
                .flat_map(|i| &i.calls)
                .any(|c| !c.worker.leaks.is_empty())
        })
        .collect();
    let worlds = Worlds {
        clocks: world::Clocks::Store,
        stolen_identity: true,
    };
    let started = Instant::now();
    let (failures, stats) = explore(&seeds, worlds, usize::MAX);
    let mut kinds: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for (_, report) in &failures {
        // The violations come first in a report, one a line, the plan after them.
        let mut found = std::collections::BTreeSet::new();
        for line in report
            .lines()
            .take_while(|l| !l.trim_start().starts_with("plan:"))
        {
            let kind = line.trim_start().split(':').next().unwrap_or_default();
            if !kind.is_empty() && kind.chars().all(|c| c.is_ascii_uppercase() || c == ' ') {
                found.insert(kind);
            }
        }
        for kind in found {
            *kinds.entry(kind).or_default() += 1;
        }
    }
    let broken = failures
        .iter()
        .filter(|(_, report)| !report.starts_with("STOLEN CLAIM ACCEPTED"))
        .count();
    eprintln!(
        "simulation, thieves with the claimer's identity: {broken} of {} schedules with a leaked token broke the promise ({} failing in all, {} steals, {} accepted) in {:.1}s",
        seeds.len(),
        failures.len(),
        stats.get(world::STEALS).copied().unwrap_or(0),
        stats.get(world::STEALS_ACCEPTED).copied().unwrap_or(0),
        started.elapsed().as_secs_f64()
    );
    for (kind, n) in &kinds {
        eprintln!("  {kind}: {n} schedules");
    }
    if let Some((seed, report)) = failures
        .iter()
        .find(|(_, r)| !r.starts_with("STOLEN CLAIM ACCEPTED"))
    {
        eprintln!(
            "  the first, seed {seed}: {}",
            report.lines().next().unwrap_or("")
        );
    }
    assert!(
        broken > 0,
        "thieves holding the claimer's identity and its token must break the promise in some of {} schedules; kinds found: {kinds:?}",
        seeds.len()
    );
    // The seal holds on its own: no read shows a claim's nonce, so a token rebuilt from
    // reads is refused even where the principal check cannot help.
    assert_eq!(
        stats
            .get(&world::read_steals_accepted())
            .copied()
            .unwrap_or(0),
        0,
        "a token rebuilt from what the read API shows must never be taken: {stats:?}"
    );
}
