//! `oncegate verify --live`: does the real provider honour the key oncegate sends it, and
//! does the capability's reconciliation read find the effect by what it is given?
//!
//! Meant for a provider's test mode or sandbox: it sends the capability's real request
//! twice, through the same executor `oncegate serve` uses for it (HTTP or MCP), with one
//! idempotency key, and compares the two effect references; then it runs the
//! reconciliation read (when one is declared) for that key and arguments. The store is
//! never opened and no intent is recorded: this checks the provider, not the gate (the
//! simulated `oncegate verify` checks the gate).
//!
//! The key is a fresh verification key, not the key oncegate derives for the arguments:
//! a later real call with the same arguments must never be answered with the
//! verification's effect, and every run must test the provider afresh (with the derived
//! key a second run would only replay the first run's effect). It has the derived key's
//! shape (64 lowercase hex characters, a SHA-256 of the derived key and a random nonce),
//! so a provider that limits a key's length or alphabet treats it as it treats real ones.

use std::sync::Arc;
use std::time::Duration;

use oncegate_core::config::{Capability, Category, KeyThreading, Registry};
use oncegate_core::key::{CallScope, IntentKey};
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_engine::{Executor, IntentHandle};
use oncegate_gateway::upstream::UpstreamExecutor;
use serde::Serialize;
use serde_json::{Value, json};

use crate::verify::Check;

/// Why a capability cannot be checked live. Nothing was sent.
#[derive(Debug)]
pub struct Refusal(pub String);

/// What a live check found.
#[derive(Debug, Serialize)]
pub struct LiveReport {
    /// The capability.
    pub capability: String,
    /// The verification key both requests carried (find them by it at the provider).
    pub idempotency_key: String,
    /// Both requests answered with one and the same effect.
    pub key_honoured: bool,
    /// The reconciliation read found that effect (`None`: no read is declared, or the
    /// first request made no effect to look for).
    pub reconcile_finds: Option<bool>,
    /// Each step, in order.
    pub checks: Vec<Check>,
}

impl LiveReport {
    /// The provider honours the key, and the reconciliation read (if any) works.
    pub fn ok(&self) -> bool {
        self.key_honoured && self.reconcile_finds != Some(false)
    }
}

/// A capability ready to be checked: its executor and the intent both requests carry.
pub struct Prepared {
    cap: Arc<Capability>,
    executor: UpstreamExecutor,
    intent: IntentHandle,
    /// Where the key travels in the request (empty: nowhere).
    placement: Vec<String>,
}

/// Everything that can be refused before a byte is sent: the capability, its category,
/// its upstream and effect reference, the arguments and the key derived from them.
pub fn prepare(
    registry: &Registry,
    name: &str,
    principal: &str,
    args: &str,
) -> Result<Prepared, Refusal> {
    let refuse = |why: String| Err(Refusal(why));
    let Some(cap) = registry.capability(name) else {
        return refuse(format!("no capability `{name}` in the registry"));
    };
    match cap.category {
        Category::Keyed | Category::IdempotentWrite => {}
        Category::Read => {
            return refuse(format!(
                "`{name}` is a `read`: it has no effect whose deduplication could be checked"
            ));
        }
        Category::NonIdempotent => {
            return refuse(format!(
                "`{name}` is `non_idempotent`: its provider is declared not to dedupe, so sending it twice would make two effects and prove nothing (oncegate's own dedupe protects it: `oncegate verify` without --live checks that). Declare it `keyed` only once the provider honours a key"
            ));
        }
    }
    let Some(up) = &cap.upstream else {
        return refuse(format!(
            "`{name}` is claim-only (no [capabilities.upstream]): your code makes the call, so oncegate has no request to send"
        ));
    };
    if up.effect_ref.is_none() {
        return refuse(format!(
            "`{name}`'s upstream declares no effect_ref: there is no effect reference to compare between the two requests (declare e.g. effect_ref = \"/id\")"
        ));
    }
    let arguments: Value = serde_json::from_str(args)
        .map_err(|e| Refusal(format!("--args is not valid JSON: {e}")))?;
    oncegate_core::normalise::check_exact_numbers(args.as_bytes())
        .map_err(|e| Refusal(format!("--args: {e}")))?;
    let derived = oncegate_core::key::derive(
        &registry.gateway.tenant,
        principal,
        cap,
        &arguments,
        &CallScope::default(),
        jiff::Timestamp::now(),
        &registry.gateway.time_zone,
    )
    .map_err(|e| Refusal(format!("--args: {e}")))?;
    let nonce: [u8; 16] = rand::random();
    let key = oncegate_core::key::digest(&json!({
        "verify": derived.key.as_str(),
        "nonce": nonce,
    }));
    let intent = IntentHandle {
        key: key.clone(),
        intent_key: IntentKey::from_hex(key),
        generation: 1,
        capability: cap.name.clone(),
        arguments,
        normalised: Value::Object(derived.normalised),
        business_ref: derived.business_ref,
        run_id: None,
        step_id: None,
    };
    let executor = UpstreamExecutor::new(oncegate_gateway::server::http_client(), Arc::clone(cap))
        .with_limits(registry.gateway.limits);
    executor.admit(&intent).map_err(Refusal)?;
    let placement = executor.key_placement(&intent).map_err(Refusal)?;
    if placement.is_empty() && up.idempotency != KeyThreading::None {
        return refuse(format!(
            "`{name}`'s request never carries the key (a `GET` sends no body; an `argument` key needs an object body): the provider could not dedupe the repeat"
        ));
    }
    Ok(Prepared {
        cap: Arc::clone(cap),
        executor,
        intent,
        placement,
    })
}

