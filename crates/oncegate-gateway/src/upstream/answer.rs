//! Reading a provider's answer: a body within the limits (past them only its digest,
//! length and preview are kept), and the registry's pointers into it (`effect_ref`, and
//! a reconciliation's `found` and `result`).

use oncegate_core::ReconcileResult;
use oncegate_core::config::Reconcile;
use oncegate_core::limits::{AnswerSummary, Limits, answer_over_limit, json_depth};
use serde_json::Value;

/// The string at `pointer` in `body` (`None`: no pointer, nothing there, or null).
pub(super) fn pointer_string(body: &Value, pointer: Option<&str>) -> Option<String> {
    match body.pointer(pointer?)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// An upstream answer as read within the limits.
pub(super) struct Answer {
    /// What is stored: the body, or its summary when it is over a limit.
    pub(super) stored: Value,
    /// The parsed body when it was read whole (pointers such as `effect_ref` read it).
    pub(super) full: Option<Value>,
}

/// Reads a body chunk by chunk: past `max_answer_bytes` only its digest, length and
/// preview are kept, so a huge answer never sits in memory or in the store.
pub(super) async fn read_body(
    mut response: reqwest::Response,
    limits: &Limits,
) -> Result<Answer, reqwest::Error> {
    let mut kept = Vec::new();
    let mut over: Option<AnswerSummary> = None;
    while let Some(chunk) = response.chunk().await? {
        match over.as_mut() {
            Some(summary) => summary.update(&chunk),
            None if kept.len() + chunk.len() > limits.max_answer_bytes => {
                let mut summary = AnswerSummary::new();
                summary.update(&kept);
                summary.update(&chunk);
                kept = Vec::new();
                over = Some(summary);
            }
            None => kept.extend_from_slice(&chunk),
        }
    }
    if let Some(summary) = over {
        let reason = answer_over_limit(summary.len(), None, limits).unwrap_or_default();
        return Ok(Answer {
            stored: summary.finish(&reason),
            full: None,
        });
    }
    let text = String::from_utf8_lossy(&kept).into_owned();
    let summarise = |reason: String| {
        let mut summary = AnswerSummary::new();
        summary.update(&kept);
        summary.finish(&reason)
    };
    Ok(match serde_json::from_str::<Value>(&text) {
        Ok(body) => match answer_over_limit(kept.len(), Some(json_depth(&body)), limits) {
            Some(reason) => Answer {
                stored: summarise(reason),
                full: Some(body),
            },
            None => Answer {
                stored: body.clone(),
                full: Some(body),
            },
        },
        // serde_json stops at 128 levels: deeper than any limit.
        Err(e) if e.to_string().contains("recursion limit") => Answer {
            stored: summarise(format!(
                "the answer nests more than 128 levels deep, over the limit of {} (gateway.max_answer_depth)",
                limits.max_answer_depth
            )),
            full: None,
        },
        Err(_) => Answer {
            stored: Value::String(text),
            full: None,
        },
    })
}

/// Reads a reconciliation answer with the registry's `found`, `effect_ref` and `result`
/// pointers.
pub(super) fn judge(rec: &Reconcile, body: Value) -> Result<ReconcileResult, String> {
    let found = match rec.found.as_deref() {
        None => true,
        Some(p) => match body.pointer(p) {
            Some(Value::Bool(b)) => *b,
            other => {
                return Err(format!(
                    "`{p}` is not a boolean in the reconciliation answer ({other:?})"
                ));
            }
        },
    };
    Ok(if found {
        let effect_ref = pointer_string(&body, rec.effect_ref.as_deref());
        let result = match rec.result.as_deref() {
            Some(p) => body.pointer(p).cloned().unwrap_or(body),
            None => body,
        };
        ReconcileResult::Found { effect_ref, result }
    } else {
        ReconcileResult::NotFound
    })
}
