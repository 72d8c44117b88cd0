//! `GET /v1/approvals/{id}`: everything an approver weighs, the console's card included
//! (it renders this same [`ApprovalDetail`]): every argument the held call sends (not
//! only the key's), the digest the approval is bound to, the request its execution would
//! send (rendered by the executor's own code and not sent, secrets masked), money in its
//! currency ("150.00 USD"), why it is held, and, when the first attempt's outcome is
//! unknown, that approving may execute it again.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use oncegate_core::config::{Capability, Role};
use oncegate_core::decide::approval_covers;
use oncegate_core::intent::{Approval, ApprovalReason, IntentRecord, IntentState};
use oncegate_core::normalise::{Money, Normaliser};
use oncegate_engine::IntentHandle;
use oncegate_store::IntentsRead;
use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::routes::require;
use crate::state::AppState;
use crate::upstream::preview::{self, RequestPreview};

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
    pub reason: ApprovalReason,
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

#[utoipa::path(get, path = "/v1/approvals/{id}", tag = "approvals", params(("id" = String, Path)),
    responses((status = 200, description = "everything the approver weighs: every sent argument, the digest the approval is bound to, the rendered request (secrets masked), money in its currency, why it is held, the unknown-first-attempt warning", body = ApprovalDetail),
        (status = 403, description = "not an approver or admin"), (status = 404, description = "no such approval")),
    security(("bearer" = [])))]
pub(crate) async fn get_approval(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin, Role::Approver])?;
    let (approval, record) = load(&state, &id).await?;
    let record =
        record.ok_or_else(|| ApiError::NotFound(format!("the intent approval {id} holds")))?;
    Ok(Json(detail(&state, approval, &record)).into_response())
}

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
            reason: approval.reason,
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
            state: record.state.as_str(),
            business_ref: record.business_ref.clone(),
            run_id: record.run_id.clone(),
            step_id: record.step_id.clone(),
            executions: record.executions,
            normalised: record.normalised.clone(),
        },
        approval,
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
