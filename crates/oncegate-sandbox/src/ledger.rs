//! The sandbox's memory: every effect it committed, and its idempotency-key index.
//!
//! Everything here runs under one lock and never awaits, so "is this key new?" and
//! "commit it" are one atomic step, as in a provider that enforces keys in a database.

use std::{collections::HashMap, num::NonZeroUsize};

use jiff::Timestamp;
use rand::distr::{Alphanumeric, SampleString};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::resource::Resource;

/// A validated create (a `POST` body or a create tool's arguments), ready to commit.
#[derive(Debug)]
pub(super) struct NewEffect {
    resource: Resource,
    /// The body exactly as received (over MCP: the arguments without the key): what a
    /// repeated key is compared with, and what `/v1/effects` shows.
    request: Value,
    order_id: Option<String>,
    amount_minor: Option<i64>,
    currency: Option<String>,
    dedupe_ref: Option<String>,
    /// The resource's own fields, before the provider adds id, key and timestamp.
    fields: Map<String, Value>,
    /// The W3C `traceparent` the request carried (HTTP header, MCP `_meta`), as a
    /// provider's request log keeps it: what a test reads to see a trace reach the
    /// provider.
    traceparent: Option<String>,
    /// The W3C `tracestate` it carried, likewise (a test reads what a caller's vendor
    /// entries reached).
    tracestate: Option<String>,
}

/// Why a body cannot become an effect; the text is shown to the caller.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct InvalidBody(pub(super) String);

/// A charge or refund.
#[derive(Deserialize)]
struct MoneyBody {
    order_id: String,
    amount_minor: Value,
    currency: String,
    #[serde(default)]
    memo: Option<String>,
}

#[derive(Deserialize)]
struct EmailBody {
    order_id: String,
    to: String,
    template: String,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    dedupe_ref: Option<String>,
}

impl NewEffect {
    /// Checks `request` against what a `POST` of `resource` accepts. Unknown fields are
    /// tolerated (and kept in `request`), as most providers do.
    pub(super) fn parse(resource: Resource, request: Value) -> Result<NewEffect, InvalidBody> {
        let shape = |e: serde_json::Error| InvalidBody(e.to_string());
        let mut fields = Map::new();
        let effect = match resource {
            Resource::Charges | Resource::Refunds => {
                let body = MoneyBody::deserialize(&request).map_err(shape)?;
                let order_id = non_empty("order_id", body.order_id)?;
                let amount_minor = minor_units(&body.amount_minor)?;
                let currency = currency(&body.currency)?;
                fields.insert("order_id".into(), json!(order_id));
                fields.insert("amount_minor".into(), json!(amount_minor));
                fields.insert("currency".into(), json!(currency));
                fields.insert("memo".into(), json!(body.memo));
                fields.insert("status".into(), json!("succeeded"));
                NewEffect {
                    resource,
                    order_id: Some(order_id),
                    amount_minor: Some(amount_minor),
                    currency: Some(currency),
                    dedupe_ref: None,
                    fields,
                    request,
                    traceparent: None,
                    tracestate: None,
                }
            }
            Resource::Emails => {
                let body = EmailBody::deserialize(&request).map_err(shape)?;
                let order_id = non_empty("order_id", body.order_id)?;
                let to = non_empty("to", body.to)?;
                let template = non_empty("template", body.template)?;
                fields.insert("order_id".into(), json!(order_id));
                fields.insert("to".into(), json!(to));
                fields.insert("template".into(), json!(template));
                fields.insert("body".into(), json!(body.body));
                fields.insert("dedupe_ref".into(), json!(body.dedupe_ref));
                fields.insert("status".into(), json!("sent"));
                NewEffect {
                    resource,
                    order_id: Some(order_id),
                    amount_minor: None,
                    currency: None,
                    dedupe_ref: body.dedupe_ref,
                    fields,
                    request,
                    traceparent: None,
                    tracestate: None,
                }
            }
            Resource::Ledger => {
                let Some(entry) = request.as_object() else {
                    return Err(InvalidBody("a ledger entry must be a JSON object".into()));
                };
                // The ledger takes any object; pick out what the effect list reports if
                // the entry happens to carry it.
                let order_id = entry
                    .get("order_id")
                    .and_then(Value::as_str)
                    .map(String::from);
                let amount_minor = entry.get("amount_minor").and_then(Value::as_i64);
                let currency = entry
                    .get("currency")
                    .and_then(Value::as_str)
                    .map(String::from);
                fields.insert("order_id".into(), json!(order_id));
                fields.insert("entry".into(), request.clone());
                NewEffect {
                    resource,
                    order_id,
                    amount_minor,
                    currency,
                    dedupe_ref: None,
                    fields,
                    request,
                    traceparent: None,
                    tracestate: None,
                }
            }
        };
        Ok(effect)
    }

