//! `[telemetry]`: where the gateway exports its traces (OpenTelemetry over OTLP/HTTP).
//!
//! The model only: the exporter lives in the binary, which also reads the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` when the file names no endpoint, and trace context on
//! the wire is the gateway's business.

/// The `service.name` traces carry unless `[telemetry] service_name` says otherwise.
pub const DEFAULT_SERVICE_NAME: &str = "oncegate";

/// `[telemetry]` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TelemetrySettings {
    /// `otlp_endpoint`: the collector's base URL (`http://host:4318`), as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is written; traces are POSTed to
    /// `<otlp_endpoint>/v1/traces`. `None`: the file names none.
    pub otlp_endpoint: Option<String>,
    /// `service_name`: the `service.name` resource attribute (default `oncegate`).
    pub service_name: String,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
        }
    }
}

impl TelemetrySettings {
    /// Where traces are POSTed for a base endpoint (the OTLP/HTTP rule for
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: the signal's path is appended).
    pub fn traces_url(endpoint: &str) -> String {
        format!("{}/v1/traces", endpoint.trim_end_matches('/'))
    }

    /// Why `endpoint` cannot be a collector's base URL, if it cannot.
    pub fn check_endpoint(endpoint: &str) -> Result<(), String> {
        let url =
            url::Url::parse(endpoint).map_err(|e| format!("`{endpoint}` is not a URL ({e})"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "`{endpoint}` is not an http:// or https:// URL (traces are sent over OTLP/HTTP)"
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("`{endpoint}` names no host"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "`{endpoint}` has a query or fragment; write the collector's base URL"
            ));
        }
        Ok(())
    }
}
