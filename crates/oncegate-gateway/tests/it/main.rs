//! oncegate-gateway integration tests.

mod approvals;
mod budgets;
mod claims;
mod console;
mod front_door;
mod fronted;
mod fuzz;
mod identity;
mod mcp_surface;
mod mcp_upstream;
mod openapi;
mod pins;
mod replicas;
mod support;
mod upstream;
mod webhook;
mod wire_bytes;
