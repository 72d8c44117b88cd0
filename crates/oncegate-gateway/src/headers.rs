//! The request headers both surfaces read: the bearer token and the structural ids
//! (`Oncegate-Run-Id`, `Oncegate-Step-Id`, `Idempotency-Key`).

use axum::http::{HeaderMap, StatusCode, header};
use oncegate_core::codes::Code;

use crate::error::ApiError;

/// The token of the one `Authorization: Bearer <token>` header. The scheme is
/// case-insensitive (RFC 9110 11.1) and may be followed by several spaces; two
/// `Authorization` headers are refused (400) rather than one of them picked.
pub(crate) fn bearer_token(headers: &HeaderMap) -> Result<&str, ApiError> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        if headers.contains_key(header::AUTHORIZATION) {
            return Err(ApiError::Coded(
                StatusCode::BAD_REQUEST,
                Code::AmbiguousAuthorization,
                "the request carries more than one Authorization header; send exactly one".into(),
            ));
        }
        return Err(ApiError::Unauthenticated);
    };
    let value = value.to_str().map_err(|_| ApiError::Unauthenticated)?;
    let (scheme, token) = value.split_once(' ').ok_or(ApiError::Unauthenticated)?;
    let token = token.trim_matches(' ');
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(ApiError::Unauthenticated);
    }
    Ok(token)
}

/// A structural header (`Oncegate-Run-Id`, `Oncegate-Step-Id`, `Idempotency-Key`):
/// absent, or one value of 1 to 255 visible ASCII characters. Anything else is a 400:
/// silently dropping it would collapse distinct steps onto one intent key.
pub(crate) fn header_string(headers: &HeaderMap, name: &str) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let display = display_header(name);
    if values.next().is_some() {
        return Err(invalid_header(format!(
            "{display} is sent more than once; send it once"
        )));
    }
    let text = value.to_str().map_err(|_| {
        invalid_header(format!(
            "{display} contains non-ASCII bytes; only visible ASCII characters (`!` to `~`) are allowed"
        ))
    })?;
    // HTTP strips surrounding whitespace already; a proxy may not have.
    let text = text.trim_matches([' ', '\t']);
    oncegate_core::limits::check_id(display, text).map_err(invalid_header)?;
    Ok(Some(text.to_owned()))
}

/// A run or step id (header or MCP `_meta`) that is not 1 to 255 visible ASCII characters.
pub(crate) fn invalid_header(message: String) -> ApiError {
    ApiError::Coded(StatusCode::BAD_REQUEST, Code::InvalidHeader, message)
}

fn display_header(name: &str) -> &'static str {
    match name {
        "oncegate-run-id" => "Oncegate-Run-Id",
        "oncegate-step-id" => "Oncegate-Step-Id",
        "idempotency-key" => "Idempotency-Key",
        _ => "a structural header",
    }
}