impl Prepared {
    /// The verification key both requests carry.
    pub fn key(&self) -> &str {
        &self.intent.key
    }

    /// Sends the request twice with one key, compares, then reads the effect back,
    /// waiting up to `read_within` for the read to find it (providers index late).
    pub async fn run(&self, read_within: Duration) -> LiveReport {
        let mut report = LiveReport {
            capability: self.cap.name.clone(),
            idempotency_key: self.intent.key.clone(),
            key_honoured: false,
            reconcile_finds: None,
            checks: Vec::new(),
        };
        let first = self.executor.execute(self.intent.clone()).await;
        let first_ref = match self.applied(&first) {
            Ok(r) => {
                report.checks.push(Check {
                    name: "first request".into(),
                    ok: true,
                    detail: format!("applied as {r} (key sent in {})", self.sent_in()),
                });
                r
            }
            Err(why) => {
                report.checks.push(Check {
                    name: "first request".into(),
                    ok: false,
                    detail: format!("{why}; nothing more was sent"),
                });
                return report;
            }
        };
        let repeat = self.executor.execute(self.intent.clone()).await;
        let (honoured, detail) = self.compare(&first_ref, &repeat);
        report.key_honoured = honoured;
        report.checks.push(Check {
            name: "repeat with the same key".into(),
            ok: honoured,
            detail,
        });
        if self.cap.reconcile.is_some() {
            let (found, detail) = self.read_back(&first_ref, read_within).await;
            report.reconcile_finds = Some(found);
            report.checks.push(Check {
                name: "reconciliation read".into(),
                ok: found,
                detail,
            });
        } else {
            report.checks.push(Check {
                name: "reconciliation read".into(),
                ok: true,
                detail: "none declared: an unknown outcome is retried with the same key or escalated, never looked up".into(),
            });
        }
        report
    }

    fn sent_in(&self) -> String {
        if self.placement.is_empty() {
            "nothing: idempotency = \"none\"".into()
        } else {
            self.placement.join(" and ")
        }
    }

    fn pointer(&self) -> &str {
        self.cap
            .upstream
            .as_ref()
            .and_then(|u| u.effect_ref.as_deref())
            .unwrap_or_default()
    }

    /// The effect reference of an applied answer, or why there is none.
    fn applied(&self, result: &EffectResult) -> Result<String, String> {
        match result {
            EffectResult::Applied {
                effect_ref: Some(r),
                ..
            } => Ok(r.clone()),
            EffectResult::Applied {
                effect_ref: None,
                result,
            } => Err(format!(
                "applied, but the answer has nothing at effect_ref `{}` to compare: {}",
                self.pointer(),
                preview(result)
            )),
            EffectResult::Failed { message, result } => {
                Err(format!("failed: {message}: {}", preview(result)))
            }
            EffectResult::Unknown { message } => Err(format!("outcome unknown: {message}")),
            EffectResult::NotSent { message } => Err(format!("not sent: {message}")),
        }
    }

    /// Whether the repeat answered the first effect, and what to say about it.
    fn compare(&self, first: &str, repeat: &EffectResult) -> (bool, String) {
        let honours = if self.placement.is_empty() {
            "the write is idempotent without a key"
        } else {
            "the provider honours the key"
        };
        match self.applied(repeat) {
            Ok(r) if r == first => (true, format!("applied as {r} again: {honours}")),
            Ok(r) => (
                false,
                format!(
                    "applied as {r}, a second effect beside {first}: the provider does not honour the key (it made two effects for one key)"
                ),
            ),
            Err(why) => (
                false,
                format!(
                    "{why}: the provider does not answer a repeated key with the first effect, so oncegate cannot rely on it to dedupe a re-execution"
                ),
            ),
        }
    }

    /// Runs the reconciliation read until it finds `effect` or `within` has passed.
    async fn read_back(&self, effect: &str, within: Duration) -> (bool, String) {
        let until = tokio::time::Instant::now() + within;
        let mut reads = 0;
        loop {
            reads += 1;
            let answer = self.executor.reconcile(self.intent.clone()).await;
            let verdict = match &answer {
                ReconcileResult::Found {
                    effect_ref: Some(r),
                    ..
                } if r == effect => {
                    return (
                        true,
                        format!("found {r} by the key and arguments it is given"),
                    );
                }
                ReconcileResult::Found {
                    effect_ref: None, ..
                } => {
                    return (
                        true,
                        format!(
                            "found an effect (the read declares no effect_ref, so whether it is {effect} is not compared)"
                        ),
                    );
                }
                ReconcileResult::Found {
                    effect_ref: Some(r),
                    ..
                } => format!("found {r}, not {effect}: it reads another effect"),
                ReconcileResult::NotFound => {
                    format!("did not find {effect}: the read answers \"not found\" for it")
                }
                ReconcileResult::Undecidable { message } => {
                    format!("could not tell: {message}")
                }
            };
            if tokio::time::Instant::now() >= until {
                return (
                    false,
                    format!(
                        "{verdict} ({reads} read(s) over {:?}): an unknown outcome of this capability could not be settled from the provider's record",
                        within
                    ),
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// A short view of an answer for a message.
fn preview(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}
