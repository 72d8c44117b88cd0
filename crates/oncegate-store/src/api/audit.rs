//! The audit chain: [`AuditRead`] (records by position, shard and intent, and the
//! verify checkpoint) and [`AuditWrite`] (the checkpoint). Records are appended only
//! inside a commit ([`crate::IntentsWrite::commit`]), sealed with the rows they explain.

use std::future::Future;

use oncegate_core::audit::AuditRecord;
use oncegate_core::key::IntentKey;

use crate::error::StoreError;

/// Reads of the audit chain.
pub trait AuditRead: Send + Sync {
    /// Audit records after a global position, in order, with their positions.
    fn audit_after(
        &self,
        after: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<(i64, AuditRecord)>, StoreError>> + Send;
    /// One shard's records in sequence order.
    fn audit_shard(
        &self,
        shard: u32,
    ) -> impl Future<Output = Result<Vec<AuditRecord>, StoreError>> + Send;
    /// Up to `limit` records of one shard after sequence number `after`, in order.
    fn audit_shard_after(
        &self,
        shard: u32,
        after: u64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<AuditRecord>, StoreError>> + Send;
    /// The shards that have records.
    fn audit_shards(&self) -> impl Future<Output = Result<Vec<u32>, StoreError>> + Send;
    /// The newest `limit` audit records naming intent `key` (every generation), in the
    /// order they were chained: the intent's timeline.
    fn audit_of_intent(
        &self,
        key: &IntentKey,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<AuditRecord>, StoreError>> + Send;
    /// Where the last clean `audit verify` ended (`audit_check::Checkpoint` as JSON).
    fn audit_checkpoint(&self) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;
}

/// Writes beside the audit chain.
pub trait AuditWrite: Send + Sync {
    /// Replaces the `audit verify` checkpoint (outside the audit chain: it only saves
    /// the next verify a walk, and every checkpointed head is checked again).
    fn put_audit_checkpoint(
        &self,
        checkpoint: String,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}
