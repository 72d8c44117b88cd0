//! Completions from outside the gate's own execution (the two-phase API): strict
//! fences on generation, execution, state and lease, and the heartbeat that extends a
//! live lease.

use jiff::Timestamp;
use serde_json::json;

use super::effect::{Reporter, record_reported, settle_reported};
use super::event::Event;
use super::lease::{lease_nonce, nonce_holds};
use super::model::{Action, Decision, EffectResult};
use super::steps::{outcome_of, standing_outcome};
use crate::audit::AuditKind;
use crate::codes::Code;
use crate::config::Capability;
use crate::intent::{IntentRecord, IntentState, Outcome, Reason, Status};

/// What a completion of a claim from outside the gate's own execution does (see
/// [`complete_claim`]).
#[derive(Clone, Debug)]
pub enum Completion {
    /// The claim still holds the intent: commit this (its outcome is the answer).
    Record(Decision),
    /// This claim's completion with the same result was recorded already (a client
    /// retrying its own complete): answer what was recorded, write nothing.
    Recorded(Outcome),
    /// The claim no longer holds the intent: record nothing (`OG-0024`). When it reports
    /// an effect the intent does not record, `evidence` is an audit event to append
    /// (the intent unchanged): the provider may hold an effect a human must look at.
    Stale(Reason, Option<Decision>),
}

/// Why the claim `(generation, execution, nonce)` no longer holds `record` at `now`, or
/// `None` while it does: the intent is in flight for exactly that execution, under the
/// lease that claim took (its [`lease_nonce`]), and the lease has not expired. The nonce
/// is what keeps anyone who can count executions from completing a claim they do not
/// hold (the gate's own executions included: their nonce never leaves the process).
pub fn stale_claim(
    record: &IntentRecord,
    generation: u32,
    execution: u32,
    nonce: &str,
    now: Timestamp,
) -> Option<Reason> {
    let why = if record.generation != generation {
        format!(
            "the claim is for generation {generation}; the intent is at generation {} now",
            record.generation
        )
    } else if execution > record.executions {
        format!(
            "the intent has had {} execution(s); no claim holds execution {execution}",
            record.executions
        )
    } else if record.executions != execution {
        format!(
            "execution {execution} was superseded by execution {} of this intent",
            record.executions
        )
    } else if record.state != IntentState::InFlight {
        format!(
            "the intent is {} now; this claim no longer holds it",
            record.state.as_str()
        )
    } else {
        match &record.lease {
            Some(lease) if !nonce_holds(lease_nonce(&lease.owner), nonce) => {
                "the token does not name the claim that holds this execution".to_owned()
            }
            Some(lease) if now < lease.expires_at => return None,
            Some(lease) => format!("the claim's lease expired at {}", lease.expires_at),
            None => "the claim holds no lease".to_owned(),
        }
    };
    Some(Reason::new(
        Code::StaleClaim,
        format!("{why}; nothing was recorded (the intent is reconciled like any other)"),
    ))
}

/// A completion from outside: what the holder of the claim `(generation, execution)`
/// says its execution did. Strict, unlike [`super::record_claim_effect`] (the gate's own
/// executions, whose late answers are still the truth): a claim that was superseded,
/// whose lease expired by `now`, or whose intent is no longer in flight for it records
/// nothing, whatever it says, so a worker that stalled past its lease can never
/// overwrite what the sweep or another attempt recorded. A repeat of the completion
/// that was recorded (the same execution, the intent settled exactly as this result
/// settles it) answers what was recorded.
#[expect(
    clippy::too_many_arguments,
    reason = "the claim's fence (generation, execution, nonce) travels as plain values"
)]
pub fn complete_claim(
    record: &IntentRecord,
    generation: u32,
    execution: u32,
    nonce: &str,
    result: EffectResult,
    cap: &Capability,
    actor: &str,
    now: Timestamp,
) -> Completion {
    let Some(stale) = stale_claim(record, generation, execution, nonce, now) else {
        return Completion::Record(record_reported(
            record,
            execution,
            result,
            cap,
            actor,
            now,
            Reporter::Worker,
        ));
    };
    if record.generation == generation
        && record.executions == execution
        && record.state != IntentState::InFlight
    {
        // Would this result have written the record as it stands? Then it did.
        let mut probe = record.clone();
        let status = settle_reported(&mut probe, &result, cap, Reporter::Worker, now);
        let same = probe.state == record.state
            && probe.effect_ref == record.effect_ref
            && probe.result == record.result
            && probe.error == record.error;
        if same {
            return Completion::Recorded(outcome_of(record, status, None));
        }
    }
    let evidence = match &result {
        EffectResult::Applied { effect_ref, .. }
            if record.state != IntentState::Applied || record.effect_ref != *effect_ref =>
        {
            let outcome = standing_outcome(record);
            let detail = json!({"stale_completion": {"generation": generation, "execution": execution, "effect_ref": effect_ref, "why": stale.message}});
            let event = Event::about(AuditKind::Effect, record, cap, actor, now);
            Some(event.nothing_written(Action::Respond, outcome, detail))
        }
        _ => None,
    };
    Completion::Stale(stale, evidence)
}

/// A heartbeat of the claim `(generation, execution)`: a live lease runs on to `now`
/// plus the capability's lease (never shorter than it was). `Err`: the claim is stale
/// (see [`stale_claim`]) and nothing is written.
pub fn heartbeat_claim(
    record: &IntentRecord,
    generation: u32,
    execution: u32,
    nonce: &str,
    cap: &Capability,
    actor: &str,
    now: Timestamp,
) -> Result<Decision, Reason> {
    if let Some(stale) = stale_claim(record, generation, execution, nonce, now) {
        return Err(stale);
    }
    let mut next = record.clone();
    next.updated_at = now;
    if let Some(lease) = next.lease.as_mut() {
        lease.expires_at = lease.expires_at.max(now + cap.lease);
    }
    let outcome = outcome_of(&next, Status::InFlight, None);
    let expires_at = next.lease.as_ref().map(|l| l.expires_at);
    let detail = json!({"heartbeat": {"execution": execution, "lease_expires_at": expires_at}});
    let event = Event::about(AuditKind::Effect, record, cap, actor, now);
    Ok(event.writing(Action::Respond, next, None, outcome, detail))
}
