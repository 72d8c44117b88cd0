//! Where a claim stands between its steps: who sends the effect ([`Sender`]), what
//! the store must judge again by its own clock ([`Rejudge`]), and where a call stands
//! once decided and committed ([`Step`]). Below the claim loop, `apply`, `invoke` and
//! the approvals that all pass them around.

use std::sync::Arc;

use oncegate_core::config::Capability;
use oncegate_core::intent::Outcome;

use crate::call::IntentHandle;
use crate::fence::Claim;

/// Who sends the effect a claim leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sender {
    /// The gate, with the intent's recorded arguments (`invoke`).
    Gate,
    /// The caller, with the arguments it holds (the two-phase API): a claim whose
    /// arguments differ from the ones a human was asked about is refused.
    Caller,
}

/// What a decision relied on about time, which the store judges again by its own clock
/// before it writes the decision (see `oncegate_store::Commit`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Rejudge {
    /// The decision replaces an in-flight attempt whose lease this gate judged expired.
    pub(crate) takes_over: bool,
    /// The decision holds only before this instant (an approval's expiry or time to live).
    pub(crate) valid_until: Option<jiff::Timestamp>,
}

/// Where a call stands once it is decided and committed.
#[expect(
    clippy::large_enum_variant,
    reason = "one per call, moved a few times; boxing buys nothing"
)]
pub(crate) enum Step {
    /// Answered.
    Settled(Outcome),
    /// Claimed for execution.
    Execute {
        claim: Claim,
        cap: Arc<Capability>,
        /// The attempt count the caller hears instead of the execution's own (set when
        /// a reconciliation read led to the execution).
        attempt: Option<u32>,
    },
    /// A read to pass through.
    Read {
        outcome: Outcome,
        intent: IntentHandle,
    },
}
