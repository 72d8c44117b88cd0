//! Several real `oncegate serve` replicas on one PostgreSQL database, in front of one
//! `oncegate sandbox`, through the faults a deployment meets: concurrent repeats spread
//! over the replicas, a replica killed mid-call, every store connection cut, PostgreSQL
//! restarted, and state (kill switches, MCP sessions) that must reach every replica.
//!
//! Each test works in its own database (`og_<random>` on `ONCEGATE_TEST_POSTGRES_URL`,
//! default `postgres://postgres@127.0.0.1:5432/test`), dropped at the end; the restart
//! test runs a private PostgreSQL cluster of its own, so the shared server is never
//! stopped. Effects are counted in the sandbox's own ledger, never taken from the
//! gateway's word.

mod clocks;
mod cluster;
mod crash;
mod limits;
mod load;
mod outage;
mod pg;
mod shared_state;
// The single-process tests' helpers (`oncegate sandbox`, `serve` command lines, the
// sandbox ledger); this target uses only some of them.
#[allow(dead_code)]
#[path = "../it/support.rs"]
mod support;
