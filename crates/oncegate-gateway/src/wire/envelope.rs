//! The one outcome wire type, [`Envelope`], and its renderings.
//!
//! An [`Outcome`] reaches a client in one of two forms, both built from the envelope: the
//! JSON API answers the envelope itself (snake_case, with an HTTP status from
//! [`http_status`]); `/mcp` answers a tool result whose first text block is the
//! envelope's `message` (the model line) and whose `_meta[OUTCOME_META_KEY]` is
//! [`Envelope::mcp_meta`] (camelCase), and whose `structuredContent` carries
//! [`Envelope::structured`] under [`OUTCOME_STRUCTURED_KEY`] (for frameworks that hand
//! the model only the structured output; [`structured_content`] merges it with the
//! upstream's own). A call refused before it was decided has an envelope too
//! ([`Envelope::refusal`]), so an MCP client reads one shape either way.

use axum::http::StatusCode;
use oncegate_core::codes::Code;
use oncegate_core::config::{Capability, UpstreamKind};
use oncegate_core::intent::{IntentState, Outcome, Status};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::tool_result::record_of;

/// The `_meta` key an MCP tool result reports the outcome under.
pub const OUTCOME_META_KEY: &str = "dev.oncegate/outcome";

/// The `structuredContent` field an MCP tool result reports the outcome under (declared
/// in every offered tool's `outputSchema`: [`crate::mcp::schema::output_schema`]).
pub const OUTCOME_STRUCTURED_KEY: &str = "oncegate";

/// Where an upstream's structured value goes when it cannot take the outcome's field
/// beside its own: not an object, or an object with an `oncegate` field of its own
/// (never overwritten).
pub const UPSTREAM_STRUCTURED_KEY: &str = "result";

/// The outcome envelope on the wire.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Envelope {
    /// applied, replayed, in_flight, unknown, pending_approval, denied, refused, dry_run,
    /// failed, approved (a claim-only capability's held call, approved: the caller's next
    /// claim executes it).
    pub status: String,
    /// The intent key.
    pub intent_key: Option<String>,
    /// The generation.
    pub generation: u32,
    /// Calls seen on the intent, this one included.
    pub attempt: u32,
    /// The intent's state.
    pub state: Option<String>,
    /// The upstream's effect reference.
    pub effect_ref: Option<String>,
    /// The upstream's stored answer.
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// The approval holding the call.
    pub approval_id: Option<String>,
    /// Why, with a stable code: `{"code": "OG-0004", "message": "..."}`.
    #[schema(value_type = Option<Object>)]
    pub reason: Option<Value>,
    /// Alerts raised.
    #[schema(value_type = Vec<Object>)]
    pub alerts: Vec<Value>,
    /// One line the model can act on.
    pub message: String,
    /// Whether `message` tells the model not to call again (the MCP renderings carry it;
    /// the JSON API's callers read `status`).
    #[serde(skip)]
    pub do_not_call_again: bool,
}

/// One line of text a model can act on.
pub fn model_line(o: &Outcome) -> String {
    let r = o.effect_ref.as_deref().unwrap_or("(no reference)");
    match o.status {
        // A read passes through: no intent, nothing to not repeat.
        Status::Applied if o.key.is_none() => "OK: read answered.".into(),
        Status::Applied => format!("APPLIED as {r}."),
        Status::Replayed => match o.state {
            Some(IntentState::Failed) => "ALREADY TRIED: the provider refused it (definite). Do not call again with the same arguments.".into(),
            _ => format!("ALREADY APPLIED as {r} - do not call again."),
        },
        Status::InFlight => "IN PROGRESS: another attempt is executing this - do not call again.".into(),
        Status::Unknown => "OUTCOME UNKNOWN - oncegate is reconciling; do not call again.".into(),
        Status::PendingApproval => format!("HELD FOR HUMAN APPROVAL {} - do not call again.", o.approval_id.as_deref().unwrap_or("")),
        Status::Denied => format!("DENIED: {} - do not retry.", o.reason.as_ref().map_or("", |r| r.message.as_str())),
        Status::Refused => match o.reason.as_ref() {
            Some(r) if r.code == Code::ApprovalQueueFull => format!("QUEUE FULL: {} Nothing was done; do not call again until your pending approvals are decided.", r.message),
            r => format!("REFUSED: {} - do not retry.", r.map_or("", |r| r.message.as_str())),
        },
        Status::DryRun => "DRY RUN: nothing was executed.".into(),
        Status::Failed => format!("FAILED: {}", o.reason.as_ref().map_or("", |r| r.message.as_str())),
        Status::Approved => "APPROVED: nothing executed yet; the caller's next claim of this intent executes it.".into(),
    }
}

/// Whether [`model_line`] tells the model not to call again: a repeat would only replay,
/// wait on the same attempt, or be refused again. An applied call, a read, a dry run and
/// a failure say nothing either way.
pub fn forbids_repeat(o: &Outcome) -> bool {
    match o.status {
        Status::Replayed
        | Status::InFlight
        | Status::Unknown
        | Status::PendingApproval
        | Status::Denied
        | Status::Refused => true,
        Status::Applied | Status::DryRun | Status::Failed | Status::Approved => false,
    }
}

