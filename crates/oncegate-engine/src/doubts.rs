//! What a provider was seen to fail at, kept until an admin clears it: a reconciliation
//! read that did not find an effect oncegate knows was applied (its "not found" then
//! proves nothing), and idempotency keys that were not honoured (the capability is then
//! treated as `non_idempotent`).
//!
//! A doubt is stored beside the kill switches (target `reconciliation-unproven:<cap>`
//! or `keys-ignored:<cap>`), written with its audit event and its finding in one commit,
//! read through the same cache (at most 500 ms old on every replica; unreadable: a
//! consequential call fails closed, and a read's "not found" counts as nothing), and
//! cleared by an admin with an audited commit.

use std::sync::Arc;

use jiff::Timestamp;
use oncegate_core::audit::{AuditEvent, AuditKind};
use oncegate_core::config::{Capability, Category, OnUnknown, Role};
use oncegate_core::decide::{self, EffectResult, ReconcileResult};
use oncegate_core::intent::{IntentRecord, IntentState};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use oncegate_store::{Commit, FindingRow, IntentsWrite, KillSwitchChange, SharedRead, StoreError};

use crate::error::GateError;
use crate::gate::Gate;
use crate::kill_switches::Switches;
use crate::who::Who;

/// What a provider failed to prove.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Doubt {
    /// The reconciliation read did not find an effect oncegate knows was applied: its
    /// "not found" is not absence.
    ReconciliationUnproven,
    /// A re-execution with the same key made a second effect: the provider does not
    /// honour idempotency keys, and the capability is treated as `non_idempotent`.
    KeysIgnored,
}

impl Doubt {
    /// Both doubts.
    pub const ALL: [Doubt; 2] = [Doubt::ReconciliationUnproven, Doubt::KeysIgnored];

    /// The name in the API, the CLI, alerts and findings.
    pub fn as_str(self) -> &'static str {
        match self {
            Doubt::ReconciliationUnproven => "reconciliation_unproven",
            Doubt::KeysIgnored => "keys_ignored",
        }
    }

    /// Reads [`Doubt::as_str`] back.
    pub fn parse(name: &str) -> Option<Doubt> {
        Doubt::ALL.into_iter().find(|d| d.as_str() == name)
    }

    fn prefix(self) -> &'static str {
        match self {
            Doubt::ReconciliationUnproven => "reconciliation-unproven:",
            Doubt::KeysIgnored => "keys-ignored:",
        }
    }

    /// The stored target of this doubt about `capability`.
    fn target(self, capability: &str) -> String {
        format!("{}{capability}", self.prefix())
    }

    /// What it means, for a log line, a finding and an approval's reason.
    fn explain(self, capability: &str) -> String {
        match self {
            Doubt::ReconciliationUnproven => format!(
                "the reconciliation read of {capability} did not find an effect oncegate knows was applied: its \"not found\" cannot prove absence until an admin clears this"
            ),
            Doubt::KeysIgnored => format!(
                "the provider does not honour idempotency keys for {capability}: treated as non_idempotent (repeats wait for the settle horizon) until an admin clears this"
            ),
        }
    }
}

/// A doubt as listed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Doubted {
    /// The capability.
    pub capability: String,
    /// What its provider failed at.
    pub doubt: Doubt,
    /// What was seen (the evidence, in words).
    pub reason: String,
    /// Who noticed (`oncegate-sweep`, `oncegate`, `detection`).
    pub set_by: String,
    /// When.
    pub set_at: Timestamp,
}

/// Reads a stored target back, if it is a doubt.
fn parse_target(target: &str) -> Option<(Doubt, &str)> {
    Doubt::ALL
        .into_iter()
        .find_map(|d| target.strip_prefix(d.prefix()).map(|cap| (d, cap)))
}

/// Whether a stored target is a doubt (the kill-switch listing leaves them out).
pub(crate) fn is_doubt(target: &str) -> bool {
    parse_target(target).is_some()
}

/// The doubts on one capability, from the switch cache.
#[derive(Clone, Debug, Default)]
pub(crate) struct Doubts {
    /// Why its reconciliation read's "not found" proves nothing.
    pub(crate) read_unproven: Option<String>,
    /// Why its provider is not trusted with keys.
    pub(crate) keys_ignored: Option<String>,
}

impl Doubts {
    fn of(switches: &Switches, capability: &str) -> Self {
        let get = |d: Doubt| switches.get(&d.target(capability)).cloned();
        Self {
            read_unproven: get(Doubt::ReconciliationUnproven),
            keys_ignored: get(Doubt::KeysIgnored),
        }
    }

