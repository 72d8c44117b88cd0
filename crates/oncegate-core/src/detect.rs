//! The detection backstop's logic: which effects one duplicate rule calls the same
//! intent carried out twice, and which effects the upstream lists that never passed
//! through oncegate. Pure: the engine reads the ledger (applied intents) and the
//! upstream's listing, and records what this returns.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::canonical::canonical_json_of;
use crate::config::{DuplicateRule, MatchOn};

/// Where an effect was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Seen {
    /// An intent oncegate recorded (applied, or one whose execution the upstream
    /// lists while oncegate still waits for its answer).
    Oncegate,
    /// Only in the upstream's listing: it never passed through oncegate.
    Upstream,
}

/// One effect as detection compares it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Effect {
    /// Where it was seen.
    pub seen: Seen,
    /// The intent (oncegate effects).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent_key: Option<String>,
    /// Its generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u32>,
    /// The upstream's reference.
    pub effect_ref: Option<String>,
    /// Who issued it (oncegate effects).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The normalised business reference.
    pub business_ref: Option<String>,
    /// The normalised significant arguments.
    pub normalised: Map<String, Value>,
    /// When it took effect.
    pub at: Timestamp,
    /// Why its arguments could not be normalised (an upstream effect whose fields do
    /// not fit the key recipe: reported, never compared).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

impl Effect {
    /// The effect's identity among findings: its intent and generation, else the
    /// upstream's reference.
    pub fn member(&self) -> String {
        member(
            self.intent_key.as_deref(),
            self.generation,
            self.effect_ref.as_deref(),
            self.at,
        )
    }
}

fn member(
    key: Option<&str>,
    generation: Option<u32>,
    effect_ref: Option<&str>,
    at: Timestamp,
) -> String {
    match (key, effect_ref) {
        (Some(k), _) => format!("i:{k}:{}", generation.unwrap_or(1)),
        (None, Some(r)) => format!("u:{r}"),
        (None, None) => format!("t:{at}"),
    }
}

/// [`Effect::member`] of an effect as a stored finding's body spells it (`None` if
/// the JSON is not an effect).
pub fn member_of(stored: &Value) -> Option<String> {
    let at = stored.get("at")?.as_str()?.parse::<Timestamp>().ok()?;
    Some(member(
        stored.get("intent_key").and_then(Value::as_str),
        stored
            .get("generation")
            .and_then(Value::as_u64)
            .and_then(|g| u32::try_from(g).ok()),
        stored.get("effect_ref").and_then(Value::as_str),
        at,
    ))
}

/// What a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Two or more oncegate effects the rule calls one intent.
    Duplicate,
    /// An effect that never passed through oncegate (alone, or duplicating others).
    Bypass,
}

/// One thing found, before it is recorded.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Found {
    /// What it is.
    pub kind: FindingKind,
    /// The values the effects agree on (the rule's `on`), empty for a lone bypass
    /// whose arguments could not be read.
    pub on: Map<String, Value>,
    /// The effects, oldest first.
    pub effects: Vec<Effect>,
}

impl Found {
    /// The finding's id: the rule, the kind and the effects' identities, so the same
    /// effects found again (every run of the rule) are the same finding.
    pub fn id(&self, rule: &str) -> String {
        let mut members: Vec<String> = self.effects.iter().map(Effect::member).collect();
        members.sort();
        let text = canonical_json_of(&(rule, self.kind, members));
        format!("f_{}", &hex::encode(Sha256::digest(text.as_bytes()))[..20])
    }
}

/// The rule's values of one effect, or `None` if it lacks one (it cannot be compared).
fn values(rule: &DuplicateRule, e: &Effect) -> Option<Map<String, Value>> {
    let mut out = Map::new();
    for on in &rule.on {
        let v = match on {
            MatchOn::BusinessRef => Value::String(e.business_ref.clone()?),
            MatchOn::Arg(a) => e.normalised.get(a)?.clone(),
        };
        out.insert(on.name().to_owned(), v);
    }
    Some(out)
}

/// Everything `rule` finds among `effects`: effects that agree on every value the rule
/// compares and lie within `within` of the previous one form a group; a group of two
/// or more is a finding (a bypass if any member was seen only upstream). An upstream
/// effect in no such group is a bypass finding of its own.
pub fn find(rule: &DuplicateRule, effects: &[Effect]) -> Vec<Found> {
    let mut groups: BTreeMap<String, (Map<String, Value>, Vec<&Effect>)> = BTreeMap::new();
    let mut lone = Vec::new();
    for e in effects {
        match values(rule, e).filter(|_| e.unreadable.is_none()) {
            Some(v) => {
                let key = canonical_json_of(&v);
                groups
                    .entry(key)
                    .or_insert_with(|| (v, Vec::new()))
                    .1
                    .push(e);
            }
            None if e.seen == Seen::Upstream => lone.push(e),
            None => {}
        }
    }
    let mut found = Vec::new();
    for (_, (on, mut members)) in groups {
        members.sort_by(|a, b| a.at.cmp(&b.at).then(a.effect_ref.cmp(&b.effect_ref)));
        let mut cluster: Vec<&Effect> = Vec::new();
        let on = &on;
        for e in members {
            if let Some(last) = cluster.last()
                && e.at.duration_since(last.at) > rule.within
            {
                flush(on, &mut cluster, &mut lone, &mut found);
            }
            cluster.push(e);
        }
        flush(on, &mut cluster, &mut lone, &mut found);
    }
    for e in lone {
        found.push(Found {
            kind: FindingKind::Bypass,
            on: values(rule, e).unwrap_or_default(),
            effects: vec![e.clone()],
        });
    }
    found
}

