//! Shared state on SQLite: kill switches, MCP sessions and work claims ([`SharedRead`] /
//! [`SharedWrite`]).

use sqlx::Row;

use super::writer::Small;
use super::{SqliteStore, audit_row, corrupt, switch_read, unavailable};
use crate::controls;
use crate::{KillSwitch, McpSession, SharedRead, SharedWrite, StoreError};

impl SharedRead for SqliteStore {
    async fn kill_switches(&self) -> Result<Vec<KillSwitch>, StoreError> {
        let rows = sqlx::query(
            "SELECT target, reason, set_by, set_at, audit_shard, audit_seq, row_hash FROM kill_switches ORDER BY target",
        )
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        let mut read = Vec::with_capacity(rows.len());
        for r in &rows {
            let switch = switch_read(r);
            let newest = sqlx::query(
                "SELECT shard, seq, prev_hash, hash, body FROM audit
                 WHERE json_extract(body, '$.detail.row_switch.key') = ? ORDER BY id DESC LIMIT 1",
            )
            .bind(&switch.row.target)
            .fetch_optional(&self.inner.readers)
            .await
            .map_err(unavailable)?
            .as_ref()
            .map(audit_row)
            .transpose()?;
            read.push((switch, newest));
        }
        // Every target the chain ever sealed (an index scan): one with no row was deleted.
        let sealed = sqlx::query(
            "SELECT json_extract(body, '$.detail.row_switch.key') AS target, MAX(id) FROM audit
             WHERE json_extract(body, '$.detail.row_switch.key') IS NOT NULL GROUP BY target",
        )
        .fetch_all(&self.inner.readers)
        .await
        .map_err(unavailable)?;
        let mut deleted = Vec::new();
        for r in &sealed {
            let target: String = r.get(0);
            if read.iter().any(|(s, _)| s.row.target == target) {
                continue;
            }
            let at =
                sqlx::query("SELECT shard, seq, prev_hash, hash, body FROM audit WHERE id = ?")
                    .bind(r.get::<i64, _>(1))
                    .fetch_one(&self.inner.readers)
                    .await
                    .map_err(unavailable)
                    .and_then(|row| audit_row(&row))
                    .map_or(jiff::Timestamp::UNIX_EPOCH, |record| record.event.at);
            deleted.push((target, at));
        }
        Ok(controls::switches_on(
            read,
            deleted,
            self.inner.chain_key.as_ref(),
            self.inner.legacy_before,
        ))
    }

    async fn mcp_session(&self, id: &str) -> Result<Option<McpSession>, StoreError> {
        let row =
            sqlx::query("SELECT id, principal, state, updated_at FROM mcp_sessions WHERE id = ?")
                .bind(id)
                .fetch_optional(&self.inner.readers)
                .await
                .map_err(unavailable)?;
        row.map(|r| {
            Ok(McpSession {
                id: r.get(0),
                principal: r.get(1),
                state: r
                    .get::<Option<&str>, _>(2)
                    .map(serde_json::from_str)
                    .transpose()
                    .map_err(corrupt)?,
                updated_at: jiff::Timestamp::from_millisecond(r.get(3)).map_err(corrupt)?,
            })
        })
        .transpose()
    }
}

impl SharedWrite for SqliteStore {
    async fn put_mcp_session(&self, session: McpSession) -> Result<(), StoreError> {
        self.small(Small::PutSession(session)).await.map(drop)
    }

    async fn delete_mcp_session(
        &self,
        id: &str,
        idle_before: jiff::Timestamp,
    ) -> Result<(), StoreError> {
        self.small(Small::DeleteSession(id.to_owned(), idle_before))
            .await
            .map(drop)
    }

    async fn claim_work(
        &self,
        work: &str,
        owner: &str,
        now: jiff::Timestamp,
        ttl: jiff::SignedDuration,
    ) -> Result<bool, StoreError> {
        self.small(Small::ClaimWork {
            work: work.to_owned(),
            owner: owner.to_owned(),
            until: now + ttl,
            now,
        })
        .await
    }

    async fn release_work(&self, work: &str, owner: &str) -> Result<(), StoreError> {
        self.small(Small::ReleaseWork {
            work: work.to_owned(),
            owner: owner.to_owned(),
        })
        .await
        .map(drop)
    }
}
