//! Claiming: load -> decide -> commit, with reconciliation on the way. One file because
//! it is one loop: the checks, the decision, `apply` and the reconciliation it may call
//! re-enter each other on every lost race, and a split would put one retry loop's
//! halves in two files.
//!
//! [`Gate::claim`] and [`Gate::claim_with`] run every check a call goes through (a
//! required client key's presence, the read rate cap, role, argument limits, key
//! derivation, policy, the executor's `admit`, the client key's binding), then decide on the stored intent and commit the decision. A decision to
//! execute comes back as a [`Claim`]: the intent is in flight under a lease for that
//! execution, and whoever holds the claim executes the effect and completes it
//! (complete.rs). Everything else comes back settled, exactly as `invoke` answers it.

use std::sync::Arc;

use oncegate_core::config::{Capability, Role};
use oncegate_core::decide::{self, Action, CallRequest, Decision};
use oncegate_core::intent::{self, IntentRecord, IntentState, Outcome};
use oncegate_core::key::{CallScope, IntentKey, derive};
use oncegate_core::policy::PolicyVerdict;
use serde_json::Value;

use oncegate_store::{Commit, IntentsRead, IntentsWrite, StoreError};

use crate::call::{Call, IntentHandle};
use crate::error::GateError;
use crate::executor::{ClaimOnly, Executor};
use crate::gate::{Gate, MAX_RACES, bump, contention, log_alerts, random_hex, store_down};
use crate::who::Who;

/// Names one claim of one execution of one intent generation: what a completion or a
/// heartbeat must show. `execution` is the fencing number: every new execution of the
/// intent (a retry, a re-execution after reconciliation, an approval) increments it, so
/// an older claim can never write over a newer one. `nonce` is the claim's own secret
/// (128 random bits in its lease's owner): counting executions is not enough to
/// complete a claim somebody else holds, the gate's own executions included.
#[derive(Clone, PartialEq, Eq)]
pub struct Fence {
    /// The intent key.
    pub intent_key: IntentKey,
    /// The generation.
    pub generation: u32,
    /// The execution number.
    pub execution: u32,
    /// The claim's nonce (see `oncegate_core::decide::lease_nonce`).
    pub nonce: String,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The nonce is a bearer secret: never in a log line.
        f.debug_struct("Fence")
            .field("intent_key", &self.intent_key)
            .field("generation", &self.generation)
            .field("execution", &self.execution)
            .finish_non_exhaustive()
    }
}

impl Fence {
    /// The fence as one opaque string for a wire form that carries the intent key
    /// apart (`g<generation>.e<execution>.<nonce>`); [`Fence::from_token`] reads it back.
    pub fn token(&self) -> String {
        format!("g{}.e{}.{}", self.generation, self.execution, self.nonce)
    }

    /// Reads [`Fence::token`] back for `intent_key`; `None` if it is not one.
    pub fn from_token(intent_key: IntentKey, token: &str) -> Option<Self> {
        let (numbers, nonce) = token.rsplit_once('.')?;
        if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let (generation, execution) = numbers.strip_prefix('g')?.split_once(".e")?;
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u32>().ok())
                .flatten()
        };
        Some(Self {
            intent_key,
            generation: number(generation)?,
            execution: number(execution)?,
            nonce: nonce.to_owned(),
        })
    }
}

/// A claimed execution: the intent is in flight, under a lease, for this execution.
/// Execute the effect with `intent.key` as the upstream idempotency key, then
/// [`Gate::complete`] it (and [`Gate::heartbeat`] it while the effect runs long).
#[derive(Clone, Debug)]
pub struct Claim {
    /// The intent key.
    pub intent_key: IntentKey,
    /// The generation.
    pub generation: u32,
    /// The execution number: the fencing token (see [`Fence`]).
    pub execution: u32,
    /// Executions and reconciliation reads started on this generation, this one
    /// included (what the attempt ceiling counts).
    pub attempt: u32,
    /// When the lease runs out, by the gate's clock: a completion after it records
    /// nothing, and the intent turns unknown and is reconciled.
    pub lease_expires_at: jiff::Timestamp,
    /// The capability.
    pub capability: String,
    /// Who claimed (and who the completion's audit event names).
    pub principal: String,
    /// Its role when authentication proved it (an identity provider's token); `None`:
    /// the registry's.
    pub role: Option<Role>,
    /// What to execute: the key to thread upstream and the arguments.
    pub intent: IntentHandle,
    /// The intent as the claim committed it (the gate's own executions record
    /// against it).
    pub(crate) record: IntentRecord,
}