/// Ends one group: two or more effects are a finding; a lone upstream effect waits to
/// be reported alone.
fn flush<'a>(
    on: &Map<String, Value>,
    cluster: &mut Vec<&'a Effect>,
    lone: &mut Vec<&'a Effect>,
    found: &mut Vec<Found>,
) {
    let upstream = cluster.iter().any(|e| e.seen == Seen::Upstream);
    if cluster.len() >= 2 {
        found.push(Found {
            kind: if upstream {
                FindingKind::Bypass
            } else {
                FindingKind::Duplicate
            },
            on: on.clone(),
            effects: cluster.iter().map(|e| (*e).clone()).collect(),
        });
    } else if let [e] = cluster.as_slice()
        && e.seen == Seen::Upstream
    {
        lone.push(*e);
    }
    cluster.clear();
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;
    use serde_json::json;

    use super::*;
    use crate::config::{Escalation, HoldOn};

    fn rule() -> DuplicateRule {
        DuplicateRule {
            name: "charge_card".into(),
            on: vec![MatchOn::BusinessRef, MatchOn::Arg("amount".into())],
            within: SignedDuration::from_hours(24),
            every: SignedDuration::from_mins(15),
            escalation: Escalation::Hold,
            hold: HoldOn::BusinessRef,
        }
    }

    fn effect(seen: Seen, order: &str, minor: &str, hours: i64, id: &str) -> Effect {
        Effect {
            seen,
            intent_key: (seen == Seen::Oncegate).then(|| format!("k{id}")),
            generation: (seen == Seen::Oncegate).then_some(1),
            effect_ref: Some(id.into()),
            principal: None,
            run_id: None,
            business_ref: Some(order.into()),
            normalised: json!({"amount": {"currency": "USD", "minor": minor}})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            at: Timestamp::UNIX_EPOCH + SignedDuration::from_hours(hours),
            unreadable: None,
        }
    }

    #[test]
    fn distinct_effects_raise_nothing() {
        let effects = [
            effect(Seen::Oncegate, "A", "1250", 0, "1"),
            effect(Seen::Oncegate, "B", "1250", 0, "2"),
            effect(Seen::Oncegate, "A", "999", 1, "3"),
            // The same order and amount, but a day and more apart: a new purchase.
            effect(Seen::Oncegate, "A", "1250", 30, "4"),
        ];
        assert_eq!(find(&rule(), &effects), vec![]);
    }

    #[test]
    fn the_same_reference_and_amount_within_the_window_is_a_duplicate() {
        let effects = [
            effect(Seen::Oncegate, "A", "1250", 0, "1"),
            effect(Seen::Oncegate, "A", "1250", 5, "2"),
            effect(Seen::Oncegate, "B", "1", 5, "3"),
        ];
        let found = find(&rule(), &effects);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].kind, FindingKind::Duplicate);
        assert_eq!(found[0].effects.len(), 2);
        assert_eq!(found[0].on["business_ref"], "A");
        // Found again, it is the same finding.
        assert_eq!(
            found[0].id("charge_card"),
            find(&rule(), &effects)[0].id("charge_card")
        );
        assert_ne!(found[0].id("charge_card"), found[0].id("other"));
    }

    #[test]
    fn an_upstream_only_effect_is_a_bypass_alone_or_duplicating() {
        let effects = [
            effect(Seen::Oncegate, "A", "1250", 0, "1"),
            effect(Seen::Upstream, "A", "1250", 1, "u2"),
            effect(Seen::Upstream, "C", "5", 1, "u3"),
        ];
        let found = find(&rule(), &effects);
        assert_eq!(found.len(), 2);
        assert!(found.iter().all(|f| f.kind == FindingKind::Bypass));
        assert!(found.iter().any(|f| f.effects.len() == 2));
        assert!(
            found
                .iter()
                .any(|f| f.effects.len() == 1 && f.on["business_ref"] == "C")
        );
    }

    #[test]
    fn an_unreadable_upstream_effect_is_still_reported() {
        let mut e = effect(Seen::Upstream, "A", "1", 0, "u1");
        e.unreadable = Some("no amount".into());
        let found = find(&rule(), &[e]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].kind, FindingKind::Bypass);
    }
}
