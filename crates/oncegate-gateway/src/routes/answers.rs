//! The shapes of the JSON API's 200 answers that are not an outcome envelope, for the
//! OpenAPI document: the listing pages and the small admin answers spelled out, their
//! items (the store's records, which the core crate defines) as objects. The handlers
//! write these shapes (some as raw bytes, a page under a byte budget), so the types are
//! the document's only; the CLI test `openapi::` checks live answers against them.

#![expect(
    dead_code,
    reason = "shapes for the OpenAPI document; the handlers write the same JSON"
)]

use utoipa::ToSchema;

/// A cursor for the next page (`?cursor=`); null on the last page.
type Cursor = Option<String>;

/// `GET /v1/intents`: one page, newest first.
#[derive(ToSchema)]
pub struct IntentsPage {
    /// The intent records (latest generation of each).
    #[schema(value_type = Vec<Object>)]
    intents: Vec<()>,
    /// Rows that could not be read (their keys and why): never a failed listing.
    #[schema(value_type = Vec<Object>)]
    unreadable: Vec<()>,
    next_cursor: Cursor,
}

/// `GET /v1/approvals`: one page, oldest first.
#[derive(ToSchema)]
pub struct ApprovalsPage {
    #[schema(value_type = Vec<Object>)]
    approvals: Vec<()>,
    #[schema(value_type = Vec<Object>)]
    unreadable: Vec<()>,
    next_cursor: Cursor,
}

/// `GET /v1/findings`: one page, newest first.
#[derive(ToSchema)]
pub struct FindingsPage {
    #[schema(value_type = Vec<Object>)]
    findings: Vec<()>,
    next_cursor: Cursor,
}

/// `GET /v1/admin/holds`.
#[derive(ToSchema)]
pub struct Holds {
    #[schema(value_type = Vec<Object>)]
    holds: Vec<()>,
}

/// `GET /v1/admin/doubts`.
#[derive(ToSchema)]
pub struct Doubts {
    #[schema(value_type = Vec<Object>)]
    doubts: Vec<()>,
}

/// `GET /v1/limits`.
#[derive(ToSchema)]
pub struct Limits {
    #[schema(value_type = Vec<Object>)]
    limits: Vec<()>,
}

/// `PUT /v1/admin/kill-switches/{target}`: the switches every replica now honours.
#[derive(ToSchema)]
pub struct KillSwitches {
    #[schema(value_type = Vec<Object>)]
    kill_switches: Vec<()>,
}

/// `GET /v1/admin/tools`.
#[derive(ToSchema)]
pub struct Tools {
    /// Each fronted tool's pin (`state`: `pinned` or `changed`).
    #[schema(value_type = Vec<Object>)]
    tools: Vec<()>,
}

/// `POST /v1/admin/tools/{server}/{tool}/accept`.
#[derive(ToSchema)]
pub struct Accepted {
    #[schema(value_type = Object)]
    accepted: (),
    /// Present (true) when that definition already was the pin.
    already: Option<bool>,
}

/// `POST /v1/admin/holds/{id}/clear` and `POST /v1/admin/doubts/{capability}/{doubt}/clear`.
#[derive(ToSchema)]
pub struct Cleared {
    #[schema(value_type = Object)]
    cleared: (),
    /// Why (kept in the audit chain).
    reason: String,
}

/// `POST /v1/admin/limits/{scope}/reconcile`.
#[derive(ToSchema)]
pub struct Reconciled {
    /// The budget.
    reconciled: String,
    accept_table: bool,
    reason: String,
}

/// `GET /v1/audit/verify` when every shard verifies.
#[derive(ToSchema)]
pub struct Verified {
    ok: bool,
    records: u64,
    shards: u64,
    rows: u64,
}
