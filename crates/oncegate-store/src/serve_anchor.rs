//! The serve anchor: every audit shard's head, kept outside the store, so a store that
//! went back in time is noticed before anything is served from it.
//!
//! A store restored from a backup (or a file with an intent row and its shard's tail
//! records deleted together) is consistent in itself: `audit verify` passes, and every
//! intent it forgot would run again. The serving process therefore writes, after every
//! commit, the heads it committed to a small file beside the database
//! (`<file>.anchor`, written whole and renamed into place), and checks them when it
//! starts: each anchored head must still be in the store with the same hash (the store
//! may be ahead: an anchor write lost in a crash only makes the anchor older). A store
//! behind its anchor, an anchor of another store, or an anchor missing where the store
//! says it was anchored is refused (`OG-0031`) unless the operator says the restore
//! was deliberate (`oncegate serve --accept-rollback`); the store then remembers when
//! (`rollback_accepted_at`), and every intent it does not know, or knows only as not
//! applied from before then, is treated as possibly executed until its replay window
//! has passed (see `oncegate_core::decide`).
//!
//! With a chain key the anchor carries an HMAC under it, so it cannot be rewritten to
//! match a rolled-back store without the secret.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use oncegate_core::audit::{ChainHead, ChainKey};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The `meta` row that says this store has been anchored (so a missing anchor file is
/// news, not a first start).
pub(crate) const ANCHORED: &str = "serve_anchored";
/// The `meta` row that holds when a rollback was accepted.
pub(crate) const ROLLBACK_ACCEPTED_AT: &str = "rollback_accepted_at";

#[derive(Serialize, Deserialize)]
struct Document {
    store_id: String,
    heads: BTreeMap<u32, Head>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mac: Option<String>,
}

#[derive(Clone, Serialize, Deserialize, PartialEq, Eq, Debug)]
pub(crate) struct Head {
    pub(crate) seq: u64,
    pub(crate) hash: String,
}

/// The anchor file of one store, as its serving process writes it.
pub(crate) struct AnchorFile {
    path: PathBuf,
    tmp: PathBuf,
    store_id: String,
    key: Option<ChainKey>,
}

fn mac_of(key: &ChainKey, store_id: &str, heads: &BTreeMap<u32, Head>) -> String {
    key.mac(&json!({"anchor": store_id, "heads": heads}))
}

impl AnchorFile {
    /// The anchor of the store `store_id` kept in the database file `db` (canonical).
    pub(crate) fn beside(db: &Path, store_id: &str, key: Option<ChainKey>) -> Self {
        let name = |ext: &str| {
            let mut p = db.as_os_str().to_owned();
            p.push(ext);
            PathBuf::from(p)
        };
        Self {
            path: name(".anchor"),
            tmp: name(".anchor.tmp"),
            store_id: store_id.to_owned(),
            key,
        }
    }

    /// Where it is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `heads` whole and renames it into place (never a torn anchor). Not
    /// synced: it is written after the commit it names is durable, so a crash can only
    /// leave it older than the store, never ahead of it.
    pub(crate) fn write(&self, heads: &HashMap<u32, ChainHead>) -> std::io::Result<()> {
        let heads: BTreeMap<u32, Head> = heads
            .iter()
            .map(|(shard, h)| {
                (
                    *shard,
                    Head {
                        seq: h.seq,
                        hash: h.hash.clone(),
                    },
                )
            })
            .collect();
        let doc = Document {
            mac: self.key.as_ref().map(|k| mac_of(k, &self.store_id, &heads)),
            store_id: self.store_id.clone(),
            heads,
        };
        let mut file = std::fs::File::create(&self.tmp)?;
        file.write_all(&serde_json::to_vec(&doc).map_err(std::io::Error::other)?)?;
        drop(file);
        std::fs::rename(&self.tmp, &self.path)
    }

    /// The heads the anchor vouches for: `Ok(None)` when there is no anchor file,
    /// `Err` with what is wrong when it cannot be trusted.
    pub(crate) fn read(&self) -> Result<Option<BTreeMap<u32, Head>>, String> {
        let text = match std::fs::read(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(format!(
                    "the anchor {} is unreadable: {e}",
                    self.path.display()
                ));
            }
        };
        let doc: Document = serde_json::from_slice(&text)
            .map_err(|e| format!("the anchor {} is not an anchor: {e}", self.path.display()))?;
        if doc.store_id != self.store_id {
            return Err(format!(
                "the anchor {} belongs to store {}, and this file is store {} (the database file was replaced)",
                self.path.display(),
                doc.store_id,
                self.store_id
            ));
        }
        if let Some(key) = &self.key
            && doc.mac.as_deref() != Some(mac_of(key, &self.store_id, &doc.heads).as_str())
        {
            return Err(format!(
                "the anchor {} is not sealed with this chain key (edited, or written before the key was set)",
                self.path.display()
            ));
        }
        Ok(Some(doc.heads))
    }
}

