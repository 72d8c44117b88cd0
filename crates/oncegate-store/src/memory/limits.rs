//! Limits and findings in memory: [`LimitsRead`] / [`LimitsWrite`].

use super::MemoryStore;
use crate::{LimitsRead, LimitsWrite, StoreError};

impl LimitsRead for MemoryStore {
    async fn limit_used(&self, scope: &str, since: jiff::Timestamp) -> Result<i64, StoreError> {
        let data = self.reach().await?;
        Ok(data
            .reservations
            .iter()
            .filter(|((s, _, _), (_, at, active))| s == scope && *active && *at >= since)
            .map(|(_, (amount, _, _))| amount)
            .sum())
    }

    async fn findings(
        &self,
        limit: u32,
        after: Option<&crate::PageAfter>,
    ) -> Result<Vec<crate::FindingRow>, StoreError> {
        let data = self.reach().await?;
        let after = after.map(|a| (a.at, a.id.as_str()));
        let mut all: Vec<_> = data
            .findings
            .values()
            .filter(|f| after.is_none_or(|after| (f.raised_at, f.id.as_str()) < after))
            .cloned()
            .collect();
        all.sort_by(|a, b| (b.raised_at, &b.id).cmp(&(a.raised_at, &a.id)));
        all.truncate(limit.max(1) as usize);
        Ok(all)
    }

    async fn findings_due(
        &self,
        now: jiff::Timestamp,
        limit: u32,
    ) -> Result<Vec<crate::FindingRow>, StoreError> {
        let data = self.reach().await?;
        let mut due: Vec<_> = data
            .findings
            .values()
            .filter(|f| f.delivered_at.is_none() && f.next_attempt_at.is_some_and(|t| t <= now))
            .cloned()
            .collect();
        due.sort_by(|a, b| {
            a.next_attempt_at
                .cmp(&b.next_attempt_at)
                .then(a.id.cmp(&b.id))
        });
        due.truncate(limit.max(1) as usize);
        Ok(due)
    }

    /// The memory store keeps no ledgers: nothing outside the process can edit it.
    async fn ledgers(&self) -> Result<crate::LimitLedgers, StoreError> {
        Ok(crate::LimitLedgers::default())
    }
}

impl LimitsWrite for MemoryStore {
    async fn finding_delivery(
        &self,
        id: &str,
        attempts: u32,
        delivered_at: Option<jiff::Timestamp>,
        next_attempt_at: Option<jiff::Timestamp>,
    ) -> Result<(), StoreError> {
        {
            let mut data = self.reach().await?;
            if let Some(f) = data.findings.get_mut(id) {
                f.attempts = attempts;
                f.delivered_at = delivered_at;
                f.next_attempt_at = next_attempt_at;
            }
        }
        self.pause().await;
        Ok(())
    }
}
