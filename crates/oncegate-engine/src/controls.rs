//! The controls around calls: kill switches (stored; cached per gate in
//! kill_switches.rs), breaker resets, the read rate cap and the
//! binding of a coded orchestrator's own idempotency key. All timed by the gate's clock.

use std::collections::HashMap;
use std::sync::Arc;

use oncegate_core::codes::Code;
use oncegate_core::config::{Capability, Role};
use oncegate_core::decide;
use oncegate_core::intent::Outcome;
use oncegate_core::key::{DerivedKey, IntentKey};

use oncegate_store::{Commit, IntentsRead, IntentsWrite, KillSwitchChange, SharedRead, StoreError};

use crate::error::GateError;
use crate::gate::{Gate, MAX_RACES};
use crate::kill_switches::{Stale, switch_for};
use crate::who::Who;

impl Gate {
    /// Switches a capability or an agent off (`reason` Some) or on again (None): the
    /// switch is written with its audit event in one commit (refused if the store is
    /// down), so it survives restarts and reaches every gate on the store, this one at
    /// once and the others within a second (their caches' freshness).
    /// `target` is `capability:NAME` or `agent:NAME`.
    pub async fn set_kill_switch(
        &self,
        actor: &str,
        target: &str,
        reason: Option<String>,
    ) -> Result<(), StoreError> {
        self.switch(actor, target, reason, None).await
    }

    /// [`Gate::set_kill_switch`] with why a switch is cleared (`note`, kept in the
    /// audit record; a switch set keeps its reason there as before).
    pub async fn switch(
        &self,
        actor: &str,
        target: &str,
        reason: Option<String>,
        note: Option<String>,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        let event = oncegate_core::audit::AuditEvent {
            at: now,
            kind: oncegate_core::audit::AuditKind::Admin,
            key: None,
            generation: 0,
            capability: target.strip_prefix("capability:").map(str::to_owned),
            actor: actor.to_owned(),
            run_id: None,
            from: None,
            to: None,
            status: None,
            code: Some(Code::KillSwitch),
            detail: match note.filter(|_| reason.is_none()) {
                Some(n) => {
                    serde_json::json!({"kill_switch": target, "on": false, "reason": null, "note": n})
                }
                None => {
                    serde_json::json!({"kill_switch": target, "on": reason.is_some(), "reason": reason})
                }
            },
        };
        let mut commit = Commit::event(event);
        commit.kill_switch = Some(KillSwitchChange {
            target: target.to_owned(),
            reason: reason.clone(),
            actor: actor.to_owned(),
            at: now,
        });
        self.store.commit(commit).await?;
        self.kill_switches.changed(target, reason.as_deref());
        Ok(())
    }

    /// The kill switches that are on, by target, with their reason: read from the store
    /// (every gate's switches), and this gate's cache refreshed with them.
    pub async fn kill_switches(&self) -> Result<HashMap<String, String>, StoreError> {
        let changes = self.kill_switches.changes();
        let at = self.clock.now();
        let switches: HashMap<String, String> = self
            .store
            .kill_switches()
            .await?
            .into_iter()
            .map(|s| (s.target, s.reason))
            .collect();
        self.kill_switches
            .loaded(Arc::new(switches.clone()), at, changes);
        // Holds and doubts share the store and the cache; they are listed by `holds()`
        // and `doubts()`.
        Ok(switches
            .into_iter()
            .filter(|(target, _)| {
                !crate::limits::is_hold(target) && !crate::doubts::is_doubt(target)
            })
            .collect())
    }

