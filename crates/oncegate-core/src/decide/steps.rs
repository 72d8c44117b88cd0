//! The steps several transitions share: building an outcome and its audit event,
//! claiming an execution, opening an approval, settling a record, and the checks on a
//! held call's arguments. Below every transition, above the types they pass.

use jiff::Timestamp;
use serde_json::Value;

use super::lease::lease_seal;
use crate::canonical::canonical_json;
use crate::codes::Code;
use crate::config::{Capability, OnUnknown};
use crate::intent::{
    Approval, ApprovalReason, ApprovalState, IntentRecord, IntentState, Lease, Outcome, Reason,
    Status,
};
use crate::key::sent_digest;

/// Whether a generation's arguments are fixed: once a human has been asked about it (an
/// approval was opened on it, for any reason), every execution of it sends the
/// arguments the approval was asked on, never a later call's, and the approval stays
/// bound to exactly what the approver saw.
pub fn arguments_frozen(record: &IntentRecord) -> bool {
    record.approval_id.is_some()
}

/// The top-level arguments whose values differ between the held call and `arguments`
/// (by canonical JSON; an added or removed argument differs), sorted. Names only: the
/// values are agent-written text.
pub fn drifted_arguments(record: &IntentRecord, arguments: &Value) -> Vec<String> {
    if sent_digest(&record.arguments) == sent_digest(arguments) {
        return Vec::new();
    }
    let empty = serde_json::Map::new();
    let held = record.arguments.as_object().unwrap_or(&empty);
    let now = arguments.as_object().unwrap_or(&empty);
    let mut names: Vec<String> = held
        .keys()
        .chain(now.keys())
        .filter(|k| {
            let (a, b) = (held.get(*k), now.get(*k));
            match (a, b) {
                (Some(a), Some(b)) => canonical_json(a) != canonical_json(b),
                _ => true,
            }
        })
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        // Not objects (a malformed record): the whole call differs.
        names.push("(arguments)".to_owned());
    }
    names
}

/// Whether `approval` still covers `record`: it was asked on exactly the arguments the
/// record would send. An approval from before the sent-arguments digest holds the key
/// arguments' digest instead; it covers the record's arguments as they were held.
pub fn approval_covers(approval: &Approval, record: &IntentRecord) -> bool {
    approval.args_digest == sent_digest(&record.arguments)
        || approval.args_digest == record.args_digest
}

/// Builds the outcome a record implies.
pub fn outcome_of(record: &IntentRecord, status: Status, reason: Option<Reason>) -> Outcome {
    Outcome {
        status,
        key: Some(record.key.clone()),
        generation: record.generation,
        attempt: record.attempts,
        state: Some(record.state),
        effect_ref: record.effect_ref.clone(),
        result: record.result.clone(),
        approval_id: record.approval_id.clone(),
        reason: reason.or_else(|| record.error.clone()),
        alerts: Vec::new(),
    }
}

/// The outcome a repeat gets for a record as it stands (used for replays and for
/// answering a second approver).
pub fn standing_outcome(record: &IntentRecord) -> Outcome {
    let status = match record.state {
        IntentState::Applied | IntentState::Failed => Status::Replayed,
        IntentState::InFlight => Status::InFlight,
        IntentState::Unknown => Status::Unknown,
        IntentState::NotApplied => Status::Failed,
        IntentState::PendingApproval => Status::PendingApproval,
        IntentState::Denied => Status::Denied,
    };
    let reason = match record.state {
        IntentState::InFlight => Some(Reason::new(
            Code::InFlight,
            "another attempt holds the claim; poll, do not re-issue",
        )),
        _ => None,
    };
    outcome_of(record, status, reason)
}

