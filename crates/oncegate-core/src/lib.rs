//! oncegate-core: the pure logic of oncegate.
//!
//! Registry (config), intent keys and normalisers, Cedar policy evaluation, the decision
//! state machine and audit hashing. Nothing here does I/O or reads a clock: the shell
//! (oncegate-engine's `Gate`, the gateway) loads state, injects `now`, and writes what
//! these functions decide.

pub mod audit;
pub mod canonical;
pub mod codes;
pub mod config;
pub mod decide;
pub mod detect;
pub mod intent;
pub mod key;
pub mod limits;
pub mod normalise;
pub mod policy;
pub mod redact;
pub mod template;

pub use codes::Code;
pub use config::{Capability, Category, Registry};
pub use decide::{Action, Decision, EffectResult, ReconcileResult, decide};
pub use intent::{IntentRecord, IntentState, Outcome, Status};
pub use key::{DerivedKey, IntentKey, derive};
