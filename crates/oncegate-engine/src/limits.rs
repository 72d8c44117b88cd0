//! Holds and limits: the two controls that bound damage whatever the keys say.
//!
//! A hold is a kill switch scoped to a value: the store keeps it beside the kill
//! switches (target `hold:<capability>:<on>=<value>`), set and cleared in one commit
//! with its audit event, read through the same cache (at most 500 ms old on every
//! replica, fail closed when unreadable), and it refuses what it covers with
//! `OG-0026` exactly where a kill switch refuses (before the decision, and again
//! before an execution commits).
//!
//! A limit's budget is reserved inside the commit that claims an execution: the store
//! sums the budget's active reservations in the window and refuses the commit
//! (`StoreError::LimitReached`) when this call would pass the max, so parallel calls
//! cannot each spend the last of it. A record written in a state that says the effect
//! did not happen releases its reservations in the same transaction (the store does,
//! see `oncegate_store::releases`); a repeat of the same intent never reserves twice.

use jiff::Timestamp;
use oncegate_core::audit::{AuditEvent, AuditKind};
use oncegate_core::codes::Code;
use oncegate_core::config::{Capability, HoldOn, Limit, LimitPer, OverLimit};
use oncegate_core::intent::IntentRecord;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use oncegate_store::{
    Commit, IntentsWrite, KillSwitchChange, LimitReconcile, LimitsRead, Reservation, SharedRead,
    StoreError,
};

use crate::gate::Gate;
use crate::kill_switches::Switches;

/// The prefix of a hold's target among the kill switches.
const HOLD: &str = "hold:";

/// A hold as listed: what it stops and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Hold {
    /// `h_` and 16 hex digits of the target's SHA-256: what `clear` names.
    pub id: String,
    /// The capability it stops.
    pub capability: String,
    /// `business_ref`, `capability`, or the argument it matches.
    pub on: String,
    /// The value it matches (empty for `capability`).
    pub value: String,
    /// Why (the finding it came from).
    pub reason: String,
    /// Who placed it.
    pub set_by: String,
    /// When.
    pub set_at: Timestamp,
}

/// A normalised value as a hold spells it: strings as they are, anything else as
/// canonical JSON.
fn spelled(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => oncegate_core::key::canonical_json_of(other),
    }
}

/// The stored target of a hold on `on` = `value` for `capability`.
pub fn hold_target(capability: &str, on: &HoldOn, value: Option<&Value>) -> String {
    let value = match on {
        HoldOn::Capability => String::new(),
        _ => value.map(spelled).unwrap_or_default(),
    };
    format!("{HOLD}{capability}:{}={value}", on.name())
}

pub(crate) fn hold_id(target: &str) -> String {
    format!(
        "h_{}",
        &hex::encode(Sha256::digest(target.as_bytes()))[..16]
    )
}

/// Reads a hold back from its target.
fn parse_hold(target: &str) -> Option<(String, String, String)> {
    let rest = target.strip_prefix(HOLD)?;
    let (capability, rest) = rest.split_once(':')?;
    let (on, value) = rest.split_once('=')?;
    Some((capability.to_owned(), on.to_owned(), value.to_owned()))
}

/// Whether a stored target is a hold (the kill-switch listing leaves them out).
pub(crate) fn is_hold(target: &str) -> bool {
    target.starts_with(HOLD)
}

/// The hold that covers a call of `capability` with this business reference and these
/// normalised significant arguments, as the model line says it.
pub(crate) fn hold_for(
    switches: &Switches,
    capability: &str,
    business_ref: Option<&str>,
    normalised: &Map<String, Value>,
) -> Option<String> {
    // Every target looked up below starts `hold:<capability>:`; with none stored (nearly
    // every call) no target is formatted at all.
    let for_capability = |target: &String| {
        target
            .strip_prefix(HOLD)
            .and_then(|rest| rest.strip_prefix(capability))
            .is_some_and(|rest| rest.starts_with(':'))
    };
    if !switches.keys().any(for_capability) {
        return None;
    }
    let found = |on: &HoldOn, value: Option<&Value>| {
        switches.get(&hold_target(capability, on, value)).cloned()
    };
    let reason = found(&HoldOn::Capability, None)
        .or_else(|| {
            business_ref.and_then(|r| found(&HoldOn::BusinessRef, Some(&Value::String(r.into()))))
        })
        .or_else(|| {
            normalised
                .iter()
                .find_map(|(arg, v)| found(&HoldOn::Arg(arg.clone()), Some(v)))
        })?;
    Some(format!(
        "held for review: a human is looking at a possible duplicate ({reason}); do not retry, an admin will clear it"
    ))
}

