//! The executor of one capability's upstream: the engine's [`Executor`] (execute,
//! admit, reconcile), choosing HTTP ([`super::http`]) or MCP ([`super::tool_call`]),
//! recording the upstream's time, and redacting the gateway's credentials from every
//! message of a result.

use std::sync::Arc;

use oncegate_core::config::{Capability, KeyThreading, Upstream, UpstreamKind};
use oncegate_core::limits::Limits;
use oncegate_core::redact::Redactor;
use oncegate_core::template::Template;
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_engine::{Attempt, Executor, IntentHandle, LateAnswer};
use tracing::Instrument;

use super::client::secrets;
use super::mcp;
use super::render::{Scope, check_path, nobody};
use crate::inflight::InFlight;

/// Executes one capability's upstream (HTTP or MCP) and its reconciliation read.
pub struct UpstreamExecutor {
    pub(super) client: reqwest::Client,
    pub(super) cap: Arc<Capability>,
    /// Where a call left running past its timeout registers, so shutdown waits for it.
    pub(super) inflight: Option<InFlight>,
    /// Where an effect's MCP call is listed until it has really ended.
    pub(super) running: Option<mcp::RunningCalls>,
    /// Connected MCP clients to reuse (none: connect per call).
    pub(super) sessions: Option<mcp::Sessions>,
    /// What an answer may be before only its summary is stored.
    pub(super) limits: Limits,
}

impl UpstreamExecutor {
    /// An executor for `cap`, sharing `client`'s connection pool.
    pub fn new(client: reqwest::Client, cap: Arc<Capability>) -> Self {
        Self {
            client,
            cap,
            inflight: None,
            running: None,
            sessions: None,
            limits: Limits::default(),
        }
    }

    /// Stores answers within `limits` (the registry's `[gateway]` limits).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Registers MCP calls left running past their timeout with `inflight`.
    pub fn with_inflight(mut self, inflight: InFlight) -> Self {
        self.inflight = Some(inflight);
        self
    }

    /// Lists effects' MCP calls in `running` until they have really ended (shared by
    /// every executor of a gateway, see [`Executor::attempt_running`]).
    pub fn with_running(mut self, running: mcp::RunningCalls) -> Self {
        self.running = Some(running);
        self
    }

    /// Sends MCP calls through the connected clients in `sessions` (shared by every
    /// executor of a gateway) instead of connecting per call.
    pub fn with_sessions(mut self, sessions: mcp::Sessions) -> Self {
        self.sessions = Some(sessions);
        self
    }
}

impl Executor for UpstreamExecutor {
    /// A capability without an upstream is claim-only: its callers execute it.
    fn executes(&self) -> bool {
        self.cap.upstream.is_some()
    }

    async fn execute(&self, intent: IntentHandle) -> EffectResult {
        self.execute_attempt(intent).await.result
    }

    fn attempt_running(&self, intent: &IntentHandle) -> bool {
        self.running
            .as_ref()
            .is_some_and(|r| r.is_running(&intent.key))
    }

