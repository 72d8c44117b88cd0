//! The OpenTelemetry exporter `oncegate serve` installs beside its log (`[telemetry]`).
//!
//! Traces leave over OTLP/HTTP (protobuf) to `[telemetry] otlp_endpoint`, or, when the
//! file names none, wherever the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) points. With neither, nothing is installed:
//! no layer, no propagator, no thread, so the spans stay plain `tracing` spans that the
//! default log level never even records.
//!
//! The SDK's batch processor runs on a thread of its own and sends with a blocking
//! reqwest client (the workspace's: rustls on ring). That client is built before the
//! async runtime starts and the exporter is shut down after it stops (a blocking client
//! must not be built or dropped inside a runtime); shutting it down sends what is still
//! queued. A collector that answers can lose no decision's span at a SIGTERM; one that
//! is down or hangs adds at most the export timeout (5 s) to the exit, and what was
//! queued is dropped then.

use std::time::Duration;

use anyhow::Context;
use oncegate_core::config::TelemetrySettings;
use opentelemetry::trace::TracerProvider;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Level;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::registry::LookupSpan;

/// How long one export may take before it is given up (the collector is down: spans
/// are dropped, calls are never held up).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The standard variables that point the exporter somewhere when the file does not.
const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// A running trace exporter; [`Exporter::shutdown`] flushes it.
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// The exporter `settings` (and the environment) ask for, if any. Installs the W3C
    /// trace context propagator the gateway reads `traceparent` with and sends it on.
    pub fn start(settings: &TelemetrySettings) -> anyhow::Result<Option<Self>> {
        let configured = settings
            .otlp_endpoint
            .as_deref()
            .map(TelemetrySettings::traces_url);
        let from_environment = ENDPOINT_VARIABLES
            .iter()
            .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()));
        if configured.is_none() && !from_environment {
            return Ok(None);
        }
        oncegate_gateway::server::install_crypto();
        let client = reqwest::blocking::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(EXPORT_TIMEOUT)
            .build()
            .context("cannot build the trace exporter's HTTP client")?;
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_timeout(EXPORT_TIMEOUT);
        // The file's endpoint wins; without one the exporter reads the standard
        // variables itself (a signal's own endpoint as written, the general one with
        // `/v1/traces` appended).
        if let Some(url) = configured {
            exporter = exporter.with_endpoint(url);
        }
        let exporter = exporter
            .build()
            .context("cannot start the trace exporter ([telemetry] otlp_endpoint)")?;
        // Every decision is exported, whatever the caller's `traceparent` says: its
        // sampled flag is the agent's to set, and an agent must not be able to hide its
        // own decisions (or the upstream calls under them) from the operator's trace.
        let sampler = Sampler::parent_based(Sampler::AlwaysOn)
            .with_remote_parent_not_sampled(Sampler::AlwaysOn)
            .with_local_parent_not_sampled(Sampler::AlwaysOn);
        let provider = SdkTracerProvider::builder()
            .with_sampler(sampler)
            .with_batch_exporter(exporter)
            .with_resource(
                Resource::builder()
                    .with_service_name(settings.service_name.clone())
                    .build(),
            )
            .build();
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        Ok(Some(Self { provider }))
    }

    /// The layer that turns oncegate's spans into exported ones. Only spans, and only
    /// oncegate's own at INFO and above (the decision, the store commit, the upstream
    /// call, the reconciliation read): a library's spans and any event stay out of the
    /// trace, whatever `ONCEGATE_LOG` prints.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("oncegate"))
            .with_filter(filter_fn(|meta| {
                meta.is_span()
                    && meta.target().starts_with("oncegate")
                    && *meta.level() <= Level::INFO
            }))
    }

    /// Sends what is queued and stops the exporter's thread.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("warning: traces still queued at shutdown may be lost: {e}");
        }
    }
}
