//! Long outcomes as tasks: the `io.modelcontextprotocol/tasks` extension (SEP-2663).
//!
//! A client that declares the extension (in its request `_meta` capabilities at
//! 2026-07-28, or at `initialize` in a session) and whose `tools/call` ends `in_flight`
//! (another attempt holds the intent) or `unknown` (oncegate reconciles it) is answered
//! `resultType: "task"` instead of an `isError` result to repeat later. The task id is
//! the intent key, so `tasks/get` and a repeat of the call read the same record:
//! `working` while it is in flight or unknown, then `completed` with exactly the tool
//! result a repeat of the call answers (the decided outcome's [`tool_result`]). Polling
//! executes nothing: it reads the record, which the call's own task, or the
//! reconciliation sweep, settles. Only the principal that called (or an admin) reads
//! its task; any other id is "no such task".

use jiff::Timestamp;
use oncegate_core::config::Role;
use oncegate_core::decide::standing_outcome;
use oncegate_core::intent::{IntentRecord, IntentState, Outcome, Status};
use oncegate_core::key::IntentKey;
use oncegate_store::IntentsRead;
use rmcp::model::{
    CreateTaskResult, DetailedTask, ErrorData as McpError, GetTaskResult, JsonObject, Task,
    TaskPayload, TaskStatus,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;

use super::surface::tool_result;
use crate::state::{AppState, Principal};
use crate::wire::model_line;

/// How often a client is asked to poll, in milliseconds.
pub const POLL_INTERVAL_MS: u64 = 1_000;

/// Whether the request's client declared the Tasks extension.
pub fn declared(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities()
        .is_some_and(|c| c.supports_tasks())
}

/// The task a call's outcome becomes, for a client that declared the extension: one for
/// an intent still in flight or unknown, else `None` (the outcome is the answer).
pub fn task_for(outcome: &Outcome, now: Timestamp) -> Option<CreateTaskResult> {
    if !matches!(outcome.status, Status::InFlight | Status::Unknown) {
        return None;
    }
    let key = outcome.key.as_ref()?.as_str();
    let now = now.to_string();
    let task = Task::new(key, TaskStatus::Working, now.clone(), now)
        .with_status_message(model_line(outcome))
        .with_poll_interval_ms(POLL_INTERVAL_MS);
    Some(CreateTaskResult::new(task))
}

/// `tasks/get`: the intent's task as it stands.
pub async fn get(
    state: &AppState,
    principal: &Principal,
    task_id: &str,
) -> Result<GetTaskResult, McpError> {
    let unknown = || McpError::invalid_params(format!("no task `{task_id}`"), None);
    // An intent key is lowercase hex; anything else names no task.
    if task_id.is_empty() || !task_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(unknown());
    }
    let record = state
        .gate()
        .store()
        .load(&IntentKey::from_hex(task_id.to_owned()))
        .await
        .map_err(|e| McpError::internal_error(format!("the store is unavailable: {e}"), None))?
        .ok_or_else(unknown)?;
    if record.principal != principal.name && principal.role != Role::Admin {
        return Err(unknown());
    }
    Ok(GetTaskResult::new(detailed(state, &record)))
}

/// The record as a task: working while in flight or unknown, else completed with the
/// tool result a repeat of the call answers.
fn detailed(state: &AppState, record: &IntentRecord) -> DetailedTask {
    let outcome = standing_outcome(record);
    let task = Task::new(
        record.key.as_str(),
        TaskStatus::Working,
        record.created_at.to_string(),
        record.updated_at.to_string(),
    )
    .with_status_message(model_line(&outcome))
    .with_poll_interval_ms(POLL_INTERVAL_MS);
    let settled = !matches!(record.state, IntentState::InFlight | IntentState::Unknown);
    let capability = state.gate().registry().capability(&record.capability).cloned();
    let payload = match (settled, capability) {
        (true, Some(cap)) => match serde_json::to_value(tool_result(&outcome, &cap)) {
            Ok(Value::Object(result)) => TaskPayload::Completed { result },
            _ => TaskPayload::Working,
        },
        (true, None) => {
            // A fronted tool this process has not read: the outcome alone.
            let mut result = JsonObject::new();
            result.insert("content".into(), serde_json::json!([{"type": "text", "text": model_line(&outcome)}]));
            TaskPayload::Completed { result }
        }
        (false, _) => TaskPayload::Working,
    };
    DetailedTask::new(task, payload)
}
