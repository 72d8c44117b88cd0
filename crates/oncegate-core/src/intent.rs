//! Intent records, approvals and the outcomes callers see.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codes::Code;
use crate::key::IntentKey;

/// The state of one intent generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntentState {
    /// Claimed; a lease is held while the effect runs.
    InFlight,
    /// The effect happened.
    Applied,
    /// The upstream said no: nothing happened (definite).
    Failed,
    /// It may or may not have happened.
    Unknown,
    /// Confirmed not to have happened: the same key may execute again.
    NotApplied,
    /// Waiting for a human.
    PendingApproval,
    /// Policy or a human said no; final for this generation.
    Denied,
}

impl IntentState {
    /// The wire and database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IntentState::InFlight => "in_flight",
            IntentState::Applied => "applied",
            IntentState::Failed => "failed",
            IntentState::Unknown => "unknown",
            IntentState::NotApplied => "not_applied",
            IntentState::PendingApproval => "pending_approval",
            IntentState::Denied => "denied",
        }
    }

    /// Parses [`IntentState::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "in_flight" => IntentState::InFlight,
            "applied" => IntentState::Applied,
            "failed" => IntentState::Failed,
            "unknown" => IntentState::Unknown,
            "not_applied" => IntentState::NotApplied,
            "pending_approval" => IntentState::PendingApproval,
            "denied" => IntentState::Denied,
            _ => return None,
        })
    }
}

/// A held claim.
#[derive(Clone, Serialize, Deserialize)]
pub struct Lease {
    /// Who holds it: the gateway instance and the claim's seal (see
    /// `decide::lease_seal`), never its nonce.
    pub owner: String,
    /// After this, the holder is presumed dead and the intent is unknown.
    pub expires_at: Timestamp,
    /// The claim's nonce, in the process that made the claim only: never stored,
    /// serialised or shown (the claimer's token carries it).
    #[serde(skip)]
    pub nonce: Option<String>,
}

/// The nonce stays out of logs and panics.
impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("owner", &self.owner)
            .field("expires_at", &self.expires_at)
            .field("nonce", &self.nonce.as_ref().map(|_| "<secret>"))
            .finish()
    }
}

/// Two leases are the same lease whatever one process knows of its nonce.
impl PartialEq for Lease {
    fn eq(&self, other: &Self) -> bool {
        self.owner == other.owner && self.expires_at == other.expires_at
    }
}

impl Eq for Lease {}

/// A reason with its stable code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    /// The stable code.
    pub code: Code,
    /// Human-readable detail.
    pub message: String,
}

impl Reason {
    /// Builds a reason.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// One intent generation, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IntentRecord {
    /// The intent key.
    pub key: IntentKey,
    /// 1 for the first intent; +1 for each repeat after the replay window.
    pub generation: u32,
    /// The capability.
    pub capability: String,
    /// The tenant.
    pub tenant: String,
    /// Who first issued it (always recorded, whether or not it is in the key).
    pub principal: String,
    /// The run that issued it.
    pub run_id: Option<String>,
    /// The step that issued it.
    pub step_id: Option<String>,
    /// The normalised business reference.
    pub business_ref: Option<String>,
    /// The key without its run part, for cross-run detection (run/step scopes only).
    pub cross_key: Option<IntentKey>,
    /// SHA-256 of the canonical normalised arguments; approvals are bound to it.
    pub args_digest: String,
    /// The normalised significant arguments.
    pub normalised: Value,
    /// The arguments of the call that created this generation (to execute it later,
    /// after an approval).
    pub arguments: Value,
    /// Where it stands.
    pub state: IntentState,
    /// Executions and reconciliation reads started on this generation; the attempt
    /// ceiling applies to it. Replays and polls never count (they write nothing).
    pub attempts: u32,
    /// Times the effect was started upstream.
    pub executions: u32,
    /// The claim, while in flight.
    pub lease: Option<Lease>,
    /// The upstream's reference for the effect (charge id, message id).
    pub effect_ref: Option<String>,
    /// The upstream's answer, replayed to repeats.
    pub result: Option<Value>,
    /// Why it failed, was denied or is unknown.
    pub error: Option<Reason>,
    /// The open or last approval.
    pub approval_id: Option<String>,
    /// Set when the attempt ceiling tripped; cleared by an admin.
    pub breaker_tripped: bool,
    /// When this generation reached a decided state (applied, failed, denied); the
    /// replay window runs from here, so a call that waited for an approval or a
    /// reconciliation still gets its whole window.
    #[serde(default)]
    pub settled_at: Option<Timestamp>,
    /// When the last attempt's own request ended without an answer that settles it (an
    /// `unknown` execution came back, or its lease expired: the lease's expiry). The
    /// upstream may still process that request afterwards, so a reconciliation read's
    /// "not found" proves absence only once the capability's `settle_horizon` has passed
    /// since then. `None` while an attempt runs (and on records written before it
    /// existed, which count from their last write instead).
    #[serde(default)]
    pub attempt_ended_at: Option<Timestamp>,
    /// A worker reported that its claim's execution sent nothing, and the capability
    /// has a reconciliation read: the intent is `unknown` until a read checks that word
    /// (found: applied, and the report is evidence of a worker that lies; not found:
    /// the next claim executes at once, with no settle horizon to wait for, since
    /// nothing is said to have been sent). Cleared by the next execution or settlement.
    #[serde(default)]
    pub not_sent_reported: bool,
    /// When this generation started (the window's start until it settles).
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
    /// Optimistic concurrency: every write increments it.
    pub version: u64,
}

