//! The controls around calls: kill switches, breaker resets, the read rate cap and the
//! binding of a coded orchestrator's own idempotency key. All timed by the gate's clock.

use std::collections::HashMap;

use oncegate_core::codes::Code;
use oncegate_core::config::{Capability, Role};
use oncegate_core::decide;
use oncegate_core::intent::Outcome;
use oncegate_core::key::{DerivedKey, IntentKey};

use oncegate_store::{Commit, StoreError, StoreRead, StoreWrite};

use crate::error::GateError;
use crate::gate::{Gate, MAX_RACES};

impl Gate {
    /// Switches a capability or an agent off (`reason` Some) or on again (None), and
    /// appends the change to the audit chain first (it is refused if the store is down).
    /// `target` is `capability:NAME` or `agent:NAME`.
    pub async fn set_kill_switch(
        &self,
        actor: &str,
        target: &str,
        reason: Option<String>,
    ) -> Result<(), StoreError> {
        let event = oncegate_core::audit::AuditEvent {
            at: self.clock.now(),
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
            detail: serde_json::json!({"kill_switch": target, "on": reason.is_some(), "reason": reason}),
        };
        self.store.commit(Commit::new(None, None, event)).await?;
        let mut map = self
            .kill_switches
            .write()
            .unwrap_or_else(|e| e.into_inner());
        match reason {
            Some(r) => map.insert(target.to_owned(), r),
            None => map.remove(target),
        };
        Ok(())
    }

    /// The kill switches that are on.
    pub fn kill_switches(&self) -> HashMap<String, String> {
        self.kill_switches
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn kill_switch_for(&self, capability: &str, principal: &str) -> Option<String> {
        let map = self.kill_switches.read().unwrap_or_else(|e| e.into_inner());
        map.get(&format!("capability:{capability}"))
            .or_else(|| map.get(&format!("agent:{principal}")))
            .map(|r| format!("switched off by an admin: {r}"))
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
    pub async fn reset_breaker(&self, actor: &str, key: &IntentKey) -> Result<Outcome, GateError> {
        let who = self
            .registry
            .principal(actor)
            .ok_or_else(|| GateError::Forbidden(format!("unknown principal `{actor}`")))?;
        if who.role != Role::Admin {
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
