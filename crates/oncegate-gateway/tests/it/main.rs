//! oncegate-gateway integration tests.

mod openapi;
mod sandbox;
mod upstream;
