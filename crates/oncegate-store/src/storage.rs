//! Storage forms: the bytes a backend keeps for an intent row, an approval row and an
//! audit record, apart from the domain types the engine works with and the wire types
//! the gateway renders.
//!
//! Every backend encodes through these structs, both for a row's body and for its row
//! seal (the [`row_hash`](oncegate_core::audit::row_hash) an audit record carries), and
//! decodes through them. The version-1 forms serialise byte for byte as stores have
//! always been written (the same field names in the same order, the same `default`
//! rules, the same spellings of numbers, timestamps and enums), so existing stores, their
//! row seals and their audit chains verify unchanged, with no migration.
//!
//! The rule: a storage struct changes only with a new version (`IntentRowV2`, ...) and
//! a migration that rewrites (and re-seals) the rows, or a decoder that reads both. The
//! domain types (`oncegate_core::intent`, `oncegate_core::audit`) and the wire types are
//! free to change: a rename there changes a conversion below, never stored bytes. The
//! snapshot tests in `tests/it/storage.rs` pin the bytes and hashes of sample rows and
//! decode rows as an earlier build wrote them.
//!
//! Nested enums ([`IntentState`], [`ApprovalState`], [`ApprovalReason`], [`Code`]) keep
//! their domain serde spellings instead of copies of their own: each is a closed set of
//! snake_case words (or `OG-` codes) that are also the database columns' and the API's
//! spelling, and `tests/it/storage.rs` pins every variant's spelling, so a change fails
//! a test rather than silently changing stored bytes. Nested structs ([`LeaseV1`],
//! [`ReasonV1`]) and intent keys (plain hex strings) have storage forms of their own.
//! An audit record's body is the chain's own frozen form of the event,
//! [`EventV1`](oncegate_core::audit::EventV1), which lives in core because core does the
//! hashing: the stored body is exactly what the hash covers.

use jiff::Timestamp;
use oncegate_core::audit::{AuditEvent, AuditRecord, EventV1};
use oncegate_core::codes::Code;
use oncegate_core::intent::{
    Approval, ApprovalReason, ApprovalState, IntentRecord, IntentState, Lease, Reason,
};
use oncegate_core::key::IntentKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version 1 of a stored intent generation (the `intents.body` column).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IntentRowV1 {
    /// The intent key, lowercase hex.
    pub key: String,
    /// The generation.
    pub generation: u32,
    /// The capability.
    pub capability: String,
    /// The tenant.
    pub tenant: String,
    /// Who first issued it.
    pub principal: String,
    /// The run that issued it.
    pub run_id: Option<String>,
    /// The step that issued it.
    pub step_id: Option<String>,
    /// The normalised business reference.
    pub business_ref: Option<String>,
    /// The cross-run key, lowercase hex.
    pub cross_key: Option<String>,
    /// SHA-256 of the canonical normalised arguments.
    pub args_digest: String,
    /// The normalised significant arguments.
    pub normalised: Value,
    /// The arguments of the call that created this generation.
    pub arguments: Value,
    /// Where it stands.
    pub state: IntentState,
    /// Executions and reconciliation reads started.
    pub attempts: u32,
    /// Times the effect was started upstream.
    pub executions: u32,
    /// The claim, while in flight.
    pub lease: Option<LeaseV1>,
    /// The upstream's reference for the effect.
    pub effect_ref: Option<String>,
    /// The upstream's answer.
    pub result: Option<Value>,
    /// Why it failed, was denied or is unknown.
    pub error: Option<ReasonV1>,
    /// The open or last approval.
    pub approval_id: Option<String>,
    /// Whether the attempt ceiling tripped.
    pub breaker_tripped: bool,
    /// When it reached a decided state. Absent in rows written before it existed.
    #[serde(default)]
    pub settled_at: Option<Timestamp>,
    /// When the last attempt ended without a settling answer. Absent in rows written
    /// before it existed.
    #[serde(default)]
    pub attempt_ended_at: Option<Timestamp>,
    /// A worker's `not_sent` waits for a reconciliation read. Written only when set, so
    /// rows without it (all rows before it existed) keep their exact bytes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_sent_reported: bool,
    /// When this generation started.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
    /// The stored version.
    pub version: u64,
}

/// Version 1 of a stored lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseV1 {
    /// Who holds it.
    pub owner: String,
    /// When it expires.
    pub expires_at: Timestamp,
}

/// Version 1 of a stored reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonV1 {
    /// The stable code, spelled `OG-NNNN`.
    pub code: Code,
    /// Human-readable detail.
    pub message: String,
}

