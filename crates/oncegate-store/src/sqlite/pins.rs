//! Pinned tool definitions on SQLite: written by the writer thread (`Small::PinTool`,
//! `Small::AcceptTool`, one statement each), read back through the reader pool.

use super::{Small, SqliteStore, unavailable};
use crate::{OfferedTool, PinsRead, PinsWrite, StoreError, ToolPin};

const ALL: &str = "SELECT server, tool, digest, definition, pinned_at, pinned_by, pending_digest, pending_definition, pending_at
     FROM tool_pins ORDER BY server, tool";
const ONE: &str = "SELECT server, tool, digest, definition, pinned_at, pinned_by, pending_digest, pending_definition, pending_at
     FROM tool_pins WHERE server = ? AND tool = ?";

fn pin(r: &sqlx::sqlite::SqliteRow) -> Result<ToolPin, StoreError> {
    crate::decode::tool_pin(r)
}

impl PinsRead for SqliteStore {
    async fn tool_pins(&self) -> Result<Vec<ToolPin>, StoreError> {
        sqlx::query(ALL)
            .fetch_all(&self.inner.readers)
            .await
            .map_err(unavailable)?
            .iter()
            .map(pin)
            .collect()
    }
}

impl PinsWrite for SqliteStore {
    async fn pin_tool(&self, offered: OfferedTool) -> Result<ToolPin, StoreError> {
        let (server, tool) = (offered.server.clone(), offered.tool.clone());
        self.small(Small::PinTool(offered)).await?;
        // This file has one writer (this process): the row read back is this write, or
        // a later one of its own.
        let row = sqlx::query(ONE)
            .bind(&server)
            .bind(&tool)
            .fetch_one(&self.inner.readers)
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
        self.small(Small::AcceptTool {
            server: server.to_owned(),
            tool: tool.to_owned(),
            digest: digest.to_owned(),
            by: by.to_owned(),
            at,
        })
        .await
    }
}
