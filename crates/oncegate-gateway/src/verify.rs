//! `oncegate verify`: the demo's proof, for a user's own registry.
//!
//! For every non-read capability: lint the key recipe for shapes that cannot be safe,
//! then run the scenarios through a real `Gate` on a scratch store, with a simulated
//! upstream standing in for the real one (no real effect is ever sent): timeout after
//! commit, re-plans that drift every significant argument in every way its normaliser
//! accepts, parallel identical calls, the attempt ceiling, the replay window, and
//! distinct business references. Policies are not exercised here (they decide *whether*
//! a call may run, not *how many times*); `check-config` validates them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use oncegate_core::config::{Capability, Category, OnUnknown, Registry};
use oncegate_core::decide::{EffectResult, ReconcileResult};
use oncegate_core::intent::Status;
use oncegate_core::normalise::{ArgPath, Normaliser};
use oncegate_core::template::Source;
use oncegate_store::{Call, Executor, Gate, IntentHandle, ManualClock, SqliteStore};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// One check's result.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it held.
    pub ok: bool,
    /// What was seen.
    pub detail: String,
}

/// One capability's report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The capability.
    pub capability: String,
    /// Recipe findings (each one fails the capability).
    pub findings: Vec<String>,
    /// The simulated scenarios.
    pub checks: Vec<Check>,
}

impl Report {
    /// Everything held.
    pub fn ok(&self) -> bool {
        self.findings.is_empty() && self.checks.iter().all(|c| c.ok)
    }
}

/// Recipe shapes that cannot be safe.
pub fn lint(cap: &Capability) -> Vec<String> {
    let mut findings = Vec::new();
    let key = &cap.key;
    if cap.category == Category::NonIdempotent
        && key.business_ref.is_none()
        && !key.significant.is_empty()
        && key
            .significant
            .iter()
            .all(|s| matches!(s.normaliser, Normaliser::Text { .. }))
    {
        findings.push("non_idempotent and keyed on nothing but free text: a re-plan that rewords the text is a new intent (declare a business_ref)".into());
    }
    if let (Some(path), Some(up)) = (&key.business_ref, &cap.upstream)
        && let Some(body) = &up.body
    {
        let mut templates = vec![&up.url];
        body.templates(&mut templates);
        let provided = templates.iter().flat_map(|t| t.sources()).any(|s| match s {
            Source::BusinessRef => true,
            Source::Arg(a) => a.root() == path.root(),
            _ => false,
        });
        if !provided {
            findings.push(format!("the business_ref `{path}` reaches the upstream through no argument of its body or URL: the provider cannot tie the effect to it"));
        }
    }
    for s in &key.significant {
        let leaf = s
            .path
            .as_str()
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let moneyish = ["amount", "price", "total", "cost", "fee", "sum"]
            .iter()
            .any(|m| leaf.contains(m));
        if moneyish
            && !matches!(
                s.normaliser,
                Normaliser::Money { .. } | Normaliser::Integer | Normaliser::Decimal
            )
        {
            findings.push(format!("`{}` looks like an amount but is normalised as {}: \"12.5\" and \"12.50\" would be two intents (use type = \"money\")", s.path, s.normaliser.type_name()));
        }
    }
    if cap.on_unknown == OnUnknown::Reconcile && cap.reconcile.is_none() {
        findings.push("on_unknown = \"reconcile\" but no [capabilities.reconcile] read is declared: every unknown outcome escalates to a human".into());
    }
    if cap.category == Category::Keyed
        && cap
            .upstream
            .as_ref()
            .is_some_and(|u| u.idempotency == oncegate_core::config::KeyThreading::None)
    {
        findings.push("keyed, but the upstream is not given the key".into());
    }
    findings
}

/// A simulated provider: it honours the idempotency key for `keyed` capabilities,
/// ignores it otherwise, and can commit then time out.
#[derive(Default)]
struct Simulated {
    honours_key: bool,
    effects: Mutex<Vec<String>>,
    stall_next: Mutex<bool>,
}