    /// When the switches cannot be read: nothing the provider says is trusted.
    fn unreadable(e: &StoreError) -> Self {
        let why = format!("the stored doubts cannot be read ({e})");
        Self {
            read_unproven: Some(why.clone()),
            keys_ignored: Some(why),
        }
    }

    /// `cap` as the gate treats it: a provider that ignores keys makes a `keyed` or
    /// `idempotent_write` capability `non_idempotent` (a repeat waits for the settle
    /// horizon before "not found" counts; an `on_unknown = "retry"`, which
    /// `non_idempotent` forbids, reads the provider when it can and asks a human
    /// otherwise).
    pub(crate) fn applied_to(&self, cap: Arc<Capability>) -> Arc<Capability> {
        if self.keys_ignored.is_none() || !decide::dedupe_is_proof(&cap) {
            return cap;
        }
        let mut downgraded = (*cap).clone();
        downgraded.category = Category::NonIdempotent;
        if downgraded.on_unknown == OnUnknown::Retry {
            downgraded.on_unknown = if downgraded.reconcile.is_some() {
                OnUnknown::Reconcile
            } else {
                OnUnknown::Escalate
            };
        }
        Arc::new(downgraded)
    }

    /// A reconciliation read's answer as far as it can be trusted: an unproven read's
    /// "not found" proves nothing (the intent stays unknown, or goes to a human).
    pub(crate) fn weigh(&self, answer: ReconcileResult) -> ReconcileResult {
        match (answer, &self.read_unproven) {
            (ReconcileResult::NotFound, Some(why)) => ReconcileResult::Undecidable {
                message: format!("the upstream has no record of the effect, but {why}"),
            },
            (answer, _) => answer,
        }
    }
}

/// The effect an execution of `record`'s generation answered, when the intent already
/// records another one: `(known, new)`. Every execution of a generation sends the same
/// key, so a provider that honours it answers the first effect again.
fn second_effect(record: &IntentRecord, result: &EffectResult) -> Option<(String, String)> {
    match (record.state, record.effect_ref.as_deref(), result) {
        (
            IntentState::Applied,
            Some(known),
            EffectResult::Applied {
                effect_ref: Some(new),
                ..
            },
        ) if known != new => Some((known.to_owned(), new.clone())),
        _ => None,
    }
}

impl Gate {
    /// An execution's answer, recorded (or refused as stale) against `record`: when
    /// the intent already knew another effect and its capability is `keyed` or
    /// `idempotent_write` by the registry, the provider ignored the key. Raises the
    /// doubt (failures are logged: the evidence is in the audit chain already).
    pub(crate) async fn notice_second_effect(
        &self,
        record: &IntentRecord,
        result: &EffectResult,
        execution: u32,
        actor: &str,
    ) {
        let Some((known, new)) = second_effect(record, result) else {
            return;
        };
        let trusted_with_keys = self
            .settling_capability(&record.capability)
            .is_some_and(|cap| decide::dedupe_is_proof(&cap));
        if !trusted_with_keys {
            return;
        }
        let evidence = json!({
            "seen": "re-execution",
            "intent_key": record.key.to_string(),
            "generation": record.generation,
            "execution": execution,
            "effects": [known, new],
            "reported_by": actor,
        });
        if let Err(e) = self
            .raise_doubt(&record.capability, Doubt::KeysIgnored, "oncegate", evidence)
            .await
        {
            tracing::error!(capability = %record.capability, error = %e, "the doubt could not be recorded");
        }
    }

    /// The doubts on `capability` (from the switch cache; unreadable: every doubt on).
    pub(crate) async fn doubts_on(&self, capability: &str) -> Result<Doubts, Doubts> {
        let clock = self.clock.clone();
        match self
            .kill_switches
            .current(&self.store, || clock.now())
            .await
        {
            Ok(switches) => Ok(Doubts::of(&switches, capability)),
            Err(stale) => Err(Doubts::unreadable(&stale.error)),
        }
    }

    /// The doubts on `capability`, or a store error when they cannot be read.
    pub(crate) async fn doubts_or_error(
        &self,
        capability: &str,
    ) -> Result<Doubts, Arc<StoreError>> {
        let clock = self.clock.clone();
        self.kill_switches
            .current(&self.store, || clock.now())
            .await
            .map(|switches| Doubts::of(&switches, capability))
            .map_err(|stale| stale.error)
    }