impl Gate {
    /// The hold covering a call, from the switch cache. `Err`: the cache could not be
    /// reloaded (consequential calls fail closed on it).
    pub(crate) async fn held_for(
        &self,
        capability: &str,
        business_ref: Option<&str>,
        normalised: &Map<String, Value>,
    ) -> Result<Option<String>, std::sync::Arc<StoreError>> {
        let clock = self.clock.clone();
        match self
            .kill_switches
            .current(&self.store, || clock.now())
            .await
        {
            Ok(switches) => Ok(hold_for(&switches, capability, business_ref, normalised)),
            Err(stale) => Err(stale.error),
        }
    }

    /// Places a hold (its audit event in the same commit). Placing one that is already
    /// on keeps it.
    pub async fn place_hold(
        &self,
        actor: &str,
        capability: &str,
        on: &HoldOn,
        value: Option<&Value>,
        reason: &str,
        extra: Value,
    ) -> Result<Hold, StoreError> {
        let target = hold_target(capability, on, value);
        let now = self.clock.now();
        let mut commit = Commit::event(hold_event(
            now, actor, capability, &target, true, reason, extra,
        ));
        commit.kill_switch = Some(KillSwitchChange {
            target: target.clone(),
            reason: Some(reason.to_owned()),
            actor: actor.to_owned(),
            at: now,
        });
        self.store.commit(commit).await?;
        self.kill_switches.changed(&target, Some(reason));
        let (capability, on, value) = parse_hold(&target).expect("a target this module wrote");
        Ok(Hold {
            id: hold_id(&target),
            capability,
            on,
            value,
            reason: reason.to_owned(),
            set_by: actor.to_owned(),
            set_at: now,
        })
    }

    /// The holds that are on (read from the store).
    pub async fn holds(&self) -> Result<Vec<Hold>, StoreError> {
        Ok(self
            .store
            .kill_switches()
            .await?
            .into_iter()
            .filter_map(|s| {
                let (capability, on, value) = parse_hold(&s.target)?;
                Some(Hold {
                    id: hold_id(&s.target),
                    capability,
                    on,
                    value,
                    reason: s.reason,
                    set_by: s.set_by,
                    set_at: s.set_at,
                })
            })
            .collect())
    }

    /// Clears a hold by id: `Ok(None)` if no such hold is on.
    pub async fn clear_hold(
        &self,
        actor: &str,
        id: &str,
        reason: &str,
    ) -> Result<Option<Hold>, StoreError> {
        let Some(hold) = self.holds().await?.into_iter().find(|h| h.id == id) else {
            return Ok(None);
        };
        let target = format!("{HOLD}{}:{}={}", hold.capability, hold.on, hold.value);
        let now = self.clock.now();
        let mut commit = Commit::event(hold_event(
            now,
            actor,
            &hold.capability,
            &target,
            false,
            reason,
            json!({"hold_id": id}),
        ));
        commit.kill_switch = Some(KillSwitchChange {
            target: target.clone(),
            reason: None,
            actor: actor.to_owned(),
            at: now,
        });
        self.store.commit(commit).await?;
        self.kill_switches.changed(&target, None);
        Ok(Some(hold))
    }

    /// Reconciles the budget `scope` (a limit's name, or `name@principal`) whose
    /// reservations disagree with its ledger: they are restored from the ledger when it
    /// holds; when it does not, only with `accept_table` (the reservations are then
    /// accepted as found). One commit with its audit record, which says which.
    pub async fn reconcile_limit(
        &self,
        actor: &str,
        scope: &str,
        accept_table: bool,
        reason: &str,
    ) -> Result<(), StoreError> {
        let mut commit = Commit::event(AuditEvent {
            at: self.clock.now(),
            kind: AuditKind::Admin,
            key: None,
            generation: 0,
            capability: None,
            actor: actor.to_owned(),
            run_id: None,
            from: None,
            to: None,
            status: None,
            code: None,
            detail: json!({"reconcile_limit": scope, "accept_table": accept_table, "reason": reason}),
        });
        commit.limit_reconcile = Some(LimitReconcile {
            scope: scope.to_owned(),
            accept_table,
        });
        self.store.commit(commit).await
    }

