//! Reading a stored MCP tool result: the small helpers the MCP upstream (which stores
//! them) and the surfaces (which render them) share, so neither imports the other.

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

/// The JSON a tool result is judged by: `structuredContent`, or the first text block
/// parsed as JSON (servers that predate structured content).
pub fn structured(result: &CallToolResult) -> Value {
    if let Some(v) = &result.structured_content {
        return v.clone();
    }
    result
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .map(|t| serde_json::from_str(&t).unwrap_or(Value::String(t)))
        .unwrap_or(Value::Null)
}

/// The provider's record inside a stored tool result (what [`structured`] reads); any
/// other value as it is.
pub fn record_of(stored: Value) -> Value {
    match serde_json::from_value::<CallToolResult>(stored.clone()) {
        Ok(r) if stored.get("content").is_some_and(Value::is_array) => structured(&r),
        _ => stored,
    }
}

/// The first text block of a result (for messages).
pub fn first_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_default()
}

/// Every text block of a result, one per line (what a `rejected` pattern is matched
/// against).
pub fn all_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A stored record re-shaped as a tool result (for a reconciled effect).
pub fn as_tool_result(record: &Value) -> Value {
    json!({
        "content": [{"type": "text", "text": record.to_string()}],
        "structuredContent": record,
    })
}
