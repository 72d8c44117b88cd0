//! `oncegate verify`: the demo's proof, for a user's own registry.
//!
//! Why one file: the recipe lint and every scenario share the simulated upstream, hence
//! one long file.
//!
//! For every non-read capability: lint the key recipe for shapes that cannot be safe,
//! then run the scenarios through a real `Gate` on a scratch store, with a simulated
//! upstream standing in for the real one (no real effect is ever sent): timeout after
//! commit, a late commit (the provider commits after the timeout, and after the first
//! reconciliation read), re-plans that drift every significant argument in every way its
//! normaliser accepts, parallel identical calls, the attempt ceiling, the replay window,
//! and distinct business references. A `keyed` capability is also checked to really
//! thread its key upstream, and its re-execution to be deduplicated by it. Policies are not exercised here (they decide *whether*
//! a call may run, not *how many times*); `check-config` validates them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use oncegate_core::config::{Capability, Category, OnUnknown, Registry};
use oncegate_core::decide::{EffectResult, ReconcileResult};
use oncegate_core::intent::{IntentState, Status};
use oncegate_core::normalise::{ArgPath, Normaliser};
use oncegate_core::template::Source;
use oncegate_engine::{Call, Executor, Gate, IntentHandle, ManualClock};
use oncegate_store::{OpenMode, StoreOptions};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// An undeclared argument the simulated model rewrites on every call.
const FREE_TEXT: &str = "oncegate_verify_free_text";

/// The client key a coded orchestrator would send for a capability that requires one:
/// one per distinct request (a drifted re-plan of the same intent may carry a new key;
/// the key only must never name two intents).
fn client_key_for(cap: &Capability, args: &Value) -> Option<String> {
    cap.require_client_key
        .then(|| format!("verify-{}", oncegate_core::key::digest(args)))
}

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
    // A non_idempotent capability keyed on free text alone is a config error
    // (oncegate-core config/build): no registry that loads holds one.
    if let (Some(path), Some(up)) = (&key.business_ref, &cap.upstream)
        && let Some(body) = &up.body
    {
        let mut templates = vec![&up.url];
        templates.extend(up.headers.values());
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
        let moneyish = leaf
            .split(['_', '-'])
            .any(|t| ["amount", "price", "total", "cost", "fee", "sum"].contains(&t));
        if moneyish && matches!(s.normaliser, Normaliser::Text { .. }) {
            findings.push(format!("`{}` looks like an amount but is normalised as {}: \"12.5\" and \"12.50\" would be two intents (use type = \"money\")", s.path, s.normaliser.type_name()));
        }
    }
    if cap.on_unknown == OnUnknown::Reconcile && cap.reconcile.is_none() {
        findings.push("on_unknown = \"reconcile\" but no [capabilities.reconcile] read is declared: every unknown outcome escalates to a human".into());
    }
    if cap.replay_window.is_zero() {
        findings.push(
            "replay_window is 0: every repeat is a new intent, so nothing is ever replayed".into(),
        );
    }
    findings
}

