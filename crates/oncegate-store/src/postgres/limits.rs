//! Limits and findings on PostgreSQL ([`crate::LimitsRead`]): a budget's window sum,
//! the ledgers `audit verify` checks, and the findings listing and outbox.

use sqlx::{PgConnection, Row};

use super::read::finding_row;
use super::{PgStore, ts, unavailable};
use crate::{LimitsRead, StoreError, ledger};

impl LimitsRead for PgStore {
    async fn limit_used(&self, scope: &str, since: jiff::Timestamp) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "SELECT COALESCE(SUM(amount), 0)::int8 FROM reservations WHERE scope = $1 AND active AND reserved_at >= $2::timestamptz",
        )
        .bind(scope)
        .bind(ts(since))
        .fetch_one(&mut *self.conn().await?)
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
                "SELECT id, rule, (extract(epoch from raised_at) * 1000000)::int8, body, (extract(epoch from delivered_at) * 1000000)::int8, attempts, (extract(epoch from next_attempt_at) * 1000000)::int8, audit_shard, audit_seq, row_hash FROM findings ORDER BY raised_at DESC, id DESC LIMIT $1",
            )
            .bind(limit),
            Some(after) => sqlx::query(
                "SELECT id, rule, (extract(epoch from raised_at) * 1000000)::int8, body, (extract(epoch from delivered_at) * 1000000)::int8, attempts, (extract(epoch from next_attempt_at) * 1000000)::int8, audit_shard, audit_seq, row_hash FROM findings WHERE (raised_at, id) < ($2::timestamptz, $3) ORDER BY raised_at DESC, id DESC LIMIT $1",
            )
            .bind(limit)
            .bind(ts(after.at))
            .bind(after.id.clone()),
        };
        let rows = query
            .fetch_all(&mut *self.conn().await?)
            .await
            .map_err(unavailable)?;
        rows.iter()
            .map(|r| Ok(finding_row(r)?.listed(self.legacy_before_ms())))
            .collect()
    }

    async fn findings_due(
        &self,
        now: jiff::Timestamp,
        limit: u32,
    ) -> Result<Vec<crate::FindingRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, rule, (extract(epoch from raised_at) * 1000000)::int8, body, (extract(epoch from delivered_at) * 1000000)::int8, attempts, (extract(epoch from next_attempt_at) * 1000000)::int8, audit_shard, audit_seq, row_hash FROM findings WHERE delivered_at IS NULL AND next_attempt_at <= $1::timestamptz ORDER BY next_attempt_at, id LIMIT $2",
        )
        .bind(ts(now))
        .bind(i64::from(limit.max(1)))
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        rows.iter()
            .map(|r| Ok(finding_row(r)?.listed(self.legacy_before_ms())))
            .collect()
    }

    async fn ledgers(&self) -> Result<crate::LimitLedgers, StoreError> {
        let legacy_before = self.inner.legacy_before;
        self.snapshot(async |conn: &mut PgConnection| {
            let mut ledgers = crate::LimitLedgers::default();
            for r in sqlx::query(
                "SELECT scope, seq, chain, audit_shard, audit_seq FROM limit_scopes WHERE seq > 0",
            )
            .fetch_all(&mut *conn)
            .await
            .map_err(unavailable)?
            {
                ledgers.heads.insert(
                    r.get(0),
                    ledger::Head {
                        seq: r.get::<i64, _>(1) as u64,
                        chain: r.get::<Option<String>, _>(2).unwrap_or_default(),
                        link: (
                            r.get::<Option<i64>, _>(3).unwrap_or(-1) as u32,
                            r.get::<Option<i64>, _>(4).unwrap_or(0) as u64,
                        ),
                    },
                );
            }
            for r in sqlx::query(
                "SELECT scope, seq, key, generation, amount, at, reserve, chain FROM limit_ledger ORDER BY scope, seq",
            )
            .fetch_all(&mut *conn)
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
                "SELECT scope, key, generation, amount, active, (extract(epoch from reserved_at) * 1000000)::int8 FROM reservations ORDER BY scope",
            )
            .fetch_all(&mut *conn)
            .await
            .map_err(unavailable)?
            {
                let scope: String = r.get(0);
                let legacy = legacy_before.is_some_and(|t| r.get::<i64, _>(5) < t);
                if legacy && !ledgers.entries.contains_key(&scope) {
                    continue;
                }
                ledgers.table.entry(scope).or_default().push((
                    ledger::Active {
                        key: r.get(1),
                        generation: r.get::<i64, _>(2) as u32,
                        amount: r.get(3),
                    },
                    r.get::<bool, _>(4),
                ));
            }
            Ok(ledgers)
        })
        .await
    }
}