/// Version 1 of a stored approval (the `approvals.body` column).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRowV1 {
    /// `ap_...`.
    pub id: String,
    /// The intent key it holds, lowercase hex.
    pub key: String,
    /// Its generation.
    pub generation: u32,
    /// The capability.
    pub capability: String,
    /// The principal whose call it holds.
    pub principal: String,
    /// The bound arguments digest.
    pub args_digest: String,
    /// The bound policy hash.
    pub policy_hash: String,
    /// Why it was asked.
    pub reason: ApprovalReason,
    /// Details.
    pub detail: String,
    /// Where it stands.
    pub state: ApprovalState,
    /// Who decided.
    pub decided_by: Option<String>,
    /// When.
    pub decided_at: Option<Timestamp>,
    /// Asked at.
    pub created_at: Timestamp,
    /// When it expires.
    pub expires_at: Timestamp,
    /// The stored version.
    pub version: u64,
}

/// Version 1 of a stored audit record: the columns (shard, seq, prev_hash, hash) and
/// the body, which is the chain's hashed form of the event.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditRowV1 {
    /// The shard.
    pub shard: u32,
    /// Position in the shard, from 1.
    pub seq: u64,
    /// The previous record's hash.
    pub prev_hash: String,
    /// This record's hash (`hmac-sha256:...` when keyed).
    pub hash: String,
    /// The `audit.body` column.
    pub body: EventV1,
}

impl IntentRowV1 {
    /// The row's body as JSON (what is stored and what its seal hashes).
    pub fn to_body(&self) -> Value {
        serde_json::to_value(self).expect("storage forms serialise")
    }

    /// The body column's text: [`IntentRowV1::to_body`]'s text, written without building the
    /// value.
    pub fn body_text(&self) -> String {
        serde_json::to_string(self).expect("storage forms serialise")
    }

    /// Decodes a stored body.
    pub fn from_body(body: Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(body)
    }
}

impl ApprovalRowV1 {
    /// The row's body as JSON (what is stored and what its seal hashes).
    pub fn to_body(&self) -> Value {
        serde_json::to_value(self).expect("storage forms serialise")
    }

    /// The body column's text: [`ApprovalRowV1::to_body`]'s text, written without building the
    /// value.
    pub fn body_text(&self) -> String {
        serde_json::to_string(self).expect("storage forms serialise")
    }

    /// Decodes a stored body.
    pub fn from_body(body: Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(body)
    }
}

impl AuditRowV1 {
    /// The body column's text.
    pub fn body_text(&self) -> String {
        serde_json::to_string(&self.body).expect("storage forms serialise")
    }

    /// The body column's text of a record of `event` (what [`AuditRowV1::body_text`]
    /// gives once it is sealed).
    pub fn body_text_of(event: &AuditEvent) -> String {
        serde_json::to_string(&EventV1::from(event)).expect("storage forms serialise")
    }

    /// A row from its columns and the body column's text.
    pub fn from_columns(
        shard: u32,
        seq: u64,
        prev_hash: String,
        hash: String,
        body: &str,
    ) -> Result<Self, serde_json::Error> {
        Ok(Self {
            shard,
            seq,
            prev_hash,
            hash,
            body: serde_json::from_str(body)?,
        })
    }
}

