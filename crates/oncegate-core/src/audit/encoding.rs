//! The audit chain's own encoding of an event: what a record's hash covers, and what a
//! store keeps as an audit row's body.
//!
//! [`AuditEvent`] is the domain type: the engine builds it, the API and the CLI show
//! it, and it is free to change. [`EventV1`] is the frozen form the chain hashes. Its
//! field names, their order and their spellings are those the chain has always hashed,
//! so records sealed before this module existed keep verifying.
//!
//! The rule: `EventV1` changes only with a new version. A different hashed form is a
//! new `EventV2` (and a store migration), and verification must then know which form
//! sealed each record, so that every record ever sealed still verifies. Renaming or
//! adding a field of [`AuditEvent`] changes only the conversions below.
//!
//! Nested enums ([`AuditKind`], [`IntentState`], [`Status`], [`Code`]) keep their domain
//! serde spellings here rather than a copy of their own: each is a closed set of
//! snake_case words (or `OG-` codes) that are also the API's and the database columns'
//! spelling. A change to any of them is caught by the `variant_spellings` snapshot
//! below, which pins every variant's spelling; such a change needs an `EventV2`.
//! The row seals inside `detail` ([`RowSeal`](super::RowSeal)) are pinned by the same
//! rule through the stored-bytes snapshots of `oncegate-store`.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

use super::event::{AuditEvent, AuditKind, AuditRecord, ChainHead, KEYED_PREFIX};
use super::key::{ChainKey, mac_bytes};
use crate::canonical::{canonical_json, canonical_json_of};
use crate::codes::Code;
use crate::config::AUDIT_SHARDS;
use crate::intent::{IntentState, Status};
use crate::key::IntentKey;

/// Version 1 of the hashed (and stored) form of an audit event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventV1 {
    /// When (the injected clock), RFC 3339 as jiff writes it.
    pub at: Timestamp,
    /// What kind of decision.
    pub kind: AuditKind,
    /// The intent key, lowercase hex.
    pub key: Option<String>,
    /// Its generation.
    pub generation: u32,
    /// The capability.
    pub capability: Option<String>,
    /// Who acted.
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
    /// Everything else, row seals included.
    pub detail: Value,
}

impl From<AuditEvent> for EventV1 {
    fn from(e: AuditEvent) -> Self {
        Self {
            at: e.at,
            kind: e.kind,
            key: e.key.map(|k| k.as_str().to_owned()),
            generation: e.generation,
            capability: e.capability,
            actor: e.actor,
            run_id: e.run_id,
            from: e.from,
            to: e.to,
            status: e.status,
            code: e.code,
            detail: e.detail,
        }
    }
}

impl From<&AuditEvent> for EventV1 {
    fn from(e: &AuditEvent) -> Self {
        Self::from(e.clone())
    }
}

impl From<EventV1> for AuditEvent {
    fn from(e: EventV1) -> Self {
        Self {
            at: e.at,
            kind: e.kind,
            key: e.key.map(IntentKey::from_hex),
            generation: e.generation,
            capability: e.capability,
            actor: e.actor,
            run_id: e.run_id,
            from: e.from,
            to: e.to,
            status: e.status,
            code: e.code,
            detail: e.detail,
        }
    }
}

/// The canonical JSON of an event's V1 form: the part of a record's hashed bytes that
/// is the event (see `hash_input_v1` for the whole).
pub(crate) fn canonical_v1(event: &AuditEvent) -> String {
    canonical_json_of(&EventV1::from(event))
}

/// What a record's hash (or HMAC) is computed over, before canonical JSON: the shard,
/// the sequence number as a string, the previous hash and the event in its V1 form.
/// The chain spells its canonical JSON directly around [`canonical_v1`] (`hash_at`);
/// this value form is what the tests hold that spelling to.
#[cfg(test)]
pub(crate) fn hash_input_v1(shard: u32, seq: u64, prev_hash: &str, event: &AuditEvent) -> Value {
    let body = serde_json::to_value(EventV1::from(event)).expect("audit events serialise");
    serde_json::json!({"shard": shard, "seq": seq.to_string(), "prev": prev_hash, "event": body})
}