/// Starts an execution. Executions (and reconciliation reads, see [`decide`]) are what
/// the attempt ceiling counts.
pub(super) fn claim(record: &mut IntentRecord, owner: &str, cap: &Capability, now: Timestamp) {
    record.attempts += 1;
    // A holder asked for as `claim_owner` (gate, nonce, claimer) is stored sealed: the
    // nonce stays in this process, with the claim, and never reaches the store.
    let (owner, nonce) = match owner.split('/').collect::<Vec<_>>()[..] {
        [gate, nonce, claimer] => (
            format!("{gate}/{}", lease_seal(nonce, claimer)),
            Some(nonce.to_owned()),
        ),
        _ => (owner.to_owned(), None),
    };
    record.lease = Some(Lease {
        owner,
        expires_at: now + cap.lease,
        nonce,
    });
    record.executions += 1;
    record.error = None;
    record.not_sent_reported = false;
    // A new attempt: its request has not ended yet. But an attempt before it whose
    // outcome is unknown (a retry or an approved re-execution of an unknown intent, a
    // keyed re-execution with the same key) may still land: its end is kept, so that if
    // this one sends nothing the intent is still unknown, never `not_applied`.
    if !matches!(
        record.state,
        IntentState::Unknown | IntentState::PendingApproval
    ) {
        record.attempt_ended_at = None;
    }
    record.state = IntentState::InFlight;
    record.updated_at = now;
}

/// Whether an attempt that turns unknown goes to a human at once: `on_unknown =
/// "escalate"` and no reconciliation read, so nothing would ever resolve it otherwise
/// (the console would show it as reconciling until the agent happened to repeat).
pub(super) fn escalates_at_once(cap: &Capability) -> bool {
    cap.on_unknown == OnUnknown::Escalate && cap.reconcile.is_none()
}

/// The id of the approval [`escalate_unknown`] opens for the intent's current attempt.
pub(super) fn attempt_approval_id(record: &IntentRecord) -> String {
    use sha2::{Digest, Sha256};
    let seed = format!(
        "unknown-first-attempt\n{}\n{}\n{}",
        record.key, record.generation, record.executions
    );
    let digest = Sha256::digest(seed.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("ap_{hex}")
}

/// Holds `next`, whose attempt just turned unknown, for a human (see
/// [`escalates_at_once`]): the approval an agent's repeat would have opened, opened now.
/// Its id is derived from the intent, generation and execution, so two recorders of one
/// attempt (a late answer racing the sweep) open the same approval, never two.
pub(super) fn escalate_unknown(
    next: &mut IntentRecord,
    cap: &Capability,
    now: Timestamp,
) -> Approval {
    let id = attempt_approval_id(next);
    let approval = new_approval(
        &id,
        next,
        cap,
        ApprovalReason::UnknownFirstAttempt,
        ApprovalReason::UnknownFirstAttempt.explain().to_owned(),
        now,
    );
    let why = next
        .error
        .as_ref()
        .and_then(|e| e.message.split(';').next())
        .unwrap_or("the attempt ended without an answer")
        .to_owned();
    next.error = Some(Reason::new(
        Code::UpstreamUnknown,
        format!(
            "{why}; the effect may have happened and no reconciliation read can tell: held for a human ({id}), do not re-issue"
        ),
    ));
    next.state = IntentState::PendingApproval;
    next.approval_id = Some(id);
    approval
}

pub(super) fn new_approval(
    id: &str,
    record: &IntentRecord,
    cap: &Capability,
    reason: ApprovalReason,
    detail: String,
    now: Timestamp,
) -> Approval {
    Approval {
        id: id.to_owned(),
        key: record.key.clone(),
        generation: record.generation,
        capability: cap.name.clone(),
        principal: record.principal.clone(),
        args_digest: sent_digest(&record.arguments),
        policy_hash: cap.policy_hash().to_owned(),
        reason,
        detail,
        state: ApprovalState::Pending,
        decided_by: None,
        decided_at: None,
        created_at: now,
        expires_at: now + cap.approval_ttl,
        version: 0,
    }
}

/// A held intent whose approval was denied, expired or voided. An intent held because
/// its first attempt's status is unknown stays `unknown`: the effect may have happened,
/// so it keeps being reconciled (and never silently becomes a new intent after the
/// window). Anything else is denied for this generation.
pub(super) fn settle_refusal(record: &mut IntentRecord, reason: ApprovalReason, now: Timestamp) {
    if reason == ApprovalReason::UnknownFirstAttempt {
        record.state = IntentState::Unknown;
    } else {
        record.state = IntentState::Denied;
        record.settled_at = Some(now);
    }
}

/// The effect happened: record it, with its reference and the provider's answer.
pub(super) fn settle_applied(
    record: &mut IntentRecord,
    effect_ref: Option<String>,
    result: Value,
    now: Timestamp,
) {
    record.state = IntentState::Applied;
    record.settled_at = Some(now);
    record.effect_ref = effect_ref;
    record.result = Some(result);
    record.error = None;
    record.not_sent_reported = false;
}