/// A simulated provider: it honours the idempotency key for `keyed` capabilities,
/// ignores it otherwise, and can commit then time out, or time out and commit later.
#[derive(Default)]
struct Simulated {
    honours_key: bool,
    /// Every execute() call, deduped or not.
    executions: std::sync::atomic::AtomicUsize,
    effects: Mutex<Vec<String>>,
    stall_next: Mutex<bool>,
    /// The next execution times out before the provider commits; it commits on `land`.
    late_next: Mutex<bool>,
    late: Mutex<Vec<String>>,
    /// The keys every execution was sent, in order.
    keys: Mutex<Vec<String>>,
    /// The last intent executed (to render its request).
    last: Mutex<Option<IntentHandle>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Simulated {
    fn executions(&self) -> usize {
        self.executions.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn count(&self) -> usize {
        locked(&self.effects).len()
    }

    /// The provider commits what it was still processing, as a provider that honours
    /// the key (or not) does.
    fn land(&self) {
        let late = std::mem::take(&mut *locked(&self.late));
        let mut effects = locked(&self.effects);
        for key in late {
            if !(self.honours_key && effects.contains(&key)) {
                effects.push(key);
            }
        }
    }
}

impl Executor for Simulated {
    async fn execute(&self, intent: IntentHandle) -> EffectResult {
        self.executions
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        locked(&self.keys).push(intent.key.clone());
        *locked(&self.last) = Some(intent.clone());
        if std::mem::take(&mut *locked(&self.late_next)) {
            locked(&self.late).push(intent.key.clone());
            return EffectResult::Unknown {
                message: "simulated: timed out; the provider is still processing it".into(),
            };
        }
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

/// A provider that answers every call with 429: nothing happens, so each repeat executes
/// again and the attempt ceiling is what stops the loop.
#[derive(Default)]
struct RateLimited(std::sync::atomic::AtomicUsize);

impl Executor for RateLimited {
    async fn execute(&self, _intent: IntentHandle) -> EffectResult {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        EffectResult::NotSent {
            message: "simulated: 429, nothing was done".into(),
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
                unit,
                ..
            } => {
                let currency = default_currency.unwrap_or(iso_currency::Currency::USD);
                let code = currency.code();
                if let Some(c) = currency_arg {
                    set_path(&mut args, c, json!(code));
                }
                let exponent = u32::from(currency.exponent().unwrap_or(0));
                let minor: i64 = 1250 + if vary { 100 * n as i64 } else { 0 };
                let major = rust_decimal::Decimal::new(minor, exponent);
                let major_text = major.to_string();
                let number: Value = serde_json::from_str(&major.normalize().to_string())
                    .unwrap_or(json!(major_text));
                match unit {
                    oncegate_core::normalise::MoneyUnit::Major => (
                        json!(major_text),
                        vec![
                            number,
                            json!(format!("{major_text} {code}")),
                            json!(format!("{code} {major_text}")),
                            json!({"minor": minor, "currency": code}),
                        ],
                    ),
                    oncegate_core::normalise::MoneyUnit::Minor => (
                        json!(minor),
                        vec![
                            json!(minor.to_string()),
                            json!({"minor": minor, "currency": code}),
                            json!(format!("{major_text} {code}")),
                        ],
                    ),
                }
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
                let v = if values.is_empty() {
                    String::new()
                } else {
                    values[if vary { n % values.len() } else { 0 }].clone()
                };
                (
                    json!(v),
                    vec![json!(v.to_ascii_uppercase()), json!(format!(" {v}"))],
                )
            }
            Normaliser::Set => (
                json!(["a", "b", format!("c{n}")]),
                vec![json!([format!("c{n}"), "b", "a", "a"])],
            ),
            Normaliser::Id { .. } => {
                let v = 1000 + n as i64;
                (json!(v.to_string()), vec![json!(v)])
            }
            // Exact: no spelling of a JSON value drifts onto another but key order.
            Normaliser::Json => (json!({"a": n, "b": "x"}), vec![json!({"b": "x", "a": n})]),
        };
        set_path(&mut args, &s.path, value);
        for alt in alternatives {
            drifts.push((s.path.clone(), alt));
        }
    }
    args[FREE_TEXT] = json!("free text the model rewrites on every re-plan");
    (args, drifts)
}

async fn scratch_gate(
    registry: &Registry,
    clock: ManualClock,
) -> Result<(Gate, tempfile::TempDir), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = oncegate_store::open(
        "sqlite://verify.db",
        dir.path(),
        OpenMode::Create,
        StoreOptions::default(),
    )
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
        let mut findings = lint(cap);
        let checks = if cap.dry_run {
            vec![Check {
                name: "simulation".into(),
                ok: true,
                detail: "skipped: the capability is dry_run, it never executes".into(),
            }]
        } else {
            match simulate(registry, cap, principal).await {
                Ok(checks) => checks,
                Err(e) => {
                    findings.push(format!("the simulation could not run: {e}"));
                    Vec::new()
                }
            }
        };
        reports.push(Report {
            capability: cap.name.clone(),
            findings,
            checks,
        });
    }
    Ok(reports)
}

async fn simulate(
    registry: &Registry,
    cap: &Capability,
    principal: &str,
) -> Result<Vec<Check>, String> {
    let mut checks = Vec::new();
    let call = |args: Value| Call {
        capability: cap.name.clone(),
        client_key: client_key_for(cap, &args),
        arguments: args,
        run_id: Some("verify-run".into()),
        step_id: Some("verify-step".into()),
    };
    // The simulated provider dedupes on the key only where the capability says it may
    // (keyed or idempotent) and the key actually reaches it.
    let threaded = cap
        .upstream
        .as_ref()
        .is_none_or(|u| u.idempotency != oncegate_core::config::KeyThreading::None);
    let honours_key =
        threaded && matches!(cap.category, Category::Keyed | Category::IdempotentWrite);
    let sim = || {
        Arc::new(Simulated {
            honours_key,
            ..Simulated::default()
        })
    };
    let invoke = |gate: &Gate, args: Value, up: &Arc<Simulated>| {
        let (gate, up, c) = (gate.clone(), up.clone(), call(args));
        async move {
            gate.invoke_with(principal, c, up)
                .await
                .map_err(|e| e.to_string())
        }
    };

    // Timeout after commit, then a repeat.
    let (gate, _dir) = scratch_gate(registry, ManualClock::new(Timestamp::now())).await?;
    let up = sim();
    *up.stall_next.lock().unwrap_or_else(|e| e.into_inner()) = true;
    let (args, drifts) = samples(cap, 0);
    let first = invoke(&gate, args.clone(), &up).await?;
    let again = invoke(&gate, args.clone(), &up).await?;
    checks.push(Check {
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
    });

    checks.extend(late_commit(registry, cap, principal, honours_key, &args).await?);

    // Drifted re-plans.
    let (gate, _dir) = scratch_gate(registry, ManualClock::new(Timestamp::now())).await?;
    let up = sim();
    invoke(&gate, args.clone(), &up).await?;
    let mut moved = Vec::new();
    for (path, alt) in &drifts {
        let mut drifted = args.clone();
        set_path(&mut drifted, path, alt.clone());
        drifted[FREE_TEXT] = json!("reissue: the previous attempt failed");
        match invoke(&gate, drifted, &up).await {
            Ok(o) if o.status == Status::Replayed => {}
            Ok(o) => moved.push(format!("{path} = {alt} -> {}", o.status.as_str())),
            Err(e) => moved.push(format!("{path} = {alt} -> {e}")),
        }
    }
    checks.push(Check {
        name: "drifted re-plans".into(),
        ok: moved.is_empty() && up.executions() == 1,
        detail: if moved.is_empty() {
            format!("{} drifted spellings all replayed", drifts.len())
        } else {
            moved.join("; ")
        },
    });

    // Parallel identical calls: one execution, one applied, whatever the provider does.
    let (gate, _dir) = scratch_gate(registry, ManualClock::new(Timestamp::now())).await?;
    let up = sim();
    let outcomes =
        futures::future::join_all((0..16).map(|_| invoke(&gate, args.clone(), &up))).await;
    let applied = outcomes
        .iter()
        .filter(|o| matches!(o, Ok(o) if o.status == Status::Applied))
        .count();
    let errors = outcomes.iter().filter(|o| o.is_err()).count();
    checks.push(Check {
        name: "16 parallel identical calls".into(),
        ok: up.executions() == 1 && applied == 1 && errors == 0,
        detail: format!(
            "{} execution(s), {applied} applied, {errors} error(s)",
            up.executions()
        ),
    });

    // Attempt ceiling: it counts executions and reconciliations, never replays. A storm
    // of repeats of an applied call is all replays; a storm of executions (a provider
    // that keeps answering 429) trips the breaker at the ceiling.
    match cap.attempt_ceiling {
        Some(ceiling) if ceiling <= 1000 => {
            let (gate, _dir) = scratch_gate(registry, ManualClock::new(Timestamp::now())).await?;
            let up = sim();
            invoke(&gate, args.clone(), &up).await?;
            let mut replays = 0;
            for _ in 0..=ceiling {
                replays +=
                    u32::from(invoke(&gate, args.clone(), &up).await?.status == Status::Replayed);
            }
            // A scratch store of its own, so the same sample arguments are a new intent.
            let (gate, _dir) = scratch_gate(registry, ManualClock::new(Timestamp::now())).await?;
            let limited = Arc::new(RateLimited::default());
            let mut last = Status::Applied;
            for _ in 0..=ceiling {
                let c = call(args.clone());
                last = gate
                    .invoke_with(principal, c, limited.clone())
                    .await
                    .map_err(|e| e.to_string())?
                    .status;
            }
            let executed = limited.0.load(std::sync::atomic::Ordering::SeqCst);
            checks.push(Check {
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
            });
        }
        Some(ceiling) => checks.push(Check {
            name: format!("attempt ceiling ({ceiling})"),
            ok: true,
            detail: "not simulated: more than 1000 calls".into(),
        }),
        None => checks.push(Check {
            name: "attempt ceiling".into(),
            ok: true,
            detail: "none declared (repeats are never refused)".into(),
        }),
    }

    // Replay window. A `day` scope makes the next day a new intent anyway.
    if cap.key.scope == oncegate_core::config::Scope::Day
        || cap.replay_window > SignedDuration::from_hours(24 * 3650)
    {
        checks.push(Check {
            name: "replay window".into(),
            ok: true,
            detail: "not simulated for day scopes or windows over ten years".into(),
        });
    } else {
        let clock = ManualClock::new(Timestamp::now());
        let (gate, _dir) = scratch_gate(registry, clock.clone()).await?;
        let up = sim();
        invoke(&gate, args.clone(), &up).await?;
        clock.advance(cap.replay_window + SignedDuration::from_secs(1));
        let later = invoke(&gate, args.clone(), &up).await?;
        checks.push(Check {
            name: format!("outside the {:#} window", cap.replay_window),
            ok: later.status != Status::Replayed && later.generation == 2,
            detail: format!(
                "a repeat after the window: {} (generation {})",
                later.status.as_str(),
                later.generation
            ),
        });
    }

    // Distinct intents: no false dedupe.
    let (gate, _dir) = scratch_gate(registry, ManualClock::new(Timestamp::now())).await?;
    let up = sim();
    let mut keys = HashMap::new();
    for n in 1..=3 {
        let (args, _) = samples(cap, n);
        let o = invoke(&gate, args, &up).await?;
        keys.insert(o.key.map(|k| k.to_string()), o.status);
    }
    let recipe_varies = cap.key.business_ref.is_some() || !cap.key.significant.is_empty();
    checks.push(Check {
        name: "3 distinct intents".into(),
        ok: !recipe_varies || (keys.len() == 3 && up.count() == 3),
        detail: if recipe_varies {
            format!("{} key(s), {} effect(s)", keys.len(), up.count())
        } else {
            "no key recipe: every call with the same scope is one intent".into()
        },
    });
    Ok(checks)
}

/// The provider commits after the gateway's timeout, and after the first
/// reconciliation read: the agent repeats meanwhile (its repeat reads "not found"),
/// then the commit lands and the background sweep reads again. One effect, and the
/// intent ends `applied` where a reconciliation read can see it. For `keyed`
/// capabilities: the key really reaches the upstream, and the re-execution a repeat
/// makes is deduplicated by it.
async fn late_commit(
    registry: &Registry,
    cap: &Capability,
    principal: &str,
    honours_key: bool,
    args: &Value,
) -> Result<Vec<Check>, String> {
    let mut checks = Vec::new();
    let clock = ManualClock::new(Timestamp::now());
    let (gate, _dir) = scratch_gate(registry, clock.clone()).await?;
    let up = Arc::new(Simulated {
        honours_key,
        ..Simulated::default()
    });
    *locked(&up.late_next) = true;
    let call = || Call {
        capability: cap.name.clone(),
        arguments: args.clone(),
        run_id: Some("verify-run".into()),
        step_id: Some("verify-step".into()),
        client_key: client_key_for(cap, args),
    };
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
        checks.push(match placement {
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
        });
        let same_key = keys.windows(2).all(|w| w[0] == w[1]);
        checks.push(Check {
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
        });
    }
    Ok(checks)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The example registry, with `edit` applied, loaded from a scratch directory.
    fn example(edit: impl FnOnce(String) -> String) -> (Registry, tempfile::TempDir) {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            examples.join("policies.cedar"),
            dir.path().join("policies.cedar"),
        )
        .unwrap();
        let text = edit(std::fs::read_to_string(examples.join("payments.toml")).unwrap());
        let path = dir.path().join("oncegate.toml");
        std::fs::write(&path, text).unwrap();
        (oncegate_engine::config::load_registry(&path).unwrap(), dir)
    }

    fn check<'r>(reports: &'r [Report], capability: &str, name: &str) -> &'r Check {
        reports
            .iter()
            .find(|r| r.capability == capability)
            .unwrap_or_else(|| panic!("no report for {capability}"))
            .checks
            .iter()
            .find(|c| c.name.starts_with(name))
            .unwrap_or_else(|| panic!("no check `{name}` for {capability}"))
    }

    #[tokio::test]
    async fn the_example_registry_holds_under_late_commits() {
        let (registry, _dir) = example(|t| t);
        let reports = verify(&registry, "planner").await.unwrap();
        for r in &reports {
            assert!(r.ok(), "{r:#?}");
            let late = check(&reports, &r.capability, "late commit");
            assert!(late.detail.contains("1 effect(s)"), "{late:?}");
        }
        for keyed in ["charge_card", "refund"] {
            let threaded = check(&reports, keyed, "key threaded upstream");
            assert!(threaded.ok, "{threaded:?}");
            let dedupe = check(&reports, keyed, "re-execution deduplicated");
            assert!(
                dedupe.ok
                    && dedupe
                        .detail
                        .starts_with("2 execution(s) with the same key"),
                "a keyed repeat re-executes at once and the provider dedupes it: {dedupe:?}"
            );
        }
        // A non-keyed capability waits for the provider's record instead.
        let email = check(&reports, "send_email", "late commit");
        assert!(
            email.detail.contains("from 1 execution(s), then applied"),
            "{email:?}"
        );
    }

    #[tokio::test]
    async fn a_recipe_that_would_duplicate_under_a_late_commit_fails() {
        let (registry, _dir) = example(|t| {
            t.replace(
                "name = \"send_email\"\n",
                "name = \"send_email\"\nsettle_horizon = \"0s\"\n",
            ) + r#"
[[capabilities]]
name = "refund_by_get"
category = "keyed"
on_unknown = "retry"
[capabilities.key]
business_ref = "order_id"
[capabilities.upstream]
kind = "http"
method = "GET"
url = "http://127.0.0.1:9/refund"
idempotency = "argument"
idempotency_arg = "key"
body = { order_id = "{business_ref}" }
"#
        });
        let reports = verify(&registry, "planner").await.unwrap();
        let email = check(&reports, "send_email", "late commit");
        assert!(!email.ok, "{email:?}");
        assert!(
            email.detail.contains("2 effect(s)") && email.detail.contains("settle_horizon 0s"),
            "{email:?}"
        );
        let get = check(&reports, "refund_by_get", "key threaded upstream");
        assert!(
            !get.ok && get.detail.contains("never carries"),
            "a GET sends no body, so the key never arrives: {get:?}"
        );
        // The rest of the example still holds.
        let refund = check(&reports, "refund", "late commit");
        assert!(refund.ok, "{refund:?}");
    }
}
