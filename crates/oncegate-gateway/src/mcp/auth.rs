//! The `/mcp` middleware: authenticates before rmcp reads anything (401 with
//! `WWW-Authenticate` otherwise, from the one error table), keeps a session to the
//! principal that opened it, and answers a body that is too large (413) or not a
//! routable JSON-RPC message (400) itself, so nothing of such a request reaches the
//! handler.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::ErrorCode;
use serde_json::{Value, json};

use super::sessions::Sessions;
use crate::state::{AppState, MAX_BODY_BYTES};

/// What the middleware needs: the state (tokens) and the session owners.
#[derive(Clone)]
pub struct Auth {
    /// The gateway's state.
    pub state: AppState,
    /// Who opened each session.
    pub sessions: Sessions,
}

/// Authenticates before rmcp reads anything (401 with `WWW-Authenticate` otherwise),
/// then answers a body that is too large (413) or not JSON (400, JSON-RPC parse error)
/// itself, so nothing of such a request reaches the handler.
pub async fn authenticate(
    State(Auth { state, sessions }): State<Auth>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let principal = match state.authenticate(&parts.headers).await {
        Ok(principal) => principal,
        Err(e) => return e.into_response(),
    };
    // A session belongs to the principal that opened it: another token cannot resume its
    // streams (and read its results), cancel its requests or end it.
    let session = parts
        .headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session
        && sessions.owner(id).await.as_deref() != Some(principal.name.as_str())
    {
        // 404 either way: a client re-initialises on it. An evicted session says why.
        let message = if sessions.was_evicted(id) {
            "session ended: its principal opened more MCP sessions than gateway.mcp_sessions_per_principal allows, and this was the least recently used; initialize a new session"
        } else {
            "session not found"
        };
        return jsonrpc_error(
            axum::http::StatusCode::NOT_FOUND,
            ErrorCode::INVALID_REQUEST,
            message,
        );
    }
    let method = parts.method.clone();
    let name = principal.name.clone();
    parts.extensions.insert(principal);
    let request = if method == axum::http::Method::POST {
        match checked_body(body).await {
            Ok(body) => Request::from_parts(parts, body),
            Err(response) => return *response,
        }
    } else {
        Request::from_parts(parts, body)
    };
    let response = next.run(request).await;
    if let Some(id) = &session
        && response.status() == axum::http::StatusCode::NOT_FOUND
    {
        // rmcp ended it (idle, worker gone): forget the binding too.
        sessions.unbind(id).await;
    }
    match (&session, response.headers().get(SESSION_HEADER)) {
        (None, Some(id)) => {
            if let Ok(id) = id.to_str() {
                sessions.bind(id, &name).await;
            }
        }
        (Some(id), _) if method == axum::http::Method::DELETE && response.status().is_success() => {
            sessions.unbind(id).await;
            // rmcp answers 202; SDKs expect 200 or 204 for a terminated session.
            let mut response = response;
            if response.status() == axum::http::StatusCode::ACCEPTED {
                *response.status_mut() = axum::http::StatusCode::OK;
            }
            return response;
        }
        _ => {}
    }
    response
}

/// The `Mcp-Session-Id` header (2025-11-25 sessions).
const SESSION_HEADER: &str = "mcp-session-id";

/// Reads a POST body: too large is 413, not JSON is 400 `-32700`, not a routable
/// JSON-RPC message is 400 `-32600`/`-32602`.
async fn checked_body(body: axum::body::Body) -> Result<axum::body::Body, Box<Response>> {
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| {
            Box::new(jsonrpc_error(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::INVALID_REQUEST,
                &format!("the request body exceeds {MAX_BODY_BYTES} bytes"),
            ))
        })?;
    let message: Value = serde_json::from_slice(&bytes).map_err(|e| {
        Box::new(jsonrpc_error(
            axum::http::StatusCode::BAD_REQUEST,
            ErrorCode::PARSE_ERROR,
            &format!("parse error: {e}"),
        ))
    })?;
    if let Some((code, problem)) = jsonrpc_problem(&message) {
        return Err(Box::new(jsonrpc_error_with_id(
            axum::http::StatusCode::BAD_REQUEST,
            code,
            problem,
            message
                .get("id")
                .filter(|id| id.is_string() || id.is_i64() || id.is_u64()),
        )));
    }
    // A tool argument serde_json would round never reaches the key or the upstream.
    if message.get("method").and_then(Value::as_str) == Some("tools/call")
        && let Err(e) = oncegate_core::normalise::check_exact_numbers(&bytes)
    {
        return Err(Box::new(jsonrpc_error_with_id(
            axum::http::StatusCode::BAD_REQUEST,
            ErrorCode::INVALID_PARAMS,
            &format!("invalid params: {e}"),
            message.get("id"),
        )));
    }
    Ok(axum::body::Body::from(bytes))
}

/// Why a body is not a JSON-RPC 2.0 message rmcp can route (MCP has no batches since
/// 2025-06-18): `(code, message)`.
fn jsonrpc_problem(v: &Value) -> Option<(ErrorCode, &'static str)> {
    let invalid = Some((
        ErrorCode::INVALID_REQUEST,
        "invalid request: not a JSON-RPC 2.0 request, notification or response",
    ));
    let Some(m) = v.as_object() else {
        return invalid;
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid;
    }
    if m.get("id")
        .is_some_and(|id| !(id.is_string() || id.is_i64() || id.is_u64()))
    {
        return Some((
            ErrorCode::INVALID_REQUEST,
            "invalid request: `id` must be a string or an integer",
        ));
    }
    match m.get("method") {
        Some(Value::String(method)) => {
            // `"params": null` is sent by some clients for "no params".
            let params = m.get("params").filter(|p| !p.is_null());
            if params.is_some_and(|p| !p.is_object()) {
                return Some((
                    ErrorCode::INVALID_PARAMS,
                    "invalid params: `params` must be an object",
                ));
            }
            if method == "tools/call" {
                let p = params.and_then(Value::as_object);
                if !p.and_then(|p| p.get("name")).is_some_and(Value::is_string) {
                    return Some((
                        ErrorCode::INVALID_PARAMS,
                        "invalid params: tools/call needs the tool `name`",
                    ));
                }
                if p.and_then(|p| p.get("arguments"))
                    .is_some_and(|a| !(a.is_object() || a.is_null()))
                {
                    return Some((
                        ErrorCode::INVALID_PARAMS,
                        "invalid params: tool `arguments` must be an object",
                    ));
                }
            }
            None
        }
        Some(_) => invalid,
        None if m.contains_key("id") && (m.contains_key("result") || m.contains_key("error")) => {
            None
        }
        None => invalid,
    }
}

fn jsonrpc_error(status: axum::http::StatusCode, code: ErrorCode, message: &str) -> Response {
    jsonrpc_error_with_id(status, code, message, None)
}

fn jsonrpc_error_with_id(
    status: axum::http::StatusCode,
    code: ErrorCode,
    message: &str,
    id: Option<&Value>,
) -> Response {
    (
        status,
        axum::Json(
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code.0, "message": message}}),
        ),
    )
        .into_response()
}
