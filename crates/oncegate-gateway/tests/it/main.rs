//! oncegate-gateway integration tests.

mod sandbox;
