//! `oncegate demo`: the red-team scenarios, run twice each: once through a naive
//! executor (a fresh UUID key per attempt, as agent harnesses do today) and once through
//! oncegate, counting effects in the sandbox provider's ledger.
//!
//! world.rs starts what every scenario runs over (the sandbox, a gateway, clients);
//! scenarios.rs holds one method per scenario; here is the list and the row each one
//! becomes.

mod scenarios;
mod world;

use serde::Serialize;

pub use world::World;

/// One scenario's result.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// 1..=10.
    pub id: u8,
    /// Short name.
    pub name: &'static str,
    /// The one-line story.
    pub story: &'static str,
    /// Effects the naive executor caused.
    pub naive_effects: usize,
    /// Effects with oncegate in front.
    pub oncegate_effects: usize,
    /// What oncegate must produce.
    pub expected: usize,
    /// Whatever else was checked (alerts, approvals, breaker), and whether it held.
    pub notes: String,
    /// oncegate met its expectation.
    pub ok: bool,
}

/// The scenarios, in order: (id, name, story).
pub const SCENARIOS: [(u8, &str, &str); 12] = [
    (
        1,
        "timeout-retry",
        "the provider commits then stalls past the timeout; the harness retries 3x",
    ),
    (
        2,
        "injected re-plan",
        "a page says the charge \"failed, reissue it\"; re-plans drift 12.5 / \"12.50\" / 1250 minor",
    ),
    (
        3,
        "crash replay",
        "the gateway is SIGKILLed between the provider's commit and the record, restarted, the run resumes",
    ),
    (
        4,
        "double approval",
        "a refund over the limit needs approval; two approvers click at once",
    ),
    (
        5,
        "parallel subagents",
        "16 subagents fire the same charge at once",
    ),
    (
        6,
        "retry storm",
        "50 repeats of a sent email are replays and raise an alert; 50 against a provider answering 429 trip the breaker",
    ),
    (
        7,
        "outside the window",
        "a second refund after the replay window is a new intent and goes to approval",
    ),
    (
        8,
        "cross-run duplicate",
        "the same ledger entry from a second run raises an alert and is held",
    ),
    (
        9,
        "provider ignores keys",
        "the email provider ignores Idempotency-Key; the send times out once",
    ),
    (
        10,
        "control",
        "5 different orders give 5 charges (no false dedupe)",
    ),
    (
        11,
        "bypass held",
        "a direct credential charges an order the gateway charged; detection holds it, the next charge is refused",
    ),
    (
        12,
        "spend limit",
        "16 subagents charge 16 different orders of 1,500.00 at once against a 4,500.00 USD daily budget",
    ),
];

impl World {
    /// Runs one scenario.
    pub async fn run(&self, id: u8) -> Row {
        // A fault left queued by an earlier scenario must not leak into this one.
        let _ = self
            .http
            .delete(format!("{}/_sandbox/faults", self.sandbox))
            .send()
            .await;
        let (_, name, story) = SCENARIOS[usize::from(id - 1)];
        let tally = match id {
            1 => self.timeout_retry().await,
            2 => self.injected_replan().await,
            3 => self.crash_replay().await,
            4 => self.double_approval().await,
            5 => self.parallel_subagents().await,
            6 => self.retry_storm().await,
            7 => self.outside_the_window().await,
            8 => self.cross_run_duplicate().await,
            9 => self.provider_ignores_keys().await,
            11 => self.bypass_held().await,
            12 => self.spend_limit().await,
            _ => self.control().await,
        };
        Row {
            id,
            name,
            story,
            naive_effects: tally.naive,
            oncegate_effects: tally.oncegate,
            expected: tally.expected,
            ok: tally.ok && tally.oncegate == tally.expected,
            notes: tally.notes,
        }
    }
}
