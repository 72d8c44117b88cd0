//! oncegate-engine integration tests (real SQLite files, and the simulation on the
//! in-memory store), compiled as one binary.

mod approvals;
mod claims;
mod crash;
mod gate;
mod limits;
mod postgres;
mod read_back;
mod shared_store;
mod simulation;
mod support;
