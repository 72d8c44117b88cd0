//! Pinned tool definitions on PostgreSQL: one statement per write, so two replicas
//! reading a changed server at once leave one pin and one pending definition.

use super::{PgStore, ts, unavailable};
use crate::{OfferedTool, PinsRead, PinsWrite, StoreError, ToolPin};

const ALL: &str = "SELECT server, tool, digest, definition,
     (extract(epoch from pinned_at) * 1000000)::int8, pinned_by, pending_digest,
     pending_definition, (extract(epoch from pending_at) * 1000000)::int8
     FROM tool_pins ORDER BY server, tool";

fn pin(r: &sqlx::postgres::PgRow) -> Result<ToolPin, StoreError> {
    crate::decode::tool_pin(r)
}

impl PinsRead for PgStore {
    async fn tool_pins(&self) -> Result<Vec<ToolPin>, StoreError> {
        sqlx::query(ALL)
            .fetch_all(&mut *self.conn().await?)
            .await
            .map_err(unavailable)?
            .iter()
            .map(pin)
            .collect()
    }
}

impl PinsWrite for PgStore {
    async fn pin_tool(&self, t: OfferedTool) -> Result<ToolPin, StoreError> {
        let row = sqlx::query(
            "INSERT INTO tool_pins (server, tool, digest, definition, pinned_at, pinned_by)
             VALUES ($1, $2, $3, $4, $5::timestamptz, 'oncegate')
             ON CONFLICT (server, tool) DO UPDATE SET
                 pending_at = CASE WHEN tool_pins.digest = $3 THEN NULL
                     WHEN tool_pins.pending_digest = $3 THEN tool_pins.pending_at
                     ELSE $5::timestamptz END,
                 pending_definition = CASE WHEN tool_pins.digest = $3 THEN NULL ELSE $4 END,
                 pending_digest = CASE WHEN tool_pins.digest = $3 THEN NULL ELSE $3 END
             RETURNING server, tool, digest, definition,
                 (extract(epoch from pinned_at) * 1000000)::int8, pinned_by, pending_digest,
                 pending_definition, (extract(epoch from pending_at) * 1000000)::int8",
        )
        .bind(&t.server)
        .bind(&t.tool)
        .bind(&t.digest)
        .bind(&t.definition)
        .bind(ts(t.at))
        .fetch_one(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        pin(&row)
    }

    async fn accept_tool(
        &self,
        server: &str,
        tool: &str,
        digest: &str,
        by: &str,
        at: jiff::Timestamp,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE tool_pins SET digest = pending_digest, definition = pending_definition,
                 pinned_at = $4::timestamptz, pinned_by = $5,
                 pending_digest = NULL, pending_definition = NULL, pending_at = NULL
             WHERE server = $1 AND tool = $2 AND pending_digest = $3",
        )
        .bind(server)
        .bind(tool)
        .bind(digest)
        .bind(ts(at))
        .bind(by)
        .execute(&mut *self.conn().await?)
        .await
        .map_err(unavailable)?;
        Ok(done.rows_affected() == 1)
    }
}
