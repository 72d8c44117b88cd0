//! oncegate-sandbox integration tests: the provider over a real socket, HTTP and MCP.

mod sandbox;
mod support;