    /// What the effect creates.
    pub(super) fn resource(&self) -> Resource {
        self.resource
    }

    /// The effect as requested under the trace context `traceparent` and `tracestate`
    /// (kept as sent, up to 256 and 1,024 characters: the sandbox records them, it does
    /// not judge them).
    pub(super) fn traced(mut self, traceparent: Option<&str>, tracestate: Option<&str>) -> Self {
        self.traceparent = traceparent.filter(|t| t.len() <= 256).map(str::to_owned);
        self.tracestate = tracestate.filter(|t| t.len() <= 1024).map(str::to_owned);
        self
    }
}

fn non_empty(field: &str, value: String) -> Result<String, InvalidBody> {
    if value.trim().is_empty() {
        Err(InvalidBody(format!("{field} must not be empty")))
    } else {
        Ok(value)
    }
}

/// A positive amount in minor units. A string of digits is accepted too, as
/// form-encoding providers do, so that a gateway rendering `"{norm.amount.minor}"`
/// as text still talks to the sandbox.
fn minor_units(value: &Value) -> Result<i64, InvalidBody> {
    let invalid = || InvalidBody("amount_minor must be a positive integer (minor units)".into());
    let amount = match value {
        Value::Number(number) => number.as_i64().ok_or_else(invalid)?,
        Value::String(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
            text.parse::<i64>().map_err(|_| invalid())?
        }
        _ => return Err(invalid()),
    };
    if amount > 0 {
        Ok(amount)
    } else {
        Err(invalid())
    }
}

/// A three-letter currency code, upper-cased as providers report it.
fn currency(code: &str) -> Result<String, InvalidBody> {
    if code.len() == 3 && code.bytes().all(|b| b.is_ascii_alphabetic()) {
        Ok(code.to_ascii_uppercase())
    } else {
        Err(InvalidBody(format!(
            "currency must be a three-letter ISO 4217 code, not {code:?}"
        )))
    }
}

/// What committing a create did.
#[derive(Debug, PartialEq)]
pub(super) enum Commit {
    /// A new effect; its object.
    Created(Value),
    /// The key was seen with the same body: no new effect; the first object.
    Replayed(Value),
    /// The key was seen with another body: nothing committed.
    KeyReused,
}

/// How the provider treats the idempotency key of one create.
#[derive(Clone, Copy, Debug)]
pub(super) struct KeyUse<'a> {
    /// The key as sent (the `Idempotency-Key` header, or the MCP argument or `_meta`).
    pub(super) key: Option<&'a str>,
    /// Whether this resource honours keys at all.
    pub(super) honoured: bool,
}

/// Which objects a lookup wants; every given criterion must match.
#[derive(Debug, Default)]
pub(super) struct Lookup<'a> {
    pub(super) idempotency_key: Option<&'a str>,
    pub(super) order_id: Option<&'a str>,
    pub(super) dedupe_ref: Option<&'a str>,
}

/// Which effects `/v1/effects` lists; every given criterion must match.
#[derive(Debug, Default)]
pub(super) struct EffectFilter<'a> {
    pub(super) resource: Option<Resource>,
    pub(super) order_id: Option<&'a str>,
    pub(super) idempotency_key: Option<&'a str>,
    /// Only effects committed at or after this instant.
    pub(super) since: Option<Timestamp>,
    /// Only effects whose `seq` is greater: the `next` of the page before (0: from the
    /// first effect).
    pub(super) after: usize,
}

/// One page of `/v1/effects`.
#[derive(Debug, PartialEq)]
pub(super) struct EffectPage {
    /// In commit (`seq`) order.
    pub(super) effects: Vec<Value>,
    /// The `seq` of the last effect when the page is full, so that there may be more;
    /// `None` when the listing is exhausted.
    pub(super) next: Option<usize>,
}

/// Every effect committed, in order, and the keys that name them.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    entries: Vec<Entry>,
    /// Honoured keys only: a provider that ignores keys has nothing to find them by.
    by_key: HashMap<(Resource, String), usize>,
}

#[derive(Debug)]
struct Entry {
    resource: Resource,
    /// What the provider answers for it: on create, on replay and on lookup.
    object: Value,
    request: Value,
    sent_key: Option<String>,
    honoured_key: Option<String>,
    order_id: Option<String>,
    amount_minor: Option<i64>,
    currency: Option<String>,
    dedupe_ref: Option<String>,
    traceparent: Option<String>,
    tracestate: Option<String>,
    id: String,
    at: Timestamp,
}