/// What is wrong with a store against its anchor: one line per problem, none when the
/// store holds every anchored head. `stored(shard, seq)` is the hash the store holds at
/// that place, if any; `anchored`: whether the store says it was anchored before.
pub(crate) fn behind(
    anchor: Result<Option<BTreeMap<u32, Head>>, String>,
    anchored: bool,
    mut stored: impl FnMut(u32, u64) -> Result<Option<String>, crate::StoreError>,
) -> Result<Vec<String>, crate::StoreError> {
    let heads = match anchor {
        Err(problem) => return Ok(vec![problem]),
        Ok(None) if anchored => {
            return Ok(vec![
                "the anchor file beside the store is missing, and the store says it was served with one (the store was restored from a backup, or the anchor deleted)".into(),
            ]);
        }
        Ok(None) => return Ok(Vec::new()),
        Ok(Some(heads)) => heads,
    };
    let mut problems = Vec::new();
    for (shard, head) in heads {
        match stored(shard, head.seq)? {
            Some(hash) if hash == head.hash => {}
            Some(_) => problems.push(format!(
                "audit shard {shard} record {} differs from the one this store's server committed (the chain was rewritten)",
                head.seq
            )),
            None => problems.push(format!(
                "audit shard {shard} ends before record {}, which this store's server committed (the store went back in time: a restored backup, or deleted records)",
                head.seq
            )),
        }
    }
    Ok(problems)
}

/// The refusal for a store behind its anchor.
pub(crate) fn refusal(store: &str, anchor: &Path, problems: &[String]) -> crate::StoreError {
    crate::StoreError::RolledBack(format!(
        "the store {store} is behind the anchor its server keeps at {}: {}. Serving it would execute again every intent it forgot. If you restored it on purpose, start with `oncegate serve --accept-rollback`: intents the store does not know (and those it knows only as not applied) are then read from the provider, or held for approval, before anything executes, for as long as their replay window lasts",
        anchor.display(),
        problems.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heads(seq: u64, hash: &str) -> HashMap<u32, ChainHead> {
        HashMap::from([(
            3,
            ChainHead {
                seq,
                hash: hash.into(),
            },
        )])
    }

    #[test]
    fn an_anchor_names_its_store_and_with_a_key_its_mac_holds() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let key = ChainKey::new(b"k").unwrap();
        let mine = AnchorFile::beside(&db, "store-a", Some(key.clone()));
        assert_eq!(mine.read(), Ok(None));
        mine.write(&heads(7, "h7")).unwrap();
        let read = mine.read().unwrap().unwrap();
        assert_eq!(read[&3].seq, 7);
        assert!(
            AnchorFile::beside(&db, "store-b", Some(key))
                .read()
                .is_err()
        );
        let other_key = AnchorFile::beside(&db, "store-a", ChainKey::new(b"x"));
        assert!(other_key.read().unwrap_err().contains("chain key"));
    }

    #[test]
    fn a_store_ahead_of_its_anchor_is_fine_and_one_behind_it_is_not() {
        let anchor = || {
            Ok(Some(BTreeMap::from([(
                3,
                Head {
                    seq: 7,
                    hash: "h7".into(),
                },
            )])))
        };
        let ahead = behind(anchor(), true, |_, seq| Ok((seq == 7).then(|| "h7".into())));
        assert!(ahead.unwrap().is_empty());
        let back = behind(anchor(), true, |_, _| Ok(None)).unwrap();
        assert!(back[0].contains("went back in time"), "{back:?}");
        let rewritten = behind(anchor(), true, |_, _| Ok(Some("other".into()))).unwrap();
        assert!(rewritten[0].contains("rewritten"), "{rewritten:?}");
        assert!(behind(Ok(None), false, |_, _| Ok(None)).unwrap().is_empty());
        assert!(!behind(Ok(None), true, |_, _| Ok(None)).unwrap().is_empty());
    }
}
