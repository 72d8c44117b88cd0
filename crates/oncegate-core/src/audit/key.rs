//! The chain key: the secret that seals audit records with HMAC-SHA256, and which
//! unkeyed records from before it was set a store still trusts at load.

use std::collections::BTreeMap;

use hmac::{KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::canonical::canonical_json;

/// The secret of an optional chain key: records sealed with it carry an HMAC-SHA256
/// instead of a plain hash, so a shard edited and recomputed without the secret fails
/// verification.
///
/// A store that held records before the key was set trusts those older records at load
/// only up to the sequence numbers its key-since mark names (see
/// [`ChainKey::trusting_unkeyed_until`]); every later record must carry the key's HMAC.
#[derive(Clone)]
pub struct ChainKey {
    pub(super) secret: Vec<u8>,
    /// Per shard, the highest sequence number an unkeyed record may have and still be
    /// trusted at load (records from before the key was set); absent shards: none.
    unkeyed_until: std::sync::Arc<BTreeMap<u32, u64>>,
}

impl ChainKey {
    /// A key from its secret; `None` for an empty secret (which would protect nothing).
    pub fn new(secret: &[u8]) -> Option<Self> {
        (!secret.is_empty()).then(|| Self {
            secret: secret.to_vec(),
            unkeyed_until: std::sync::Arc::default(),
        })
    }

    /// This key, trusting at load the unkeyed records of each shard up to the sequence
    /// number `heads` gives it: the records written before the key was set, vouched
    /// for by a mark sealed with the key.
    pub fn trusting_unkeyed_until(mut self, heads: BTreeMap<u32, u64>) -> Self {
        self.unkeyed_until = std::sync::Arc::new(heads);
        self
    }

    /// Whether an unkeyed record at `shard`/`seq` predates the key (and so may be
    /// checked by its plain hash).
    pub fn trusts_unkeyed(&self, shard: u32, seq: u64) -> bool {
        self.unkeyed_until
            .get(&shard)
            .is_some_and(|until| seq <= *until)
    }

    /// The hex HMAC-SHA256 of `value`'s canonical JSON under this key: what seals a
    /// document kept beside the chain (the `audit verify` checkpoint).
    pub fn mac(&self, value: &Value) -> String {
        mac_hex(self, value)
    }
}

impl std::fmt::Debug for ChainKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChainKey(..)")
    }
}

/// The hex HMAC-SHA256 of `material`'s canonical JSON under `key`.
pub(super) fn mac_hex(key: &ChainKey, material: &Value) -> String {
    mac_bytes(key, canonical_json(material).as_bytes())
}

/// The hex HMAC-SHA256 of `bytes` under `key`.
pub(super) fn mac_bytes(key: &ChainKey, bytes: &[u8]) -> String {
    let mut mac =
        hmac::Hmac::<Sha256>::new_from_slice(&key.secret).expect("HMAC takes any key length");
    mac.update(bytes);
    hex::encode(mac.finalize().into_bytes())
}