impl Ledger {
    /// Commits `effect` unless its key says it already happened.
    pub(super) fn commit(&mut self, effect: NewEffect, key: KeyUse<'_>, now: Timestamp) -> Commit {
        let honoured_key = key.key.filter(|_| key.honoured);
        if let Some(k) = honoured_key
            && let Some(&index) = self.by_key.get(&(effect.resource, k.to_owned()))
            && let Some(first) = self.entries.get(index)
        {
            return if first.request == effect.request {
                Commit::Replayed(first.object.clone())
            } else {
                Commit::KeyReused
            };
        }

        let id = format!(
            "{}_{}",
            effect.resource.id_prefix(),
            Alphanumeric.sample_string(&mut rand::rng(), 24)
        );
        let mut object = Map::new();
        object.insert("id".into(), json!(id));
        object.extend(effect.fields);
        object.insert("idempotency_key".into(), json!(honoured_key));
        object.insert("created_at".into(), json!(now));
        let object = Value::Object(object);

        if let Some(k) = honoured_key {
            self.by_key
                .insert((effect.resource, k.to_owned()), self.entries.len());
        }
        tracing::info!(
            kind = effect.resource.effect_kind(),
            %id,
            order_id = effect.order_id.as_deref(),
            idempotency_key = key.key,
            honoured = key.honoured,
            "sandbox effect committed"
        );
        self.entries.push(Entry {
            resource: effect.resource,
            object: object.clone(),
            request: effect.request,
            sent_key: key.key.map(String::from),
            honoured_key: honoured_key.map(String::from),
            order_id: effect.order_id,
            amount_minor: effect.amount_minor,
            currency: effect.currency,
            dedupe_ref: effect.dedupe_ref,
            traceparent: effect.traceparent,
            tracestate: effect.tracestate,
            id,
            at: now,
        });
        Commit::Created(object)
    }

    /// The first object of `resource` that matches `lookup`.
    pub(super) fn find(&self, resource: Resource, lookup: &Lookup<'_>) -> Option<&Value> {
        let matches = |entry: &&Entry| {
            entry.resource == resource
                && lookup
                    .idempotency_key
                    .is_none_or(|k| entry.honoured_key.as_deref() == Some(k))
                && lookup
                    .order_id
                    .is_none_or(|o| entry.order_id.as_deref() == Some(o))
                && lookup
                    .dedupe_ref
                    .is_none_or(|d| entry.dedupe_ref.as_deref() == Some(d))
        };
        match lookup.idempotency_key {
            // The index keeps key lookups (the gateway's reconcile path) cheap however
            // long a benchmark has been running.
            Some(k) => self
                .by_key
                .get(&(resource, k.to_owned()))
                .and_then(|&index| self.entries.get(index))
                .filter(matches),
            None => self.entries.iter().find(matches),
        }
        .map(|entry| &entry.object)
    }

    /// Every object of `resource` for `order_id`, in commit order.
    pub(super) fn for_order(&self, resource: Resource, order_id: &str) -> Vec<Value> {
        self.entries
            .iter()
            .filter(|e| e.resource == resource && e.order_id.as_deref() == Some(order_id))
            .map(|e| e.object.clone())
            .collect()
    }

