//! What the chain records: one decision ([`AuditEvent`]), the record that chains it
//! into a shard ([`AuditRecord`]), and a shard's head. Domain types, below the frozen
//! encoding that hashes them and the walk that verifies them.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codes::Code;
use crate::config::AUDIT_SHARDS;
use crate::intent::{IntentState, Status};
use crate::key::IntentKey;

/// The hash that precedes the first record of every shard.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What kind of decision a record documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditKind {
    /// A call was decided.
    Call,
    /// An effect's outcome was recorded.
    Effect,
    /// A reconciliation read was applied.
    Reconcile,
    /// A human decided an approval.
    Approval,
    /// An admin acted (breaker reset, kill switch).
    Admin,
}

impl AuditKind {
    /// The audit's spelling (`call`, `effect`, `reconcile`, `approval`, `admin`).
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::Call => "call",
            AuditKind::Effect => "effect",
            AuditKind::Reconcile => "reconcile",
            AuditKind::Approval => "approval",
            AuditKind::Admin => "admin",
        }
    }
}

/// One decision, before it is chained. A domain type, free to change: the chain hashes
/// (and stores keep) its frozen form [`EventV1`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    /// When (the injected clock).
    pub at: Timestamp,
    /// What kind of decision.
    pub kind: AuditKind,
    /// The intent.
    pub key: Option<IntentKey>,
    /// Its generation.
    pub generation: u32,
    /// The capability.
    pub capability: Option<String>,
    /// Who acted (agent, approver or admin).
    pub actor: String,
    /// The run.
    pub run_id: Option<String>,
    /// State before.
    pub from: Option<IntentState>,
    /// State after.
    pub to: Option<IntentState>,
    /// What the caller was told.
    pub status: Option<Status>,
    /// The stable code, if any.
    pub code: Option<Code>,
    /// Anything else worth keeping (effect ref, approval id, alerts).
    pub detail: Value,
}

impl AuditEvent {
    /// The shard this event belongs to, of the default [`AUDIT_SHARDS`].
    pub fn shard(&self) -> u32 {
        self.shard_in(AUDIT_SHARDS)
    }

    /// The shard this event belongs to in a store of `shards` shards (`[store]
    /// audit_shards`; 0 counts as 1).
    pub fn shard_in(&self, shards: u32) -> u32 {
        let basis = self
            .key
            .as_ref()
            .map_or(self.actor.as_str(), IntentKey::as_str);
        let first = u32::from_str_radix(basis.get(..4).unwrap_or("0"), 16)
            .unwrap_or_else(|_| basis.bytes().map(u32::from).sum());
        first % shards.max(1)
    }
}

/// A chained audit record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// The shard.
    pub shard: u32,
    /// Position in the shard, from 1.
    pub seq: u64,
    /// The previous record's hash (or [`GENESIS`]).
    pub prev_hash: String,
    /// This record's hash.
    pub hash: String,
    /// The decision.
    pub event: AuditEvent,
}

/// The head of one shard's chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainHead {
    /// Last sequence number (0 when empty).
    pub seq: u64,
    /// Last hash (or [`GENESIS`]).
    pub hash: String,
}

impl ChainHead {
    /// An empty shard.
    pub fn genesis() -> Self {
        Self {
            seq: 0,
            hash: GENESIS.to_owned(),
        }
    }
}

/// How a keyed record's hash is spelled: `hmac-sha256:` then the hex MAC.
pub const KEYED_PREFIX: &str = "hmac-sha256:";
