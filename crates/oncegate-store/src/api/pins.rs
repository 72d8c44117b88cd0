//! Pinned tool definitions of fronted MCP servers: [`PinsRead`] / [`PinsWrite`].

use std::future::Future;

use crate::error::StoreError;

/// The definition a fronted MCP server offered for one of its tools, as oncegate pinned
/// it the first time it offered the tool to agents, and a later different one it has
/// seen since (held until an admin accepts it). Definitions are the gateway's canonical
/// JSON (description, input schema, annotations, output schema); the store compares
/// digests only.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ToolPin {
    /// The server's alias (`[[mcp_servers]] alias`).
    pub server: String,
    /// The server's own name for the tool.
    pub tool: String,
    /// The digest of the pinned definition (`sha256:<hex>` of its canonical JSON).
    pub digest: String,
    /// The pinned definition (canonical JSON text).
    pub definition: String,
    /// When it was pinned (first offered, or accepted).
    pub pinned_at: jiff::Timestamp,
    /// Who pinned it: `oncegate` when first offered, else the admin who accepted it.
    pub pinned_by: String,
    /// A different definition the server offers now, held until accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingTool>,
}

/// A changed definition, seen and held.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PendingTool {
    /// Its digest: what an admin names to accept it.
    pub digest: String,
    /// The definition (canonical JSON text).
    pub definition: String,
    /// When it was first seen.
    pub seen_at: jiff::Timestamp,
}

/// A definition a server offers now, for [`PinsWrite::pin_tool`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfferedTool {
    /// The server's alias.
    pub server: String,
    /// The server's name for the tool.
    pub tool: String,
    /// The digest of `definition`.
    pub digest: String,
    /// The definition (canonical JSON text).
    pub definition: String,
    /// When it was read.
    pub at: jiff::Timestamp,
}

/// Pinned tool definitions of fronted MCP servers, shared by every replica on the
/// store: a pin one writes is the pin all honour. Kept outside the audit chain (the
/// engine audits a change and an acceptance with their own events). Reads.
pub trait PinsRead: Send + Sync {
    /// Every pin, by server and tool.
    fn tool_pins(&self) -> impl Future<Output = Result<Vec<ToolPin>, StoreError>> + Send;
}

/// Writes of pinned tool definitions (see [`PinsRead`]).
pub trait PinsWrite: Send + Sync {
    /// Records what a server offers for a tool now, in one atomic step: a tool without a
    /// pin is pinned to it; a definition equal to the pin clears any pending one; a
    /// different one becomes the pending definition (its `seen_at` kept while it stays
    /// the same). Answers the pin as it stands after.
    fn pin_tool(
        &self,
        offered: OfferedTool,
    ) -> impl Future<Output = Result<ToolPin, StoreError>> + Send;
    /// An admin accepts the pending definition whose digest is `digest`: it becomes the
    /// pin (pinned at `at` by `by`). False, and nothing written, when the tool's
    /// pending definition is not that one (none, another, or no such pin).
    fn accept_tool(
        &self,
        server: &str,
        tool: &str,
        digest: &str,
        by: &str,
        at: jiff::Timestamp,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}