impl Claim {
    /// A claim of `record` as committed (in flight, under a lease).
    pub(crate) fn of(record: IntentRecord, principal: Who<'_>) -> Self {
        Self {
            intent_key: record.key.clone(),
            generation: record.generation,
            execution: record.executions,
            attempt: record.attempts,
            lease_expires_at: record
                .lease
                .as_ref()
                .map(|l| l.expires_at)
                .expect("a claimed intent holds a lease"),
            capability: record.capability.clone(),
            principal: principal.name().to_owned(),
            role: principal.proved_role(),
            intent: IntentHandle::of(&record),
            record,
        }
    }

    /// Who claimed, as authentication proved it.
    pub fn who(&self) -> Who<'_> {
        match self.role {
            Some(role) => Who::verified(&self.principal, role),
            None => Who::from(&self.principal),
        }
    }

    /// What a completion or heartbeat must show (e.g. across a wire).
    pub fn fence(&self) -> Fence {
        Fence {
            intent_key: self.intent_key.clone(),
            generation: self.generation,
            execution: self.execution,
            // The nonce this process made the claim with (the lease stores its seal).
            nonce: self
                .record
                .lease
                .as_ref()
                .and_then(|l| l.nonce.clone())
                .unwrap_or_default(),
        }
    }
}

/// What a claim answers.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per call; boxing buys nothing"
)]
pub enum Claimed {
    /// This caller holds the execution: run it, then complete it.
    Execute(Claim),
    /// Nothing to execute: a replay, in flight elsewhere, unknown, pending approval,
    /// denied, refused, dry run; exactly what `invoke` would answer.
    Settled(Outcome),
    /// A read capability: nothing is claimed (reads are never deduplicated). The
    /// caller performs the read itself and completes nothing; its audit entry and the
    /// read rate cap are already taken care of.
    Read(IntentHandle),
}

/// Who sends the effect a claim leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sender {
    /// The gate, with the intent's recorded arguments (`invoke`).
    Gate,
    /// The caller, with the arguments it holds (the two-phase API): a claim whose
    /// arguments differ from the ones a human was asked about is refused.
    Caller,
}

/// What a decision relied on about time, which the store judges again by its own clock
/// before it writes the decision (see `oncegate_store::Commit`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Rejudge {
    /// The decision replaces an in-flight attempt whose lease this gate judged expired.
    pub(crate) takes_over: bool,
    /// The decision holds only before this instant (an approval's expiry or time to live).
    pub(crate) valid_until: Option<jiff::Timestamp>,
}

/// Where a call stands once it is decided and committed.
#[expect(
    clippy::large_enum_variant,
    reason = "one per call, moved a few times; boxing buys nothing"
)]
pub(crate) enum Step {
    /// Answered.
    Settled(Outcome),
    /// Claimed for execution.
    Execute {
        claim: Claim,
        cap: Arc<Capability>,
        /// The attempt count the caller hears instead of the execution's own (set when
        /// a reconciliation read led to the execution).
        attempt: Option<u32>,
    },
    /// A read to pass through.
    Read {
        outcome: Outcome,
        intent: IntentHandle,
    },
}

