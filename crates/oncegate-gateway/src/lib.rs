//! oncegate-gateway: the only crate that knows wire formats.

pub mod mcp;
pub mod probe;
pub mod server;
pub mod upstream;
