//! The one error-to-wire table, for both surfaces.
//!
//! Every way a request can fail before (or instead of) a decided outcome is an
//! [`ApiError`]. [`ApiError::parts`] is the table: HTTP status, stable code, message. The
//! JSON API answers it as `{"error": {"code", "message"}}` with that status (a 401 adds
//! `WWW-Authenticate`); `/mcp` answers it through [`ApiError::into_mcp`]: a JSON-RPC error
//! for what rejects the request itself (an unknown tool, an invalid run or step id),
//! otherwise an `isError` tool result whose `_meta` is the refusal's [`Envelope`], so the
//! model reads one line it can act on.
//!
//! Server faults are logged once, where they become an `ApiError` ([`ApiError::internal`],
//! the store conversion); clients see the code and a message, never internals.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use oncegate_core::codes::Code;
use oncegate_core::limits::LimitError;
use oncegate_engine::GateError;
use rmcp::model::{CallToolResult, ContentBlock, ErrorData as McpError, MetaObject};
use serde_json::json;

use crate::wire::{Envelope, OUTCOME_META_KEY, structured_content};

/// Everything a route can fail with, mapped to the wire once.
#[derive(Debug)]
pub enum ApiError {
    /// No or a wrong bearer token (401).
    Unauthenticated,
    /// A JWT that is not accepted, and why (401, `error="invalid_token"`).
    InvalidToken(String),
    /// Authenticated but not allowed (403).
    Forbidden(String),
    /// The request is malformed (400).
    BadRequest(String),
    /// The engine refused to decide.
    Gate(GateError),
    /// Not found (404).
    NotFound(String),
    /// The store is down (503).
    Store(String),
    /// The gateway failed itself: a call task panicked or was cancelled (500).
    Internal(String),
    /// A refusal with its own status and stable code.
    Coded(StatusCode, Code, String),
}

impl ApiError {
    /// A server fault: `detail` is logged here, once; the client reads only `message`.
    pub fn internal(message: String, detail: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "{message}");
        ApiError::Internal(message)
    }

    /// The table: HTTP status, stable code and message of every error.
    pub fn parts(&self) -> (StatusCode, Code, String) {
        match self {
            ApiError::Unauthenticated => (
                StatusCode::UNAUTHORIZED,
                Code::Unauthenticated,
                "missing or wrong bearer token".into(),
            ),
            ApiError::InvalidToken(why) => (
                StatusCode::UNAUTHORIZED,
                Code::Unauthenticated,
                format!("the bearer token is not accepted: {why}"),
            ),
            ApiError::Forbidden(m) => (StatusCode::FORBIDDEN, Code::Forbidden, m.clone()),
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, Code::InvalidArguments, m.clone()),
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, Code::NotFound, m.clone()),
            ApiError::Store(m) => (
                StatusCode::SERVICE_UNAVAILABLE,
                Code::StoreUnavailable,
                m.clone(),
            ),
            ApiError::Internal(m) => (StatusCode::INTERNAL_SERVER_ERROR, Code::Internal, m.clone()),
            ApiError::Coded(status, code, m) => (*status, *code, m.clone()),
            ApiError::Gate(e) => {
                let status = match e {
                    GateError::UnknownCapability(_) => StatusCode::NOT_FOUND,
                    GateError::Forbidden(_) => StatusCode::FORBIDDEN,
                    GateError::InvalidArguments(_) | GateError::Inadmissible(_) => {
                        StatusCode::UNPROCESSABLE_ENTITY
                    }
                    GateError::Limit(LimitError::TooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
                    GateError::Limit(LimitError::TooDeep { .. }) => {
                        StatusCode::UNPROCESSABLE_ENTITY
                    }
                    GateError::UnknownApproval(_) | GateError::UnknownIntent(_) => {
                        StatusCode::NOT_FOUND
                    }
                    GateError::ClientKeyMissing(_) => StatusCode::BAD_REQUEST,
                    GateError::ClientKeyReused(_) => StatusCode::UNPROCESSABLE_ENTITY,
                    GateError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
                    GateError::StaleClaim(_) => StatusCode::CONFLICT,
                    GateError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
                };
                (status, e.code(), e.to_string())
            }
        }
    }

    /// The human-readable part.
    pub fn message(&self) -> String {
        self.parts().2
    }

    /// The MCP form of the error, for `tools/call`: a JSON-RPC error when the request
    /// itself is wrong (an unknown tool, an invalid run or step id), else an `isError`
    /// tool result (nothing was decided; the first line says what to do).
    pub fn into_mcp(self) -> Result<CallToolResult, McpError> {
        match self {
            ApiError::Gate(GateError::UnknownCapability(name)) => Err(McpError::invalid_params(
                format!("unknown tool `{name}`"),
                None,
            )),
            ApiError::Coded(
                _,
                code @ (Code::InvalidHeader | Code::RequestStateInvalid | Code::RequestStateUsed),
                m,
            ) => Err(McpError::invalid_params(
                format!("invalid params: {m}"),
                Some(json!({"code": code})),
            )),
            // Only reachable if the middleware did not run: a server fault.
            ApiError::Unauthenticated | ApiError::InvalidToken(_) => Err(McpError::internal_error(
                "the request was not authenticated",
                None,
            )),
            other => {
                let (_, code, message) = other.parts();
                Ok(refusal(code, &message))
            }
        }
    }
}