impl From<&Outcome> for Envelope {
    fn from(o: &Outcome) -> Self {
        Envelope {
            status: o.status.as_str().to_owned(),
            intent_key: o.key.as_ref().map(ToString::to_string),
            generation: o.generation,
            attempt: o.attempt,
            state: o.state.map(|s| s.as_str().to_owned()),
            effect_ref: o.effect_ref.clone(),
            result: o.result.clone(),
            approval_id: o.approval_id.clone(),
            reason: o.reason.as_ref().map(|r| reason(r.code, &r.message)),
            alerts: o
                .alerts
                .iter()
                .map(|a| serde_json::to_value(a).unwrap_or(Value::Null))
                .collect(),
            message: model_line(o),
            do_not_call_again: forbids_repeat(o),
        }
    }
}

/// The `reason` object: `{"code": "OG-....", "message": "..."}`.
pub fn reason(code: Code, message: &str) -> Value {
    json!({"code": code, "message": message})
}

impl Envelope {
    /// A call the gateway refused before deciding it (bad arguments, forbidden, store
    /// down): no intent, nothing claimed. `status` is `denied` or `refused`; `line` is
    /// the model line; `do_not_call_again` whether it says so.
    pub fn refusal(
        status: &str,
        code: Code,
        message: &str,
        line: String,
        do_not_call_again: bool,
    ) -> Self {
        Envelope {
            status: status.to_owned(),
            intent_key: None,
            generation: 0,
            attempt: 0,
            state: None,
            effect_ref: None,
            result: None,
            approval_id: None,
            reason: Some(reason(code, message)),
            alerts: Vec::new(),
            message: line,
            do_not_call_again,
        }
    }

    /// A read claimed through the two-phase API: nothing is claimed (reads are never
    /// deduplicated); the caller runs it and completes nothing.
    pub fn pass_through() -> Self {
        Envelope {
            status: "pass_through".to_owned(),
            intent_key: None,
            generation: 0,
            attempt: 0,
            state: None,
            effect_ref: None,
            result: None,
            approval_id: None,
            reason: None,
            alerts: Vec::new(),
            message: "PASS THROUGH: a read; run it yourself, there is nothing to complete."
                .to_owned(),
            do_not_call_again: false,
        }
    }

    /// The MCP rendering: the value of `_meta[OUTCOME_META_KEY]` (camelCase, the
    /// reason's code only: the model line carries its message).
    pub fn mcp_meta(&self) -> Value {
        json!({
            "status": self.status,
            "intentKey": self.intent_key,
            "attempt": self.attempt,
            "generation": self.generation,
            "state": self.state,
            "effectRef": self.effect_ref,
            "approvalId": self.approval_id,
            "code": self.reason.as_ref().and_then(|r| r.get("code")),
            "alerts": self.alerts,
        })
    }

    /// The structured rendering: the value of `structuredContent[OUTCOME_STRUCTURED_KEY]`
    /// (snake_case like the JSON API; small on purpose: the status, the model line, and
    /// whether that line forbids a repeat, so a model that sees only structured output
    /// reads what the first text block says).
    pub fn structured(&self) -> Value {
        let mut out = serde_json::Map::new();
        out.insert("status".into(), json!(self.status));
        out.insert("message".into(), json!(self.message));
        out.insert("do_not_call_again".into(), json!(self.do_not_call_again));
        if let Some(key) = &self.intent_key {
            out.insert("intent_key".into(), json!(key));
        }
        if let Some(id) = &self.approval_id {
            out.insert("approval_id".into(), json!(id));
        }
        Value::Object(out)
    }

    /// The JSON API rendering of a decided call to `cap`: its HTTP status and the
    /// envelope, whose `result` is the provider's record for an MCP upstream (as an HTTP
    /// upstream's body would be; MCP clients get the whole tool result on `/mcp`).
    pub fn for_http(o: &Outcome, cap: &Capability) -> (StatusCode, Self) {
        let mut envelope = Envelope::from(o);
        if cap
            .upstream
            .as_ref()
            .is_some_and(|u| u.kind == UpstreamKind::Mcp)
        {
            envelope.result = envelope.result.map(record_of);
        }
        (http_status(o), envelope)
    }
}

/// A tool result's `structuredContent`: the upstream's own object with the outcome added
/// under [`OUTCOME_STRUCTURED_KEY`] (its fields untouched); an upstream value that is not
/// an object, or that has an `oncegate` field of its own, is kept whole under
/// [`UPSTREAM_STRUCTURED_KEY`] instead; no upstream value: the outcome alone.
pub fn structured_content(upstream: Option<Value>, envelope: &Envelope) -> Value {
    let outcome = envelope.structured();
    let mut out = match upstream {
        Some(Value::Object(m)) if !m.contains_key(OUTCOME_STRUCTURED_KEY) => m,
        Some(other) => serde_json::Map::from_iter([(UPSTREAM_STRUCTURED_KEY.to_owned(), other)]),
        None => serde_json::Map::new(),
    };
    out.insert(OUTCOME_STRUCTURED_KEY.to_owned(), outcome);
    Value::Object(out)
}

/// The HTTP status of a decided call.
pub fn http_status(o: &Outcome) -> StatusCode {
    match o.status {
        Status::Applied | Status::Replayed | Status::DryRun | Status::Failed | Status::Approved => {
            StatusCode::OK
        }
        Status::InFlight | Status::Unknown | Status::PendingApproval => StatusCode::ACCEPTED,
        Status::Denied => StatusCode::FORBIDDEN,
        Status::Refused => match o.reason.as_ref().map(|r| r.code) {
            Some(Code::StoreUnavailable) => StatusCode::SERVICE_UNAVAILABLE,
            Some(Code::AttemptCeiling | Code::Contention | Code::ApprovalQueueFull) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            _ => StatusCode::CONFLICT,
        },
    }
}
