//! oncegate-store integration tests (real SQLite files), compiled as one binary.

mod conformance;
mod controls;
mod integrity;
mod keys;
mod open;
mod postgres;
mod postgres_trips;
mod settled;
mod storage;
