//! oncegate-gateway integration tests.

mod fuzz;
mod mcp_surface;
mod mcp_upstream;
mod openapi;
mod sandbox;
mod upstream;
