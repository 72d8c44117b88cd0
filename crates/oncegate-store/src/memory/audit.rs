//! The audit chain in memory: [`AuditRead`] and [`AuditWrite`].

use oncegate_core::audit::AuditRecord;
use oncegate_core::key::IntentKey;

use super::MemoryStore;
use crate::{AuditRead, AuditWrite, StoreError};

impl AuditRead for MemoryStore {
    async fn audit_after(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, AuditRecord)>, StoreError> {
        let data = self.reach().await?;
        Ok(data
            .audit
            .iter()
            .filter(|(p, _)| *p > after)
            .take(limit as usize)
            .map(|(p, r)| (*p, r.clone().into()))
            .collect())
    }

    async fn audit_shard(&self, shard: u32) -> Result<Vec<AuditRecord>, StoreError> {
        let data = self.reach().await?;
        let mut records: Vec<AuditRecord> = data
            .audit
            .iter()
            .filter(|(_, r)| r.shard == shard)
            .map(|(_, r)| r.clone().into())
            .collect();
        records.sort_by_key(|r| r.seq);
        Ok(records)
    }

    async fn audit_shard_after(
        &self,
        shard: u32,
        after: u64,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let mut records = self.audit_shard(shard).await?;
        records.retain(|r| r.seq > after);
        records.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        Ok(records)
    }

    async fn audit_checkpoint(&self) -> Result<Option<String>, StoreError> {
        Ok(self.reach().await?.audit_checkpoint.clone())
    }

    async fn audit_of_intent(
        &self,
        key: &IntentKey,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let data = self.reach().await?;
        // `audit` is in chain order (by position): the newest `limit`, in that order.
        let mut newest: Vec<AuditRecord> = data
            .audit
            .iter()
            .rev()
            .map(|(_, r)| AuditRecord::from(r.clone()))
            .filter(|r| r.event.key.as_ref() == Some(key))
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .collect();
        newest.reverse();
        Ok(newest)
    }

    async fn audit_shards(&self) -> Result<Vec<u32>, StoreError> {
        let data = self.reach().await?;
        Ok(data.heads.keys().copied().collect())
    }
}

impl AuditWrite for MemoryStore {
    async fn put_audit_checkpoint(&self, checkpoint: String) -> Result<(), StoreError> {
        self.reach().await?.audit_checkpoint = Some(checkpoint);
        self.pause().await;
        Ok(())
    }
}
