//! Pinned tool definitions of fronted MCP servers, for admins: every pin and what is
//! pending (`GET /v1/admin/tools`), and the acceptance of a changed definition by its
//! digest (`POST /v1/admin/tools/{server}/{tool}/accept`), after which this replica
//! reads the server's list again at once (the others within a few seconds).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use oncegate_core::codes::Code;
use oncegate_core::config::Role;
use oncegate_engine::Accepted;
use oncegate_store::ToolPin;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{json_body, require};
use crate::error::ApiError;
use crate::state::AppState;

/// A pin as the API shows it: the definitions as JSON, the name agents know the tool
/// by, and its state (`pinned`, or `changed`: held until accepted).
fn shown(state: &AppState, pin: &ToolPin) -> Value {
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    let name = state
        .fronted()
        .tools(&pin.server)
        .and_then(|tools| tools.into_iter().find(|t| t.tool == pin.tool))
        .map(|t| t.name);
    json!({
        "server": pin.server,
        "tool": pin.tool,
        "name": name,
        "state": if pin.pending.is_some() { "changed" } else { "pinned" },
        "digest": pin.digest,
        "definition": parse(&pin.definition),
        "pinned_at": pin.pinned_at,
        "pinned_by": pin.pinned_by,
        "pending": pin.pending.as_ref().map(|p| json!({
            "digest": p.digest,
            "definition": parse(&p.definition),
            "seen_at": p.seen_at,
        })),
    })
}

#[utoipa::path(get, path = "/v1/admin/tools", tag = "admin", responses((status = 200, description = "every fronted tool's pinned definition, and the changed ones held until accepted (`state`: `pinned` or `changed`)", body = super::answers::Tools)), security(("bearer" = [])))]
pub(crate) async fn list_tools(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin])?;
    let pins = state.gate().tool_pins().await?;
    let tools: Vec<Value> = pins.iter().map(|pin| shown(&state, pin)).collect();
    Ok(Json(json!({"tools": tools})).into_response())
}

/// `POST /v1/admin/tools/{server}/{tool}/accept` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcceptBody {
    /// The digest of the changed definition (`pending.digest` in `GET /v1/admin/tools`):
    /// only the definition pending now is accepted.
    digest: String,
}

#[utoipa::path(post, path = "/v1/admin/tools/{server}/{tool}/accept", tag = "admin", params(("server" = String, Path, description = "the `[[mcp_servers]]` alias"), ("tool" = String, Path, description = "the server's name for the tool")), request_body = AcceptBody, responses((status = 200, description = "the changed definition is the pin now (or already was): the tool is offered again", body = super::answers::Accepted), (status = 404, description = "no pin for that server and tool"), (status = 409, description = "OG-0059: the digest is not the pending definition's (stale)")), security(("bearer" = [])))]
pub(crate) async fn accept_tool(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((server, tool)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let p = state.authenticate(&headers).await?;
    require(&p, &[Role::Admin])?;
    let body: AcceptBody = json_body(&body)?;
    let accepted = state
        .gate()
        .accept_tool(p.who(), &server, &tool, &body.digest)
        .await
        .map_err(ApiError::Gate)?;
    match accepted {
        Accepted::Now(pin) => {
            // Offer it here now; the server's list is read again with the new pin.
            if let Some(s) = state
                .gate()
                .registry()
                .mcp_servers
                .iter()
                .find(|s| s.alias == server)
            {
                let _ = crate::fronted::read(&state, s).await;
            }
            Ok(Json(json!({"accepted": shown(&state, &pin)})).into_response())
        }
        Accepted::Already(pin) => {
            Ok(Json(json!({"accepted": shown(&state, &pin), "already": true})).into_response())
        }
        Accepted::Stale(pin) => Err(ApiError::Coded(
            StatusCode::CONFLICT,
            Code::ToolChanged,
            match &pin.pending {
                Some(pending) => format!(
                    "{} is not the changed definition of {server}/{tool} pending now ({}): read it again (`oncegate tools list`) before accepting",
                    body.digest, pending.digest
                ),
                None => format!(
                    "{} is not pending for {server}/{tool}: nothing is (its pin is {})",
                    body.digest, pin.digest
                ),
            },
        )),
        Accepted::NoPin => Err(ApiError::NotFound(format!(
            "no pinned tool `{tool}` of MCP server `{server}`"
        ))),
    }
}
