//! The store conformance suite: written once, run against every backend.
//!
//! Each check takes a fresh, empty store and panics with a message on a violation.
//! Backends call [`run_all`] from their integration tests (see `tests/it`). The checks
//! are cut by table, as the store API is: intents and approvals, the audit chain, shared
//! state, limits and findings, tool pins, and listings; `fixtures` is the sample rows
//! they all build from.

mod audit;
mod fixtures;
mod intents;
mod limits;
mod listing;
mod pins;
mod shared_state;

pub use audit::{audit_chain, audit_of_intent, rows_are_sealed};
pub use fixtures::sample_record;
pub use intents::{
    client_key_binding, compare_and_set, conflict_is_atomic, generations_and_approvals,
    one_insert_wins,
};
pub use limits::{findings, limits};
pub use listing::{
    listing_and_cross_run, listing_by_run_and_reference, listing_order, listing_pages,
    listing_since,
};
pub use pins::tool_pins;
pub use shared_state::{kill_switches, mcp_sessions, single_use_claims, work_claims};

use crate::Backend;

/// Runs every check; `fresh` makes an empty store per check.
pub async fn run_all<S, F, Fut>(fresh: F)
where
    S: Backend,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = S>,
{
    compare_and_set(&fresh().await).await;
    conflict_is_atomic(&fresh().await).await;
    generations_and_approvals(&fresh().await).await;
    listing_and_cross_run(&fresh().await).await;
    audit_chain(&fresh().await).await;
    audit_of_intent(&fresh().await).await;
    listing_by_run_and_reference(&fresh().await).await;
    one_insert_wins(&fresh().await).await;
    client_key_binding(&fresh().await).await;
    listing_order(&fresh().await).await;
    rows_are_sealed(&fresh().await).await;
    kill_switches(&fresh().await).await;
    mcp_sessions(&fresh().await).await;
    work_claims(&fresh().await).await;
    single_use_claims(&fresh().await).await;
    limits(&fresh().await).await;
    findings(&fresh().await).await;
    listing_since(&fresh().await).await;
    tool_pins(&fresh().await).await;
    listing_pages(&fresh().await).await;
}
