//! Running a duplicate rule: the effects ledger (the applied intents of the
//! capability, read from the intent table, no second copy), the upstream's own listing
//! when the capability declares one, `oncegate_core::detect::find`, and each finding
//! recorded once (its id is derived from what was found: a finding already stored is
//! a lost compare-and-set, nothing more), with its hold in the same commit.

use std::collections::HashSet;

use jiff::{SignedDuration, Timestamp};
use oncegate_core::audit::{AuditEvent, AuditKind};
use oncegate_core::codes::Code;
use oncegate_core::config::{Capability, Escalation, HoldOn};
use oncegate_core::detect::{Effect, FindingKind, Found, Seen, find, member_of};
use oncegate_core::intent::IntentState;
use oncegate_core::key::{IntentKey, normalise_arguments};
use serde_json::{Value, json};

use oncegate_store::{
    Commit, FindingRow, IntentFilter, IntentsRead, IntentsWrite, KillSwitchChange, LimitsRead,
    PageAfter, StoreError,
};

use crate::gate::Gate;
use crate::limits::hold_target;

/// The most applied intents one run reads per capability (newest first).
const LEDGER_READ: u32 = 100_000;
/// The most stored findings (newest first) a run reads to learn which effects were
/// reported already.
const REPORTED_READ: u32 = 10_000;

/// One effect the upstream lists: its reference, the key it saw, when, and the call
/// arguments it corresponds to (the listing's mapping applied).
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamEffect {
    /// The upstream's reference.
    pub effect_ref: String,
    /// The idempotency key it received, if it records one.
    pub key: Option<String>,
    /// When it took effect.
    pub at: Timestamp,
    /// The call arguments (normalised by the key recipe before comparing).
    pub arguments: Value,
}

/// What one run of a rule did.
#[derive(Clone, Debug, Default)]
pub struct DetectRun {
    /// Effects compared (ledger and upstream-only).
    pub compared: usize,
    /// Findings raised by this run (each raised once, ever).
    pub raised: Vec<Value>,
    /// The ids of findings this run found again (raised before).
    pub known: Vec<String>,
}

impl Gate {
    /// Runs `capability`'s duplicate rule over the effects since `since`, with the
    /// upstream's listing of the same span (empty without one), and records what is
    /// new. Each finding is recorded with its audit event and, for `hold` rules, its
    /// hold, in one commit.
    pub async fn detect(
        &self,
        capability: &str,
        since: Timestamp,
        upstream: Vec<UpstreamEffect>,
    ) -> Result<DetectRun, StoreError> {
        let Some(cap) = self.registry.capability(capability).cloned() else {
            return Ok(DetectRun::default());
        };
        let Some(rule) = cap.duplicates.clone() else {
            return Ok(DetectRun::default());
        };
        let mut effects = self.ledger_effects(&cap, rule.within, since).await?;
        self.add_upstream_effects(&cap, &mut effects, upstream)
            .await?;
        let mut run = DetectRun {
            compared: effects.len(),
            ..DetectRun::default()
        };
        let mut reported: Option<HashSet<String>> = None;
        for found in find(&rule, &effects) {
            // Only what involves an effect since `since` (older groups were the
            // business of earlier runs).
            if found.effects.iter().all(|e| e.at < since) {
                continue;
            }
            // A group whose effects earlier findings already named (a wider `since`
            // joins what two scheduled runs found apart) is nothing new: raising it
            // would alert again and put back a hold an admin cleared.
            if reported.is_none() {
                reported = Some(self.reported_effects(&rule.name).await?);
            }
            if reported
                .as_ref()
                .is_some_and(|r| found.effects.iter().all(|e| r.contains(&e.member())))
            {
                run.known.push(found.id(&rule.name));
                continue;
            }
            match self.raise(&cap, &found).await? {
                Some(finding) => run.raised.push(finding),
                None => run.known.push(found.id(&rule.name)),
            }
        }
        Ok(run)
    }

    /// The ledger's side of a detection run: applied intents of `cap`, with a window's
    /// margin (`within`) before `since` so an effect just after `since` meets its twin
    /// just before it.
    async fn ledger_effects(
        &self,
        cap: &Capability,
        within: SignedDuration,
        since: Timestamp,
    ) -> Result<Vec<Effect>, StoreError> {
        let from = since.checked_sub(within).unwrap_or(Timestamp::MIN);
        let listing = self
            .store
            .list_intents(&IntentFilter {
                state: Some(IntentState::Applied),
                capability: Some(cap.name.clone()),
                breaker_tripped: false,
                limit: LEDGER_READ,
                oldest_first: false,
                updated_since: Some(from),
                ..IntentFilter::default()
            })
            .await?;
        Ok(listing
            .items
            .iter()
            .filter(|r| r.updated_at >= from)
            .map(|r| Effect {
                seen: Seen::Oncegate,
                intent_key: Some(r.key.to_string()),
                generation: Some(r.generation),
                effect_ref: r.effect_ref.clone(),
                principal: Some(r.principal.clone()),
                run_id: r.run_id.clone(),
                business_ref: r.business_ref.clone(),
                normalised: r.normalised.as_object().cloned().unwrap_or_default(),
                at: r.settled_at.unwrap_or(r.updated_at),
                unreadable: None,
            })
            .collect())
    }