    /// The committed effects that pass `filter`, in commit order, as `/v1/effects` shows
    /// them: at most `limit` of them, or all with `None`.
    pub(super) fn effects(
        &self,
        filter: &EffectFilter<'_>,
        limit: Option<NonZeroUsize>,
    ) -> EffectPage {
        let limit = limit.map_or(usize::MAX, NonZeroUsize::get);
        // `seq` is the index plus one, so the cursor skips straight to its place: a
        // detection job paging through a long benchmark's ledger never rescans it.
        let effects: Vec<(usize, &Entry)> = self
            .entries
            .iter()
            .enumerate()
            .skip(filter.after)
            .map(|(index, e)| (index + 1, e))
            .filter(|(_, e)| {
                filter.resource.is_none_or(|r| e.resource == r)
                    && filter
                        .order_id
                        .is_none_or(|o| e.order_id.as_deref() == Some(o))
                    && filter
                        .idempotency_key
                        .is_none_or(|k| e.sent_key.as_deref() == Some(k))
                    // A filter, not a cursor: it assumes nothing about the clock.
                    && filter.since.is_none_or(|since| e.at >= since)
            })
            .take(limit)
            .collect();
        let next = match effects.last() {
            Some(&(seq, _)) if effects.len() == limit => Some(seq),
            _ => None,
        };
        let effects = effects
            .into_iter()
            .map(|(seq, e)| {
                json!({
                    "seq": seq,
                    "kind": e.resource.effect_kind(),
                    "id": e.id,
                    "order_id": e.order_id,
                    "amount_minor": e.amount_minor,
                    "currency": e.currency,
                    "idempotency_key": e.sent_key,
                    "at": e.at,
                    "request": e.request,
                    "traceparent": e.traceparent,
                    "tracestate": e.tracestate,
                })
            })
            .collect();
        EffectPage { effects, next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charge(amount: i64) -> NewEffect {
        let body = json!({"order_id": "A-1", "amount_minor": amount, "currency": "usd"});
        NewEffect::parse(Resource::Charges, body).expect("a valid charge")
    }

    fn honoured(key: &str) -> KeyUse<'_> {
        KeyUse {
            key: Some(key),
            honoured: true,
        }
    }

    #[test]
    fn a_repeated_key_replays_and_a_changed_body_is_refused() {
        let mut ledger = Ledger::default();
        let now = Timestamp::UNIX_EPOCH;
        let Commit::Created(first) = ledger.commit(charge(1250), honoured("k"), now) else {
            panic!("the first use of a key creates");
        };
        assert_eq!(first["currency"], "USD");
        assert_eq!(
            ledger.commit(charge(1250), honoured("k"), now),
            Commit::Replayed(first)
        );
        assert_eq!(
            ledger.commit(charge(999), honoured("k"), now),
            Commit::KeyReused
        );
        assert_eq!(
            ledger.effects(&EffectFilter::default(), None).effects.len(),
            1
        );
    }

    #[test]
    fn an_ignored_key_commits_every_time_and_cannot_be_looked_up() {
        let mut ledger = Ledger::default();
        let ignored = KeyUse {
            key: Some("k"),
            honoured: false,
        };
        for _ in 0..2 {
            ledger.commit(charge(1250), ignored, Timestamp::UNIX_EPOCH);
        }
        let by_sent_key = EffectFilter {
            idempotency_key: Some("k"),
            ..EffectFilter::default()
        };
        assert_eq!(ledger.effects(&by_sent_key, None).effects.len(), 2);
        let lookup = Lookup {
            idempotency_key: Some("k"),
            ..Lookup::default()
        };
        assert_eq!(ledger.find(Resource::Charges, &lookup), None);
    }

    #[test]
    fn effects_page_by_seq_and_filter_by_commit_time() {
        let mut ledger = Ledger::default();
        let at = |second| Timestamp::from_second(second).expect("a second in range");
        let unkeyed = KeyUse {
            key: None,
            honoured: true,
        };
        for (amount, second) in [(100, 10), (200, 20), (300, 30), (400, 40), (500, 50)] {
            ledger.commit(charge(amount), unkeyed, at(second));
        }
        let page = |after, limit, since| {
            let filter = EffectFilter {
                since,
                after,
                ..EffectFilter::default()
            };
            let page = ledger.effects(&filter, NonZeroUsize::new(limit));
            let seqs: Vec<u64> = page
                .effects
                .iter()
                .filter_map(|e| e["seq"].as_u64())
                .collect();
            (seqs, page.next)
        };

        assert_eq!(page(0, 2, None), (vec![1, 2], Some(2)));
        assert_eq!(page(2, 2, None), (vec![3, 4], Some(4)));
        assert_eq!(page(4, 2, None), (vec![5], None));
        // A full last page may have more behind it; the next one, empty, says there is none.
        assert_eq!(page(3, 2, None), (vec![4, 5], Some(5)));
        assert_eq!(page(5, 2, None), (vec![], None));
        assert_eq!(page(99, 2, None), (vec![], None));
        assert_eq!(page(0, 0, None), (vec![1, 2, 3, 4, 5], None), "no limit");
        assert_eq!(
            page(0, 2, Some(at(30))),
            (vec![3, 4], Some(4)),
            "at >= since"
        );
        assert_eq!(page(4, 2, Some(at(30))), (vec![5], None));
        assert_eq!(page(0, 2, Some(at(51))), (vec![], None));
    }

    #[test]
    fn bodies_are_validated() {
        let bad = [
            json!({"order_id": "A-1", "amount_minor": -5, "currency": "USD"}),
            json!({"order_id": "A-1", "amount_minor": 1.5, "currency": "USD"}),
            json!({"order_id": "", "amount_minor": 5, "currency": "USD"}),
            json!({"order_id": "A-1", "amount_minor": 5, "currency": "dollars"}),
            json!({"order_id": "A-1", "currency": "USD"}),
            json!([1, 2]),
        ];
        for body in bad {
            assert!(
                NewEffect::parse(Resource::Charges, body.clone()).is_err(),
                "{body} should be refused"
            );
        }
        let text_amount = json!({"order_id": "A-1", "amount_minor": "1250", "currency": "EUR"});
        let effect = NewEffect::parse(Resource::Refunds, text_amount).expect("digits are accepted");
        assert_eq!(effect.amount_minor, Some(1250));
        assert!(NewEffect::parse(Resource::Ledger, json!("entry")).is_err());
    }
}
