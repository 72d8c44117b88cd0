//! Intents and approvals on SQLite: [`IntentsRead`] (on the reader pool and the reader
//! threads) and [`IntentsWrite`] (through the writer task).

use oncegate_core::audit::{RowKind, StoredRow};
use oncegate_core::intent::{Approval, IntentRecord};
use oncegate_core::key::IntentKey;
use sqlx::Row;
use tokio::sync::oneshot;

use super::writer::Job;
use super::{SqliteStore, finding_row, read, row_data, switch_read, unavailable};
use crate::listing::{self, Dialect, live_count};
use crate::rows::body_hash;
use crate::storage::{ApprovalRowV1, IntentRowV1};
use crate::{
    ApprovalFilter, ClientKeyBinding, Commit, IntentFilter, IntentsRead, IntentsWrite, Listing,
    StoreError,
};

impl IntentsRead for SqliteStore {
    async fn load(&self, key: &IntentKey) -> Result<Option<IntentRecord>, StoreError> {
        let settled = self.inner.settled.as_ref();
        let now = || crate::clock::Clock::now(self.inner.clock.as_ref());
        if let Some(record) = settled.and_then(|s| s.get(key, now())) {
            // A hit never waits, so it yields once as the load it stands in for did: a
            // caller replaying in a loop would otherwise hold its runtime thread from
            // every other task for a whole coop budget (128 calls) at a time, a tail of
            // hundreds of milliseconds for the others at c=128 on two cores.
            tokio::task::yield_now().await;
            return Ok(Some(record));
        }
        // Taken before the read: an entry's age counts from before the row was read.
        let ticket = settled.map(|s| (s.ticket(), now()));
        let (key, keys) = (key.clone(), self.checks());
        let found = self
            .inner
            .blocking
            .run(move |conn| read::load(conn, &key, keys.0.as_ref(), &keys.1))
            .await?;
        if let (Some(settled), Some(ticket), Some(record)) = (settled, ticket, found.as_ref()) {
            settled.offer(ticket.0, record, ticket.1);
        }
        Ok(found)
    }

    async fn load_to_claim(&self, key: &IntentKey) -> Result<Option<IntentRecord>, StoreError> {
        if self.inner.keys.as_ref().is_some_and(|k| k.absent(key)) {
            // Yields once, as the load it stands in for did (see `load`'s hit).
            tokio::task::yield_now().await;
            return Ok(None);
        }
        self.load(key).await
    }

    async fn load_generation(
        &self,
        key: &IntentKey,
        generation: u32,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let (key, keys) = (key.clone(), self.checks());
        self.inner
            .blocking
            .run(move |conn| {
                read::load_generation(conn, &key, generation, keys.0.as_ref(), &keys.1)
            })
            .await
    }

    async fn find_other_run(
        &self,
        cross_key: &IntentKey,
        run_id: Option<&str>,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let (cross_key, keys) = (cross_key.clone(), self.checks());
        let run_id = run_id.map(str::to_owned);
        self.inner
            .blocking
            .run(move |conn| {
                read::find_other_run(
                    conn,
                    &cross_key,
                    run_id.as_deref(),
                    keys.0.as_ref(),
                    &keys.1,
                )
            })
            .await
    }

    async fn list_intents(
        &self,
        filter: &IntentFilter,
    ) -> Result<Listing<IntentRecord>, StoreError> {
        let rows = listing::intents_query(Dialect::Sqlite, filter)
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        let (rows, next) = listing::page_of(Dialect::Sqlite, rows, Some(filter.limit), |r| {
            let row = row_data(r, RowKind::Intent);
            (r.get("sort_at"), row.id, row.generation)
        });
        Ok(crate::rows::listing_of::<IntentRowV1, _>(
            RowKind::Intent,
            rows.iter().map(|r| row_data(r, RowKind::Intent)),
            next,
        ))
    }

    async fn approval(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        let (id, keys) = (id.to_owned(), self.checks());
        self.inner
            .blocking
            .run(move |conn| read::approval(conn, &id, keys.0.as_ref(), &keys.1))
            .await
    }

