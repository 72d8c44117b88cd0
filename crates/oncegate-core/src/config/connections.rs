//! `[gateway.connections]`: how many connections the gateway holds and for how long
//! before they earn their keep. The model only: the accept loop lives in the gateway.

use std::time::Duration;

/// `[gateway.connections]` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// `max`: open connections the gateway holds at once (default 10,000; lowered at
    /// start to what the process's file limit allows).
    pub max: usize,
    /// `per_address`: open connections from one client address (IPv6: one /64) at once
    /// (default 1,000). Behind a proxy every connection shares its address: raise it.
    pub per_address: usize,
    /// `first_byte_timeout`: how long a new connection may stay silent before it is
    /// closed, whatever protocol it would speak (default 10s).
    pub first_byte_timeout: Duration,
    /// `idle_timeout`: how long a connection with no request running stays open (default
    /// 2m; longer than common client pools keep idle connections, so they close first).
    pub idle_timeout: Duration,
    /// `http2_keep_alive`: the interval of HTTP/2 pings, and how long an answer may take
    /// before the connection is closed (default 30s).
    pub http2_keep_alive: Duration,
}

impl Default for ConnectionSettings {
    fn default() -> Self {
        Self {
            max: 10_000,
            per_address: 1_000,
            first_byte_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            http2_keep_alive: Duration::from_secs(30),
        }
    }
}
