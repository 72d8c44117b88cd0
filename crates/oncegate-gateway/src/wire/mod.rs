//! The gateway's own wire types: what the JSON API and the console put on the wire,
//! converted from core's types, so a rename in core cannot change a byte a client reads.
//! [`Envelope`] is the one outcome type (JSON envelope, MCP `_meta` and model line).

mod approval;
mod controls;
mod envelope;
mod findings;
mod intent;
mod limits;

pub use approval::{
    Approval as WireApproval, ApprovalDetail, HeldBecause, HeldIntent, MoneyArgument,
    approval_reason, approval_state,
};
pub use controls::{
    Doubt as WireDoubt, Doubts as WireDoubts, Hold as WireHold, Holds as WireHolds,
    KillSwitches as WireKillSwitches, doubt_kind,
};
pub use findings::FindingsPage as WireFindingsPage;
pub use intent::{Intent as WireIntent, Lease as WireLease, Reason as WireReason, intent_state};

pub use limits::{Limit as WireLimit, Limits as WireLimits, over_limit};

pub use envelope::{
    Envelope, OUTCOME_META_KEY, OUTCOME_STRUCTURED_KEY, UPSTREAM_STRUCTURED_KEY, forbids_repeat,
    http_status, model_line, reason, structured_content,
};
