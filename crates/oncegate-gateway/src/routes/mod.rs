//! The JSON API's handlers, one module per resource, and what they share (roles, body
//! parsing, `?state=` filters). Every handler authenticates with the bearer token (the
//! principal comes from the token, never from the body) and fails with an [`ApiError`],
//! which the one table in [`crate::error`] puts on the wire.

pub(crate) mod admin;
pub(crate) mod answers;
pub(crate) mod approvals;
pub(crate) mod audit;
pub(crate) mod calls;
pub(crate) mod claims;
pub(crate) mod findings;
pub(crate) mod health;
pub(crate) mod intents;
pub(crate) mod tools;

use axum::http::StatusCode;
use oncegate_core::codes::Code;
use oncegate_core::config::Role;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::state::Principal;

/// The value of an absent `arguments`.
fn empty_object() -> Value {
    json!({})
}

/// Refuses (403) a principal whose role is not one of `roles`.
pub(crate) fn require(principal: &Principal, roles: &[Role]) -> Result<(), ApiError> {
    if roles.contains(&principal.role) {
        Ok(())
    } else {
        Err(ApiError::Forbidden(format!(
            "`{}` ({}) may not do this",
            principal.name,
            principal.role.as_str()
        )))
    }
}

/// Parses a JSON body (400 when it is not one of `T`).
pub(crate) fn json_body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("malformed request body: {e}")))
}

/// Parses an optional JSON body: none at all is `T::default()` (400 when a body is
/// there and is not one of `T`).
pub(crate) fn optional_json_body<T: serde::de::DeserializeOwned + Default>(
    bytes: &[u8],
) -> Result<T, ApiError> {
    if bytes.is_empty() {
        Ok(T::default())
    } else {
        json_body(bytes)
    }
}

/// Refuses a body holding a number serde_json would round (`12.5000000000000001`, a
/// 25-digit integer): the key and the upstream would see another number than the one
/// written. `bytes` must already have parsed as JSON.
pub(crate) fn exact_numbers(bytes: &[u8]) -> Result<(), ApiError> {
    oncegate_core::normalise::check_exact_numbers(bytes).map_err(|e| {
        ApiError::Coded(
            StatusCode::UNPROCESSABLE_ENTITY,
            Code::InvalidArguments,
            e.0,
        )
    })
}

/// Parses an optional `?state=` filter, refusing unknown spellings with a 400.
pub(crate) fn parse_state<T>(
    raw: Option<&str>,
    parse: fn(&str) -> Option<T>,
    what: &str,
) -> Result<Option<T>, ApiError> {
    raw.map(|s| parse(s).ok_or_else(|| ApiError::BadRequest(format!("`{s}` is not {what}"))))
        .transpose()
}
