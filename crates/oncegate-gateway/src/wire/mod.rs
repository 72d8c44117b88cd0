//! The gateway's own wire types: what the JSON API and the console put on the wire,
//! converted from core's types, so a rename in core cannot change a byte a client reads.
//! [`Envelope`] is the one outcome type (JSON envelope, MCP `_meta` and model line).

mod approval;
mod envelope;
mod intent;

pub use approval::{
    Approval as WireApproval, ApprovalDetail, HeldBecause, HeldIntent, MoneyArgument,
    approval_reason, approval_state,
};
pub use intent::{Intent as WireIntent, Lease as WireLease, Reason as WireReason, intent_state};

pub use envelope::{
    Envelope, OUTCOME_META_KEY, OUTCOME_STRUCTURED_KEY, UPSTREAM_STRUCTURED_KEY, forbids_repeat,
    http_status, model_line, reason, structured_content,
};
