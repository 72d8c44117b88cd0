//! An intent record as the JSON API shows it (`GET /v1/intents/{key}`, each row of
//! `GET /v1/intents`): the gateway's own type, converted from core's [`IntentRecord`]
//! field by field, so a rename in core fails to compile here instead of changing the
//! JSON a client reads. Field order and spelling are the wire's (pinned by the
//! `wire_bytes` snapshot test).

use jiff::Timestamp;
use oncegate_core::intent::{IntentRecord, IntentState, Lease as CoreLease, Reason as CoreReason};
use serde::Serialize;
use serde_json::Value;

/// One intent generation on the wire.
#[derive(Debug, Serialize)]
pub struct Intent {
    pub key: String,
    pub generation: u32,
    pub capability: String,
    pub tenant: String,
    pub principal: String,
    pub run_id: Option<String>,
    pub step_id: Option<String>,
    pub business_ref: Option<String>,
    pub cross_key: Option<String>,
    pub args_digest: String,
    pub normalised: Value,
    pub arguments: Value,
    pub state: &'static str,
    pub attempts: u32,
    pub executions: u32,
    pub lease: Option<Lease>,
    pub effect_ref: Option<String>,
    pub result: Option<Value>,
    pub error: Option<Reason>,
    pub approval_id: Option<String>,
    pub breaker_tripped: bool,
    pub settled_at: Option<Timestamp>,
    pub attempt_ended_at: Option<Timestamp>,
    pub not_sent_reported: bool,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: u64,
}

/// A held claim: who holds it and until when (never its nonce).
#[derive(Debug, Serialize)]
pub struct Lease {
    pub owner: String,
    pub expires_at: Timestamp,
}

/// A reason with its stable code (`OG-0001` ...).
#[derive(Debug, Serialize)]
pub struct Reason {
    pub code: &'static str,
    pub message: String,
}

/// The wire spelling of an intent's state.
pub fn intent_state(state: IntentState) -> &'static str {
    match state {
        IntentState::InFlight => "in_flight",
        IntentState::Applied => "applied",
        IntentState::Failed => "failed",
        IntentState::Unknown => "unknown",
        IntentState::NotApplied => "not_applied",
        IntentState::PendingApproval => "pending_approval",
        IntentState::Denied => "denied",
    }
}

impl From<&CoreReason> for Reason {
    fn from(r: &CoreReason) -> Self {
        Self {
            code: r.code.as_str(),
            message: r.message.clone(),
        }
    }
}

impl From<&CoreLease> for Lease {
    fn from(l: &CoreLease) -> Self {
        Self {
            owner: l.owner.clone(),
            expires_at: l.expires_at,
        }
    }
}

impl From<&IntentRecord> for Intent {
    fn from(r: &IntentRecord) -> Self {
        Self {
            key: r.key.as_str().to_owned(),
            generation: r.generation,
            capability: r.capability.clone(),
            tenant: r.tenant.clone(),
            principal: r.principal.clone(),
            run_id: r.run_id.clone(),
            step_id: r.step_id.clone(),
            business_ref: r.business_ref.clone(),
            cross_key: r.cross_key.as_ref().map(|k| k.as_str().to_owned()),
            args_digest: r.args_digest.clone(),
            normalised: r.normalised.clone(),
            arguments: r.arguments.clone(),
            state: intent_state(r.state),
            attempts: r.attempts,
            executions: r.executions,
            lease: r.lease.as_ref().map(Lease::from),
            effect_ref: r.effect_ref.clone(),
            result: r.result.clone(),
            error: r.error.as_ref().map(Reason::from),
            approval_id: r.approval_id.clone(),
            breaker_tripped: r.breaker_tripped,
            settled_at: r.settled_at,
            attempt_ended_at: r.attempt_ended_at,
            not_sent_reported: r.not_sent_reported,
            created_at: r.created_at,
            updated_at: r.updated_at,
            version: r.version,
        }
    }
}
