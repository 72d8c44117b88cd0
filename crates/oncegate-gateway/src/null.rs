//! The null gateway, for `oncegate bench` only (`oncegate serve --null-gateway`, hidden):
//! the same server, router and layers as the gateway, with `POST /v1/calls`
//! authenticating, reading the call, normalising its arguments (the upstream's body is
//! rendered from them) and forwarding it to the capability's upstream through the same
//! executor, with no key, no policy, no decision and no store. What a gateway costs before
//! it decides anything: the floor the bench reports beside the real `/v1/calls`.
//!
//! It makes no intent key (each forward gets a fresh provider key), claims nothing and
//! records nothing: it is never a way to call an effect in production, and `serve`
//! refuses it unless asked for by that flag.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use oncegate_core::EffectResult;
use oncegate_core::key::{IntentKey, normalise_arguments};
use oncegate_engine::{Executor, GateError, IntentHandle};
use serde_json::json;

use crate::door::executor;
use crate::error::ApiError;
use crate::routes::calls::read_call;
use crate::state::AppState;

/// Forwards made by this process: with the boot nonce, each forward's provider key.
static FORWARDS: AtomicU64 = AtomicU64::new(0);

/// `POST /v1/calls` of the null gateway: authenticate, read, forward, answer.
pub(crate) async fn post_call(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let _principal = state.authenticate(&headers).await?;
    let call = read_call(&headers, &body)?;
    let capability = state
        .gate()
        .find_capability(&call.capability)
        .ok_or_else(|| ApiError::Gate(GateError::UnknownCapability(call.capability.clone())))?;
    // The upstream's body is rendered from the normalised arguments, as the gateway's:
    // the one piece of the key's work the forward needs.
    let (business_ref, normalised) = match normalise_arguments(&capability, &call.arguments) {
        Ok(n) => n,
        Err(e) => {
            let body = json!({"status": "refused", "detail": e.to_string()});
            return Ok((StatusCode::UNPROCESSABLE_ENTITY, Json(body)).into_response());
        }
    };
    let n = FORWARDS.fetch_add(1, Ordering::Relaxed);
    let key = format!("null-{:016x}-{n}", boot_nonce());
    let intent = IntentHandle {
        intent_key: IntentKey::from_hex(format!("{n:064x}")),
        key,
        generation: 1,
        capability: capability.name.clone(),
        normalised: serde_json::Value::Object(normalised),
        arguments: call.arguments,
        business_ref,
        run_id: call.run_id,
        step_id: call.step_id,
    };
    let answer = match executor(&state, capability).execute(intent).await {
        EffectResult::Applied { effect_ref, result } => (
            StatusCode::OK,
            Json(json!({"status": "applied", "effect_ref": effect_ref, "result": result})),
        ),
        other => (
            StatusCode::BAD_GATEWAY,
            Json(json!({"status": "not_applied", "detail": format!("{other:?}")})),
        ),
    };
    Ok(answer.into_response())
}

/// A random number fixed for this process, so two runs never share a provider key.
fn boot_nonce() -> u64 {
    static NONCE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NONCE.get_or_init(rand::random)
}