    async fn list_approvals(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<Listing<Approval>, StoreError> {
        let rows = listing::approvals_query(Dialect::Sqlite, filter)
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?;
        let limit = (filter.limit > 0).then_some(filter.limit);
        let (rows, next) = listing::page_of(Dialect::Sqlite, rows, limit, |r| {
            (r.get("sort_at"), r.get("id"), 0)
        });
        Ok(crate::rows::listing_of::<ApprovalRowV1, _>(
            RowKind::Approval,
            rows.iter().map(|r| row_data(r, RowKind::Approval)),
            next,
        ))
    }

    async fn pending_approvals_of(
        &self,
        principal: &str,
        now: jiff::Timestamp,
    ) -> Result<u32, StoreError> {
        // The expiry is read from the body (no column): the index narrows the rows to
        // this principal's pending ones, which the budget keeps few.
        let rows = sqlx::query(
            "SELECT json_extract(body, '$.expires_at') AS expires_at FROM approvals
             WHERE state = 'pending' AND json_extract(body, '$.principal') = ?1",
        )
        .bind(principal)
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        Ok(live_count(
            rows.iter()
                .map(|r| r.get::<Option<String>, _>("expires_at")),
            now,
        ))
    }

    async fn stored_rows(&self) -> Result<Vec<StoredRow>, StoreError> {
        let mut out = Vec::new();
        for (kind, sql) in [
            (
                RowKind::Intent,
                "SELECT key, generation, version, body, audit_shard, audit_seq, row_hash FROM intents ORDER BY key, generation",
            ),
            (
                RowKind::Approval,
                "SELECT id, generation, version, body, audit_shard, audit_seq, row_hash FROM approvals ORDER BY id",
            ),
        ] {
            let rows = sqlx::query(sql)
                .fetch_all(&self.inner.readers)
                .await
                .map_err(unavailable)?;
            for r in &rows {
                let row = row_data(r, kind);
                out.push(StoredRow {
                    kind,
                    generation: if kind == RowKind::Intent {
                        row.generation
                    } else {
                        0
                    },
                    body_hash: body_hash(&row.body).map(|(_, h)| h),
                    sealed_hash: row.row_hash,
                    link: row.link,
                    key: row.id,
                });
            }
        }
        out.extend(self.stored_controls().await?);
        Ok(out)
    }

    async fn stored_controls(&self) -> Result<Vec<StoredRow>, StoreError> {
        let mut out = Vec::new();
        for r in sqlx::query(
            "SELECT target, reason, set_by, set_at, audit_shard, audit_seq, row_hash FROM kill_switches",
        )
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?
        {
            let switch = switch_read(&r);
            if switch.row_hash.is_some()
                || self
                    .inner
                    .legacy_before
                    .is_none_or(|t| switch.row.set_at_ms >= t)
            {
                out.push(switch.stored());
            }
        }
        for r in sqlx::query(
            "SELECT id, rule, raised_at, body, delivered_at, attempts, next_attempt_at, audit_shard, audit_seq, row_hash FROM findings",
        )
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?
        {
            let finding = finding_row(&r)?;
            if finding.row_hash.is_some()
                || self
                    .inner
                    .legacy_before
                    .is_none_or(|t| finding.finding.raised_at.as_millisecond() >= t)
            {
                out.push(finding.stored());
            }
        }
        Ok(out)
    }
}

impl IntentsWrite for SqliteStore {
    async fn bind_client_key(
        &self,
        binding: ClientKeyBinding,
    ) -> Result<ClientKeyBinding, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .writer
            .send(Job::Bind(binding, tx))
            .await
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?
    }

    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        // Once the commit is visible, failed, or was given up on: its row's cached copy
        // may be stale.
        let _forget = self
            .inner
            .settled
            .as_ref()
            .zip(commit.record.as_ref())
            .map(|(settled, r)| settled.forget_on_drop(r.key.clone()));
        if let (Some(keys), Some(record)) = (&self.inner.keys, &commit.record) {
            keys.note(&record.key);
        }
        let result = self.commit_inner(commit).await;
        metrics::histogram!("oncegate_store_commit_seconds")
            .record(started.elapsed().as_secs_f64());
        result
    }
}