impl Simulated {
    fn count(&self) -> usize {
        self.effects.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Executor for Simulated {
    async fn execute(&self, intent: IntentHandle) -> EffectResult {
        let mut effects = self.effects.lock().unwrap_or_else(|e| e.into_inner());
        if !(self.honours_key && effects.contains(&intent.key)) {
            effects.push(intent.key.clone());
        }
        let id = format!("sim_{}", effects.len());
        drop(effects);
        let stalled =
            std::mem::take(&mut *self.stall_next.lock().unwrap_or_else(|e| e.into_inner()));
        if stalled {
            EffectResult::Unknown {
                message: "simulated: committed, then the answer timed out".into(),
            }
        } else {
            EffectResult::Applied {
                effect_ref: Some(id.clone()),
                result: json!({"id": id}),
            }
        }
    }

    async fn reconcile(&self, intent: IntentHandle) -> ReconcileResult {
        let effects = self.effects.lock().unwrap_or_else(|e| e.into_inner());
        match effects.iter().position(|k| *k == intent.key) {
            Some(i) => ReconcileResult::Found {
                effect_ref: Some(format!("sim_{}", i + 1)),
                result: json!({}),
            },
            None => ReconcileResult::NotFound,
        }
    }
}

fn set_path(args: &mut Value, path: &ArgPath, value: Value) {
    let mut current = args;
    let segments: Vec<&str> = path.as_str().split('.').collect();
    for (i, seg) in segments.iter().enumerate() {
        if i + 1 == segments.len() {
            current[*seg] = value;
            return;
        }
        if !current[*seg].is_object() {
            current[*seg] = Value::Object(Map::new());
        }
        current = &mut current[*seg];
    }
}

/// Sample arguments for a capability, with `n` varying the business reference, and the
/// drifted spellings of each significant argument (path, alternative values).
fn samples(cap: &Capability, n: usize) -> (Value, Vec<(ArgPath, Value)>) {
    let mut args = json!({});
    let mut drifts = Vec::new();
    if let Some(b) = &cap.key.business_ref {
        set_path(&mut args, b, json!(format!("VERIFY-{n}")));
    }
    for s in &cap.key.significant {
        // Without a business ref, the first significant argument carries `n`.
        let vary = cap.key.business_ref.is_none() && n > 0;
        let (value, alternatives): (Value, Vec<Value>) = match &s.normaliser {
            Normaliser::Money {
                currency_arg,
                default_currency,
                ..
            } => {
                let code = default_currency.map_or("USD", |c| c.code());
                if let Some(c) = currency_arg {
                    set_path(&mut args, c, json!(code));
                }
                let major = if vary {
                    format!("{}.50", 12 + n)
                } else {
                    "12.50".into()
                };
                let minor: i64 = major.replace('.', "").parse().unwrap_or(1250);
                let number: f64 = major.parse().unwrap_or(12.5);
                (
                    json!(major),
                    vec![
                        json!(number),
                        json!(format!("{major} {code}")),
                        json!(format!("{code} {major}")),
                        json!({"minor": minor, "currency": code}),
                    ],
                )
            }
            Normaliser::Email => {
                let local = if vary {
                    format!("ann{n}")
                } else {
                    "ann".into()
                };
                (
                    json!(format!("{local}@example.com")),
                    vec![
                        json!(format!(" {local}@EXAMPLE.com ")),
                        json!(format!("{local}@Example.Com")),
                    ],
                )
            }
            Normaliser::Text { case_fold } => {
                let base = if vary {
                    format!("verify text {n}")
                } else {
                    "verify text".into()
                };
                let mut alt = vec![json!(format!(
                    "  verify   text{} ",
                    if vary { format!(" {n}") } else { String::new() }
                ))];
                if *case_fold {
                    alt.push(json!(base.to_uppercase()));
                }
                (json!(base), alt)
            }
            Normaliser::Integer => {
                let v = 42 + n as i64;
                (json!(v), vec![json!(v.to_string()), json!(v as f64)])
            }
            Normaliser::Decimal => (
                json!(format!("{}.50", 1 + n)),
                vec![
                    json!(format!("{}.5", 1 + n)),
                    json!(format!("{}.500", 1 + n)),
                ],
            ),
            Normaliser::Enum { values } => {
                let v = values.first().cloned().unwrap_or_default();
                (
                    json!(v),
                    vec![json!(v.to_uppercase()), json!(format!(" {v}"))],
                )
            }
            Normaliser::Set => (
                json!(["a", "b", format!("c{n}")]),
                vec![json!([format!("c{n}"), "b", "a", "a"])],
            ),
            Normaliser::Id => {
                let v = 1000 + n as i64;
                (json!(v.to_string()), vec![json!(v)])
            }
        };
        set_path(&mut args, &s.path, value);
        for alt in alternatives {
            drifts.push((s.path.clone(), alt));
        }
    }
    args["note"] = json!("free text the model rewrites on every re-plan");
    (args, drifts)
}

async fn scratch_gate(
    registry: &Registry,
    clock: ManualClock,
) -> Result<(Gate, tempfile::TempDir), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = SqliteStore::open(&dir.path().join("verify.db"))
        .await
        .map_err(|e| e.to_string())?;
    Ok((
        Gate::with_store(registry.clone(), store, Arc::new(clock)).without_policies(),
        dir,
    ))
}

/// Verifies every non-read capability of `registry` as `principal`.
pub async fn verify(registry: &Registry, principal: &str) -> Result<Vec<Report>, String> {
    let mut reports = Vec::new();
    for cap in registry
        .capabilities()
        .iter()
        .filter(|c| c.category != Category::Read)
    {
        let mut checks = Vec::new();
        let call = |args: Value| Call {
            capability: cap.name.clone(),
            arguments: args,
            run_id: Some("verify-run".into()),
            step_id: Some("verify-step".into()),
        };
        let sim = |cap: &Capability| {
            Arc::new(Simulated {
                honours_key: matches!(cap.category, Category::Keyed | Category::IdempotentWrite),
                ..Simulated::default()
            })
        };

        // Timeout after commit, then a repeat.
        let (gate, _dir) = scratch_gate(registry, ManualClock::new(Timestamp::now())).await?;
        let up = sim(cap);
        *up.stall_next.lock().unwrap_or_else(|e| e.into_inner()) = true;
        let (args, drifts) = samples(cap, 0);
        let first = gate
            .invoke_with(principal, call(args.clone()), up.clone())
            .await
            .map_err(|e| e.to_string())?;
        let again = gate
            .invoke_with(principal, call(args.clone()), up.clone())
            .await
            .map_err(|e| e.to_string())?;
        checks.push(Check {
            name: "timeout after commit".into(),
            ok: up.count() == 1 && first.status == Status::Unknown,
            detail: format!(
                "first {}, repeat {}, {} effect(s)",
                first.status.as_str(),
                again.status.as_str(),
                up.count()
            ),
        });

        // Drifted re-plans.
        let (gate, _dir) = scratch_gate(registry, ManualClock::new(Timestamp::now())).await?;
        let up = sim(cap);
        gate.invoke_with(principal, call(args.clone()), up.clone())
            .await
            .map_err(|e| e.to_string())?;
        let mut moved = Vec::new();
        for (path, alt) in &drifts {
            let mut drifted = args.clone();
            set_path(&mut drifted, path, alt.clone());
            drifted["note"] = json!("reissue: the previous attempt failed");
            let o = gate
                .invoke_with(principal, call(drifted), up.clone())
                .await
                .map_err(|e| e.to_string())?;
            if o.status != Status::Replayed {
                moved.push(format!("{path} = {alt} -> {}", o.status.as_str()));
            }
        }
        checks.push(Check {
            name: "drifted re-plans".into(),
            ok: moved.is_empty() && up.count() == 1,
            detail: if moved.is_empty() {
                format!("{} drifted spellings all replayed", drifts.len())
            } else {
                moved.join("; ")
            },
        });

        // Parallel identical calls.
        let (gate, _dir) = scratch_gate(registry, ManualClock::new(Timestamp::now())).await?;
        let up = sim(cap);
        let calls: Vec<_> = (0..16)
            .map(|_| gate.invoke_with(principal, call(args.clone()), up.clone()))
            .collect();
        futures::future::join_all(calls).await;
        checks.push(Check {
            name: "16 parallel identical calls".into(),
            ok: up.count() == 1,
            detail: format!("{} effect(s)", up.count()),
        });

        // Attempt ceiling.
        if let Some(ceiling) = cap.attempt_ceiling {
            let (gate, _dir) = scratch_gate(registry, ManualClock::new(Timestamp::now())).await?;
            let up = sim(cap);
            let mut last = Status::Applied;
            for _ in 0..=ceiling {
                last = gate
                    .invoke_with(principal, call(args.clone()), up.clone())
                    .await
                    .map_err(|e| e.to_string())?
                    .status;
            }
            checks.push(Check {
                name: format!("attempt ceiling ({ceiling})"),
                ok: last == Status::Refused && up.count() == 1,
                detail: format!("call {} was {}", ceiling + 1, last.as_str()),
            });
        }

        // Replay window.
        let clock = ManualClock::new(Timestamp::now());
        let (gate, _dir) = scratch_gate(registry, clock.clone()).await?;
        let up = sim(cap);
        gate.invoke_with(principal, call(args.clone()), up.clone())
            .await
            .map_err(|e| e.to_string())?;
        clock.advance(cap.replay_window + SignedDuration::from_secs(1));
        let later = gate
            .invoke_with(principal, call(args.clone()), up.clone())
            .await
            .map_err(|e| e.to_string())?;
        checks.push(Check {
            name: format!("outside the {:#} window", cap.replay_window),
            ok: later.status != Status::Replayed && later.generation == 2,
            detail: format!(
                "a repeat after the window: {} (generation {})",
                later.status.as_str(),
                later.generation
            ),
        });

        // Distinct business references: no false dedupe.
        let (gate, _dir) = scratch_gate(registry, ManualClock::new(Timestamp::now())).await?;
        let up = sim(cap);
        let mut keys = HashMap::new();
        for n in 1..=3 {
            let (args, _) = samples(cap, n);
            let o = gate
                .invoke_with(principal, call(args), up.clone())
                .await
                .map_err(|e| e.to_string())?;
            keys.insert(o.key.map(|k| k.to_string()), o.status);
        }
        checks.push(Check {
            name: "3 distinct intents".into(),
            ok: keys.len() == 3 && up.count() == 3,
            detail: format!("{} key(s), {} effect(s)", keys.len(), up.count()),
        });

        reports.push(Report {
            capability: cap.name.clone(),
            findings: lint(cap),
            checks,
        });
    }
    Ok(reports)
}
