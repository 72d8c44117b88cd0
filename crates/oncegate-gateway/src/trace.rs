//! W3C trace context in and out of the gateway, and the span of each decision.
//!
//! A call's `traceparent` (the HTTP header, or MCP `_meta.traceparent`) parents its
//! decision span; the upstream call and the reconciliation read carry the context of
//! their own spans onward (an HTTP header, MCP `_meta`). Parsing and writing the header
//! is the propagator's (the SDK's `TraceContextPropagator`, installed by the binary),
//! never this module's.
//!
//! Without `[telemetry]` nothing here costs more than a no-op: no OpenTelemetry layer is
//! installed, the global propagator is the no-op one (it reads nothing and writes
//! nothing), and the spans are plain `tracing` spans, off at the default log level.
//!
//! Span attributes never carry argument values, tokens or answers: only the ids a
//! decision is known by (capability, principal, run and step, intent key, generation,
//! attempt, outcome), plus the arguments a capability lists in `traced_arguments`.

use std::collections::HashMap;

use axum::http::HeaderMap;
use oncegate_core::config::{Capability, UpstreamKind};
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_engine::Call;
use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt;
use serde_json::{Map, Value};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C trace context fields, in the order they travel.
const FIELDS: [&str; 2] = ["traceparent", "tracestate"];

/// The trace context a call arrived with (empty: it carried none, or telemetry is off).
#[derive(Clone, Debug, Default)]
pub(crate) struct Parent(Context);

impl Parent {
    /// The context in an HTTP request's `traceparent` / `tracestate` headers.
    pub(crate) fn from_headers(headers: &HeaderMap) -> Self {
        let carrier = FIELDS
            .iter()
            .filter_map(|&name| {
                let value = headers.get(name)?.to_str().ok()?;
                Some((name.to_owned(), value.to_owned()))
            })
            .collect();
        Self::extract(&carrier)
    }

    /// The context in an MCP request's `_meta` (`traceparent`, `tracestate`); `None`
    /// when the `_meta` has no valid `traceparent`, so the caller may look elsewhere (a
    /// malformed one never hides a valid HTTP header).
    pub(crate) fn from_meta(meta: &Map<String, Value>) -> Option<Self> {
        let carrier: HashMap<String, String> = FIELDS
            .iter()
            .filter_map(|&name| Some((name.to_owned(), meta.get(name)?.as_str()?.to_owned())))
            .collect();
        let parent = Self::extract(&carrier);
        parent.0.span().span_context().is_valid().then_some(parent)
    }

    fn extract(carrier: &HashMap<String, String>) -> Self {
        if carrier.is_empty() {
            return Self::default();
        }
        Self(opentelemetry::global::get_text_map_propagator(|p| {
            p.extract(carrier)
        }))
    }
}

/// The span of one decision (`what`: `call`, `claim` or `approval`), parented by the
/// call's trace context. The outcome fields are recorded by [`record_decision`].
pub(crate) fn decision_span(
    what: &'static str,
    capability: &Capability,
    principal: &str,
    call: Option<&Call>,
    parent: &Parent,
) -> Span {
    let span = tracing::info_span!(
        "oncegate.decision",
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        oncegate.decision = what,
        oncegate.capability = %capability.name,
        oncegate.principal = principal,
        oncegate.run_id = call.and_then(|c| c.run_id.as_deref()),
        oncegate.step_id = call.and_then(|c| c.step_id.as_deref()),
        oncegate.outcome = tracing::field::Empty,
        oncegate.intent_key = tracing::field::Empty,
        oncegate.generation = tracing::field::Empty,
        oncegate.attempt = tracing::field::Empty,
    );
    if span.is_disabled() {
        return span;
    }
    // An empty or invalid context leaves the span a root: nothing to report.
    let _ = span.set_parent(parent.0.clone());
    if let Some(call) = call {
        for path in &capability.traced_arguments {
            if let Some(value) = path.lookup(&call.arguments) {
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                // An agent chooses the value: a bounded one reaches the trace.
                let text: String = text.chars().take(TRACED_CHARS).collect();
                span.set_attribute(format!("oncegate.argument.{path}"), text);
            }
        }
    }
    span
}

