//! `POST /v1/calls` (one call through the front door) and `POST /v1/keys/derive` (which
//! inputs would enter a call's intent key, and why).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use oncegate_core::codes::Code;
use oncegate_core::config::Capability;
use oncegate_core::intent::{Outcome, Status};
use oncegate_engine::Call;
use serde::Deserialize;
use serde_json::Value;

use super::{exact_numbers, json_body};
use crate::door::Door;
use crate::error::ApiError;
use crate::headers::header_string;
use crate::state::AppState;
use crate::trace::Parent;
use crate::wire::{Envelope, reason};

/// `POST /v1/calls` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallBody {
    /// The capability.
    pub capability: String,
    /// Its arguments.
    #[serde(default = "super::empty_object")]
    #[schema(value_type = Object)]
    pub arguments: Value,
}

#[utoipa::path(post, path = "/v1/calls", tag = "calls", request_body = CallBody, params(("Oncegate-Run-Id" = Option<String>, Header, description = "the orchestrator's run id"), ("Oncegate-Step-Id" = Option<String>, Header, description = "the orchestrator's step id"), ("Idempotency-Key" = Option<String>, Header, description = "a coded orchestrator's own stable key")), responses((status = 200, description = "applied, replayed, dry_run or failed", body = Envelope), (status = 202, description = "in_flight, unknown or pending_approval", body = Envelope), (status = 403, description = "denied", body = Envelope), (status = 409, description = "refused, or the Idempotency-Key's first request is in flight", body = Envelope), (status = 429, description = "attempt ceiling or read rate cap", body = Envelope), (status = 503, description = "store unavailable (fail closed)", body = Envelope), (status = 400, description = "malformed request"), (status = 401, description = "missing or wrong token"), (status = 422, description = "arguments do not normalise, or Idempotency-Key reused")), security(("bearer" = [])))]
pub(crate) async fn post_call(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let principal = state.authenticate(&headers).await?;
    let call = read_call(&headers, &body)?;
    let door = Door::open(&state, &call.capability)?.traced(Parent::from_headers(&headers));
    let client_key = call.client_key.clone();
    let capability = Arc::clone(door.capability());
    let outcome = door.call(&principal, call).await?;
    Ok(call_response(&outcome, &capability, client_key.is_some()))
}

/// The parts of a call every route that decides one reads from its request: the body
/// (capability and arguments, numbers kept exact) and the orchestrator's headers.
pub(crate) fn read_call(headers: &HeaderMap, body: &[u8]) -> Result<Call, ApiError> {
    let parsed: CallBody = json_body(body)?;
    exact_numbers(body)?;
    Ok(Call {
        capability: parsed.capability,
        arguments: parsed.arguments,
        run_id: header_string(headers, "oncegate-run-id")?,
        step_id: header_string(headers, "oncegate-step-id")?,
        client_key: header_string(headers, "idempotency-key")?,
    })
}

/// The answer to a decided call: its envelope and HTTP status, and (the IETF
/// idempotency-key draft) 409 while the first request with the caller's
/// `Idempotency-Key` is still in flight.
pub(crate) fn call_response(o: &Outcome, capability: &Capability, client_key: bool) -> Response {
    if client_key && o.status == Status::InFlight {
        let mut envelope = Envelope::from(o);
        envelope.reason = Some(reason(
            Code::ClientKeyInFlight,
            "the first request with this Idempotency-Key is still in flight",
        ));
        return (StatusCode::CONFLICT, Json(envelope)).into_response();
    }
    envelope_response(o, capability)
}

/// The envelope of a decided call and its HTTP status (the decision is counted where it
/// is made, in the call's own task).
pub(crate) fn envelope_response(o: &Outcome, capability: &Capability) -> Response {
    let (status, envelope) = Envelope::for_http(o, capability);
    (status, Json(envelope)).into_response()
}

/// `POST /v1/keys/derive` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeriveBody {
    capability: String,
    #[serde(default = "super::empty_object")]
    #[schema(value_type = Object)]
    arguments: Value,
    run_id: Option<String>,
    step_id: Option<String>,
}

#[utoipa::path(post, path = "/v1/keys/derive", tag = "keys", request_body = DeriveBody, responses((status = 200, description = "which inputs entered the key and why", body = Object), (status = 422, description = "arguments do not normalise")), security(("bearer" = [])))]
pub(crate) async fn derive_key(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    let parsed: DeriveBody = json_body(&body)?;
    exact_numbers(&body)?;
    let body = parsed;
    let mut call = Call::new(body.capability, body.arguments);
    call.run_id = body.run_id;
    call.step_id = body.step_id;
    let derived = state
        .gate()
        .derive_key(&p.name, &call)
        .map_err(ApiError::Gate)?;
    Ok(Json(derived.explanation).into_response())
}