/// A call the gateway refused before deciding (bad arguments, forbidden, store down).
fn refusal(code: Code, message: &str) -> CallToolResult {
    // The third value: whether the line tells the model not to call again.
    let (status, line, stop) = match code {
        Code::Forbidden => ("denied", format!("DENIED: {message} - do not retry."), true),
        Code::InvalidArguments | Code::ArgumentsTooLarge | Code::ArgumentsTooDeep => (
            "refused",
            format!(
                "INVALID ARGUMENTS: {message} - nothing was done; fix the arguments and call again."
            ),
            false,
        ),
        Code::RateLimited => (
            "refused",
            format!("RATE LIMITED: {message} - nothing was done; wait before reading again."),
            false,
        ),
        _ => (
            "refused",
            format!("REFUSED: {message} - do not retry."),
            true,
        ),
    };
    let envelope = Envelope::refusal(status, code, message, line, stop);
    let mut result = CallToolResult::error(vec![ContentBlock::text(envelope.message.clone())]);
    let mut meta = MetaObject::new();
    meta.insert(OUTCOME_META_KEY.into(), envelope.mcp_meta());
    result.meta = Some(meta);
    result.structured_content = Some(structured_content(None, &envelope));
    result
}

/// The one error envelope every refusal of the JSON API answers with: what
/// [`crate::error::ApiError`] serialises, so the schema is the wire.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The code and the sentence of an [`ErrorBody`].
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// A stable code (`OG-0001` ...), listed in docs/error-codes.md.
    #[schema(pattern = "^OG-[0-9]{4}$", example = "OG-0054")]
    pub code: &'static str,
    /// What happened and what to do, for a human or a model.
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message) = self.parts();
        let mut response = (
            status,
            Json(ErrorBody {
                error: ErrorDetail {
                    code: code.as_str(),
                    message,
                },
            }),
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED {
            // The router adds `resource_metadata` when `[identity]` is configured.
            let challenge = if matches!(self, ApiError::InvalidToken(_)) {
                "Bearer realm=\"oncegate\", error=\"invalid_token\""
            } else {
                "Bearer realm=\"oncegate\""
            };
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        }
        response
    }
}

impl From<oncegate_store::StoreError> for ApiError {
    fn from(e: oncegate_store::StoreError) -> Self {
        tracing::error!(error = %e, "store error");
        match e {
            oncegate_store::StoreError::Integrity(_) => {
                ApiError::Coded(StatusCode::SERVICE_UNAVAILABLE, e.code(), e.to_string())
            }
            _ => ApiError::Store(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unauthenticated_forbidden_and_internal_have_their_own_status_and_code() {
        let table = [
            (ApiError::Unauthenticated, 401, Code::Unauthenticated),
            (ApiError::Forbidden("no".into()), 403, Code::Forbidden),
            (ApiError::NotFound("none".into()), 404, Code::NotFound),
            (ApiError::Store("down".into()), 503, Code::StoreUnavailable),
            (
                ApiError::Internal("the call task failed".into()),
                500,
                Code::Internal,
            ),
            (
                ApiError::Gate(GateError::RateLimited("slow".into())),
                429,
                Code::RateLimited,
            ),
            (
                ApiError::Gate(GateError::ClientKeyReused("other".into())),
                422,
                Code::ClientKeyReused,
            ),
        ];
        for (error, status, code) in table {
            let (s, c, _) = error.parts();
            assert_eq!((s.as_u16(), c), (status, code), "{error:?}");
        }
        let r = ApiError::Unauthenticated.into_response();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert!(r.headers().contains_key(header::WWW_AUTHENTICATE));
        let r = ApiError::Forbidden("no".into()).into_response();
        assert!(!r.headers().contains_key(header::WWW_AUTHENTICATE));
    }

    #[test]
    fn on_mcp_a_failed_task_is_an_internal_tool_error_and_an_unknown_tool_a_jsonrpc_error() {
        let result = ApiError::Internal("the call task failed".into())
            .into_mcp()
            .unwrap();
        assert_eq!(result.is_error, Some(true));
        let meta = &result.meta.as_ref().unwrap()[OUTCOME_META_KEY];
        assert_eq!(meta["code"], "OG-0055", "{meta}");
        assert_eq!(meta["status"], "refused", "{meta}");
        let error = ApiError::Gate(GateError::UnknownCapability("nope".into()))
            .into_mcp()
            .unwrap_err();
        assert_eq!(error.message, "unknown tool `nope`");
    }
}
