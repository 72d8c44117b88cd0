//! Long outcomes as tasks: the `io.modelcontextprotocol/tasks` extension (SEP-2663).
//!
//! A 2026-07-28 client that declares the extension (in its request `_meta`
//! capabilities) and whose `tools/call` ends `in_flight`
//! (another attempt holds the intent) or `unknown` (oncegate reconciles it) is answered
//! `resultType: "task"` instead of an `isError` result to repeat later. The task id is
//! the intent key, so `tasks/get` and a repeat of the call read the same record:
//! `working` while it is in flight or unknown, then `completed` with exactly the tool
//! result a repeat of the call answers (the surface's `tool_result`). Polling
//! executes nothing: it reads the record, which the call's own task, or the
//! reconciliation sweep, settles. Only the principal that called (or an admin) reads
//! its task; any other id is "no such task".
//!
//! A capability declared `long_running` does not wait for the outcome at all: a call
//! that has not ended after [`TASK_AFTER`] is answered its task while it goes on.

use jiff::Timestamp;
use oncegate_core::config::{Capability, Role};
use oncegate_core::decide::standing_outcome;
use oncegate_core::intent::{IntentRecord, IntentState, Outcome, Status};
use oncegate_core::key::IntentKey;
use oncegate_store::IntentsRead;
use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, ErrorData as McpError, GetTaskResult,
    JsonObject, Task, TaskPayload, TaskStatus,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;

use crate::state::{AppState, Principal};
use crate::wire::model_line;

/// How often a client is asked to poll, in milliseconds.
pub const POLL_INTERVAL_MS: u64 = 1_000;

/// Whether the request is a 2026-07-28 (or later) one whose client declared the Tasks
/// extension: 2025-11-25 sessions keep the answers they always had.
pub fn declared(ctx: &RequestContext<RoleServer>) -> bool {
    let modern = ctx.protocol_version().is_some_and(|v| !v.has_initialize());
    modern
        && ctx
            .client_capabilities()
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

/// How long a call to a `long_running` capability is waited for before its client (one
/// that declared the extension) is answered a task instead.
pub const TASK_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// A `long_running` capability's call: its answer if it comes within [`TASK_AFTER`],
/// else the task of its intent (`key`), still working. Dropping `decided` abandons only
/// the wait: the door runs the decision and the effect in a task of their own.
pub async fn or_task<T>(
    decided: impl Future<Output = T>,
    key: &str,
    now: Timestamp,
) -> Result<T, CreateTaskResult> {
    match tokio::time::timeout(TASK_AFTER, decided).await {
        Ok(answer) => Ok(answer),
        Err(_) => {
            let now = now.to_string();
            let task = Task::new(key, TaskStatus::Working, now.clone(), now)
                .with_status_message(
                    "IN PROGRESS: this call is running - poll this task, do not call again.",
                )
                .with_poll_interval_ms(POLL_INTERVAL_MS);
            Err(CreateTaskResult::new(task))
        }
    }
}

/// How an outcome is answered as a tool result (the surface's `tool_result`).
pub type Render = fn(&Outcome, &Capability) -> CallToolResult;

/// `tasks/get`: the intent's task as it stands, a settled one's outcome answered as
/// `render` answers a call.
pub async fn get(
    state: &AppState,
    principal: &Principal,
    task_id: &str,
    render: Render,
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
    Ok(GetTaskResult::new(detailed(state, &record, render)))
}

/// The record as a task: working while in flight or unknown, else completed with the
/// tool result a repeat of the call answers.
fn detailed(state: &AppState, record: &IntentRecord, render: Render) -> DetailedTask {
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
    let capability = state
        .gate()
        .registry()
        .capability(&record.capability)
        .cloned();
    let payload = match (settled, capability) {
        (true, Some(cap)) => match serde_json::to_value(render(&outcome, &cap)) {
            Ok(Value::Object(result)) => TaskPayload::Completed { result },
            _ => TaskPayload::Working,
        },
        (true, None) => {
            // A fronted tool this process has not read: the outcome alone.
            let mut result = JsonObject::new();
            result.insert(
                "content".into(),
                serde_json::json!([{"type": "text", "text": model_line(&outcome)}]),
            );
            TaskPayload::Completed { result }
        }
        (false, _) => TaskPayload::Working,
    };
    DetailedTask::new(task, payload)
}
