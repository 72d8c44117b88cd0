//! The two-phase API, for callers that execute the effect themselves (their own SDK
//! client, their own network): `POST /v1/intents/claim` decides the call and, when it is
//! this caller's to execute, hands over a lease and a fencing token;
//! `POST /v1/intents/{key}/complete` records what the execution did and
//! `POST /v1/intents/{key}/heartbeat` keeps a long execution's lease alive.
//!
//! The engine owns every rule (complete.rs): a completion with the token of an expired
//! lease or a superseded attempt is 409 `OG-0024` and records nothing; a repeat of a
//! recorded completion answers what was recorded. A claim that is not this caller's to
//! execute answers exactly what `POST /v1/calls` would.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use oncegate_core::codes::Code;
use oncegate_core::decide::EffectResult;
use oncegate_core::key::IntentKey;
use oncegate_core::limits::bound_answer;
use oncegate_engine::{Claim, Claimed, Fence};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::calls::{CallBody, call_response, read_call};
use super::{exact_numbers, json_body};
use crate::door::{Door, spawn_in};
use crate::error::ApiError;
use crate::state::AppState;
use crate::trace::Parent;
use crate::wire::{Envelope, http_status};

/// A claim this caller holds: what to execute and what proves the claim.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ClaimAnswer {
    /// `execute` (a claim: run the effect, then complete it), or `in_flight` (a
    /// heartbeat's answer: the claim, its lease extended).
    pub status: &'static str,
    /// The intent key (the path of the complete and heartbeat routes).
    pub intent_key: String,
    /// The intent's generation.
    pub generation: u32,
    /// Executions and reconciliation reads of this generation, this one included.
    pub attempt: u32,
    /// The execution number this claim holds.
    pub execution: u32,
    /// When the lease runs out (RFC 3339): complete before, or heartbeat to extend. A
    /// completion after it records nothing (409) and the intent is reconciled.
    pub lease_expires_at: String,
    /// What a completion or heartbeat must show. A bearer secret: keep it out of logs.
    pub fencing_token: String,
    /// The key to send to the provider with the effect (e.g. as its `Idempotency-Key`):
    /// the same for every execution of this intent's generation.
    pub idempotency_key: String,
    /// The capability.
    pub capability: String,
    /// The arguments to execute (the first call's, for a provider that compares a
    /// repeated key's body with the first one).
    #[schema(value_type = Object)]
    pub arguments: Value,
    /// One line saying what to do.
    pub message: String,
}

impl ClaimAnswer {
    fn of(claim: &Claim, status: &'static str) -> Self {
        let message = match status {
            "execute" => format!(
                "EXECUTE: this caller holds the execution; run it with idempotency key {} and complete it before {}.",
                claim.intent.key, claim.lease_expires_at
            ),
            _ => format!(
                "IN FLIGHT: the lease runs until {}; complete it before then.",
                claim.lease_expires_at
            ),
        };
        Self {
            status,
            intent_key: claim.intent_key.to_string(),
            generation: claim.generation,
            attempt: claim.attempt,
            execution: claim.execution,
            lease_expires_at: claim.lease_expires_at.to_string(),
            fencing_token: claim.fence().token(),
            idempotency_key: claim.intent.key.clone(),
            capability: claim.capability.clone(),
            arguments: claim.intent.arguments.clone(),
            message,
        }
    }
}

#[utoipa::path(post, path = "/v1/intents/claim", tag = "claims", request_body = CallBody,
    params(("Oncegate-Run-Id" = Option<String>, Header, description = "the orchestrator's run id"), ("Oncegate-Step-Id" = Option<String>, Header, description = "the orchestrator's step id"), ("Idempotency-Key" = Option<String>, Header, description = "a coded orchestrator's own stable key")),
    responses(
        (status = 200, description = "`execute`: this caller holds the execution (ClaimAnswer); `pass_through`: a read, run it yourself and complete nothing; or replayed, dry_run, failed (Envelope, as POST /v1/calls)", body = ClaimAnswer),
        (status = 202, description = "in_flight, unknown or pending_approval", body = Envelope),
        (status = 403, description = "denied", body = Envelope),
        (status = 409, description = "refused, or the Idempotency-Key's first request is in flight", body = Envelope),
        (status = 429, description = "attempt ceiling or read rate cap", body = Envelope),
        (status = 503, description = "store unavailable (fail closed)", body = Envelope),
        (status = 400, description = "malformed request"),
        (status = 401, description = "missing or wrong token"),
        (status = 422, description = "arguments do not normalise, or Idempotency-Key reused")),
    security(("bearer" = [])))]
pub(crate) async fn post_claim(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let principal = state.authenticate(&headers).await?;
    let call = read_call(&headers, &body)?;
    let door = Door::open(&state, &call.capability)?.traced(Parent::from_headers(&headers));
    let client_key = call.client_key.is_some();
    let capability = Arc::clone(door.capability());
    Ok(match door.claim(&principal, call).await? {
        Claimed::Execute(claim) => Json(ClaimAnswer::of(&claim, "execute")).into_response(),
        Claimed::Settled(outcome) => call_response(&outcome, &capability, client_key),
        Claimed::Read(_) => Json(Envelope::pass_through()).into_response(),
    })
}

/// `POST /v1/intents/{key}/complete` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    /// The claim's `fencing_token`.
    pub fencing_token: String,
    /// What the execution did.
    pub outcome: Completed,
    /// The provider's reference of the effect (`applied`).
    pub effect_ref: Option<String>,
    /// The provider's answer, stored and replayed to repeats (`applied`, `failed`).
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// Why (`failed`, `unknown`, `not_sent`).
    pub error: Option<String>,
}

