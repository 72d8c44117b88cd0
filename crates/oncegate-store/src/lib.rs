//! oncegate-store: where intents, approvals and the audit chain live.
//!
//! The store API is cut by table (`api/`): a read/write trait pair per concern
//! ([`IntentsRead`] / [`IntentsWrite`] for intents and approvals, with the one atomic
//! [`IntentsWrite::commit`] of (intent record, approval, audit event); [`AuditRead`] /
//! [`AuditWrite`] for the audit chain; [`SharedRead`] / [`SharedWrite`] for kill
//! switches, MCP sessions and work claims; [`LimitsRead`] / [`LimitsWrite`] for limits
//! and findings; [`PinsRead`] / [`PinsWrite`] for pinned tool definitions), and
//! [`Backend`] is all of them. Every decision is made by `oncegate_core::decide`; a lost
//! race re-reads and re-decides. The SQLite backend is the embedded default; PostgreSQL
//! joins behind the same traits and the same conformance suite (`conformance`, with the
//! `testing` feature). [`open`] turns a store URL into a [`Store`] (the one place a
//! backend is chosen); the engine (`oncegate-engine`) and everything above it hold a
//! `Store` and never name a backend type.
//!
//! Who seals the audit chain: the backend, inside the transaction of each commit. The
//! engine hands over an [`AuditEvent`](oncegate_core::audit::AuditEvent); the backend
//! reads the head of the event's shard, links the new record to it (hash of its
//! predecessor, next sequence number), seals it (SHA-256, or HMAC-SHA256 under the chain
//! key) and writes it with the rows it explains. A backend must read the head from the
//! store inside that transaction, not from memory it kept: another writer (another
//! replica on a shared database) may have appended since. SQLite has one writer per
//! file, so it may cache heads in its writer task; a shared backend locks the shard's
//! head row (`SELECT ... FOR UPDATE`) instead.

use std::future::Future;

mod api;
pub mod audit_check;
pub mod clock;
#[cfg(feature = "testing")]
pub mod conformance;
mod controls;
mod decode;
mod error;
mod key_since;
mod ledger;
mod listing;
#[cfg(feature = "testing")]
pub mod memory;
mod open;
mod options;
pub mod postgres;
mod rows;
mod serve_anchor;
pub mod sqlite;
pub mod storage;

pub use api::audit::{AuditRead, AuditWrite};
pub use api::finding::FindingRow;
pub use api::intents::{
    ApprovalFilter, ClientKeyBinding, Commit, IntentFilter, IntentsRead, IntentsWrite, releases,
};
pub use api::limits::{LimitReconcile, LimitsRead, LimitsWrite, Reservation};
pub use api::page::{Listing, PageAfter, UnreadableRow};
pub use api::pins::{OfferedTool, PendingTool, PinsRead, PinsWrite, ToolPin};
pub use api::shared::{KillSwitch, KillSwitchChange, McpSession, SharedRead, SharedWrite};
pub use error::StoreError;
pub use ledger::LimitLedgers;
#[cfg(feature = "testing")]
pub use memory::MemoryStore;
pub use open::{
    Location, Migrated, STORE_URL_ENV, SUPPORTED_SCHEMES, Serving, Store, location,
    migrate_registry_store, open, open_registry_store, open_registry_store_with, registry_location,
    registry_store_options, registry_store_url,
};
pub use options::{DEFAULT_POOL_SIZE, DEFAULT_STATEMENT_TIMEOUT, OpenMode, StoreOptions};
pub use postgres::PgStore;
pub use sqlite::SqliteStore;
pub use storage::{ApprovalRowV1, AuditRowV1, IntentRowV1, LeaseV1, ReasonV1};

/// A backend: every table's traits, cheap to clone (clones share the store), and its
/// readiness. [`Store`] is the run-time choice among them. Generic code bounded by
/// `Backend` calls every trait's methods without naming them.
pub trait Backend:
    IntentsRead
    + IntentsWrite
    + AuditRead
    + AuditWrite
    + SharedRead
    + SharedWrite
    + LimitsRead
    + LimitsWrite
    + PinsRead
    + PinsWrite
    + Clone
    + 'static
{
    /// Readiness: the store answers reads and can take a write now (a held write lock
    /// is not ready). Answers within about a second; never waits out a busy timeout.
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}