impl Gate {
    /// Claims a call for its caller to execute (the two-phase API: claim, execute
    /// elsewhere, [`Gate::complete`]). No reconciliation read is available here: an
    /// unknown intent is escalated to a human, as [`Gate::invoke`] with a closure does.
    pub async fn claim<'a>(
        &self,
        principal: impl Into<Who<'a>>,
        call: Call,
    ) -> Result<Claimed, GateError> {
        self.claim_with(principal, call, Arc::new(ClaimOnly)).await
    }

    /// Claims a call, with an executor whose `admit` vets the call and whose
    /// `reconcile` answers for an unknown intent on the way (its `execute` is never
    /// called: the caller executes what is claimed).
    pub async fn claim_with<'a, E: Executor>(
        &self,
        principal: impl Into<Who<'a>>,
        call: Call,
        executor: Arc<E>,
    ) -> Result<Claimed, GateError> {
        Ok(
            match self
                .claim_step(principal.into(), &call, executor, Sender::Caller)
                .await?
            {
                Step::Settled(outcome) => Claimed::Settled(outcome),
                Step::Execute { claim, .. } => Claimed::Execute(claim),
                Step::Read { intent, .. } => Claimed::Read(intent),
            },
        )
    }

    /// Checks, decides and commits one call; executes nothing (but a reconciliation
    /// read). `sender`: who sends the effect a claim leads to.
    pub(crate) async fn claim_step<E: Executor>(
        &self,
        who: Who<'_>,
        call: &Call,
        executor: Arc<E>,
        sender: Sender,
    ) -> Result<Step, GateError> {
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
                return Ok(Step::Settled(store_down(None, Some(&derived.key), &e)));
            }
            Err((_, last_known)) => last_known,
        };
        // A provider seen ignoring idempotency keys: the capability is non_idempotent
        // until an admin clears the doubt (read like the switches, failing closed).
        let cap = match self.doubts_or_error(&cap.name).await {
            Ok(doubts) => doubts.applied_to(cap),
            Err(e) if cap.category.is_consequential() => {
                return Ok(Step::Settled(store_down(None, Some(&derived.key), &e)));
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
                return Ok(Step::Settled(store_down(None, Some(&derived.key), &e)));
            }
            Err(_) => None,
        };
        let mut verdict = match &cap.policy {
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

        for _ in 0..MAX_RACES {
            let now = self.clock.now();
            let loaded = async {
                let mut existing = self.maybe_across_gap(self.store.load(&derived.key).await?);
                let approval = match existing.as_ref().and_then(|r| r.approval_id.as_deref()) {
                    Some(id) => self.approval_across_gap(self.store.approval(id).await?),
                    None => None,
                };
                // The intent and its approval are two reads: a decision another gate
                // committed between them shows a decided approval beside the intent
                // still pending. They were committed together, so the intent read again
                // is the one that goes with this approval.
                if existing
                    .as_ref()
                    .is_some_and(|r| r.state == IntentState::PendingApproval)
                    && approval
                        .as_ref()
                        .is_some_and(|a| a.state != oncegate_core::intent::ApprovalState::Pending)
                {
                    existing = self.maybe_across_gap(self.store.load(&derived.key).await?);
                }
                let other_run = match (&existing, &derived.cross_key) {
                    (None, Some(cross)) => {
                        self.store
                            .find_other_run(cross, call.run_id.as_deref())
                            .await?
                    }
                    _ => None,
                };
                Ok::<_, StoreError>((existing, approval, other_run))
            }
            .await;
            let (existing, approval, other_run) = match loaded {
                Ok(l) => l,
                Err(e) if cap.category.is_consequential() => {
                    return Ok(Step::Settled(store_down(None, Some(&derived.key), &e)));
                }
                Err(_) => (None, None, None),
            };
            let approval_id = format!("ap_{}", random_hex(8));
            let holder = self.claim_holder(principal);
            let req = CallRequest {
                principal,
                tenant,
                derived: &derived,
                arguments: &call.arguments,
                run_id: call.run_id.as_deref(),
                step_id: call.step_id.as_deref(),
                owner: &holder,
                approval: approval.as_ref(),
                other_run: other_run.as_ref(),
                kill_switch: killed.as_deref(),
                held: held.as_deref(),
                new_approval_id: &approval_id,
                rolled_back_at: self.store.rollback_accepted_at(),
                caller_sends: sender == Sender::Caller,
            };
            let decision = decide::decide(existing.as_ref(), &req, &cap, &verdict, now);
            // A new approval beyond the agent's budget is refused, not queued. The agent's
            // turn is held through this iteration's commit: parallel calls count in turn.
            let _turn = self.queue_turn(&decision, principal).await;
            if let Some(refused) = self.approval_queue_full(&decision, principal, now).await {
                log_alerts(&refused, &cap);
                return Ok(Step::Settled(refused));
            }
            // What the decision relied on about time, which the store judges again by its
            // own clock: an attempt's lease expired (a takeover), an approved claim-only
            // call still within its time to live.
            let rejudge = Rejudge {
                takes_over: decision.record.is_some()
                    && existing.as_ref().is_some_and(|r| {
                        r.state == IntentState::InFlight
                            && r.lease.as_ref().is_some_and(|l| now >= l.expires_at)
                    }),
                valid_until: approval
                    .as_ref()
                    .filter(|a| {
                        decision.action == Action::Execute
                            && a.state == oncegate_core::intent::ApprovalState::Approved
                            && existing
                                .as_ref()
                                .is_some_and(|r| r.state == IntentState::PendingApproval)
                    })
                    .map(|a| decide::approved_claim_deadline(a, &cap)),
            };
            if decision.action == Action::PassThrough {
                // Reads claim nothing; their audit entry is best effort.
                let mut event = decision.event;
                who.stamp(&mut event);
                let _ = self.store.commit(Commit::new(None, None, event)).await;
                let intent = IntentHandle {
                    key: String::new(),
                    intent_key: derived.key.clone(),
                    generation: 0,
                    capability: cap.name.clone(),
                    arguments: call.arguments.clone(),
                    normalised: Value::Object(derived.normalised.clone()),
                    business_ref: derived.business_ref.clone(),
                    run_id: call.run_id.clone(),
                    step_id: call.step_id.clone(),
                };
                return Ok(Step::Read {
                    outcome: decision.outcome,
                    intent,
                });
            }
            let mut decision = decision;
            if decision.action == Action::Replay {
                let now = self.clock.now();
                self.replays
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .note_replay(&mut decision.outcome, &cap, now);
            }
            match self
                .apply(
                    decision,
                    rejudge,
                    &cap,
                    who,
                    executor.clone(),
                    Some(&call.arguments),
                )
                .await
            {
                Ok(step) => return Ok(step),
                Err(StoreError::Conflict) => {
                    tokio::task::yield_now().await;
                    continue;
                }
                Err(StoreError::LimitReached { scope, .. })
                    if !matches!(verdict, PolicyVerdict::RequireApproval { .. }) =>
                {
                    // Over a limit that asks a human instead of refusing: decide again
                    // as if policy had asked for approval (the approval names the limit).
                    verdict = PolicyVerdict::RequireApproval {
                        policies: vec![format!("limit:{scope}")],
                    };
                    continue;
                }
                Err(StoreError::LeaseLive(why)) => {
                    // This gate's clock runs ahead of the store's: the holder is still
                    // within its lease, so the intent is in flight.
                    tracing::warn!(key = %derived.key, why = %why, "a lease this gate judged expired is live by the store's clock (is this host's clock fast?)");
                    let standing = existing.as_ref().map(decide::standing_outcome);
                    return Ok(Step::Settled(
                        standing.unwrap_or_else(|| contention(&derived.key)),
                    ));
                }
                Err(e) => {
                    return Ok(Step::Settled(store_down(
                        existing.as_ref(),
                        Some(&derived.key),
                        &e,
                    )));
                }
            }
        }
        Ok(Step::Settled(contention(&derived.key)))
    }

    /// Commits a decision and carries out its action. `Conflict` means re-decide.
    /// `arguments`: the call that asked, when there is one; an intent reconciled absent
    /// re-executes with them (its significant arguments are the same by key; a
    /// corrected free-text argument is what the caller means now), unless a human was
    /// asked about the generation (`decide::arguments_frozen`): then with the
    /// arguments the approval was asked on.
    pub(crate) async fn apply<E: Executor>(
        &self,
        decision: Decision,
        rejudge: Rejudge,
        cap: &Arc<Capability>,
        actor: Who<'_>,
        executor: Arc<E>,
        arguments: Option<&Value>,
    ) -> Result<Step, StoreError> {
        let Decision {
            action,
            record,
            approval,
            outcome,
            mut event,
        } = decision;
        actor.stamp(&mut event);
        // A reconciliation read is asked by one gate at a time: take the intent's claim
        // before the decision (which counts the read as an attempt) is committed.
        let work = match (action, record.as_ref()) {
            (Action::Reconcile, Some(current)) => {
                match self.await_reconcile_claim(current, cap).await? {
                    Some(work) => Some(work),
                    None => {
                        // Another gate's read is still out past its claim's time: this
                        // caller hears where the intent stands (unknown, being
                        // reconciled); the read this decision counted did not run.
                        let mut outcome = outcome;
                        outcome.attempt = outcome.attempt.saturating_sub(1);
                        return Ok(Step::Settled(outcome));
                    }
                }
            }
            _ => None,
        };
        // The kill switches were read when the call began; a reconciliation wait since
        // may have lasted a lease. Nothing executes past a switch set meanwhile (on any
        // replica), and nothing executes when the switches cannot be read.
        if action == Action::Execute
            && let Some(r) = record.as_ref()
        {
            match self.kill_switch_for(&cap.name, &r.principal).await {
                Ok(None) => {}
                Ok(Some(why)) => {
                    if let Some(work) = work {
                        work.release(self).await;
                    }
                    let reason = oncegate_core::intent::Reason::new(
                        oncegate_core::codes::Code::KillSwitch,
                        why,
                    );
                    let mut refused = decide::outcome_of(r, intent::Status::Refused, Some(reason));
                    refused.attempt = outcome.attempt;
                    return Ok(Step::Settled(refused));
                }
                Err((e, _)) => {
                    if let Some(work) = work {
                        work.release(self).await;
                    }
                    return Err(StoreError::Unavailable(e.to_string()));
                }
            }
        }
        // A hold placed since the call began (a finding on another replica) stops the
        // execution too; and an execution reserves against the capability's limits in
        // its own commit.
        let mut reservations = Vec::new();
        if action == Action::Execute
            && let Some(r) = record.as_ref()
        {
            let normalised = r.normalised.as_object().cloned().unwrap_or_default();
            let refusal = match self
                .held_for(&cap.name, r.business_ref.as_deref(), &normalised)
                .await
            {
                Ok(None) => None,
                Ok(Some(why)) => Some(oncegate_core::intent::Reason::new(
                    oncegate_core::codes::Code::Held,
                    why,
                )),
                Err(e) => {
                    if let Some(work) = work {
                        work.release(self).await;
                    }
                    return Err(StoreError::Unavailable(e.to_string()));
                }
            };
            let refusal = refusal.or_else(|| {
                let approved = approval
                    .as_ref()
                    .is_some_and(|a| a.state == oncegate_core::intent::ApprovalState::Approved);
                match self.reservations(cap, r, approved, self.clock.now()) {
                    Ok(list) => {
                        reservations = list;
                        None
                    }
                    Err(why) => Some(oncegate_core::intent::Reason::new(
                        oncegate_core::codes::Code::LimitReached,
                        why,
                    )),
                }
            });
            if let Some(reason) = refusal {
                if let Some(work) = work {
                    work.release(self).await;
                }
                let mut refused = decide::outcome_of(r, intent::Status::Refused, Some(reason));
                refused.attempt = outcome.attempt;
                return Ok(Step::Settled(refused));
            }
        }
        if action != Action::Replay {
            let mut commit = Commit::new(record.clone(), approval, event)
                .taking_over(rejudge.takes_over)
                .valid_until(rejudge.valid_until);
            commit.reservations = reservations;
            if let Err(e) = self.store.commit(commit).await {
                if let Some(work) = work {
                    work.release(self).await;
                }
                if let (
                    StoreError::LimitReached {
                        scope,
                        used,
                        amount,
                        ..
                    },
                    Some(r),
                ) = (&e, record.as_ref())
                    && crate::limits::limit_named(cap, scope).is_none_or(|l| {
                        l.over == oncegate_core::config::OverLimit::Refuse
                            || r.approval_id.is_some()
                    })
                {
                    let reason = oncegate_core::intent::Reason::new(
                        oncegate_core::codes::Code::LimitReached,
                        crate::limits::over_limit_reason(cap, scope, *used, *amount),
                    );
                    tracing::warn!(capability = %cap.name, limit = %scope, used, amount, "limit reached: call refused");
                    metrics::counter!("oncegate_limit_refusals_total", "limit" => scope.clone())
                        .increment(1);
                    let mut refused = decide::outcome_of(r, intent::Status::Refused, Some(reason));
                    refused.attempt = outcome.attempt;
                    return Ok(Step::Settled(refused));
                }
                return Err(e);
            }
        }
        log_alerts(&outcome, cap);
        match action {
            Action::Respond | Action::PassThrough | Action::Replay => Ok(Step::Settled(outcome)),
            Action::Execute => {
                let claimed = bump(record.expect("an Execute decision writes the claim"));
                Ok(Step::Execute {
                    claim: Claim::of(claimed, actor),
                    cap: cap.clone(),
                    attempt: None,
                })
            }
            Action::Reconcile => {
                let current = bump(record.expect("a Reconcile decision writes the record"));
                let work = work.expect("a Reconcile decision holds its claim");
                let step = self
                    .reconcile_claimed(current, cap, actor, executor, arguments)
                    .await;
                work.release(self).await;
                step
            }
        }
    }

    /// A reconciliation read for `current` (committed, under this gate's reconciliation
    /// claim), and what its answer leads to.
    async fn reconcile_claimed<E: Executor>(
        &self,
        current: IntentRecord,
        cap: &Arc<Capability>,
        actor: Who<'_>,
        executor: Arc<E>,
        arguments: Option<&Value>,
    ) -> Result<Step, StoreError> {
        let handle = IntentHandle::of(&current);
        // Sampled before the read (see `sweep_one`).
        let running = executor.attempt_running(&handle);
        // Judged at the moment the read was asked (see `sweep_one`).
        let asked_at = self.clock.earliest();
        let answer = executor.reconcile(handle).await;
        // An unproven read's "not found" proves nothing.
        let answer = match self.doubts_on(&cap.name).await {
            Ok(doubts) | Err(doubts) => doubts.weigh(answer),
        };
        // Apply the one answer; a lost race re-reads this generation and applies
        // it again (after_reconcile answers with the standing outcome once someone
        // else has resolved the intent) instead of re-deciding the whole call,
        // which would commit another reconcile and burn an attempt.
        let mut latest = current.clone();
        let mut step = None;
        for _ in 0..MAX_RACES {
            let approval_id = format!("ap_{}", random_hex(8));
            let holder = self.claim_holder(actor.name());
            let mut next = decide::after_reconcile(
                &latest,
                answer.clone(),
                cap,
                actor.name(),
                &holder,
                &approval_id,
                running,
                asked_at,
            );
            // A provider that dedupes on the key compares a repeated key's body
            // with the first one: it gets the first arguments again. So does a
            // generation a human was asked about: what executes is what was approved.
            if let (Action::Execute, Some(record), Some(args)) =
                (next.action, next.record.as_mut(), arguments)
                && !decide::dedupe_is_proof(cap)
                && !decide::arguments_frozen(record)
            {
                record.arguments = args.clone();
            }
            let disproved = latest.not_sent_reported
                && next
                    .record
                    .as_ref()
                    .is_some_and(|r| r.state == IntentState::Applied);
            let rejudge = Rejudge::default();
            match Box::pin(self.apply(next, rejudge, cap, actor, executor.clone(), arguments)).await
            {
                Err(StoreError::Conflict) => match self
                    .store
                    .load_generation(&current.key, current.generation)
                    .await?
                {
                    // A newer execution started since the read was asked: the
                    // answer speaks of the older attempt only, so it settles
                    // nothing; the caller hears where the intent stands now.
                    Some(fresh) if fresh.executions != current.executions => {
                        step = Some(Step::Settled(decide::standing_outcome(&fresh)));
                        break;
                    }
                    Some(fresh) => latest = self.across_gap(fresh),
                    None => return Err(StoreError::Conflict),
                },
                other => {
                    step = Some(other?);
                    if disproved {
                        crate::complete::not_sent_disproved(&latest, cap);
                    }
                    break;
                }
            }
        }
        // The caller hears the attempt count of the reconciliation (an execution
        // it led to included).
        Ok(match step.ok_or(StoreError::Conflict)? {
            Step::Settled(mut outcome) => {
                outcome.attempt = current.attempts;
                Step::Settled(outcome)
            }
            Step::Execute { claim, cap, .. } => Step::Execute {
                claim,
                cap,
                attempt: Some(current.attempts),
            },
            read @ Step::Read { .. } => read,
        })
    }
}
