//! A page of `GET /v1/findings` on the wire. Each finding is the engine's stored JSON
//! body as it is (with its delivery columns added by the engine): the body is the
//! record kept in the store and sealed by the audit chain, so it is shown as stored
//! rather than re-spelled here.

use serde::Serialize;
use serde_json::Value;

/// One page of findings, newest first.
#[derive(Debug, Serialize)]
pub struct FindingsPage {
    pub findings: Vec<Value>,
    /// Where the next page starts (`?cursor=`); null on the last page.
    pub next_cursor: Option<String>,
}
