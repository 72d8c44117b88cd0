//! Approvals, as every surface acts on them: load one with the intent it holds, what an
//! approver weighs ([`detail`]), and the decision through the front door ([`decide`]).
//! `GET /v1/approvals/{id}` and the console's card show the same [`ApprovalDetail`]; the
//! JSON API's approve/deny routes and the console's buttons decide through the same
//! function, so a click is exactly as idempotent as an API call.

use std::sync::Arc;

use oncegate_core::config::Capability;
use oncegate_core::decide::{Choice, approval_covers};
use oncegate_core::intent::{Approval, ApprovalReason, IntentRecord, IntentState, Outcome};
use oncegate_core::normalise::{Money, Normaliser};
use oncegate_engine::IntentHandle;
use oncegate_store::IntentsRead;

use crate::door::Door;
use crate::error::ApiError;
use crate::state::{AppState, Principal};
use crate::trace::Parent;
use crate::upstream::preview::{self, RequestPreview};
use crate::wire::{
    ApprovalDetail, HeldBecause, HeldIntent, MoneyArgument, WireApproval, approval_reason,
    intent_state,
};

/// Approval `id` and the intent generation it holds (`None`: unreadable or gone).
pub(crate) async fn load(
    state: &AppState,
    id: &str,
) -> Result<(Approval, Option<IntentRecord>), ApiError> {
    let store = state.gate().store();
    let approval = store
        .approval(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no approval {id}")))?;
    let record = store
        .load_generation(&approval.key, approval.generation)
        .await?;
    Ok((approval, record))
}

/// What an approver is shown about `approval`, which holds `record`.
pub(crate) fn detail(
    state: &AppState,
    approval: Approval,
    record: &IntentRecord,
) -> ApprovalDetail {
    let gate = state.gate();
    let cap = gate
        .find_capability(&approval.capability)
        .or_else(|| gate.settling_capability(&approval.capability));
    let request = match &cap {
        Some(cap) => preview::render(cap, &handle(record)),
        None => RequestPreview {
            kind: "none",
            method: None,
            url: None,
            tool: None,
            headers: Vec::new(),
            body: None,
            meta: None,
            note: Some(format!(
                "capability {} is not offered by this gateway now: approving waits until it is",
                approval.capability
            )),
        },
    };
    let unknown_before = approval.reason == ApprovalReason::UnknownFirstAttempt
        || (record.executions > 0
            && matches!(
                record.state,
                IntentState::Unknown | IntentState::PendingApproval
            ));
    ApprovalDetail {
        held_because: HeldBecause {
            reason: approval_reason(approval.reason),
            explanation: approval.reason.explain(),
            detail: approval.detail.clone(),
        },
        arguments: record.arguments.clone(),
        arguments_digest: approval.args_digest.clone(),
        arguments_bound: approval_covers(&approval, record),
        money: cap.as_deref().map(|c| money(c, record)).unwrap_or_default(),
        request,
        warning: unknown_before.then(|| {
            "The first attempt's outcome is UNKNOWN: it may already have taken effect. Approving may execute it again (with the same idempotency key; a provider that ignores the key does it twice).".to_owned()
        }),
        intent: HeldIntent {
            key: record.key.to_string(),
            generation: record.generation,
            state: intent_state(record.state),
            business_ref: record.business_ref.clone(),
            run_id: record.run_id.clone(),
            step_id: record.step_id.clone(),
            executions: record.executions,
            normalised: record.normalised.clone(),
        },
        approval: WireApproval::from(&approval),
    }
}

/// What the execution of `record` receives (as the engine hands it to the executor).
fn handle(record: &IntentRecord) -> IntentHandle {
    IntentHandle {
        key: record.upstream_key(),
        intent_key: record.key.clone(),
        generation: record.generation,
        capability: record.capability.clone(),
        arguments: record.arguments.clone(),
        normalised: record.normalised.clone(),
        business_ref: record.business_ref.clone(),
        run_id: record.run_id.clone(),
        step_id: record.step_id.clone(),
    }
}

/// The key's money arguments of `record`, formatted in their currency.
fn money(cap: &Capability, record: &IntentRecord) -> Vec<MoneyArgument> {
    cap.key
        .significant
        .iter()
        .filter(|arg| matches!(arg.normaliser, Normaliser::Money { .. }))
        .filter_map(|arg| {
            let name = arg.path.to_string();
            let m = Money::from_key_value(record.normalised.get(&name)?)?;
            Some(MoneyArgument {
                argument: name,
                amount: m.display(),
                currency: m.currency.code().to_owned(),
                minor: m.minor,
            })
        })
        .collect()
}

/// Decides approval `id` as `principal` (an approver or admin), through the front door:
/// the JSON API's routes and the console's buttons both end here.
pub(crate) async fn decide(
    state: &AppState,
    principal: &Principal,
    id: String,
    choice: Choice,
    note: Option<String>,
    parent: Parent,
) -> Result<(Arc<Capability>, Outcome), ApiError> {
    let approval = state
        .gate()
        .store()
        .approval(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no approval {id}")))?;
    // A fronted tool its server stopped listing can still be denied (nothing runs);
    // approving it waits until the server lists it again.
    let door = match (choice, state.gate().find_capability(&approval.capability)) {
        (Choice::Approve, None) | (_, Some(_)) => Door::open(state, &approval.capability)?,
        (Choice::Deny, None) => Door::settling(state, &approval.capability)?,
    };
    let door = door.traced(parent);
    let capability = Arc::clone(door.capability());
    // The held call's run and step, for the decision's span (the engine reads the record
    // again under its own rules).
    let held = state
        .gate()
        .store()
        .load_generation(&approval.key, approval.generation)
        .await?;
    let ids = held.as_ref().map_or((None, None), |r| {
        (r.run_id.as_deref(), r.step_id.as_deref())
    });
    let outcome = door.decide(principal, id, choice, note, ids).await?;
    Ok((capability, outcome))
}