impl IntentRecord {
    /// The key threaded upstream: the intent key, with the generation after the first so
    /// a keyed provider does not replay an old generation's effect.
    pub fn upstream_key(&self) -> String {
        upstream_key(&self.key, self.generation)
    }
}

/// See [`IntentRecord::upstream_key`].
pub fn upstream_key(key: &IntentKey, generation: u32) -> String {
    if generation <= 1 {
        key.to_string()
    } else {
        format!("{key}-g{generation}")
    }
}

/// Why an approval was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalReason {
    /// A policy annotated `@oncegate("require_approval")` decided it.
    Policy,
    /// The first attempt's status is unknown and cannot be reconciled.
    UnknownFirstAttempt,
    /// It repeats an intent whose replay window has closed.
    OutsideWindow,
    /// The same intent was issued by another run.
    CrossRun,
}

impl ApprovalReason {
    /// The sentence an approver reads.
    pub fn explain(self) -> &'static str {
        match self {
            ApprovalReason::Policy => "policy requires a human approval for this call",
            ApprovalReason::UnknownFirstAttempt => {
                "the first attempt's status is UNKNOWN (it may already have taken effect) and the upstream could not confirm either way; approving executes it again with the same key"
            }
            ApprovalReason::OutsideWindow => {
                "this repeats an intent that was already decided, outside its replay window; approving executes it again as a new intent"
            }
            ApprovalReason::CrossRun => "the same intent was already issued by another run",
        }
    }
}

/// The state of an approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    /// Waiting.
    Pending,
    /// Approved (single use: the intent executed, or is executing).
    Approved,
    /// Denied.
    Denied,
    /// Nobody decided in time.
    Expired,
    /// The call or the policy changed since it was asked.
    Void,
}

impl ApprovalState {
    /// The wire and database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Approved => "approved",
            ApprovalState::Denied => "denied",
            ApprovalState::Expired => "expired",
            ApprovalState::Void => "void",
        }
    }

    /// Parses [`ApprovalState::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => ApprovalState::Pending,
            "approved" => ApprovalState::Approved,
            "denied" => ApprovalState::Denied,
            "expired" => ApprovalState::Expired,
            "void" => ApprovalState::Void,
            _ => return None,
        })
    }
}

