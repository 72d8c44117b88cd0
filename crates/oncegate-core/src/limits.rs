//! Limits at the door and on upstream answers, and what a valid structural id is.
//!
//! Everything a call brings in (its arguments) and everything an upstream answers is
//! stored in the intent record and read back on every repeat. Unbounded input would make
//! a record that cannot be read back (serde_json refuses more than 128 levels of nesting,
//! and the record wraps the answer in a few levels of its own) or one that is copied
//! whole into every replay. So arguments over a limit are refused before anything is
//! claimed, and an answer over a limit is stored as a summary (its SHA-256, its length
//! and a short preview): the effect happened, so the intent is still `applied`.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::codes::Code;

/// The limits (`[gateway]` `max_argument_bytes`, `max_argument_depth`,
/// `max_answer_bytes`, `max_answer_depth`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest call arguments, as compact JSON.
    pub max_argument_bytes: usize,
    /// The deepest nesting of objects and arrays in call arguments.
    pub max_argument_depth: usize,
    /// The largest upstream answer stored whole.
    pub max_answer_bytes: usize,
    /// The deepest nesting of an upstream answer stored whole.
    pub max_answer_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_argument_bytes: DEFAULT_MAX_ARGUMENT_BYTES,
            max_argument_depth: DEFAULT_MAX_ARGUMENT_DEPTH,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            max_answer_depth: DEFAULT_MAX_ANSWER_DEPTH,
        }
    }
}

/// Default of `gateway.max_argument_bytes` (64 KiB).
pub const DEFAULT_MAX_ARGUMENT_BYTES: usize = 64 * 1024;
/// Default of `gateway.max_argument_depth`.
pub const DEFAULT_MAX_ARGUMENT_DEPTH: usize = 32;
/// Default of `gateway.max_answer_bytes` (1 MiB).
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// Default of `gateway.max_answer_depth`.
pub const DEFAULT_MAX_ANSWER_DEPTH: usize = 64;
/// The deepest either depth limit may be set: what is stored must stay well inside
/// serde_json's 128 levels once the record and the wire envelope wrap it.
pub const MAX_CONFIGURABLE_DEPTH: usize = 100;
/// How much of an answer over the limit is kept as its preview.
pub const PREVIEW_BYTES: usize = 1024;
/// The key under which a summary replaces an answer over the limit.
pub const TRUNCATED_KEY: &str = "dev.oncegate/truncated";
/// The longest run id, step id or `Idempotency-Key`.
pub const MAX_ID_LEN: usize = 255;

/// Arguments over a limit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// Too many bytes.
    #[error(
        "the arguments are {bytes} bytes as JSON, over the limit of {max} (gateway.max_argument_bytes); nothing was done"
    )]
    TooLarge {
        /// Their size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// Nested too deep.
    #[error(
        "the arguments nest more than {max} levels deep (gateway.max_argument_depth); nothing was done"
    )]
    TooDeep {
        /// The limit.
        max: usize,
    },
}

impl LimitError {
    /// The stable code.
    pub fn code(&self) -> Code {
        match self {
            LimitError::TooLarge { .. } => Code::ArgumentsTooLarge,
            LimitError::TooDeep { .. } => Code::ArgumentsTooDeep,
        }
    }
}

/// The nesting depth of objects and arrays: a scalar is 0, `{}` and `[]` are 1,
/// `{"a": [1]}` is 2. Iterative, so no input can exhaust the stack.
pub fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(depth + 1);
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    deepest
}

/// Whether `value` nests deeper than `max` (stops looking once it does).
pub fn deeper_than(value: &Value, max: usize) -> bool {
    json_depth(value) > max
}

/// Checks a call's arguments against the limits (depth first: it is the cheaper
/// refusal to explain, and a deep value is usually also the large one).
pub fn check_arguments(arguments: &Value, limits: &Limits) -> Result<(), LimitError> {
    if deeper_than(arguments, limits.max_argument_depth) {
        return Err(LimitError::TooDeep {
            max: limits.max_argument_depth,
        });
    }
    let bytes = serde_json::to_vec(arguments).map_or(usize::MAX, |b| b.len());
    if bytes > limits.max_argument_bytes {
        return Err(LimitError::TooLarge {
            bytes,
            max: limits.max_argument_bytes,
        });
    }
    Ok(())
}

/// Checks a run id, step id or `Idempotency-Key`: 1 to [`MAX_ID_LEN`] visible ASCII
/// characters (`!` to `~`). One rule for headers and MCP `_meta`, so the same id reaches
/// the same key by either path; anything else is refused rather than dropped, because a
/// dropped id collapses distinct steps onto one intent.
pub fn check_id(what: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{what} is empty"));
    }
    if value.len() > MAX_ID_LEN {
        return Err(format!(
            "{what} is {} characters long; at most {MAX_ID_LEN} are allowed",
            value.len()
        ));
    }
    if let Some(c) = value.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(format!(
            "{what} contains {c:?} (U+{:04X}); only visible ASCII characters (`!` to `~`, no spaces) are allowed",
            u32::from(c)
        ));
    }
    Ok(())
}

/// Builds the summary stored instead of an answer over the limit, from its bytes as
/// they arrive (nothing but the preview is kept).
#[derive(Default)]
pub struct AnswerSummary {
    hasher: Sha256,
    bytes: usize,
    preview: Vec<u8>,
}

