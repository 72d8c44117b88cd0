//! A claim and its fence: what a claim hands its holder ([`Claim`]), and what a
//! completion or a heartbeat must show for it ([`Fence`]). Below both claim/ (which
//! makes claims) and complete.rs (which settles them).

use oncegate_core::config::Role;
use oncegate_core::intent::IntentRecord;
use oncegate_core::key::IntentKey;

use crate::call::IntentHandle;
use crate::who::Who;

/// Names one claim of one execution of one intent generation: what a completion or a
/// heartbeat must show. `execution` is the fencing number: every new execution of the
/// intent (a retry, a re-execution after reconciliation, an approval) increments it, so
/// an older claim can never write over a newer one. `nonce` is the claim's own secret
/// (128 random bits in its lease's owner): counting executions is not enough to
/// complete a claim somebody else holds, the gate's own executions included.
#[derive(Clone, PartialEq, Eq)]
pub struct Fence {
    /// The intent key.
    pub intent_key: IntentKey,
    /// The generation.
    pub generation: u32,
    /// The execution number.
    pub execution: u32,
    /// The claim's nonce (see `oncegate_core::decide::lease_nonce`).
    pub nonce: String,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The nonce is a bearer secret: never in a log line.
        f.debug_struct("Fence")
            .field("intent_key", &self.intent_key)
            .field("generation", &self.generation)
            .field("execution", &self.execution)
            .finish_non_exhaustive()
    }
}

impl Fence {
    /// The fence as one opaque string for a wire form that carries the intent key
    /// apart (`g<generation>.e<execution>.<nonce>`); [`Fence::from_token`] reads it back.
    pub fn token(&self) -> String {
        format!("g{}.e{}.{}", self.generation, self.execution, self.nonce)
    }

    /// Reads [`Fence::token`] back for `intent_key`; `None` if it is not one.
    pub fn from_token(intent_key: IntentKey, token: &str) -> Option<Self> {
        let (numbers, nonce) = token.rsplit_once('.')?;
        if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let (generation, execution) = numbers.strip_prefix('g')?.split_once(".e")?;
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u32>().ok())
                .flatten()
        };
        Some(Self {
            intent_key,
            generation: number(generation)?,
            execution: number(execution)?,
            nonce: nonce.to_owned(),
        })
    }
}

/// A claimed execution: the intent is in flight, under a lease, for this execution.
/// Execute the effect with `intent.key` as the upstream idempotency key, then
/// `Gate::complete` it (and `Gate::heartbeat` it while the effect runs long).
#[derive(Clone, Debug)]
pub struct Claim {
    /// The intent key.
    pub intent_key: IntentKey,
    /// The generation.
    pub generation: u32,
    /// The execution number: the fencing token (see [`Fence`]).
    pub execution: u32,
    /// Executions and reconciliation reads started on this generation, this one
    /// included (what the attempt ceiling counts).
    pub attempt: u32,
    /// When the lease runs out, by the gate's clock: a completion after it records
    /// nothing, and the intent turns unknown and is reconciled.
    pub lease_expires_at: jiff::Timestamp,
    /// The capability.
    pub capability: String,
    /// Who claimed (and who the completion's audit event names).
    pub principal: String,
    /// Its role when authentication proved it (an identity provider's token); `None`:
    /// the registry's.
    pub role: Option<Role>,
    /// What to execute: the key to thread upstream and the arguments.
    pub intent: IntentHandle,
    /// The intent as the claim committed it (the gate's own executions record
    /// against it).
    pub(crate) record: IntentRecord,
}

impl Claim {
    /// A claim of `record` as committed (in flight, under a lease).
    pub(crate) fn of(record: IntentRecord, principal: Who<'_>) -> Self {
        Self {
            intent_key: record.key.clone(),
            generation: record.generation,
            execution: record.executions,
            attempt: record.attempts,
            lease_expires_at: record
                .lease
                .as_ref()
                .map(|l| l.expires_at)
                .expect("a claimed intent holds a lease"),
            capability: record.capability.clone(),
            principal: principal.name().to_owned(),
            role: principal.proved_role(),
            intent: IntentHandle::of(&record),
            record,
        }
    }

    /// Who claimed, as authentication proved it.
    pub fn who(&self) -> Who<'_> {
        match self.role {
            Some(role) => Who::verified(&self.principal, role),
            None => Who::from(&self.principal),
        }
    }

    /// What a completion or heartbeat must show (e.g. across a wire).
    pub fn fence(&self) -> Fence {
        Fence {
            intent_key: self.intent_key.clone(),
            generation: self.generation,
            execution: self.execution,
            // The nonce this process made the claim with (the lease stores its seal).
            nonce: self
                .record
                .lease
                .as_ref()
                .and_then(|l| l.nonce.clone())
                .unwrap_or_default(),
        }
    }
}