    /// Adds the upstream's listing to `effects`: an effect behind one of oncegate's
    /// intents joins as oncegate's, any other as a possible bypass. A second effect
    /// under one intent's key raises a doubt on the provider.
    async fn add_upstream_effects(
        &self,
        cap: &Capability,
        effects: &mut Vec<Effect>,
        upstream: Vec<UpstreamEffect>,
    ) -> Result<(), StoreError> {
        // Evidence of effects the upstream made twice under one intent's key.
        let mut twins = Vec::new();
        for u in upstream {
            if effects
                .iter()
                .any(|e| e.effect_ref.as_deref() == Some(u.effect_ref.as_str()))
            {
                continue; // The ledger's own effect, as the upstream lists it.
            }
            if let Some(e) = self.intent_behind(&u).await? {
                // Oncegate's execution (an intent the upstream committed while
                // oncegate still waits for its answer): not a bypass. But a second
                // effect under one intent's key is a provider that ignored the key.
                match effects
                    .iter()
                    .find(|x| x.intent_key == e.intent_key && x.generation == e.generation)
                {
                    None => effects.push(e),
                    Some(twin) => {
                        if let Some(known) = &twin.effect_ref {
                            twins.push(json!({
                                "seen": "detection",
                                "intent_key": e.intent_key,
                                "generation": e.generation,
                                "effects": [known, u.effect_ref],
                            }));
                        }
                    }
                }
                continue;
            }
            let (business_ref, normalised, unreadable) =
                match normalise_arguments(cap, &u.arguments) {
                    Ok((b, n)) => (b, n, None),
                    Err(e) => (None, Default::default(), Some(e.to_string())),
                };
            effects.push(Effect {
                seen: Seen::Upstream,
                intent_key: None,
                generation: None,
                effect_ref: Some(u.effect_ref),
                principal: None,
                run_id: None,
                business_ref,
                normalised,
                at: u.at,
                unreadable,
            });
        }
        if let Some(evidence) = twins.into_iter().next()
            && oncegate_core::decide::dedupe_is_proof(cap)
        {
            self.raise_doubt(
                &cap.name,
                crate::doubts::Doubt::KeysIgnored,
                "detection",
                evidence,
            )
            .await?;
        }
        Ok(())
    }

    /// Every effect the stored findings of `rule` name ([`Effect::member`]s).
    async fn reported_effects(&self, rule: &str) -> Result<HashSet<String>, StoreError> {
        let mut members = HashSet::new();
        for f in self.store.findings(REPORTED_READ, None).await? {
            if f.rule != rule {
                continue;
            }
            let body: Value = serde_json::from_str(&f.body)
                .map_err(|e| StoreError::Corrupt(format!("finding {}: {e}", f.id)))?;
            if let Some(effects) = body.get("effects").and_then(Value::as_array) {
                members.extend(effects.iter().filter_map(member_of));
            }
        }
        Ok(members)
    }

    /// The intent an upstream effect's key names, if oncegate has it (any state).
    async fn intent_behind(&self, u: &UpstreamEffect) -> Result<Option<Effect>, StoreError> {
        let Some(key) = u.key.as_deref().filter(|k| !k.is_empty()) else {
            return Ok(None);
        };
        let (hex, generation) = match key.rsplit_once("-g") {
            Some((hex, g)) => match g.parse::<u32>() {
                Ok(g) => (hex, g),
                Err(_) => (key, 1),
            },
            None => (key, 1),
        };
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let record = self
            .store
            .load_generation(&IntentKey::from_hex(hex.to_owned()), generation)
            .await?;
        Ok(record.map(|r| Effect {
            seen: Seen::Oncegate,
            intent_key: Some(r.key.to_string()),
            generation: Some(r.generation),
            effect_ref: Some(u.effect_ref.clone()),
            principal: Some(r.principal.clone()),
            run_id: r.run_id.clone(),
            business_ref: r.business_ref.clone(),
            normalised: r.normalised.as_object().cloned().unwrap_or_default(),
            at: u.at,
            unreadable: None,
        }))
    }