/// What an execution did, as its caller reports it.
#[derive(Clone, Copy, Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Completed {
    /// It happened.
    Applied,
    /// The provider said no, definitely: nothing happened (replayed to repeats).
    Failed,
    /// It may or may not have happened (a timeout, any error after the request may
    /// have left): the intent is reconciled, never executed again blindly.
    Unknown,
    /// Proof that nothing left (connection refused, DNS failure): the next claim
    /// executes again with the same key.
    NotSent,
}

impl CompleteBody {
    fn effect(self, limits: &oncegate_core::limits::Limits) -> EffectResult {
        let result = self.result.map_or(Value::Null, |r| bound_answer(r, limits));
        let said = |default: &str| self.error.clone().unwrap_or_else(|| default.to_owned());
        match self.outcome {
            Completed::Applied => EffectResult::Applied {
                effect_ref: self.effect_ref,
                result,
            },
            Completed::Failed => EffectResult::Failed {
                message: said("the caller reported a definite failure"),
                result,
            },
            Completed::Unknown => EffectResult::Unknown {
                message: said("the caller could not tell whether the effect happened"),
            },
            Completed::NotSent => EffectResult::NotSent {
                message: said("the caller reported that nothing reached the provider"),
            },
        }
    }
}

/// `POST /v1/intents/{key}/heartbeat` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    /// The claim's `fencing_token`.
    pub fencing_token: String,
}

#[utoipa::path(post, path = "/v1/intents/{key}/complete", tag = "claims", request_body = CompleteBody,
    params(("key" = String, Path, description = "the claim's intent key")),
    responses(
        (status = 200, description = "recorded (or a repeat of the recorded completion): applied, failed (not_sent answers failed with state not_applied)", body = Envelope),
        (status = 202, description = "recorded unknown: the intent is reconciled", body = Envelope),
        (status = 409, description = "OG-0024: the claim no longer holds the intent (lease expired, superseded); nothing recorded"),
        (status = 400, description = "malformed body or fencing token"),
        (status = 401, description = "missing or wrong token"),
        (status = 404, description = "no such intent")),
    security(("bearer" = [])))]
pub(crate) async fn complete(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let principal = state.authenticate(&headers).await?;
    let parsed: CompleteBody = json_body(&body)?;
    exact_numbers(&body)?;
    let fence = fence(&key, &parsed.fencing_token)?;
    let gate = state.gate().clone();
    let result = parsed.effect(&gate.registry().gateway.limits);
    let span = crate::trace::completion_span(
        "complete",
        &principal.name,
        &key.to_ascii_lowercase(),
        &Parent::from_headers(&headers),
    );
    // Through the one spawning path: a caller that hangs up mid-way never leaves a
    // completion half-retried, and shutdown waits for it.
    let task = async move { gate.complete_fenced(principal.who(), &fence, result).await };
    let outcome = spawn_in(&state, span.clone(), "completion", task)
        .await
        .inspect_err(|e| {
            if matches!(e, ApiError::Gate(_)) {
                crate::trace::record_error(&span);
            }
        })?;
    crate::trace::record_decision(
        &span,
        outcome.status.as_str(),
        outcome
            .key
            .as_ref()
            .map(|k| (k.as_str(), outcome.generation, outcome.attempt)),
    );
    Ok((http_status(&outcome), Json(Envelope::from(&outcome))).into_response())
}

#[utoipa::path(post, path = "/v1/intents/{key}/heartbeat", tag = "claims", request_body = HeartbeatBody,
    params(("key" = String, Path, description = "the claim's intent key")),
    responses(
        (status = 200, description = "the claim, its lease extended (status in_flight)", body = ClaimAnswer),
        (status = 409, description = "OG-0024: the claim no longer holds the intent; nothing written"),
        (status = 400, description = "malformed body or fencing token"),
        (status = 401, description = "missing or wrong token"),
        (status = 404, description = "no such intent")),
    security(("bearer" = [])))]
pub(crate) async fn heartbeat(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let principal = state.authenticate(&headers).await?;
    let parsed: HeartbeatBody = json_body(&body)?;
    let fence = fence(&key, &parsed.fencing_token)?;
    let gate = state.gate().clone();
    let span = crate::trace::completion_span(
        "heartbeat",
        &principal.name,
        &key.to_ascii_lowercase(),
        &Parent::from_headers(&headers),
    );
    let task = async move { gate.heartbeat_fenced(principal.who(), &fence).await };
    let claim = spawn_in(&state, span.clone(), "heartbeat", task)
        .await
        .inspect_err(|e| {
            if matches!(e, ApiError::Gate(_)) {
                crate::trace::record_error(&span);
            }
        })?;
    span.record("oncegate.outcome", "in_flight");
    Ok(Json(ClaimAnswer::of(&claim, "in_flight")).into_response())
}

/// The fence a path key and a fencing token name (400 when either is not one).
fn fence(key: &str, token: &str) -> Result<Fence, ApiError> {
    if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::Coded(
            StatusCode::NOT_FOUND,
            Code::NotFound,
            format!("`{key}` is not an intent key"),
        ));
    }
    Fence::from_token(IntentKey::from_hex(key.to_ascii_lowercase()), token)
        .ok_or_else(|| ApiError::BadRequest("the fencing_token is not one a claim answered".into()))
}