/// The hash of a record at (`shard`, `seq`) after `prev_hash` whose event's V1 form has
/// the canonical JSON `event`. The hashed bytes are the canonical JSON of
/// `hash_input_v1`; RFC 8785 orders its four members `event`, `prev`,
/// `seq`, `shard`, so they are spelled here around the event's own canonical text
/// rather than canonicalising the event again (the `hash_input_and_hash_v1` and
/// `encoded_events_seal_as_events_do` tests hold the two spellings equal).
pub(super) fn hash_at(
    event: &str,
    shard: u32,
    seq: u64,
    prev_hash: &str,
    key: Option<&ChainKey>,
) -> String {
    let prev = canonical_json(&Value::String(prev_hash.to_owned()));
    let material = format!(r#"{{"event":{event},"prev":{prev},"seq":"{seq}","shard":{shard}}}"#);
    match key {
        None => hex::encode(<Sha256 as sha2::Digest>::digest(material.as_bytes())),
        Some(key) => format!("{KEYED_PREFIX}{}", mac_bytes(key, material.as_bytes())),
    }
}

/// The hash (or HMAC) of `event` at (`shard`, `seq`) after `prev_hash`.
pub(super) fn hash_of(
    shard: u32,
    seq: u64,
    prev_hash: &str,
    event: &AuditEvent,
    key: Option<&ChainKey>,
) -> String {
    // The event's frozen V1 form, never its domain serde: see [`EventV1`].
    hash_at(&canonical_v1(event), shard, seq, prev_hash, key)
}

/// Chains `event` after `head` (no chain key, the default shard count).
pub fn seal(event: AuditEvent, head: &ChainHead) -> AuditRecord {
    seal_with(event, head, None, AUDIT_SHARDS)
}

/// Chains `event` after `head` (its shard's head in a store of `shards` shards), with
/// the chain key when there is one.
pub fn seal_with(
    event: AuditEvent,
    head: &ChainHead,
    key: Option<&ChainKey>,
    shards: u32,
) -> AuditRecord {
    let shard = event.shard_in(shards);
    let seq = head.seq + 1;
    let hash = hash_of(shard, seq, &head.hash, &event, key);
    AuditRecord {
        shard,
        seq,
        prev_hash: head.hash.clone(),
        hash,
        event,
    }
}

/// An event encoded for the chain before it is sealed: encoding (the V1 form's
/// canonical JSON) is most of what sealing costs, and it needs no chain head. A store
/// with one writer encodes on the caller's thread and seals on its own with
/// [`EncodedEvent::hash_at`], which costs one SHA-256 (or HMAC) of the encoded bytes.
#[derive(Clone, Debug)]
pub struct EncodedEvent {
    event: AuditEvent,
    canonical: String,
}

impl EncodedEvent {
    /// Encodes `event` (its row seals already written: they are part of what is hashed).
    pub fn new(event: AuditEvent) -> Self {
        let canonical = canonical_v1(&event);
        Self { event, canonical }
    }

    /// The event.
    pub fn event(&self) -> &AuditEvent {
        &self.event
    }

    /// The event's canonical JSON: what a record's hashed bytes hold between
    /// `{"event":` and `,"prev":` (a store that hashes on its server, PostgreSQL's
    /// commit function, spells the rest around it exactly as [`EncodedEvent::hash_at`]).
    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    /// The hash [`seal_with`] gives this event at `head`'s next position in `shard`.
    pub fn hash_at(&self, shard: u32, head: &ChainHead, key: Option<&ChainKey>) -> String {
        hash_at(&self.canonical, shard, head.seq + 1, &head.hash, key)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::audit::{ChainHead, RowSeal, add_row_seals, seal};
    use crate::key::{canonical_json, digest};

    fn sample() -> AuditEvent {
        let mut event = AuditEvent {
            at: Timestamp::from_second(1_700_000_000).unwrap(),
            kind: AuditKind::Effect,
            key: Some(IntentKey::from_hex("cd".repeat(32))),
            generation: 2,
            capability: Some("charge_card".into()),
            actor: "planner".into(),
            run_id: Some("run-7".into()),
            from: Some(IntentState::InFlight),
            to: Some(IntentState::Unknown),
            status: Some(Status::Unknown),
            code: Some(Code::StoreUnavailable),
            detail: json!({"effect_ref": "ch_1"}),
        };
        add_row_seals(
            &mut event,
            Some(RowSeal {
                key: "cd".repeat(32),
                generation: 2,
                version: 3,
                hash: "ef".repeat(32),
            }),
            None,
        );
        event
    }

    /// The exact bytes hashed for a sample record, and the hash: a rename in
    /// `AuditEvent` (or any change to `EventV1`) fails here before it reaches a chain.
    #[test]
    fn hash_input_and_hash_v1() {
        let record = seal(sample(), &ChainHead::genesis());
        let input = hash_input_v1(record.shard, record.seq, &record.prev_hash, &record.event);
        assert_eq!(
            digest(&input),
            record.hash,
            "the hash covers exactly this input"
        );
        insta::assert_snapshot!(format!(
            "hash input: {}\nhash: {}",
            canonical_json(&input),
            record.hash
        ));
    }

    /// The chain spells its hashed bytes around the event's canonical text; they must
    /// be exactly the canonical JSON of `hash_input_v1`, with and without a chain key,
    /// for any previous hash, position and detail (escapes and non-ASCII included).
    #[test]
    fn encoded_events_seal_as_events_do() {
        use crate::audit::{ChainKey, EncodedEvent, KEYED_PREFIX};
        use proptest::prelude::*;
        let key = ChainKey::new(b"a chain key").expect("a non-empty key");
        proptest!(|(shard in 0u32..64, seq in 0u64..u64::MAX, prev in any::<String>(), memo in any::<String>())| {
            let mut event = sample();
            event.detail["memo"] = Value::String(memo);
            let input = hash_input_v1(shard, seq, &prev, &event);
            let canonical = canonical_v1(&event);
            prop_assert_eq!(hash_at(&canonical, shard, seq, &prev, None), digest(&input));
            let keyed = hash_at(&canonical, shard, seq, &prev, Some(&key));
            prop_assert_eq!(keyed, format!("{KEYED_PREFIX}{}", key.mac(&input)));
            let head = ChainHead { seq, hash: prev.clone() };
            if let Some(next) = seq.checked_add(1) {
                prop_assert_eq!(
                    EncodedEvent::new(event.clone()).hash_at(shard, &head, Some(&key)),
                    hash_at(&canonical, shard, next, &prev, Some(&key))
                );
            }
        });
    }

    #[test]
    fn v1_round_trips_the_domain_event() {
        let event = sample();
        assert_eq!(AuditEvent::from(EventV1::from(&event)), event);
    }

    /// Every spelling a V1 event can carry for its enums.
    #[test]
    fn variant_spellings() {
        let kinds = [
            AuditKind::Call,
            AuditKind::Effect,
            AuditKind::Reconcile,
            AuditKind::Approval,
            AuditKind::Admin,
        ];
        let states = [
            IntentState::InFlight,
            IntentState::Applied,
            IntentState::Failed,
            IntentState::Unknown,
            IntentState::NotApplied,
            IntentState::PendingApproval,
            IntentState::Denied,
        ];
        let statuses = Status::ALL;
        let spell = |values: Vec<Value>| {
            values
                .iter()
                .map(|v| v.as_str().expect("a string spelling"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let out = [
            format!("kinds: {}", spell(kinds.map(|k| json!(k)).to_vec())),
            format!("states: {}", spell(states.map(|s| json!(s)).to_vec())),
            format!("statuses: {}", spell(statuses.map(|s| json!(s)).to_vec())),
            format!("codes: {}", spell(Code::ALL.map(|c| json!(c)).to_vec())),
        ]
        .join("\n");
        insta::assert_snapshot!(out);
    }
}
