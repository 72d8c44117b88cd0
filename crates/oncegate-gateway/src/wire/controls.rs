//! The admin controls as the JSON API lists them: holds (`GET /v1/admin/holds`), doubts
//! about providers (`GET /v1/admin/doubts`) and kill switches
//! (`PUT /v1/admin/kill-switches/{target}`). The gateway's own types, converted from the
//! engine's field by field, so a rename there fails to compile here instead of changing
//! the JSON a client reads (pinned by the `wire_bytes` snapshot test).

use std::collections::HashMap;

use jiff::Timestamp;
use oncegate_engine::{Doubt as EngineDoubt, Doubted, Hold as EngineHold};
use serde::Serialize;

/// A hold on the wire: what it stops and why.
#[derive(Debug, Serialize)]
pub struct Hold {
    pub id: String,
    pub capability: String,
    pub on: String,
    pub value: String,
    pub reason: String,
    pub set_by: String,
    pub set_at: Timestamp,
}

impl From<&EngineHold> for Hold {
    fn from(h: &EngineHold) -> Self {
        Self {
            id: h.id.clone(),
            capability: h.capability.clone(),
            on: h.on.clone(),
            value: h.value.clone(),
            reason: h.reason.clone(),
            set_by: h.set_by.clone(),
            set_at: h.set_at,
        }
    }
}

/// `GET /v1/admin/holds`.
#[derive(Debug, Serialize)]
pub struct Holds {
    pub holds: Vec<Hold>,
}

/// A doubt about a provider on the wire.
#[derive(Debug, Serialize)]
pub struct Doubt {
    pub capability: String,
    pub doubt: &'static str,
    pub reason: String,
    pub set_by: String,
    pub set_at: Timestamp,
}

/// The wire spelling of what a provider failed to prove.
pub fn doubt_kind(doubt: EngineDoubt) -> &'static str {
    match doubt {
        EngineDoubt::ReconciliationUnproven => "reconciliation_unproven",
        EngineDoubt::KeysIgnored => "keys_ignored",
    }
}

impl From<&Doubted> for Doubt {
    fn from(d: &Doubted) -> Self {
        Self {
            capability: d.capability.clone(),
            doubt: doubt_kind(d.doubt),
            reason: d.reason.clone(),
            set_by: d.set_by.clone(),
            set_at: d.set_at,
        }
    }
}

/// `GET /v1/admin/doubts`.
#[derive(Debug, Serialize)]
pub struct Doubts {
    pub doubts: Vec<Doubt>,
}

/// `PUT /v1/admin/kill-switches/{target}`: the switches that are on, target to reason
/// (an object, in the map's order, as the engine's map always was).
#[derive(Debug, Serialize)]
pub struct KillSwitches {
    pub kill_switches: HashMap<String, String>,
}
