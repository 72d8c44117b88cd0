//! The one reqwest client every upstream call of a process shares (one connection pool),
//! and the rustls crypto provider it needs.

use std::time::Duration;

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