    /// Records one finding (and its hold) unless it was raised before.
    async fn raise(&self, cap: &Capability, found: &Found) -> Result<Option<Value>, StoreError> {
        let rule = cap.duplicates.as_ref().expect("detect runs rules only");
        let now = self.clock.now();
        let id = found.id(&rule.name);
        let hold = match rule.escalation {
            Escalation::Alert => None,
            Escalation::Hold => {
                let first = found.effects.first();
                let value = match &rule.hold {
                    HoldOn::Capability => None,
                    HoldOn::BusinessRef => first
                        .and_then(|e| e.business_ref.clone())
                        .map(Value::String),
                    HoldOn::Arg(a) => first.and_then(|e| e.normalised.get(a).cloned()),
                };
                // A hold on a value the effect does not have would hold nothing: hold
                // the capability instead.
                let on = if value.is_none() {
                    HoldOn::Capability
                } else {
                    rule.hold.clone()
                };
                Some((hold_target(&cap.name, &on, value.as_ref()), on, value))
            }
        };
        let kind = match found.kind {
            FindingKind::Duplicate => "duplicate",
            FindingKind::Bypass => "bypass",
        };
        let hold_id = hold
            .as_ref()
            .map(|(target, _, _)| crate::limits::hold_id(target));
        let finding = json!({
            "id": id,
            "rule": rule.name,
            "capability": cap.name,
            "kind": kind,
            "on": found.on,
            "effects": found.effects,
            "escalation": rule.escalation,
            "hold_id": hold_id,
            "raised_at": now,
        });
        let reason = format!(
            "{kind} {} ({id}): {} effects on {}",
            cap.name,
            found.effects.len(),
            oncegate_core::key::canonical_json_of(&found.on)
        );
        let event = AuditEvent {
            at: now,
            kind: AuditKind::Admin,
            key: None,
            generation: 0,
            capability: Some(cap.name.clone()),
            actor: "detection".to_owned(),
            run_id: None,
            from: None,
            to: None,
            status: None,
            code: hold.as_ref().map(|_| Code::Held),
            detail: json!({"finding": id, "finding_kind": kind, "hold": hold.as_ref().map(|h| &h.0), "hold_id": hold_id}),
        };
        let mut commit = Commit::event(event);
        commit.finding = Some(FindingRow {
            id: id.clone(),
            rule: rule.name.clone(),
            raised_at: now,
            body: finding.to_string(),
            delivered_at: None,
            attempts: 0,
            next_attempt_at: Some(now),
            problem: None,
        });
        if let Some((target, _, _)) = &hold {
            commit.kill_switch = Some(KillSwitchChange {
                target: target.clone(),
                reason: Some(reason.clone()),
                actor: "detection".to_owned(),
                at: now,
            });
        }
        match self.store.commit(commit).await {
            Ok(()) => {}
            Err(StoreError::Conflict) => return Ok(None),
            Err(e) => return Err(e),
        }
        if let Some((target, _, _)) = &hold {
            self.kill_switches.changed(target, Some(&reason));
        }
        metrics::counter!("oncegate_findings_total", "rule" => rule.name.clone(), "kind" => kind)
            .increment(1);
        tracing::warn!(
            alert = "finding",
            finding = %id,
            rule = %rule.name,
            kind,
            effects = found.effects.len(),
            hold = hold_id.as_deref().unwrap_or("-"),
            "detection found {kind} effects"
        );
        Ok(Some(finding))
    }

    /// Stored findings, newest first.
    pub async fn findings(&self, limit: u32) -> Result<Vec<Value>, StoreError> {
        Ok(self.findings_page(limit, None).await?.0)
    }

    /// One page of the stored findings, newest first: at most `limit` after `after`,
    /// and where the next page starts when more remain.
    pub async fn findings_page(
        &self,
        limit: u32,
        after: Option<&PageAfter>,
    ) -> Result<(Vec<Value>, Option<PageAfter>), StoreError> {
        let limit = limit.max(1);
        let mut rows = self.store.findings(limit.saturating_add(1), after).await?;
        let next = (rows.len() > limit as usize).then(|| {
            rows.truncate(limit as usize);
            PageAfter::of_finding(&rows[rows.len() - 1])
        });
        let page = rows
            .into_iter()
            .map(|f| {
                let mut body: Value = serde_json::from_str(&f.body)
                    .map_err(|e| StoreError::Corrupt(format!("finding {}: {e}", f.id)))?;
                if let Value::Object(b) = &mut body {
                    b.insert("delivered_at".into(), json!(f.delivered_at));
                    b.insert("delivery_attempts".into(), json!(f.attempts));
                    if let Some(problem) = &f.problem {
                        b.insert("unreadable".into(), json!(problem));
                    }
                }
                Ok(body)
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok((page, next))
    }
}
