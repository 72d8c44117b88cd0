//! MCP upstreams: an effect or a reconciliation read as a `tools/call` on the
//! upstream's server (through the shared sessions of [`super::mcp`]), and how the call
//! ended classified the way HTTP answers are.

use oncegate_core::config::{Reconcile, ToolErrors, Upstream};
use oncegate_core::limits::{Limits, bound_answer};
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_engine::{Attempt, IntentHandle, LateAnswer};
use serde_json::{Map, Value, json};

use super::answer::{judge, pointer_string};
use super::executor::UpstreamExecutor;
use super::mcp;
use super::render::{Scope, check_path, render_tool_call, same_for_every_call};

impl UpstreamExecutor {
    /// The upstream tool's own input schema (MCP upstreams).
    pub async fn upstream_tool_schema(&self, up: &Upstream) -> Result<Map<String, Value>, String> {
        let nobody = self.nobody();
        let scope = Scope { intent: &nobody };
        let call = mcp::ToolCall {
            url: scope.url(&up.url).map_err(|e| e.to_string())?,
            headers: scope.headers(&up.headers).map_err(|e| e.to_string())?,
            tool: up.tool.clone().unwrap_or_default(),
            arguments: Map::new(),
            meta: Map::new(),
            timeout: up.timeout.unsigned_abs(),
            poolable: false,
            progress: None,
            secrets: self.secrets(),
        };
        mcp::tool_schema(self.client.clone(), call).await
    }

    pub(super) async fn execute_mcp(&self, up: &Upstream, intent: &IntentHandle) -> Attempt {
        let call = match render_tool_call(&self.cap, up, intent) {
            Ok(c) => c,
            Err(e) => {
                return Attempt::ended(EffectResult::NotSent {
                    message: e.to_string(),
                });
            }
        };
        let read = self.cap.category == oncegate_core::Category::Read;
        // Only effects hold shutdown and count as running; a read left running changes
        // nothing.
        let hold = if read { None } else { self.inflight.as_ref() };
        let running = match (&self.running, read) {
            (Some(r), false) => Some(r.enter(&intent.key)),
            _ => None,
        };
        let (end, late) = mcp::call_tool(
            self.client.clone(),
            call,
            self.sessions.as_ref(),
            hold,
            running,
        )
        .await;
        let limits = self.limits;
        let result = effect_of(up, read, &limits, end);
        let late = late.map(|rx| {
            let up = up.clone();
            let answer = async move {
                match rx.await {
                    Ok(end) => effect_of(&up, read, &limits, end),
                    Err(_) => EffectResult::Unknown {
                        message: "the late answer of the upstream call was lost".into(),
                    },
                }
            };
            LateAnswer {
                answer: Box::pin(answer),
                hold: self
                    .inflight
                    .as_ref()
                    .map(|i| Box::new(i.enter()) as Box<dyn std::any::Any + Send>),
            }
        });
        Attempt { result, late }
    }
}

/// Classifies how an effect's (or a read's) `tools/call` ended.
fn effect_of(up: &Upstream, read: bool, limits: &Limits, end: mcp::CallEnd) -> EffectResult {
    match end {
        mcp::CallEnd::Result(r) => {
            let structured = mcp::structured(&r);
            let stored = bound_tool_result(serde_json::to_value(&r).unwrap_or(Value::Null), limits);
            if r.is_error == Some(true) {
                let said = mcp::first_text(&r);
                // The registry's `rejected` pattern names the errors that prove the
                // tool refused before doing anything.
                let rejected = up
                    .rejected
                    .as_ref()
                    .is_some_and(|p| p.is_match(&mcp::all_text(&r)));
                match up.tool_errors {
                    // A read has no effect to be unsure about.
                    _ if read => EffectResult::Failed {
                        message: format!("the tool reported an error: {said}"),
                        result: stored,
                    },
                    _ if rejected => EffectResult::Failed {
                        message: format!("the tool rejected the call: {said}"),
                        result: stored,
                    },
                    ToolErrors::Failed => EffectResult::Failed {
                        message: format!("the tool reported an error: {said}"),
                        result: stored,
                    },
                    // SDKs turn any exception into a tool error, including one
                    // raised after the effect: it may have happened.
                    ToolErrors::Unknown => EffectResult::Unknown {
                        message: format!(
                            "the tool reported an error, which may have come after its effect: {said}"
                        ),
                    },
                }
            } else {
                EffectResult::Applied {
                    effect_ref: pointer_string(&structured, up.effect_ref.as_deref()),
                    result: stored,
                }
            }
        }
        mcp::CallEnd::NotSent(message) => EffectResult::NotSent { message },
        mcp::CallEnd::Rejected(message) => EffectResult::Failed {
            result: Value::Null,
            message,
        },
        mcp::CallEnd::Unknown(message) => EffectResult::Unknown { message },
    }
}

/// A stored tool result within the limits: itself, or its summary shaped as a tool
/// result (so replays and `record_of` read it like any other).
fn bound_tool_result(stored: Value, limits: &Limits) -> Value {
    let bounded = bound_answer(stored, limits);
    if bounded.get(oncegate_core::limits::TRUNCATED_KEY).is_some() {
        mcp::as_tool_result(&bounded)
    } else {
        bounded
    }
}

impl UpstreamExecutor {
    /// The reconciliation read as a read-only tool on the MCP server.
    pub(super) async fn reconcile_mcp(
        &self,
        rec: &Reconcile,
        intent: &IntentHandle,
    ) -> Result<ReconcileResult, String> {
        let scope = Scope { intent };
        let arguments = match &rec.arguments {
            Some(b) => scope.body(b).map_err(|e| e.to_string())?,
            None => json!({ "idempotency_key": intent.key }),
        };
        let Value::Object(arguments) = arguments else {
            return Err("MCP tool arguments must be an object".into());
        };
        let mut headers = rec.headers.clone();
        if let Some(up) = &self.cap.upstream {
            // The read authenticates like the write (same provider credentials).
            for (name, value) in &up.headers {
                headers.entry(name.clone()).or_insert_with(|| value.clone());
            }
        }
        let url = scope.url(&rec.url).map_err(|e| e.to_string())?;
        check_path(&url).map_err(|e| e.to_string())?;
        let call = mcp::ToolCall {
            url,
            headers: scope.headers(&headers).map_err(|e| e.to_string())?,
            tool: rec.tool.clone().unwrap_or_default(),
            arguments,
            meta: crate::trace::outgoing()
                .into_iter()
                .map(|(name, value)| (name, Value::String(value)))
                .collect(),
            timeout: rec.timeout.unsigned_abs(),
            poolable: same_for_every_call(&rec.url, headers.values()),
            progress: None,
            secrets: self.secrets(),
        };
        match mcp::call_tool(
            self.client.clone(),
            call,
            self.sessions.as_ref(),
            None,
            None,
        )
        .await
        .0
        {
            mcp::CallEnd::Result(r) if r.is_error == Some(true) => Err(format!(
                "the reconciliation tool reported an error: {}",
                mcp::first_text(&r)
            )),
            mcp::CallEnd::Result(r) => Ok(match judge(rec, mcp::structured(&r))? {
                // Stored as a tool result, so a reconciled replay reads like the original.
                ReconcileResult::Found { effect_ref, result } => ReconcileResult::Found {
                    effect_ref,
                    result: mcp::as_tool_result(&bound_answer(result, &self.limits)),
                },
                other => other,
            }),
            mcp::CallEnd::NotSent(m) | mcp::CallEnd::Rejected(m) | mcp::CallEnd::Unknown(m) => {
                Err(format!("reconciliation read failed: {m}"))
            }
        }
    }
}
