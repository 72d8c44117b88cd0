//! The seal on MCP `requestState` values: what a 2026-07-28 client echoes when it retries
//! a `tools/call` that was held for approval. The value names the approval and the intent
//! and is bound to the principal, the call (tool and arguments' digest) and a deadline;
//! an HMAC-SHA256 tag makes it unforgeable. Single use is the store's business (the MCP
//! surface consumes each state's nonce there); this file only seals and opens.
//!
//! The key: derived from the audit chain key when the store has one, so every replica
//! and every restart opens what another sealed; else 32 random bytes of this process
//! (a restart, or another replica, refuses older states: the agent calls again and is
//! answered a fresh one). Neither key is ever shown to anyone.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{KeyInit, Mac};
use oncegate_core::audit::ChainKey;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Spelled first in every sealed value: the format, so a later one can be told apart.
const PREFIX: &str = "og1.";

/// What a sealed `requestState` says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StateClaims {
    /// The approval the call waits on.
    pub(crate) approval: String,
    /// The intent's key.
    pub(crate) key: String,
    /// Who called (and alone may retry).
    pub(crate) principal: String,
    /// The tool called.
    pub(crate) tool: String,
    /// SHA-256 (hex) of the arguments' canonical JSON.
    pub(crate) digest: String,
    /// Unix seconds after which the state is refused.
    pub(crate) expires: i64,
    /// Random: what the store consumes, once.
    pub(crate) nonce: String,
}

/// The key that seals and opens `requestState` values.
#[derive(Clone)]
pub struct RequestSeal {
    key: Arc<[u8; 32]>,
}

impl RequestSeal {
    /// The seal for a store with (or without) an audit chain key.
    pub(crate) fn new(chain_key: Option<&ChainKey>) -> Self {
        let mut key = [0u8; 32];
        match chain_key {
            Some(chain) => {
                // A key of its own, derived: a requestState tag is never an audit seal.
                let derived =
                    chain.mac(&serde_json::json!({"purpose": "oncegate mcp requestState v1"}));
                hex::decode_to_slice(derived, &mut key).expect("an HMAC-SHA256 is 32 bytes");
            }
            None => rand::rng().fill_bytes(&mut key),
        }
        Self { key: Arc::new(key) }
    }

    fn mac(&self) -> hmac::Hmac<Sha256> {
        hmac::Hmac::<Sha256>::new_from_slice(self.key.as_slice())
            .expect("HMAC takes any key length")
    }

    /// The sealed value of `claims`: `og1.<claims, base64url JSON>.<tag, base64url>`.
    pub(crate) fn seal(&self, claims: &StateClaims) -> String {
        let body = format!(
            "{PREFIX}{}",
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("plain fields serialise"))
        );
        let mut mac = self.mac();
        mac.update(body.as_bytes());
        format!(
            "{body}.{}",
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        )
    }

    /// The claims of a value this key sealed; `None` for anything else (altered, another
    /// key's, not a sealed value at all). The deadline and bindings are the caller's.
    pub(crate) fn open(&self, sealed: &str) -> Option<StateClaims> {
        let (body, tag) = sealed.rsplit_once('.')?;
        let claims = body.strip_prefix(PREFIX)?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        let mut mac = self.mac();
        mac.update(body.as_bytes());
        // Constant time, before anything of the body is parsed.
        mac.verify_slice(&tag).ok()?;
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> StateClaims {
        StateClaims {
            approval: "ap_1".into(),
            key: "k".into(),
            principal: "planner".into(),
            tool: "refund".into(),
            digest: "d".into(),
            expires: 1_900_000_000,
            nonce: "n".into(),
        }
    }

    #[test]
    fn a_sealed_value_opens_to_its_claims_and_nothing_else_opens() {
        let seal = RequestSeal::new(None);
        let sealed = seal.seal(&claims());
        assert_eq!(seal.open(&sealed), Some(claims()));
        // Another process's key, a flipped character, a tag moved onto other claims.
        assert_eq!(RequestSeal::new(None).open(&sealed), None);
        let mut flipped = sealed.clone().into_bytes();
        flipped[6] ^= 1;
        assert_eq!(seal.open(&String::from_utf8(flipped).unwrap()), None);
        let mut other = claims();
        other.principal = "subagent".into();
        let (_, tag) = sealed.rsplit_once('.').unwrap();
        let (body, _) = seal
            .seal(&other)
            .rsplit_once('.')
            .map(|(b, t)| (b.to_owned(), t.to_owned()))
            .unwrap();
        assert_eq!(seal.open(&format!("{body}.{tag}")), None);
        assert_eq!(seal.open("not a state"), None);
        assert_eq!(seal.open(""), None);
    }

    #[test]
    fn a_chain_key_derives_the_same_seal_everywhere() {
        let chain = ChainKey::new(b"a chain key").unwrap();
        let sealed = RequestSeal::new(Some(&chain)).seal(&claims());
        assert_eq!(RequestSeal::new(Some(&chain)).open(&sealed), Some(claims()));
        let other = ChainKey::new(b"another key").unwrap();
        assert_eq!(RequestSeal::new(Some(&other)).open(&sealed), None);
    }
}
