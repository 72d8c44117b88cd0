//! oncegate-engine: the decision point every surface drives.
//!
//! [`Gate`] holds the registry, whatever store [`oncegate_store::open`] returned, and an
//! injected [`Clock`]. It loads an intent, asks `oncegate_core::decide` what to do,
//! commits the decision (a compare-and-set with its audit event) and carries it out:
//! executing the effect in a task of its own, reconciling with the upstream's record,
//! recording the result before anyone hears it. The gateway's JSON API and MCP surface,
//! the CLI's `verify`, and a Rust agent runtime embedding oncegate all call it; none of
//! them makes a decision of its own.

pub mod clock;
pub mod gate;
pub mod process;

pub use clock::{Clock, ManualClock, SystemClock, TokioClock};
pub use gate::{Attempt, Call, Executor, Gate, GateError, IntentHandle, LateAnswer};
pub use process::Process;
