//! oncegate-gateway: the only crate that knows wire formats.
//!
//! `sandbox` is a simulated payment/messaging/ledger provider with fault injection (a
//! real server process in tests, the demo and benchmarks).

pub mod demo;
pub mod mcp;
pub mod probe;
pub mod sandbox;
pub mod server;
pub mod upstream;
pub mod verify;
