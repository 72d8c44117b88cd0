//! What every check builds its rows from: a fixed clock ([`at`]) and sample intents,
//! audit events and approvals. Below every check module.

use jiff::Timestamp;
use oncegate_core::audit::{AuditEvent, AuditKind};
use oncegate_core::intent::{Approval, ApprovalReason, ApprovalState, IntentRecord, IntentState};
use oncegate_core::key::IntentKey;
use serde_json::json;

use crate::ApprovalFilter;

pub(super) fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("valid timestamp")
}

/// A record for tests: `key` is hex-ish text.
pub fn sample_record(key: &str, generation: u32) -> IntentRecord {
    IntentRecord {
        key: IntentKey::from_hex(key),
        generation,
        capability: "charge_card".into(),
        tenant: "acme".into(),
        principal: "planner".into(),
        run_id: Some("run-1".into()),
        step_id: None,
        business_ref: Some("A-1".into()),
        cross_key: Some(IntentKey::from_hex(format!("x{key}"))),
        args_digest: "d".into(),
        normalised: json!({"amount": {"currency": "USD", "minor": "1250"}}),
        arguments: json!({"order_id": "A-1", "amount": "12.50"}),
        state: IntentState::InFlight,
        attempts: 1,
        executions: 1,
        lease: None,
        effect_ref: None,
        result: None,
        error: None,
        approval_id: None,
        breaker_tripped: false,
        settled_at: None,
        attempt_ended_at: None,
        not_sent_reported: false,
        created_at: at(0),
        updated_at: at(0),
        version: 0,
    }
}

pub(super) fn sample_event(key: &str, n: u32) -> AuditEvent {
    AuditEvent {
        at: at(i64::from(n)),
        kind: AuditKind::Call,
        key: Some(IntentKey::from_hex(key)),
        generation: 1,
        capability: Some("charge_card".into()),
        actor: "planner".into(),
        run_id: None,
        from: None,
        to: Some(IntentState::InFlight),
        status: None,
        code: None,
        detail: json!({"n": n}),
    }
}

pub(super) fn sample_approval(id: &str, key: &str) -> Approval {
    Approval {
        id: id.into(),
        key: IntentKey::from_hex(key),
        generation: 1,
        capability: "refund".into(),
        principal: "planner".into(),
        args_digest: "d".into(),
        policy_hash: "p".into(),
        reason: ApprovalReason::Policy,
        detail: String::new(),
        state: ApprovalState::Pending,
        decided_by: None,
        decided_at: None,
        created_at: at(0),
        expires_at: at(3600),
        version: 0,
    }
}

pub(super) fn pending_approvals() -> ApprovalFilter {
    ApprovalFilter {
        state: Some(ApprovalState::Pending),
        ..ApprovalFilter::default()
    }
}
