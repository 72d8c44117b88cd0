//! Limits and findings on SQLite: [`LimitsRead`] / [`LimitsWrite`].

use sqlx::Row;

use super::writer::Small;
use super::{SqliteStore, finding_row, unavailable};
use crate::ledger::{self, LimitLedgers};
use crate::{LimitsRead, LimitsWrite, StoreError};

impl LimitsRead for SqliteStore {
    async fn limit_used(&self, scope: &str, since: jiff::Timestamp) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "SELECT COALESCE(SUM(amount), 0) FROM reservations WHERE scope = ? AND active = 1 AND reserved_at >= ?",
        )
        .bind(scope)
        .bind(since.as_millisecond())
        .fetch_one(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        Ok(row.get(0))
    }

    async fn findings(
        &self,
        limit: u32,
        after: Option<&crate::PageAfter>,
    ) -> Result<Vec<crate::FindingRow>, StoreError> {
        let limit = i64::from(limit.max(1));
        let query = match after {
            None => sqlx::query(
                "SELECT id, rule, raised_at, body, delivered_at, attempts, next_attempt_at, audit_shard, audit_seq, row_hash FROM findings
                 ORDER BY raised_at DESC, id DESC LIMIT ?1",
            )
            .bind(limit),
            Some(after) => sqlx::query(
                "SELECT id, rule, raised_at, body, delivered_at, attempts, next_attempt_at, audit_shard, audit_seq, row_hash FROM findings
                 WHERE (raised_at, id) < (?2, ?3) ORDER BY raised_at DESC, id DESC LIMIT ?1",
            )
            .bind(limit)
            .bind(after.at.as_millisecond())
            .bind(after.id.clone()),
        };
        let rows = query
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        rows.iter()
            .map(|r| Ok(finding_row(r)?.listed(self.inner.legacy_before)))
            .collect()
    }

    async fn findings_due(
        &self,
        now: jiff::Timestamp,
        limit: u32,
    ) -> Result<Vec<crate::FindingRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, rule, raised_at, body, delivered_at, attempts, next_attempt_at, audit_shard, audit_seq, row_hash FROM findings
             WHERE delivered_at IS NULL AND next_attempt_at <= ? ORDER BY next_attempt_at, id LIMIT ?",
        )
        .bind(now.as_millisecond())
        .bind(i64::from(limit.max(1)))
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        rows.iter()
            .map(|r| Ok(finding_row(r)?.listed(self.inner.legacy_before)))
            .collect()
    }

    async fn ledgers(&self) -> Result<LimitLedgers, StoreError> {
        let mut ledgers = LimitLedgers::default();
        for r in sqlx::query("SELECT scope, seq, chain, audit_shard, audit_seq FROM limit_heads")
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?
        {
            ledgers.heads.insert(
                r.get(0),
                ledger::Head {
                    seq: r.get::<i64, _>(1) as u64,
                    chain: r.get(2),
                    link: (r.get::<i64, _>(3) as u32, r.get::<i64, _>(4) as u64),
                },
            );
        }
        for r in sqlx::query(
            "SELECT scope, seq, key, generation, amount, at, reserve, chain FROM limit_ledger ORDER BY scope, seq",
        )
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?
        {
            let scope: String = r.get(0);
            ledgers
                .entries
                .entry(scope.clone())
                .or_default()
                .push(ledger::StoredEntry {
                    entry: oncegate_core::audit::LedgerEntry {
                        scope,
                        seq: r.get::<i64, _>(1) as u64,
                        key: r.get(2),
                        generation: r.get::<i64, _>(3) as u32,
                        amount: r.get(4),
                        at: r.get(5),
                        reserve: r.get(6),
                    },
                    chain: r.get(7),
                });
        }
        for r in sqlx::query(
            "SELECT scope, key, generation, amount, active, reserved_at FROM reservations ORDER BY scope",
        )
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?
        {
            let scope: String = r.get(0);
            let legacy = self
                .inner
                .legacy_before
                .is_some_and(|t| r.get::<i64, _>(5) < t);
            if legacy && !ledgers.entries.contains_key(&scope) {
                continue;
            }
            ledgers.table.entry(scope).or_default().push((
                ledger::Active {
                    key: r.get(1),
                    generation: r.get::<i64, _>(2) as u32,
                    amount: r.get(3),
                },
                r.get::<i64, _>(4) == 1,
            ));
        }
        Ok(ledgers)
    }
}

impl LimitsWrite for SqliteStore {
    async fn finding_delivery(
        &self,
        id: &str,
        attempts: u32,
        delivered_at: Option<jiff::Timestamp>,
        next_attempt_at: Option<jiff::Timestamp>,
    ) -> Result<(), StoreError> {
        self.small(Small::FindingDelivery {
            id: id.to_owned(),
            attempts,
            delivered_at,
            next_attempt_at,
        })
        .await
        .map(drop)
    }
}