    /// The reservations an execution of `record` makes, and a refusal's reason when
    /// the call cannot be counted (another currency).
    pub(crate) fn reservations(
        &self,
        cap: &Capability,
        record: &IntentRecord,
        approved: bool,
        now: Timestamp,
    ) -> Result<Vec<Reservation>, String> {
        cap.limits
            .iter()
            .map(|limit| {
                Ok(Reservation {
                    scope: limit.scope(&record.principal),
                    amount: limit.amount_of(&record.normalised)?,
                    max: limit.max,
                    since: self.window_since(now - limit.window),
                    // An approver let this one through over the budget.
                    enforce: !(approved && limit.over == OverLimit::RequireApproval),
                })
            })
            .collect()
    }

    /// Every limit's budget now, per scope: each capability budget, and each
    /// principal's for per-principal limits (every declared agent).
    pub async fn limits_status(&self) -> Result<Vec<LimitStatus>, StoreError> {
        let now = self.clock.now();
        let mut out = Vec::new();
        for cap in self.registry.capabilities() {
            for limit in &cap.limits {
                let principals: Vec<Option<&str>> = match limit.per {
                    LimitPer::Capability => vec![None],
                    LimitPer::Principal => self
                        .registry
                        .principals
                        .iter()
                        .filter(|p| p.role == oncegate_core::config::Role::Agent)
                        .map(|p| Some(p.name.as_str()))
                        .collect(),
                };
                for principal in principals {
                    let scope = limit.scope(principal.unwrap_or_default());
                    let used = self.store.limit_used(&scope, now - limit.window).await?;
                    out.push(LimitStatus::of(&cap.name, limit, principal, used));
                }
            }
        }
        Ok(out)
    }
}

/// One budget as `GET /v1/limits` shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LimitStatus {
    /// The limit.
    pub limit: String,
    /// Its capability.
    pub capability: String,
    /// The principal, for per-principal limits.
    pub principal: Option<String>,
    /// `count` or `money`.
    pub measure: &'static str,
    /// The window, e.g. `24h`.
    pub window: String,
    /// Budget, used and remaining, in the limit's unit (a count or minor units).
    pub max: i64,
    /// See `max`.
    pub used: i64,
    /// See `max`.
    pub remaining: i64,
    /// The currency of a money limit.
    pub currency: Option<String>,
    /// Remaining as people read it.
    pub remaining_display: String,
    /// What a call over it gets.
    pub over: OverLimit,
}

impl LimitStatus {
    fn of(capability: &str, limit: &Limit, principal: Option<&str>, used: i64) -> Self {
        let remaining = (limit.max - used).max(0);
        let (measure, currency) = match &limit.measure {
            oncegate_core::config::Measure::Count => ("count", None),
            oncegate_core::config::Measure::Money { currency, .. } => {
                ("money", Some(currency.code().to_owned()))
            }
        };
        Self {
            limit: limit.name.clone(),
            capability: capability.to_owned(),
            principal: principal.map(str::to_owned),
            measure,
            window: format!("{:#}", limit.window),
            max: limit.max,
            used,
            remaining,
            currency,
            remaining_display: limit.show(remaining),
            over: limit.over,
        }
    }
}

/// The audit event of a hold placed or cleared.
fn hold_event(
    at: Timestamp,
    actor: &str,
    capability: &str,
    target: &str,
    on: bool,
    reason: &str,
    extra: Value,
) -> AuditEvent {
    let mut detail =
        json!({"hold": target, "hold_id": hold_id(target), "on": on, "reason": reason});
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
        code: Some(Code::Held),
        detail,
    }
}

/// Limits by name, for the refusal's reason.
pub(crate) fn limit_named<'a>(cap: &'a Capability, scope: &str) -> Option<&'a Limit> {
    let name = scope.split_once('@').map_or(scope, |(n, _)| n);
    cap.limits.iter().find(|l| l.name == name)
}

/// The model line of a refusal by a limit.
pub(crate) fn over_limit_reason(cap: &Capability, scope: &str, used: i64, amount: i64) -> String {
    match limit_named(cap, scope) {
        Some(l) => format!(
            "limit {} reached: {} of {} used in the last {:#}, this call needs {}; do not retry before the window rolls",
            l.name,
            l.show(used),
            l.show(l.max),
            l.window,
            l.show(amount)
        ),
        None => format!("limit {scope} reached"),
    }
}
