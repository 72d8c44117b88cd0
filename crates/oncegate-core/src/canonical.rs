//! RFC 8785 canonical JSON and its SHA-256 digest: the one spelling of a JSON value that
//! keys, normalisers, audit hashes and row seals all hash.
//!
//! At the bottom of the crate on purpose: it names nothing else here, so every module
//! that hashes JSON can use it without an import running back up.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// RFC 8785 canonical JSON.
pub fn canonical_json(value: &Value) -> String {
    serde_json_canonicalizer::to_string(value).expect("a serde_json::Value always serialises")
}

/// RFC 8785 canonical JSON of anything that serialises, without building a
/// `serde_json::Value` first: the same text as [`canonical_json`] of its value form.
pub fn canonical_json_of(value: &impl Serialize) -> String {
    serde_json_canonicalizer::to_string(value).expect("storage and audit forms serialise")
}

/// SHA-256 hex of a value's canonical JSON.
pub fn digest(value: &Value) -> String {
    hex::encode(Sha256::digest(canonical_json(value).as_bytes()))
}
