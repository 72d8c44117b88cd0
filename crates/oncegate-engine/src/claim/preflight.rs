//! A claim's preflight: every check a call goes through before anything is decided on
//! the stored intent (a required client key's presence, the read rate cap, role,
//! argument limits, key derivation, the kill switches, doubts, holds, policy, the
//! executor's `admit`, the client key's binding). Run once per call; the retry loop
//! in claim/mod.rs decides again on every lost race with what it found.

use std::sync::Arc;

use oncegate_core::config::Capability;
use oncegate_core::intent::{self, Outcome};
use oncegate_core::key::{CallScope, DerivedKey, derive};
use oncegate_core::policy::PolicyVerdict;
use serde_json::Value;

use crate::call::{Call, IntentHandle};
use crate::error::GateError;
use crate::executor::Executor;
use crate::gate::{Gate, store_down};
use crate::who::Who;

/// What the preflight found, for the retry loop.
pub(super) struct Cleared {
    /// The capability, as its doubts leave it.
    pub(super) cap: Arc<Capability>,
    /// The intent key and what it was derived from.
    pub(super) derived: DerivedKey,
    /// Why a kill switch stops the call (the last known when the store cannot tell).
    pub(super) killed: Option<String>,
    /// Why a hold stops the call.
    pub(super) held: Option<String>,
    /// What policy says.
    pub(super) verdict: PolicyVerdict,
}

/// A preflight's answer: go on to decide, or the call is answered already.
#[expect(
    clippy::large_enum_variant,
    reason = "one per call, moved once; boxing buys nothing"
)]
pub(super) enum Checked {
    Cleared(Cleared),
    Settled(Outcome),
}

impl Gate {
    /// Runs every check `call` goes through before a decision. A store that cannot
    /// answer settles a consequential call (failing closed); a read goes on with what
    /// is known.
    pub(super) async fn preflight<E: Executor>(
        &self,
        who: Who<'_>,
        call: &Call,
        executor: &E,
    ) -> Result<Checked, GateError> {
        let principal = who.name();
        let cap = self.capability(&call.capability)?;
        // A required client key that is missing is the first thing the caller hears
        // (as the JSON API answered before the engine owned the check).
        if cap.require_client_key && call.client_key.is_none() {
            return Err(GateError::ClientKeyMissing(format!(
                "capability {} requires an Idempotency-Key header",
                call.capability
            )));
        }
        if cap.category == oncegate_core::Category::Read {
            self.take_read_token(principal)?;
        }
        let role = self.caller(who)?;
        // Before anything is parsed further: a record must stay readable and replays small.
        oncegate_core::limits::check_arguments(&call.arguments, &self.registry.gateway.limits)?;
        let now = self.clock.now();
        let scope = CallScope {
            run_id: call.run_id.as_deref(),
            step_id: call.step_id.as_deref(),
        };
        let tenant = &self.registry.gateway.tenant;
        let derived = derive(
            tenant,
            principal,
            &cap,
            &call.arguments,
            &scope,
            now,
            &self.registry.gateway.time_zone,
        )?;
        // The store's switches (cached, at most half a second old). When they cannot be
        // read, a consequential call fails closed; a read goes on with the last known.
        let killed = match self.kill_switch_for(&cap.name, principal).await {
            Ok(killed) => killed,
            Err((e, _)) if cap.category.is_consequential() => {
                return Ok(Checked::Settled(store_down(None, Some(&derived.key), &e)));
            }
            Err((_, last_known)) => last_known,
        };
        // A provider seen ignoring idempotency keys: the capability is non_idempotent
        // until an admin clears the doubt (read like the switches, failing closed).
        let cap = match self.doubts_or_error(&cap.name).await {
            Ok(doubts) => doubts.applied_to(cap),
            Err(e) if cap.category.is_consequential() => {
                return Ok(Checked::Settled(store_down(None, Some(&derived.key), &e)));
            }
            Err(_) => cap,
        };
        let held = match self
            .held_for(
                &cap.name,
                derived.business_ref.as_deref(),
                &derived.normalised,
            )
            .await
        {
            Ok(held) => held,
            Err(e) if cap.category.is_consequential() => {
                return Ok(Checked::Settled(store_down(None, Some(&derived.key), &e)));
            }
            Err(_) => None,
        };
        let verdict = match &cap.policy {
            Some(_) if self.skip_policies => PolicyVerdict::Allow,
            Some(engine) => engine.evaluate(
                principal,
                role,
                tenant,
                &cap,
                derived.business_ref.as_deref(),
                &derived.normalised,
            ),
            None => PolicyVerdict::Allow,
        };
        executor
            .admit(&IntentHandle {
                key: intent::upstream_key(&derived.key, 1),
                intent_key: derived.key.clone(),
                generation: 1,
                capability: cap.name.clone(),
                arguments: call.arguments.clone(),
                normalised: Value::Object(derived.normalised.clone()),
                business_ref: derived.business_ref.clone(),
                run_id: call.run_id.clone(),
                step_id: call.step_id.clone(),
            })
            .map_err(GateError::Inadmissible)?;
        if let Some(client_key) = call.client_key.as_deref() {
            // After every check that refuses the call (binding is a durable write), and
            // with the key derived above at the same `now`. A required key that is
            // missing was refused first thing.
            self.bind_client_key(principal, &cap, client_key, &derived, now)
                .await?;
        }
        Ok(Checked::Cleared(Cleared {
            cap,
            derived,
            killed,
            held,
            verdict,
        }))
    }
}