impl From<&IntentRecord> for IntentRowV1 {
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
            state: r.state,
            attempts: r.attempts,
            executions: r.executions,
            lease: r.lease.as_ref().map(LeaseV1::from),
            effect_ref: r.effect_ref.clone(),
            result: r.result.clone(),
            error: r.error.as_ref().map(ReasonV1::from),
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

impl From<IntentRowV1> for IntentRecord {
    fn from(r: IntentRowV1) -> Self {
        Self {
            key: IntentKey::from_hex(r.key),
            generation: r.generation,
            capability: r.capability,
            tenant: r.tenant,
            principal: r.principal,
            run_id: r.run_id,
            step_id: r.step_id,
            business_ref: r.business_ref,
            cross_key: r.cross_key.map(IntentKey::from_hex),
            args_digest: r.args_digest,
            normalised: r.normalised,
            arguments: r.arguments,
            state: r.state,
            attempts: r.attempts,
            executions: r.executions,
            lease: r.lease.map(Lease::from),
            effect_ref: r.effect_ref,
            result: r.result,
            error: r.error.map(Reason::from),
            approval_id: r.approval_id,
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

impl From<&Lease> for LeaseV1 {
    fn from(l: &Lease) -> Self {
        Self {
            owner: l.owner.clone(),
            expires_at: l.expires_at,
        }
    }
}

impl From<LeaseV1> for Lease {
    fn from(l: LeaseV1) -> Self {
        Self {
            owner: l.owner,
            expires_at: l.expires_at,
            nonce: None,
        }
    }
}

impl From<&Reason> for ReasonV1 {
    fn from(r: &Reason) -> Self {
        Self {
            code: r.code,
            message: r.message.clone(),
        }
    }
}

impl From<ReasonV1> for Reason {
    fn from(r: ReasonV1) -> Self {
        Self {
            code: r.code,
            message: r.message,
        }
    }
}

impl From<&Approval> for ApprovalRowV1 {
    fn from(a: &Approval) -> Self {
        Self {
            id: a.id.clone(),
            key: a.key.as_str().to_owned(),
            generation: a.generation,
            capability: a.capability.clone(),
            principal: a.principal.clone(),
            args_digest: a.args_digest.clone(),
            policy_hash: a.policy_hash.clone(),
            reason: a.reason,
            detail: a.detail.clone(),
            state: a.state,
            decided_by: a.decided_by.clone(),
            decided_at: a.decided_at,
            created_at: a.created_at,
            expires_at: a.expires_at,
            version: a.version,
        }
    }
}

impl From<ApprovalRowV1> for Approval {
    fn from(a: ApprovalRowV1) -> Self {
        Self {
            id: a.id,
            key: IntentKey::from_hex(a.key),
            generation: a.generation,
            capability: a.capability,
            principal: a.principal,
            args_digest: a.args_digest,
            policy_hash: a.policy_hash,
            reason: a.reason,
            detail: a.detail,
            state: a.state,
            decided_by: a.decided_by,
            decided_at: a.decided_at,
            created_at: a.created_at,
            expires_at: a.expires_at,
            version: a.version,
        }
    }
}

impl From<AuditRecord> for AuditRowV1 {
    fn from(r: AuditRecord) -> Self {
        Self {
            shard: r.shard,
            seq: r.seq,
            prev_hash: r.prev_hash,
            hash: r.hash,
            body: EventV1::from(r.event),
        }
    }
}

impl From<AuditRowV1> for AuditRecord {
    fn from(r: AuditRowV1) -> Self {
        Self {
            shard: r.shard,
            seq: r.seq,
            prev_hash: r.prev_hash,
            hash: r.hash,
            event: r.body.into(),
        }
    }
}

/// What a kill switch (or hold) row's seal covers: the row's columns, a cleared switch
/// with `reason` None (the row stays, so a deleted row is always tampering).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchRowV1 {
    /// `capability:NAME`, `agent:NAME` or `hold:...`.
    pub target: String,
    /// Why it is on; None: cleared.
    pub reason: Option<String>,
    /// Who set or cleared it last.
    pub set_by: String,
    /// When (milliseconds since the epoch).
    pub set_at_ms: i64,
}

/// What a finding row's seal covers: everything but its delivery state (attempts and
/// times, which the outbox moves without an audit record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingRowV1 {
    /// The finding's id.
    pub id: String,
    /// The rule that raised it.
    pub rule: String,
    /// When (milliseconds since the epoch).
    pub raised_at_ms: i64,
    /// The finding as JSON text.
    pub body: String,
}

impl SwitchRowV1 {
    /// The seal of this row (version 0: a switch's newest seal is found by the audit
    /// order, not by a version).
    pub fn seal(&self) -> oncegate_core::audit::RowSeal {
        oncegate_core::audit::RowSeal {
            key: self.target.clone(),
            generation: 0,
            version: 0,
            hash: oncegate_core::audit::row_hash_of(self),
        }
    }
}

impl FindingRowV1 {
    /// The seal of this row (as [`SwitchRowV1::seal`]).
    pub fn seal(&self) -> oncegate_core::audit::RowSeal {
        oncegate_core::audit::RowSeal {
            key: self.id.clone(),
            generation: 0,
            version: 0,
            hash: oncegate_core::audit::row_hash_of(self),
        }
    }
}

impl From<&crate::KillSwitchChange> for SwitchRowV1 {
    fn from(c: &crate::KillSwitchChange) -> Self {
        Self {
            target: c.target.clone(),
            reason: c.reason.clone(),
            set_by: c.actor.clone(),
            set_at_ms: c.at.as_millisecond(),
        }
    }
}

impl From<&crate::FindingRow> for FindingRowV1 {
    fn from(f: &crate::FindingRow) -> Self {
        Self {
            id: f.id.clone(),
            rule: f.rule.clone(),
            raised_at_ms: f.raised_at.as_millisecond(),
            body: f.body.clone(),
        }
    }
}