    /// The switch that stops `capability` for `principal`, from a cache of the store's
    /// switches at most half a second old by the gate's clock. `Err` when the cache was
    /// stale and could not be reloaded: the store's error, with the last switches known
    /// (reads may go on with them; consequential calls fail closed).
    pub(crate) async fn kill_switch_for(
        &self,
        capability: &str,
        principal: &str,
    ) -> Result<Option<String>, (Arc<StoreError>, Option<String>)> {
        let clock = self.clock.clone();
        match self
            .kill_switches
            .current(&self.store, || clock.now())
            .await
        {
            Ok(switches) => Ok(switch_for(&switches, capability, principal)),
            Err(Stale { error, last_known }) => {
                Err((error, switch_for(&last_known, capability, principal)))
            }
        }
    }

    /// A token bucket per principal for read capabilities (reads claim nothing, so this
    /// is what keeps a looping agent from hammering the upstream). Timed by the gate's
    /// clock.
    pub(crate) fn take_read_token(&self, principal: &str) -> Result<(), GateError> {
        let rate = f64::from(self.registry.gateway.read_rate_per_second);
        let now = self.clock.now();
        let mut buckets = self.read_buckets.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, last) = buckets.entry(principal.to_owned()).or_insert((rate, now));
        let elapsed = now.duration_since(*last).as_secs_f64().max(0.0);
        *tokens = (*tokens + elapsed * rate).min(rate);
        *last = now;
        if *tokens < 1.0 {
            return Err(GateError::RateLimited(format!(
                "more than {rate} reads per second"
            )));
        }
        *tokens -= 1.0;
        Ok(())
    }

    /// A coded orchestrator's own key names exactly one intent for this principal and
    /// capability: the first one it was sent with.
    pub(crate) async fn bind_client_key(
        &self,
        principal: &str,
        cap: &Capability,
        client_key: &str,
        derived: &DerivedKey,
        now: jiff::Timestamp,
    ) -> Result<(), GateError> {
        let binding = oncegate_store::ClientKeyBinding {
            principal: principal.to_owned(),
            capability: cap.name.clone(),
            client_key: client_key.to_owned(),
            intent_key: derived.key.clone(),
            args_digest: derived.args_digest.clone(),
            created_at: now,
        };
        let held = self.store.bind_client_key(binding).await?;
        if held.intent_key != derived.key {
            return Err(GateError::ClientKeyReused(format!(
                "this Idempotency-Key was first used for intent {} with other significant arguments",
                held.intent_key
            )));
        }
        Ok(())
    }

    /// An admin resets a tripped breaker.
    pub async fn reset_breaker<'a>(
        &self,
        actor: impl Into<Who<'a>>,
        key: &IntentKey,
    ) -> Result<Outcome, GateError> {
        let who = actor.into();
        let actor = who.name();
        let role = self.role_of(who)?;
        if role != Role::Admin {
            return Err(GateError::Forbidden("only admins reset breakers".into()));
        }
        for _ in 0..MAX_RACES {
            let Some(record) = self.store.load(key).await? else {
                return Err(GateError::UnknownIntent(key.to_string()));
            };
            let cap = self.capability(&record.capability)?;
            let d = decide::reset_breaker(&record, actor, &cap, self.clock.now());
            match self
                .store
                .commit(Commit::new(d.record, None, d.event))
                .await
            {
                Ok(()) => return Ok(d.outcome),
                Err(StoreError::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(GateError::Store(StoreError::Conflict))
    }
}

impl Gate {
    /// Whether `principal` may read the prompts and resources of the fronted server
    /// `alias` now: not switched off (`agent:<principal>`, or `capability:<name>` for
    /// the prompt or resource `name` asked for) and within the read rate cap. These
    /// reads claim nothing; this is all that stands between a looping agent and the
    /// server. When the store cannot be read, the last switches known decide, as for
    /// any read.
    pub async fn admit_fronted_read(&self, principal: &str, name: &str) -> Result<(), GateError> {
        let killed = match self.kill_switch_for(name, principal).await {
            Ok(killed) => killed,
            Err((_, last_known)) => last_known,
        };
        if let Some(why) = killed {
            return Err(GateError::Forbidden(why));
        }
        self.take_read_token(principal)
    }
}
