//! The audit chain on SQLite: [`AuditRead`] and [`AuditWrite`].

use oncegate_core::audit::AuditRecord;
use oncegate_core::key::IntentKey;
use sqlx::Row;

use super::writer::Small;
use super::{SqliteStore, audit_row, unavailable};
use crate::{AuditRead, AuditWrite, StoreError};

impl AuditRead for SqliteStore {
    async fn audit_after(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, AuditRecord)>, StoreError> {
        let rows = sqlx::query("SELECT id, shard, seq, prev_hash, hash, body FROM audit WHERE id > ? ORDER BY id LIMIT ?")
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        rows.iter()
            .map(|r| Ok((r.get::<i64, _>("id"), audit_row(r)?)))
            .collect()
    }

    async fn audit_shard(&self, shard: u32) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT shard, seq, prev_hash, hash, body FROM audit WHERE shard = ? ORDER BY seq",
        )
        .bind(i64::from(shard))
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        rows.iter().map(audit_row).collect()
    }

    async fn audit_shard_after(
        &self,
        shard: u32,
        after: u64,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT shard, seq, prev_hash, hash, body FROM audit WHERE shard = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(i64::from(shard))
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        rows.iter().map(audit_row).collect()
    }

    async fn audit_checkpoint(&self) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query("SELECT value FROM meta WHERE name = 'audit_checkpoint'")
                .fetch_optional(&self.inner.readers)
                .await
                .map_err(unavailable)?
                .map(|r| r.get(0)),
        )
    }

    async fn audit_of_intent(
        &self,
        key: &IntentKey,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        // The newest `limit` through `audit_by_key` (the expression spelled as the index
        // spells it), then in chain order.
        let rows = sqlx::query(
            "SELECT shard, seq, prev_hash, hash, body FROM (
                 SELECT id, shard, seq, prev_hash, hash, body FROM audit
                  WHERE json_extract(body, '$.key') = ? ORDER BY id DESC LIMIT ?
             ) ORDER BY id",
        )
        .bind(key.as_str())
        .bind(i64::from(limit))
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        rows.iter().map(audit_row).collect()
    }

    async fn audit_shards(&self) -> Result<Vec<u32>, StoreError> {
        let rows = sqlx::query("SELECT DISTINCT shard FROM audit ORDER BY shard")
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(|r| r.get::<i64, _>(0) as u32).collect())
    }
}

impl AuditWrite for SqliteStore {
    async fn put_audit_checkpoint(&self, checkpoint: String) -> Result<(), StoreError> {
        self.small(Small::PutCheckpoint(checkpoint)).await.map(drop)
    }
}