    async fn execute_attempt(&self, intent: IntentHandle) -> Attempt {
        let Some(up) = self.cap.upstream.as_ref() else {
            return Attempt::ended(EffectResult::NotSent {
                message: format!("capability {} has no upstream", self.cap.name),
            });
        };
        let span = crate::trace::upstream_span(&self.cap, up.kind);
        let attempt = self.attempt(up, intent).instrument(span.clone()).await;
        crate::trace::record_effect(&span, &attempt.result);
        self.redacted(attempt)
    }
    fn admit(&self, intent: &IntentHandle) -> Result<(), String> {
        let scope = Scope { intent };
        let http_up = self
            .cap
            .upstream
            .as_ref()
            .filter(|u| u.kind == UpstreamKind::Http)
            .map(|u| &u.url);
        let http_rec = self
            .cap
            .reconcile
            .as_ref()
            .filter(|r| r.kind == UpstreamKind::Http)
            .map(|r| &r.url);
        for template in http_up.into_iter().chain(http_rec) {
            // A template that cannot be rendered (an unset variable) is reported by the
            // execution itself, as nothing sent.
            if let Ok(url) = scope.url(template) {
                check_path(&url).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    async fn reconcile(&self, intent: IntentHandle) -> ReconcileResult {
        let Some(rec) = self.cap.reconcile.as_ref() else {
            return ReconcileResult::Undecidable {
                message: "no reconciliation read is declared".into(),
            };
        };
        let span = crate::trace::reconcile_span(&self.cap, rec.kind);
        let read = async {
            match rec.kind {
                UpstreamKind::Http => self.reconcile_read(rec, &intent).await,
                UpstreamKind::Mcp => self.reconcile_mcp(rec, &intent).await,
            }
        }
        .instrument(span.clone())
        .await;
        let answer = match read {
            Ok(r) => r,
            Err(message) => ReconcileResult::Undecidable {
                message: self.secrets().text(&message),
            },
        };
        crate::trace::record_reconcile(&span, &answer);
        answer
    }
}

impl UpstreamExecutor {
    /// What this capability's requests are filled with from the environment: no
    /// message of its results may show it (read when a result is an error).
    pub(super) fn secrets(&self) -> Redactor {
        secrets(self.cap.templates())
    }

    /// `attempt` with the messages of its result and of its late answer redacted (the
    /// provider's answer itself is stored as it came).
    fn redacted(&self, attempt: Attempt) -> Attempt {
        let Attempt { result, late } = attempt;
        let secrets = self.secrets();
        let result = redact_result(result, &secrets);
        let late = late.map(|late| LateAnswer {
            answer: Box::pin(async move { redact_result(late.answer.await, &secrets) }),
            hold: late.hold,
        });
        Attempt { result, late }
    }

    /// One upstream call (HTTP or MCP), inside its trace span.
    async fn attempt(&self, up: &Upstream, intent: IntentHandle) -> Attempt {
        let started = std::time::Instant::now();
        if up.kind == UpstreamKind::Mcp {
            let attempt = self.execute_mcp(up, &intent).await;
            metrics::histogram!("oncegate_upstream_seconds", "capability" => self.cap.name.clone())
                .record(started.elapsed().as_secs_f64());
            return attempt;
        }
        // An HTTP request ends with its timeout (reqwest drops it): no late answer.
        let req = match self.request(up, &intent) {
            Ok(r) => r,
            Err(e) => {
                return Attempt::ended(EffectResult::NotSent {
                    message: e.to_string(),
                });
            }
        };
        let result = self.send_http(up, req).await;
        metrics::histogram!("oncegate_upstream_seconds", "capability" => self.cap.name.clone())
            .record(started.elapsed().as_secs_f64());
        Attempt::ended(result)
    }

    /// Where the intent key reaches the upstream in the request this executor sends
    /// for `intent` (empty: nowhere). It renders the body the way [`Executor::execute`]
    /// does, so an `argument` key that a non-object body or a `GET` (no body) would
    /// silently drop is found (`oncegate verify`'s check of a `keyed` capability).
    pub fn key_placement(&self, intent: &IntentHandle) -> Result<Vec<String>, String> {
        let up = self
            .cap
            .upstream
            .as_ref()
            .ok_or_else(|| format!("capability {} has no upstream", self.cap.name))?;
        let scope = Scope { intent };
        let body = match &up.body {
            Some(b) => scope.body(b).map_err(|e| e.to_string())?,
            None => intent.arguments.clone(),
        };
        let mut at = Vec::new();
        match (up.kind, up.idempotency) {
            (UpstreamKind::Http, KeyThreading::Header) => {
                at.push(format!("the {} header", up.idempotency_header));
            }
            (UpstreamKind::Mcp, t) if t != KeyThreading::None => {
                at.push(format!("_meta[\"{}\"]", mcp::IDEMPOTENCY_META_KEY));
            }
            _ => {}
        }
        let body_sent = up.kind == UpstreamKind::Mcp || !up.method.eq_ignore_ascii_case("GET");
        let argument = up.kind == UpstreamKind::Mcp || up.idempotency == KeyThreading::Argument;
        if let Some(arg) = &up.idempotency_arg
            && argument
            && body_sent
            && body.is_object()
        {
            at.push(format!("the `{arg}` argument"));
        }
        Ok(at)
    }

    /// A URL template rendered outside any call (`check-config --probe`): the gateway's
    /// own `{env.NAME}` values are filled in, the call's values are left empty.
    pub fn render_url_outside_a_call(&self, url: &Template) -> Result<String, String> {
        let nobody = self.nobody();
        Scope { intent: &nobody }
            .url(url)
            .map_err(|e| e.to_string())
    }

    pub(super) fn nobody(&self) -> IntentHandle {
        nobody(&self.cap.name)
    }
}

/// `result` with its message passed through `secrets`: a client library's error names
/// the URL it failed on, and the URL and headers were rendered with the gateway's
/// credentials.
fn redact_result(result: EffectResult, secrets: &Redactor) -> EffectResult {
    match result {
        EffectResult::Failed { result, message } => EffectResult::Failed {
            result,
            message: secrets.text(&message),
        },
        EffectResult::Unknown { message } => EffectResult::Unknown {
            message: secrets.text(&message),
        },
        EffectResult::NotSent { message } => EffectResult::NotSent {
            message: secrets.text(&message),
        },
        applied @ EffectResult::Applied { .. } => applied,
    }
}
