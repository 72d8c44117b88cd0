//! The scenarios `oncegate verify` runs for one capability, one method each over its
//! [`World`], each on a scratch gate of its own with a simulated provider: timeout
//! after commit, a late commit, drifted re-plans, parallel identical calls, the attempt
//! ceiling, the replay window, and distinct intents.

use std::collections::HashMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use oncegate_core::config::{Category, OnUnknown, Scope};
use oncegate_core::intent::{IntentState, Status};
use oncegate_engine::ManualClock;
use serde_json::json;

use super::report::Check;
use super::samples::{FREE_TEXT, samples, set_path};
use super::simulated::{RateLimited, Simulated, locked};
use super::world::World;

impl World<'_> {
    /// Every scenario's checks, in order.
    pub(super) async fn simulate(&self) -> Result<Vec<Check>, String> {
        let mut checks = vec![self.timeout_after_commit().await?];
        checks.extend(self.late_commit().await?);
        checks.push(self.drifted_replans().await?);
        checks.push(self.parallel_calls().await?);
        checks.push(self.attempt_ceiling().await?);
        checks.push(self.replay_window().await?);
        checks.push(self.distinct_intents().await?);
        Ok(checks)
    }

    /// Timeout after commit, then a repeat.
    async fn timeout_after_commit(&self) -> Result<Check, String> {
        let (gate, _dir) = self.fresh_gate().await?;
        let up = self.sim();
        *up.stall_next.lock().unwrap_or_else(|e| e.into_inner()) = true;
        let args = &self.args;
        let first = self.invoke(&gate, args.clone(), &up).await?;
        let again = self.invoke(&gate, args.clone(), &up).await?;
        Ok(Check {
            name: "timeout after commit".into(),
            // Unknown, or at once held for a human (`escalate` with no read to ask).
            ok: up.count() == 1
                && matches!(first.status, Status::Unknown | Status::PendingApproval)
                && again.status != Status::Applied,
            detail: format!(
                "first {}, repeat {}, {} effect(s) from {} execution(s)",
                first.status.as_str(),
                again.status.as_str(),
                up.count(),
                up.executions()
            ),
        })
    }

    /// Drifted re-plans: every spelling the normalisers accept is a replay.
    async fn drifted_replans(&self) -> Result<Check, String> {
        let (gate, _dir) = self.fresh_gate().await?;
        let up = self.sim();
        let args = &self.args;
        self.invoke(&gate, args.clone(), &up).await?;
        let mut moved = Vec::new();
        for (path, alt) in &self.drifts {
            let mut drifted = args.clone();
            set_path(&mut drifted, path, alt.clone());
            drifted[FREE_TEXT] = json!("reissue: the previous attempt failed");
            match self.invoke(&gate, drifted, &up).await {
                Ok(o) if o.status == Status::Replayed => {}
                Ok(o) => moved.push(format!("{path} = {alt} -> {}", o.status.as_str())),
                Err(e) => moved.push(format!("{path} = {alt} -> {e}")),
            }
        }
        Ok(Check {
            name: "drifted re-plans".into(),
            ok: moved.is_empty() && up.executions() == 1,
            detail: if moved.is_empty() {
                format!("{} drifted spellings all replayed", self.drifts.len())
            } else {
                moved.join("; ")
            },
        })
    }

    /// Parallel identical calls: one execution, one applied, whatever the provider does.
    async fn parallel_calls(&self) -> Result<Check, String> {
        let (gate, _dir) = self.fresh_gate().await?;
        let up = self.sim();
        let outcomes =
            futures::future::join_all((0..16).map(|_| self.invoke(&gate, self.args.clone(), &up)))
                .await;
        let applied = outcomes
            .iter()
            .filter(|o| matches!(o, Ok(o) if o.status == Status::Applied))
            .count();
        let errors = outcomes.iter().filter(|o| o.is_err()).count();
        Ok(Check {
            name: "16 parallel identical calls".into(),
            ok: up.executions() == 1 && applied == 1 && errors == 0,
            detail: format!(
                "{} execution(s), {applied} applied, {errors} error(s)",
                up.executions()
            ),
        })
    }

    /// Attempt ceiling: it counts executions and reconciliations, never replays. A storm
    /// of repeats of an applied call is all replays; a storm of executions (a provider
    /// that keeps answering 429) trips the breaker at the ceiling.
    async fn attempt_ceiling(&self) -> Result<Check, String> {
        let ceiling = match self.cap.attempt_ceiling {
            Some(ceiling) if ceiling <= 1000 => ceiling,
            Some(ceiling) => {
                return Ok(Check {
                    name: format!("attempt ceiling ({ceiling})"),
                    ok: true,
                    detail: "not simulated: more than 1000 calls".into(),
                });
            }
            None => {
                return Ok(Check {
                    name: "attempt ceiling".into(),
                    ok: true,
                    detail: "none declared (repeats are never refused)".into(),
                });
            }
        };
        let args = &self.args;
        let (gate, _dir) = self.fresh_gate().await?;
        let up = self.sim();
        self.invoke(&gate, args.clone(), &up).await?;
        let mut replays = 0;
        for _ in 0..=ceiling {
            replays +=
                u32::from(self.invoke(&gate, args.clone(), &up).await?.status == Status::Replayed);
        }
        // A scratch store of its own, so the same sample arguments are a new intent.
        let (gate, _dir) = self.fresh_gate().await?;
        let limited = Arc::new(RateLimited::default());
        let mut last = Status::Applied;
        for _ in 0..=ceiling {
            let c = self.call(args.clone());
            last = gate
                .invoke_with(self.principal, c, limited.clone())
                .await
                .map_err(|e| e.to_string())?
                .status;
        }
        let executed = limited.0.load(std::sync::atomic::Ordering::SeqCst);
        Ok(Check {
            name: format!("attempt ceiling ({ceiling})"),
            ok: replays == ceiling + 1
                && up.executions() == 1
                && last == Status::Refused
                && executed == ceiling as usize,
            detail: format!(
                "{replays} repeats of an applied call replayed; against a provider answering 429, call {} was {} after {executed} executions",
                u64::from(ceiling) + 1,
                last.as_str()
            ),
        })
    }

    /// Replay window: a repeat after it is a new generation. A `day` scope makes the
    /// next day a new intent anyway.
    async fn replay_window(&self) -> Result<Check, String> {
        let cap = self.cap;
        if cap.key.scope == Scope::Day || cap.replay_window > SignedDuration::from_hours(24 * 3650)
        {
            return Ok(Check {
                name: "replay window".into(),
                ok: true,
                detail: "not simulated for day scopes or windows over ten years".into(),
            });
        }
        let clock = ManualClock::new(Timestamp::now());
        let (gate, _dir) = self.scratch_gate(clock.clone()).await?;
        let up = self.sim();
        self.invoke(&gate, self.args.clone(), &up).await?;
        clock.advance(cap.replay_window + SignedDuration::from_secs(1));
        let later = self.invoke(&gate, self.args.clone(), &up).await?;
        Ok(Check {
            name: format!("outside the {:#} window", cap.replay_window),
            ok: later.status != Status::Replayed && later.generation == 2,
            detail: format!(
                "a repeat after the window: {} (generation {})",
                later.status.as_str(),
                later.generation
            ),
        })
    }

    /// Distinct intents: no false dedupe.
    async fn distinct_intents(&self) -> Result<Check, String> {
        let cap = self.cap;
        let (gate, _dir) = self.fresh_gate().await?;
        let up = self.sim();
        let mut keys = HashMap::new();
        for n in 1..=3 {
            let (args, _) = samples(cap, n);
            let o = self.invoke(&gate, args, &up).await?;
            keys.insert(o.key.map(|k| k.to_string()), o.status);
        }
        let recipe_varies = cap.key.business_ref.is_some() || !cap.key.significant.is_empty();
        Ok(Check {
            name: "3 distinct intents".into(),
            ok: !recipe_varies || (keys.len() == 3 && up.count() == 3),
            detail: if recipe_varies {
                format!("{} key(s), {} effect(s)", keys.len(), up.count())
            } else {
                "no key recipe: every call with the same scope is one intent".into()
            },
        })
    }

    /// The provider commits after the gateway's timeout, and after the first
    /// reconciliation read: the agent repeats meanwhile (its repeat reads "not found"),
    /// then the commit lands and the background sweep reads again. One effect, and the
    /// intent ends `applied` where a reconciliation read can see it. For `keyed`
    /// capabilities: the key really reaches the upstream, and the re-execution a repeat
    /// makes is deduplicated by it.
    async fn late_commit(&self) -> Result<Vec<Check>, String> {
        let (cap, principal) = (self.cap, self.principal);
        let mut checks = Vec::new();
        let clock = ManualClock::new(Timestamp::now());
        let (gate, _dir) = self.scratch_gate(clock.clone()).await?;
        let up = self.sim();
        *locked(&up.late_next) = true;
        let call = || self.call(self.args.clone());
        let first = gate
            .invoke_with(principal, call(), up.clone())
            .await
            .map_err(|e| e.to_string())?;
        // The provider takes as long again as the timeout: the agent repeats before that.
        let timeout = cap
            .upstream
            .as_ref()
            .map_or(SignedDuration::from_secs(10), |u| u.timeout);
        clock.advance(SignedDuration::from_secs(1).min(timeout));
        let repeat = gate
            .invoke_with(principal, call(), up.clone())
            .await
            .map_err(|e| e.to_string())?;
        clock.advance(timeout);
        up.land();
        // Nobody repeats again: the sweep reads the provider's record.
        let mut state = None;
        if let Some(key) = &first.key {
            let store = gate.store();
            if let Some(record) = oncegate_store::IntentsRead::load(store, key)
                .await
                .map_err(|e| e.to_string())?
            {
                gate.sweep_one(&record, up.clone())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            state = oncegate_store::IntentsRead::load(store, key)
                .await
                .map_err(|e| e.to_string())?
                .map(|r| r.state);
        }
        let effects = up.count();
        let reconciles = cap.on_unknown == OnUnknown::Reconcile && cap.reconcile.is_some();
        let settled = !reconciles || state == Some(IntentState::Applied);
        checks.push(Check {
            name: "late commit (after the timeout and the first reconciliation read)".into(),
            ok: effects == 1 && settled,
            detail: format!(
                "first {}, a repeat before the commit {}, {effects} effect(s) from {} execution(s), then {}{}",
                first.status.as_str(),
                repeat.status.as_str(),
                up.executions(),
                state.map_or("no intent", IntentState::as_str),
                if effects > 1 {
                    format!(
                        ": the repeat executed again before the attempt could land (settle_horizon {:#})",
                        cap.settle_horizon
                    )
                } else {
                    String::new()
                }
            ),
        });

        if cap.category == Category::Keyed {
            checks.extend(self.key_checks(&up, effects));
        }
        Ok(checks)
    }

    /// For a `keyed` capability, after the late commit: the key really reaches the
    /// upstream, and the re-execution a repeat made was deduplicated by it.
    fn key_checks(&self, up: &Simulated, effects: usize) -> Vec<Check> {
        let (cap, honours_key) = (self.cap, self.honours_key);
        let keys = locked(&up.keys).clone();
        let handle = locked(&up.last).clone();
        let placement = match (&cap.upstream, handle) {
            (Some(_), Some(h)) => oncegate_gateway::upstream::UpstreamExecutor::new(
                oncegate_gateway::server::http_client(),
                Arc::new(cap.clone()),
            )
            .key_placement(&h),
            (None, _) => Ok(vec!["the in-process effect's IntentHandle::key".into()]),
            (Some(_), None) => Err("nothing was executed".into()),
        };
        let threaded = match placement {
            Ok(at) if !at.is_empty() => Check {
                name: "key threaded upstream".into(),
                ok: true,
                detail: format!("the intent key is sent in {}", at.join(" and ")),
            },
            Ok(_) => Check {
                name: "key threaded upstream".into(),
                ok: false,
                detail: "the request never carries the intent key, so the provider cannot dedupe a re-execution (a `GET` sends no body; an `argument` key needs an object body)".into(),
            },
            Err(e) => Check {
                name: "key threaded upstream".into(),
                ok: false,
                detail: format!("the request could not be rendered: {e}"),
            },
        };
        let same_key = keys.windows(2).all(|w| w[0] == w[1]);
        let deduplicated = Check {
            name: "re-execution deduplicated by the key".into(),
            ok: honours_key && same_key && effects == 1,
            detail: format!(
                "{} execution(s) with {} key(s), {effects} effect(s){}",
                keys.len(),
                if same_key { "the same" } else { "different" },
                if honours_key {
                    ""
                } else {
                    ": the simulated provider could not dedupe, the key does not reach it"
                }
            ),
        };
        vec![threaded, deduplicated]
    }
}
