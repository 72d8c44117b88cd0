//! The key-since mark: which unkeyed audit records a store with a chain key still
//! trusts at load.
//!
//! With `[audit] chain_key_env` set, a record sealed with a plain SHA-256 could have
//! been computed by anyone who can write the store, so a row whose newest audit record
//! is unkeyed is refused at load (it fails closed for its intent, as an edited row
//! does). The exception is history from before the key was set: the first time a
//! store is opened with a key, the mark records, per shard, the last sequence number
//! before the first keyed record (or the shard's head when it has none). The mark is
//! sealed with the key (an HMAC over the store id and the heads), so it cannot be
//! raised without the secret; a mark that does not verify trusts no unkeyed record.
//!
//! What the mark cannot see: deleting it and re-sealing a shard's keyed tail without
//! the key. Both stores re-derive the mark only from keyed records that still exist,
//! and the serve anchor (a copy of every shard's head outside the store) notices the
//! rewritten tail before anything is served.

use std::collections::BTreeMap;

use oncegate_core::audit::ChainKey;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The `meta` row that holds the mark.
pub(crate) const MARK: &str = "chain_key_since";

#[derive(Serialize, Deserialize)]
struct Mark {
    store_id: String,
    unkeyed_until: BTreeMap<u32, u64>,
    mac: String,
}

fn mac_of(key: &ChainKey, store_id: &str, heads: &BTreeMap<u32, u64>) -> String {
    key.mac(&json!({"mark": MARK, "store_id": store_id, "unkeyed_until": heads}))
}

/// The mark's text for the store `store_id`: per shard, the last unkeyed sequence
/// number the store trusts, derived from `shards` (per shard: its head, and its first
/// keyed record if any).
pub(crate) fn derive(
    key: &ChainKey,
    store_id: &str,
    shards: impl IntoIterator<Item = (u32, u64, Option<u64>)>,
) -> (String, BTreeMap<u32, u64>) {
    let heads: BTreeMap<u32, u64> = shards
        .into_iter()
        .map(|(shard, head, first_keyed)| {
            (shard, first_keyed.map_or(head, |seq| seq.saturating_sub(1)))
        })
        .collect();
    let mark = Mark {
        store_id: store_id.to_owned(),
        mac: mac_of(key, store_id, &heads),
        unkeyed_until: heads.clone(),
    };
    (
        serde_json::to_string(&mark).expect("a mark serialises"),
        heads,
    )
}

/// The heads a stored mark vouches for; none (with a warning) when it does not parse,
/// names another store, or its MAC does not hold under `key`.
pub(crate) fn read(key: &ChainKey, store_id: &str, text: &str) -> BTreeMap<u32, u64> {
    match serde_json::from_str::<Mark>(text) {
        Ok(mark)
            if mark.store_id == store_id
                && mark.mac == mac_of(key, store_id, &mark.unkeyed_until) =>
        {
            mark.unkeyed_until
        }
        _ => {
            tracing::warn!(
                alert = "chain_key_since",
                "the store's key-since mark is unreadable, of another store, or not sealed with this chain key; no record sealed without the key is trusted at load (rows last written before the key was set fail closed until rewritten)"
            );
            BTreeMap::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_vouches_for_history_before_the_first_keyed_record_only_under_its_key() {
        let key = ChainKey::new(b"k1").unwrap();
        let (text, heads) = derive(&key, "s", [(0, 9, Some(4)), (1, 7, None), (2, 3, Some(1))]);
        assert_eq!(heads, BTreeMap::from([(0, 3), (1, 7), (2, 0)]));
        assert_eq!(read(&key, "s", &text), heads);
        assert!(read(&key, "other store", &text).is_empty());
        assert!(read(&ChainKey::new(b"k2").unwrap(), "s", &text).is_empty());
        let raised = text.replace("\"1\":7", "\"1\":99");
        assert_ne!(raised, text);
        assert!(read(&key, "s", &raised).is_empty());
    }
}
