//! oncegate-gateway integration tests.

mod front_door;
mod fuzz;
mod mcp_surface;
mod mcp_upstream;
mod openapi;
mod replicas;
mod upstream;
