//! The decision state machine: pure functions of (stored state, request, capability,
//! policy verdict, now).
//!
//! This file only names the parts, layered so that no import runs back up. At the
//! bottom, `model` (what goes in and out of a decision) and `lease` (who holds a
//! claim); above them `steps`, what several transitions share (claiming, auditing,
//! settling), and `unknown` (a repeat of an unknown intent, the attempt ceiling). The
//! transitions on top are split by concern: `call` (a call arrives: execute, replay,
//! wait, reconcile or refuse) with `generation` (a new generation of a settled intent),
//! `effect` (an execution's answer is recorded, fenced by its execution number),
//! `complete` (the two-phase API's completions and heartbeats), `reconcile` (a
//! reconciliation read's answer, for a waiting repeat or the sweep) and `approval` (a
//! human approves, denies or resets a breaker).
//!
//! Stores only load and compare-and-set; everything that decides what happens is here,
//! so every backend behaves the same and every transition is testable without I/O. A
//! shell that loses a compare-and-set race re-reads and calls these functions again.

mod approval;
mod call;
mod complete;
mod effect;
mod event;
mod generation;
mod lease;
mod model;
mod reconcile;
mod steps;
mod unknown;

pub use approval::{
    Executes, MAX_NOTE_CHARS, clean_note, decide_approval, decide_approval_noted, reset_breaker,
};
pub use call::{approved_claim_deadline, decide};
pub use complete::{Completion, complete_claim, heartbeat_claim, stale_claim};
pub use effect::{record_claim_effect, record_effect};
pub use lease::{claim_owner, claimed_by, lease_nonce};
pub use model::{
    Action, ApprovalDecision, CallRequest, Choice, Decision, EffectResult, ReconcileResult,
};
pub use reconcile::{absence_unproven, after_reconcile, after_sweep, dedupe_is_proof};
pub use steps::{
    approval_covers, arguments_frozen, drifted_arguments, outcome_of, standing_outcome,
};
