//! Pinned tool definitions on SQLite: written by the writer thread (`Small::PinTool`,
//! `Small::AcceptTool`, one statement each), read back through the reader pool.

use sqlx::Row;

use super::{Small, SqliteStore, corrupt, unavailable};
use crate::{OfferedTool, PendingTool, PinsRead, PinsWrite, StoreError, ToolPin};

const ALL: &str = "SELECT server, tool, digest, definition, pinned_at, pinned_by, pending_digest, pending_definition, pending_at
     FROM tool_pins ORDER BY server, tool";
const ONE: &str = "SELECT server, tool, digest, definition, pinned_at, pinned_by, pending_digest, pending_definition, pending_at
     FROM tool_pins WHERE server = ? AND tool = ?";

fn at(ms: i64) -> Result<jiff::Timestamp, StoreError> {
    jiff::Timestamp::from_millisecond(ms).map_err(corrupt)
}

fn pin(r: &sqlx::sqlite::SqliteRow) -> Result<ToolPin, StoreError> {
    let pending = match (
        r.get::<Option<String>, _>(6),
        r.get::<Option<String>, _>(7),
        r.get::<Option<i64>, _>(8),
    ) {
        (Some(digest), Some(definition), Some(seen_at)) => Some(PendingTool {
            digest,
            definition,
            seen_at: at(seen_at)?,
        }),
        (None, None, None) => None,
        _ => return Err(corrupt("a tool pin's pending definition is half written")),
    };
    Ok(ToolPin {
        server: r.get(0),
        tool: r.get(1),
        digest: r.get(2),
        definition: r.get(3),
        pinned_at: at(r.get(4))?,
        pinned_by: r.get(5),
        pending,
    })
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
