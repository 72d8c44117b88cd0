//! The one reqwest client every upstream call of a process shares (one connection pool),
//! the rustls crypto provider it needs, how its errors read (both executors), and the
//! secrets no error text may show ([`secrets`], [`registry_secrets`]).

use std::time::Duration;

use oncegate_core::Registry;
use oncegate_core::redact::Redactor;
use oncegate_core::template::Template;

/// A reqwest client for upstreams: rustls with ring, a connect timeout.
pub fn http_client() -> reqwest::Client {
    install_crypto();
    reqwest::Client::builder()
        // A redirect would re-send an effect elsewhere (or as a GET): never follow one.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .expect("a client with these settings always builds")
}

/// Installs ring as rustls's crypto provider, once per process.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// What the templates' `{env.NAME}` placeholders are filled with in this process: the
/// values an error about a request rendered from them must not show.
pub fn secrets<'t>(templates: impl IntoIterator<Item = &'t Template>) -> Redactor {
    Redactor::of_env(templates, |name| std::env::var(name).ok())
}

/// Every secret of a registry this process could send or sign with: the `{env.NAME}`
/// values of all its templates ([`Registry::templates`]), the alert webhook's signing
/// secret and the audit chain key. For text that is not about one request (the log).
pub fn registry_secrets(registry: &Registry) -> Redactor {
    let mut redactor = secrets(registry.templates());
    let named = [
        registry.gateway.alert_webhook_secret_env.as_deref(),
        registry.audit_chain_key_env.as_deref(),
    ];
    for value in named
        .into_iter()
        .flatten()
        .filter_map(|n| std::env::var(n).ok())
    {
        redactor.add(&value);
    }
    redactor
}

/// A transport error as the executors read it (never with the URL, which may carry
/// credentials from the gateway's environment).
pub(crate) struct ErrorText {
    /// The connection failed: nothing was sent.
    pub(crate) connect: bool,
    /// The request could not be built: nothing was sent.
    pub(crate) builder: bool,
    /// The request timed out.
    pub(crate) timeout: bool,
    /// The error chain without reqwest's own "for url (...)" wrapper.
    pub(crate) text: String,
}

/// Reads a reqwest error (shared by the HTTP and MCP executors).
pub(crate) fn reqwest_error_text(e: &reqwest::Error) -> ErrorText {
    let (connect, builder, timeout) = (e.is_connect(), e.is_builder(), e.is_timeout());
    let mut text = String::new();
    let mut source: Option<&dyn std::error::Error> = Some(e);
    // The error chain without reqwest's own "for url (...)" wrapper.
    while let Some(err) = source {
        if !std::ptr::addr_eq(err, e as &dyn std::error::Error) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&err.to_string());
        }
        source = err.source();
    }
    if text.is_empty() {
        text = if connect {
            "connection failed"
        } else if builder {
            "the request could not be built"
        } else {
            "transport error"
        }
        .to_owned();
    }
    ErrorText {
        connect,
        builder,
        timeout,
        text,
    }
}