impl AnswerSummary {
    /// A summary of nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the next bytes of the answer.
    pub fn update(&mut self, chunk: &[u8]) {
        self.hasher.update(chunk);
        self.bytes += chunk.len();
        if self.preview.len() < PREVIEW_BYTES {
            let room = PREVIEW_BYTES - self.preview.len();
            self.preview
                .extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
    }

    /// The bytes seen so far.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether nothing was seen.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The value stored in place of the answer:
    /// `{"dev.oncegate/truncated": {"reason", "sha256", "bytes", "preview"}}`.
    pub fn finish(self, reason: &str) -> Value {
        // Cut the preview at a character boundary (a multi-byte character may straddle
        // the end of the kept bytes).
        let preview = match std::str::from_utf8(&self.preview) {
            Ok(s) => s.to_owned(),
            Err(e) if e.error_len().is_none() => {
                String::from_utf8_lossy(&self.preview[..e.valid_up_to()]).into_owned()
            }
            Err(_) => String::from_utf8_lossy(&self.preview).into_owned(),
        };
        json!({
            TRUNCATED_KEY: {
                "reason": reason,
                "sha256": hex::encode(self.hasher.finalize()),
                "bytes": self.bytes,
                "preview": preview,
            }
        })
    }
}

/// Why `bytes` bytes of answer at `depth` do not fit the limits (`depth` `None`: not
/// known, e.g. the answer is not JSON), or `None` when they do.
pub fn answer_over_limit(bytes: usize, depth: Option<usize>, limits: &Limits) -> Option<String> {
    if bytes > limits.max_answer_bytes {
        return Some(format!(
            "the answer is {bytes} bytes, over the limit of {} (gateway.max_answer_bytes)",
            limits.max_answer_bytes
        ));
    }
    match depth {
        Some(d) if d > limits.max_answer_depth => Some(format!(
            "the answer nests {d} levels deep, over the limit of {} (gateway.max_answer_depth)",
            limits.max_answer_depth
        )),
        _ => None,
    }
}

/// An answer already in memory (an MCP tool result, a reconciliation record) within the
/// limits: itself, or its summary.
pub fn bound_answer(answer: Value, limits: &Limits) -> Value {
    let depth = json_depth(&answer);
    let bytes = serde_json::to_vec(&answer).unwrap_or_default();
    match answer_over_limit(bytes.len(), Some(depth), limits) {
        None => answer,
        Some(reason) => {
            let mut summary = AnswerSummary::new();
            summary.update(&bytes);
            summary.finish(&reason)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> Value {
        let mut v = json!(1);
        for _ in 0..levels {
            v = json!([v]);
        }
        v
    }

    #[test]
    fn depth_counts_containers() {
        assert_eq!(json_depth(&json!(1)), 0);
        assert_eq!(json_depth(&json!({})), 1);
        assert_eq!(json_depth(&json!({"a": [1], "b": 2})), 2);
        assert_eq!(json_depth(&nested(126)), 126);
    }

    #[test]
    fn arguments_over_a_limit_are_refused_with_their_code() {
        let limits = Limits::default();
        assert_eq!(check_arguments(&nested(32), &limits), Ok(()));
        let deep = check_arguments(&nested(33), &limits).unwrap_err();
        assert_eq!(deep.code(), Code::ArgumentsTooDeep);
        let big = json!({"memo": "x".repeat(64 * 1024)});
        let large = check_arguments(&big, &limits).unwrap_err();
        assert_eq!(large.code(), Code::ArgumentsTooLarge);
        assert!(large.to_string().contains("65547 bytes"), "{large}");
    }

    #[test]
    fn ids_are_visible_ascii_of_bounded_length() {
        assert!(check_id("Oncegate-Step-Id", "step-1:a/b").is_ok());
        for bad in ["", "étape", "a b", "tab\there", "\u{200b}x"] {
            assert!(check_id("Oncegate-Step-Id", bad).is_err(), "{bad:?}");
        }
        assert!(check_id("x", &"a".repeat(255)).is_ok());
        let long = check_id("x", &"a".repeat(256)).unwrap_err();
        assert!(long.contains("256"), "{long}");
    }

    #[test]
    fn an_answer_over_a_limit_becomes_its_summary() {
        let limits = Limits::default();
        let small = json!({"id": "ch_1"});
        assert_eq!(bound_answer(small.clone(), &limits), small);
        let deep = bound_answer(nested(65), &limits);
        let s = &deep[TRUNCATED_KEY];
        assert_eq!(s["bytes"], 65 * 2 + 1);
        assert!(s["reason"].as_str().unwrap().contains("65 levels"));
        assert_eq!(s["preview"].as_str().unwrap().len(), 131);
        assert_eq!(
            s["sha256"],
            hex::encode(Sha256::digest(serde_json::to_vec(&nested(65)).unwrap()))
        );
        assert!(json_depth(&deep) <= 2);
    }

    #[test]
    fn the_preview_is_bounded_and_cut_at_a_character() {
        let mut s = AnswerSummary::new();
        s.update(&"é".repeat(PREVIEW_BYTES).into_bytes());
        let v = s.finish("big");
        let preview = v[TRUNCATED_KEY]["preview"].as_str().unwrap();
        assert_eq!(preview.len(), PREVIEW_BYTES);
        let mut s = AnswerSummary::new();
        s.update(b"a");
        s.update(&"é".repeat(PREVIEW_BYTES).into_bytes());
        let v = s.finish("big");
        let preview = v[TRUNCATED_KEY]["preview"].as_str().unwrap();
        assert_eq!(preview.len(), PREVIEW_BYTES - 1, "no half character");
        assert_eq!(v[TRUNCATED_KEY]["bytes"], 1 + 2 * PREVIEW_BYTES);
    }
}
