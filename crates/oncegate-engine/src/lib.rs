//! oncegate-engine: the decision point every surface drives.
//!
//! [`Gate`] holds the registry, whatever store [`oncegate_store::open`] returned, and an
//! injected [`Clock`]. It loads an intent, asks `oncegate_core::decide` what to do,
//! commits the decision (a compare-and-set with its audit event) and carries it out.
//! The gateway's JSON API and MCP surface, the CLI's `verify`, and a Rust agent runtime
//! embedding oncegate all call it; none of them makes a decision of its own.
//!
//! # The API
//!
//! - **Two-phase**, for callers that execute the effect themselves:
//!   [`Gate::claim`] (or [`Gate::claim_with`], with an executor that vets the call and
//!   can reconcile an unknown intent) answers [`Claimed::Execute`] with a [`Claim`]
//!   (intent key, generation, execution number as the fencing token, attempt, lease
//!   expiry, and the [`IntentHandle`] to execute), or [`Claimed::Settled`] with exactly
//!   the outcome `invoke` would give (replayed, in flight, unknown, pending approval,
//!   denied, refused, dry run), or [`Claimed::Read`] for a read capability (nothing is
//!   claimed). The holder executes, then [`Gate::complete`]s; [`Gate::heartbeat`]
//!   keeps the lease alive for a long effect. Completion is strict: a claim that was
//!   superseded, whose lease expired by the gate's clock, or whose intent is no longer
//!   in flight for it records nothing and gets [`GateError::StaleClaim`] (`OG-0024`);
//!   a repeat of a recorded completion answers what was recorded.
//! - **One-shot**, where the gate makes the call: [`Gate::invoke`] (a closure) and
//!   [`Gate::invoke_with`] (an [`Executor`], which can also reconcile) claim, execute in
//!   a task of their own (a dropped caller never aborts an effect half-way) and record
//!   the result before answering. Their recording is lenient: fenced by the execution
//!   number only, so a result or an MCP late answer ([`LateAnswer`]) that arrives after
//!   the lease expired is still recorded (an effect that happened is the truth).
//! - **Around calls**: approvals ([`Gate::decide_approval`]: approving executes the held
//!   intent once, here), breaker resets, kill switches, the read rate cap and
//!   client-key binding (inside the claim), and the reconciliation sweep
//!   ([`Gate::sweep_one`], and [`Gate::sweep_pass`] that a server ticks). All timed by
//!   the injected clock.
//!
//! # Where the wire plugs in
//!
//! The two-phase JSON API (`POST /v1/intents/claim`, `.../{key}/complete`,
//! `.../{key}/heartbeat`) is a thin layer over [`Gate::claim_with`],
//! [`Gate::complete_fenced`] and [`Gate::heartbeat_fenced`]: a claim's [`Fence`]
//! travels as the intent key plus [`Fence::token`], read back with
//! [`Fence::from_token`]; [`GateError::StaleClaim`] maps to 409.
//!
//! # Modules
//!
//! gate.rs (the struct, opening, accessors), claim/ (preflight -> load -> decide ->
//! commit, reconciliation on the way), fence.rs (a claim and its fence, below claim/ and
//! complete.rs), invoke.rs (claim -> execute in a task -> record),
//! complete.rs (complete, heartbeat, recording), approvals.rs, controls.rs (kill
//! switches, breakers, read cap, client keys), kill_switches.rs (the gate's cache of
//! the stored switches), sweep.rs, read_back.rs (the sweep proves reconciliation reads), doubts.rs (what a provider failed to prove: unproven reads, ignored keys),
//! pins.rs (fronted tools' pinned definitions: a changed one held until accepted),
//! storms.rs (replay storms),
//! call.rs, executor.rs, error.rs, clock.rs, process.rs (the simulation's processes),
//! who.rs (a principal: a registry name, or a name and role authentication proved).

mod approvals;
mod call;
mod claim;
pub mod clock;
mod complete;
pub mod config;
mod controls;
mod detect;
mod doubts;
mod error;
mod executor;
mod fence;
mod gap;
mod gate;
mod invoke;
mod kill_switches;
mod limits;
mod pins;
pub mod process;
mod queue;
mod read_back;
mod storms;
mod sweep;
mod who;

pub use call::{Call, IntentHandle};
pub use claim::Claimed;
pub use clock::{Clock, ManualClock, StoreClock, SystemClock, Ticks, TokioClock};
pub use detect::{DetectRun, UpstreamEffect};
pub use doubts::{Doubt, Doubted};
pub use error::GateError;
pub use executor::{Attempt, Executor, LateAnswer};
pub use fence::{Claim, Fence};
pub use gate::Gate;
pub use limits::{Hold, LimitStatus, hold_target};
pub use pins::{Accepted, PinCheck, TOOL_CHANGED, ToolDefinition, definition_digest};
pub use process::Process;
pub use who::Who;