/// The span of a two-phase completion or heartbeat (`what`) of intent `key`, parented by
/// the caller's trace context: the commit that records what the caller's execution did
/// is its child. The capability is the intent's, known once it is loaded, so it is not
/// on this span; the outcome fields are recorded by [`record_decision`].
pub(crate) fn completion_span(
    what: &'static str,
    principal: &str,
    key: &str,
    parent: &Parent,
) -> Span {
    let span = tracing::info_span!(
        "oncegate.decision",
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        oncegate.decision = what,
        oncegate.principal = principal,
        oncegate.outcome = tracing::field::Empty,
        oncegate.intent_key = key,
        oncegate.generation = tracing::field::Empty,
        oncegate.attempt = tracing::field::Empty,
    );
    if !span.is_disabled() {
        let _ = span.set_parent(parent.0.clone());
    }
    span
}

/// The longest traced argument value (characters); longer is cut.
const TRACED_CHARS: usize = 256;

/// What a decision came to, on its span: the status (or `claimed`), and the intent it
/// named where there is one.
pub(crate) fn record_decision(span: &Span, outcome: &str, intent: Option<(&str, u32, u32)>) {
    span.record("oncegate.outcome", outcome);
    if let Some((key, generation, attempt)) = intent {
        span.record("oncegate.intent_key", key);
        span.record("oncegate.generation", generation);
        span.record("oncegate.attempt", attempt);
    }
}

/// A decision that ended in an error (store unavailable, a refusal before deciding).
pub(crate) fn record_error(span: &Span) {
    span.record("otel.status_code", "ERROR");
}

/// The trace context of the current span (the upstream call's, the reconciliation
/// read's) as the fields to send onward: empty when telemetry is off or no span is
/// being exported.
///
/// Only `traceparent` goes out. `tracestate` is the caller's text (an agent's, often a
/// model's), and oncegate is the trust boundary in front of the providers: W3C Trace
/// Context lets a participant that does not trust the incoming state start the
/// outgoing one afresh, and oncegate adds no vendor entry of its own, so it sends none.
/// The caller's `tracestate` stays on oncegate's own spans, in the operator's collector.
pub(crate) fn outgoing() -> Vec<(String, String)> {
    let cx = Span::current().context();
    let mut carrier: HashMap<String, String> = HashMap::new();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut carrier));
    carrier
        .remove(FIELDS[0])
        .map(|traceparent| (FIELDS[0].to_owned(), traceparent))
        .into_iter()
        .collect()
}

/// The span of one upstream call (an effect, or a read passed through), a child of the
/// decision that made it; its context is what [`outgoing`] sends to the upstream.
pub(crate) fn upstream_span(capability: &Capability, kind: UpstreamKind) -> Span {
    tracing::info_span!(
        "oncegate.upstream.call",
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        oncegate.capability = %capability.name,
        oncegate.upstream = kind_name(kind),
        oncegate.result = tracing::field::Empty,
    )
}

/// How the upstream call ended, on its span.
pub(crate) fn record_effect(span: &Span, result: &EffectResult) {
    let (name, error) = match result {
        EffectResult::Applied { .. } => ("applied", false),
        EffectResult::Failed { .. } => ("failed", true),
        EffectResult::Unknown { .. } => ("unknown", true),
        EffectResult::NotSent { .. } => ("not_sent", true),
    };
    span.record("oncegate.result", name);
    if error {
        span.record("otel.status_code", "ERROR");
    }
}

/// The span of one reconciliation read ("did this intent already take effect?").
pub(crate) fn reconcile_span(capability: &Capability, kind: UpstreamKind) -> Span {
    tracing::info_span!(
        "oncegate.reconcile.read",
        otel.kind = "client",
        oncegate.capability = %capability.name,
        oncegate.upstream = kind_name(kind),
        oncegate.result = tracing::field::Empty,
    )
}

/// What the reconciliation read found, on its span.
pub(crate) fn record_reconcile(span: &Span, result: &ReconcileResult) {
    span.record(
        "oncegate.result",
        match result {
            ReconcileResult::Found { .. } => "found",
            ReconcileResult::NotFound => "not_found",
            ReconcileResult::Undecidable { .. } => "undecidable",
        },
    );
}

fn kind_name(kind: UpstreamKind) -> &'static str {
    match kind {
        UpstreamKind::Http => "http",
        UpstreamKind::Mcp => "mcp",
    }
}
