//! An approval as the JSON API and the console show it: [`Approval`] (each row of
//! `GET /v1/approvals`), and [`ApprovalDetail`], everything an approver weighs
//! (`GET /v1/approvals/{id}` and the console's card). The gateway's own types,
//! converted from core's field by field, so a rename in core fails to compile here
//! instead of changing the JSON a client reads (pinned by the `wire_bytes` snapshot).

use jiff::Timestamp;
use oncegate_core::intent::{Approval as CoreApproval, ApprovalReason, ApprovalState};
use serde::Serialize;
use serde_json::Value;

use crate::upstream::preview::RequestPreview;

/// One approval on the wire.
#[derive(Clone, Debug, Serialize)]
pub struct Approval {
    pub id: String,
    pub key: String,
    pub generation: u32,
    pub capability: String,
    pub principal: String,
    pub args_digest: String,
    pub policy_hash: String,
    pub reason: &'static str,
    pub detail: String,
    pub state: &'static str,
    pub decided_by: Option<String>,
    pub decided_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub version: u64,
}

/// The wire spelling of why an approval was asked for.
pub fn approval_reason(reason: ApprovalReason) -> &'static str {
    match reason {
        ApprovalReason::Policy => "policy",
        ApprovalReason::UnknownFirstAttempt => "unknown_first_attempt",
        ApprovalReason::OutsideWindow => "outside_window",
        ApprovalReason::CrossRun => "cross_run",
    }
}

/// The wire spelling of an approval's state.
pub fn approval_state(state: ApprovalState) -> &'static str {
    match state {
        ApprovalState::Pending => "pending",
        ApprovalState::Approved => "approved",
        ApprovalState::Denied => "denied",
        ApprovalState::Expired => "expired",
        ApprovalState::Void => "void",
    }
}

impl From<&CoreApproval> for Approval {
    fn from(a: &CoreApproval) -> Self {
        Self {
            id: a.id.clone(),
            key: a.key.as_str().to_owned(),
            generation: a.generation,
            capability: a.capability.clone(),
            principal: a.principal.clone(),
            args_digest: a.args_digest.clone(),
            policy_hash: a.policy_hash.clone(),
            reason: approval_reason(a.reason),
            detail: a.detail.clone(),
            state: approval_state(a.state),
            decided_by: a.decided_by.clone(),
            decided_at: a.decided_at,
            created_at: a.created_at,
            expires_at: a.expires_at,
            version: a.version,
        }
    }
}

/// What an approver is shown about one approval.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApprovalDetail {
    /// The approval as stored (as `GET /v1/approvals` lists it).
    #[schema(value_type = Object)]
    pub approval: Approval,
    /// Why the call is held.
    pub held_because: HeldBecause,
    /// Every argument of the held call: what its execution renders its request from and
    /// sends (the approval executes exactly these, never a later call's).
    #[schema(value_type = Object)]
    pub arguments: Value,
    /// What the approval is bound to: the SHA-256 of the canonical JSON of every
    /// argument above (`approval.args_digest`).
    pub arguments_digest: String,
    /// Whether the held arguments are still the ones the approval was asked on (if not,
    /// approving voids it: `OG-0012`).
    pub arguments_bound: bool,
    /// The money arguments (declared `money` in the key), in their currency.
    pub money: Vec<MoneyArgument>,
    /// The request the execution would send, rendered and not sent.
    pub request: RequestPreview,
    /// Set when an earlier attempt's outcome is unknown: approving may execute it again.
    pub warning: Option<String>,
    /// The held intent.
    pub intent: HeldIntent,
}

/// Why a call is held.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HeldBecause {
    /// `policy`, `unknown_first_attempt`, `outside_window` or `cross_run`.
    #[schema(value_type = String)]
    pub reason: &'static str,
    /// What that means, in a sentence.
    pub explanation: &'static str,
    /// The details: the policies (or limit) that decided it, the read that failed.
    pub detail: String,
}

/// One money argument, formatted.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MoneyArgument {
    /// The argument's path.
    pub argument: String,
    /// The amount in its currency's major unit and its code (`150.00 USD`).
    pub amount: String,
    /// The ISO 4217 code.
    pub currency: String,
    /// The amount in minor units (what the key and limits count).
    pub minor: i64,
}

/// The intent an approval holds.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HeldIntent {
    /// The intent key.
    pub key: String,
    /// Its generation.
    pub generation: u32,
    /// Where it stands.
    pub state: &'static str,
    /// The business reference.
    pub business_ref: Option<String>,
    /// The orchestrator's run.
    pub run_id: Option<String>,
    /// The orchestrator's step.
    pub step_id: Option<String>,
    /// How often the effect was started so far.
    pub executions: u32,
    /// The normalised key arguments.
    #[schema(value_type = Object)]
    pub normalised: Value,
}