/// An approval request, bound to exactly one call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    /// `ap_...`.
    pub id: String,
    /// The intent it holds.
    pub key: IntentKey,
    /// Its generation.
    pub generation: u32,
    /// The capability.
    pub capability: String,
    /// The principal whose call it holds (who may never approve it).
    pub principal: String,
    /// Bound: the SHA-256 of every argument the held call sends (`key::sent_digest`
    /// of the record's arguments), not only the key's. A changed argument voids the
    /// approval, and no call with other arguments executes under it. (Approvals asked
    /// before this held the key arguments' digest, `IntentRecord::args_digest`; they
    /// are still honoured: the arguments they execute are the ones they were asked on.)
    pub args_digest: String,
    /// Bound: a changed policy voids the approval.
    pub policy_hash: String,
    /// Why it was asked.
    pub reason: ApprovalReason,
    /// Details (determining policies, the unknown attempt).
    pub detail: String,
    /// Where it stands.
    pub state: ApprovalState,
    /// Who decided.
    pub decided_by: Option<String>,
    /// When.
    pub decided_at: Option<Timestamp>,
    /// Asked at.
    pub created_at: Timestamp,
    /// After this, it is expired.
    pub expires_at: Timestamp,
    /// Optimistic concurrency.
    pub version: u64,
}

/// What a caller is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Executed now.
    Applied,
    /// Executed before within the replay window; nothing re-executed.
    Replayed,
    /// Another attempt holds the claim: poll, do not re-issue.
    InFlight,
    /// Not yet known; oncegate is reconciling: do not re-issue.
    Unknown,
    /// Waiting for a human.
    PendingApproval,
    /// Policy or a human said no.
    Denied,
    /// Ceiling, breaker, kill switch, hold.
    Refused,
    /// What would happen; nothing executed.
    DryRun,
    /// The upstream definitely said no (first time; repeats get `replayed`).
    Failed,
    /// A human approved a held call of a claim-only capability: nothing executed yet;
    /// the caller's next claim of the same intent executes it (an approver hears this).
    Approved,
}

impl Status {
    /// Every status, in declaration order (the metrics export each at zero).
    pub const ALL: [Status; 10] = [
        Status::Applied,
        Status::Replayed,
        Status::InFlight,
        Status::Unknown,
        Status::PendingApproval,
        Status::Denied,
        Status::Refused,
        Status::DryRun,
        Status::Failed,
        Status::Approved,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Applied => "applied",
            Status::Replayed => "replayed",
            Status::InFlight => "in_flight",
            Status::Unknown => "unknown",
            Status::PendingApproval => "pending_approval",
            Status::Denied => "denied",
            Status::Refused => "refused",
            Status::DryRun => "dry_run",
            Status::Failed => "failed",
            Status::Approved => "approved",
        }
    }
}

/// The outcome envelope: what every caller gets back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// What happened.
    pub status: Status,
    /// The intent key (absent for read pass-through).
    pub key: Option<IntentKey>,
    /// The generation.
    pub generation: u32,
    /// Executions and reconciliation reads on this intent generation so far (what the
    /// attempt ceiling counts; a replay reports the count it found).
    pub attempt: u32,
    /// The intent's state after this call.
    pub state: Option<IntentState>,
    /// The effect reference, where known.
    pub effect_ref: Option<String>,
    /// The upstream's stored answer (for applied, replayed and failed).
    pub result: Option<Value>,
    /// The approval, for pending_approval.
    pub approval_id: Option<String>,
    /// Why, with a stable code, for anything but success.
    pub reason: Option<Reason>,
    /// Alerts raised by this call (cross-run duplicate, breaker tripped).
    pub alerts: Vec<Alert>,
}

/// Something an operator should hear about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Alert {
    /// The same intent arrived from a different run.
    CrossRun {
        /// The run that issued it first.
        first_run: Option<String>,
        /// This run.
        this_run: Option<String>,
    },
    /// The attempt ceiling tripped the breaker.
    BreakerTripped {
        /// The ceiling.
        ceiling: u32,
    },
    /// An agent keeps repeating an intent that already settled: every repeat is
    /// answered by a replay (nothing runs), but the loop is an orchestration fault.
    ReplayStorm {
        /// Replays seen inside the window.
        replays: u32,
        /// The window, in seconds.
        window_seconds: u32,
    },
    /// An agent has `gateway.pending_approvals_per_agent` calls waiting for approvers;
    /// its next held call was refused (`OG-0058`). Raised at most once a minute per
    /// agent and gateway process.
    ApprovalQueueFull {
        /// The agent's pending approvals.
        pending: u32,
        /// The budget.
        max: u32,
    },
}