    /// Records that `capability`'s provider failed at `doubt`, with the evidence: the
    /// doubt, its finding and its audit event in one commit, then an alert line and a
    /// metric. A doubt already on is left as it is (the evidence is still logged).
    /// Answers whether this call placed it.
    pub(crate) async fn raise_doubt(
        &self,
        capability: &str,
        doubt: Doubt,
        actor: &str,
        evidence: Value,
    ) -> Result<bool, StoreError> {
        let target = doubt.target(capability);
        let explained = doubt.explain(capability);
        metrics::counter!("oncegate_provider_doubts_total", "capability" => capability.to_owned(), "doubt" => doubt.as_str()).increment(1);
        tracing::error!(alert = doubt.as_str(), capability, evidence = %evidence, "{explained}");
        if let Ok(d) = self.doubts_or_error(capability).await {
            let on = match doubt {
                Doubt::ReconciliationUnproven => d.read_unproven.is_some(),
                Doubt::KeysIgnored => d.keys_ignored.is_some(),
            };
            if on {
                return Ok(false);
            }
        }
        let now = self.clock.now();
        let id = format!(
            "f_{}",
            &hex::encode(Sha256::digest(format!("{target}\n{evidence}").as_bytes()))[..16]
        );
        let finding = json!({
            "id": id,
            "rule": doubt.as_str(),
            "capability": capability,
            "kind": doubt.as_str(),
            "on": {"capability": capability},
            "effects": evidence.get("effects").cloned().unwrap_or(json!([])),
            "evidence": evidence,
            "escalation": "doubt",
            "summary": explained,
            "raised_at": now,
        });
        let mut commit = Commit::event(doubt_event(
            now,
            actor,
            capability,
            doubt,
            true,
            &explained,
            json!({"finding": id, "evidence": evidence}),
        ));
        commit.finding = Some(FindingRow {
            id,
            rule: doubt.as_str().to_owned(),
            raised_at: now,
            body: finding.to_string(),
            delivered_at: None,
            attempts: 0,
            next_attempt_at: Some(now),
            problem: None,
        });
        commit.kill_switch = Some(KillSwitchChange {
            target: target.clone(),
            reason: Some(explained.clone()),
            actor: actor.to_owned(),
            at: now,
        });
        match self.store.commit(commit).await {
            Ok(()) => {}
            // The same finding is stored already: another replica saw the same evidence.
            Err(StoreError::Conflict) => return Ok(false),
            Err(e) => return Err(e),
        }
        self.kill_switches.changed(&target, Some(&explained));
        Ok(true)
    }

    /// The doubts that are on (read from the store).
    pub async fn doubts(&self) -> Result<Vec<Doubted>, StoreError> {
        Ok(self
            .store
            .kill_switches()
            .await?
            .into_iter()
            .filter_map(|s| {
                let (doubt, capability) = parse_target(&s.target)?;
                Some(Doubted {
                    capability: capability.to_owned(),
                    doubt,
                    reason: s.reason,
                    set_by: s.set_by,
                    set_at: s.set_at,
                })
            })
            .collect())
    }

    /// An admin clears a doubt (audited with `reason`): the capability's reads, or its
    /// keys, are trusted again. `Ok(None)` if that doubt is not on.
    pub async fn clear_doubt<'a>(
        &self,
        actor: impl Into<Who<'a>>,
        capability: &str,
        doubt: Doubt,
        reason: &str,
    ) -> Result<Option<Doubted>, GateError> {
        let who = actor.into();
        if self.role_of(who)? != Role::Admin {
            return Err(GateError::Forbidden("only admins clear doubts".into()));
        }
        let Some(on) = self
            .doubts()
            .await?
            .into_iter()
            .find(|d| d.capability == capability && d.doubt == doubt)
        else {
            return Ok(None);
        };
        let target = doubt.target(capability);
        let now = self.clock.now();
        let mut commit = Commit::event(doubt_event(
            now,
            who.name(),
            capability,
            doubt,
            false,
            reason,
            json!({"was": on.reason}),
        ));
        commit.kill_switch = Some(KillSwitchChange {
            target: target.clone(),
            reason: None,
            actor: who.name().to_owned(),
            at: now,
        });
        self.store.commit(commit).await?;
        self.kill_switches.changed(&target, None);
        tracing::warn!(
            capability,
            doubt = doubt.as_str(),
            by = who.name(),
            reason,
            "doubt cleared by an admin"
        );
        Ok(Some(on))
    }
}

/// The audit event of a doubt raised or cleared.
fn doubt_event(
    at: Timestamp,
    actor: &str,
    capability: &str,
    doubt: Doubt,
    on: bool,
    reason: &str,
    extra: Value,
) -> AuditEvent {
    let mut detail = json!({"doubt": doubt.as_str(), "on": on, "reason": reason});
    if let (Value::Object(d), Value::Object(e)) = (&mut detail, extra) {
        d.extend(e);
    }
    AuditEvent {
        at,
        kind: AuditKind::Admin,
        key: None,
        generation: 0,
        capability: Some(capability.to_owned()),
        actor: actor.to_owned(),
        run_id: None,
        from: None,
        to: None,
        status: None,
        code: None,
        detail,
    }
}
