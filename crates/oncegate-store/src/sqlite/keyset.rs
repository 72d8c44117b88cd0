//! The keys a serving SQLite store holds rows for, so a claim's first load of a key it
//! has never seen (every distinct intent's) answers "absent" without a hop to a reader
//! thread and two reads.
//!
//! Why "absent" from here is safe: only [`crate::IntentsRead::load_to_claim`] answers
//! from the set, and only a claim follows from it. The claim's insert is the check: a
//! row of that key and generation makes it a conflict (`ON CONFLICT DO NOTHING`), and
//! so does a row or a seal of a later generation (a row edited on disk to this key);
//! the re-decision loads from disk, which refuses what it must. The insert also refuses
//! a key whose sealed rows are gone (deleted rows). So a wrong "absent" costs a
//! conflict, never an effect; every other load reads the disk. What keeps it exact:
//! - the set holds every key with a row on disk and every key the audit chain sealed a
//!   row of, so a deleted row is still refused at its load, as before;
//! - this process notes a key before its commit reaches the writer, so a row it writes
//!   is known before it is on disk;
//! - rows and records written by another process (a CLI command beside the server) are
//!   picked up by a scan of those added since the last one, at most every [`REFRESH`]
//!   and only when another connection committed (rows and records are never deleted,
//!   and SQLite gives a new row a rowid above every committed one);
//! - a key noted by a conflicting commit is known from then on, so the conflict's
//!   reload reads the disk.
//!
//! Until the first scan of both tables has finished, and after a scan fails until one
//! succeeds, every load reads the disk.
//!
//! Keys are kept as 64-bit hashes: a collision only sends a load to the disk.

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::path::Path;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use oncegate_core::key::IntentKey;
use rusqlite::{Connection, params};

use crate::StoreError;

/// How often rows written by another process are looked for.
pub(crate) const REFRESH: Duration = Duration::from_millis(500);

/// The keys known to have rows, or to have had them. One per serving store.
pub(crate) struct KeySet {
    inner: Mutex<Inner>,
    hasher: std::collections::hash_map::RandomState,
    /// Dropped with the store: the scanning thread stops at once.
    _stop: std_mpsc::Sender<()>,
}

#[derive(Default)]
struct Inner {
    keys: HashSet<u64>,
    /// The highest rowid of `intents` and id of `audit` scanned, once a scan of both
    /// whole tables has finished.
    scanned: Option<(i64, i64)>,
}

impl KeySet {
    /// Starts the scanning thread on its own read-only connection to `path`.
    pub(crate) fn start(path: &Path) -> Result<Arc<Self>, StoreError> {
        let conn = super::read::connect(path, false)?;
        let (stop, stopped) = std_mpsc::channel();
        let set = Arc::new(Self {
            inner: Mutex::default(),
            hasher: Default::default(),
            _stop: stop,
        });
        let weak = Arc::downgrade(&set);
        std::thread::Builder::new()
            .name("oncegate-sqlite-keys".into())
            .spawn(move || scan_until_dropped(conn, &weak, &stopped))
            .map_err(super::read::unavailable)?;
        Ok(set)
    }

    /// Whether `key` certainly has no row on disk: false until the first full scan.
    pub(crate) fn absent(&self, key: &IntentKey) -> bool {
        let h = self.hash(key);
        let inner = self.lock();
        inner.scanned.is_some() && !inner.keys.contains(&h)
    }

    /// A commit is about to write `key`'s row.
    pub(crate) fn note(&self, key: &IntentKey) {
        let h = self.hash(key);
        self.lock().keys.insert(h);
    }

    fn hash(&self, key: &IntentKey) -> u64 {
        self.hasher.hash_one(key.as_str())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds the keys of the rows and the records above those scanned. Hashed outside
    /// the lock, in one read transaction.
    fn scan(&self, conn: &mut Connection) -> rusqlite::Result<()> {
        let scanned = self.lock().scanned;
        let tx = conn.transaction()?;
        let mut found = Vec::new();
        let tops = match scanned {
            None => self.scan_all(&tx, &mut found)?,
            Some((rows_from, audit_from)) => (
                self.scan_one(
                    &tx,
                    "SELECT rowid, key FROM intents WHERE rowid > ?1 ORDER BY rowid",
                    rows_from,
                    &mut found,
                )?,
                self.scan_one(
                    &tx,
                    "SELECT id, json_extract(body, '$.detail.row_intent.key') FROM audit WHERE id > ?1 ORDER BY id",
                    audit_from,
                    &mut found,
                )?,
            ),
        };
        drop(tx);
        // The first scan's keys (a million on a large store) are hashed into a set of
        // their own, so loads and commits never wait behind that; the keys noted
        // meanwhile are moved over.
        let first = scanned.is_none().then(|| {
            std::mem::take(&mut found)
                .into_iter()
                .collect::<HashSet<u64>>()
        });
        let mut inner = self.lock();
        match first {
            Some(mut keys) => {
                keys.extend(inner.keys.drain());
                inner.keys = keys;
            }
            None => inner.keys.extend(found),
        }
        inner.scanned = Some(tops);
        Ok(())
    }

    /// The first scan: every key once, off the indexes (the primary key's and the
    /// chain's `audit_by_row_intent`, so no row body is read or parsed), and the newest
    /// rowid and record id of the same snapshot. `> 0`: in SQLite every text sorts
    /// above every number, so this is "not null" in a form the index serves.
    fn scan_all(&self, tx: &Connection, found: &mut Vec<u64>) -> rusqlite::Result<(i64, i64)> {
        let tops = tx.query_row(
            "SELECT (SELECT MAX(rowid) FROM intents), (SELECT MAX(id) FROM audit)",
            [],
            |r| Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, Option<i64>>(1)?)),
        )?;
        self.scan_one(
            tx,
            "SELECT 0, key FROM (SELECT DISTINCT key FROM intents WHERE key > ?1)",
            0,
            found,
        )?;
        self.scan_one(
            tx,
            "SELECT 0, key FROM (SELECT DISTINCT json_extract(body, '$.detail.row_intent.key') AS key
             FROM audit WHERE json_extract(body, '$.detail.row_intent.key') > ?1)",
            0,
            found,
        )?;
        Ok((tops.0.unwrap_or(0), tops.1.unwrap_or(0)))
    }

    /// Hashes the keys `sql` yields above `from` into `found`; returns the highest
    /// position read.
    fn scan_one(
        &self,
        conn: &Connection,
        sql: &str,
        from: i64,
        found: &mut Vec<u64>,
    ) -> rusqlite::Result<i64> {
        let mut stmt = conn.prepare_cached(sql)?;
        let mut rows = stmt.query(params![from])?;
        let mut top = from;
        while let Some(row) = rows.next()? {
            top = row.get(0)?;
            // A key that is not text (edited on disk) is no key a call derives.
            if let rusqlite::types::ValueRef::Text(key) = row.get_ref(1)?
                && let Ok(key) = std::str::from_utf8(key)
            {
                found.push(self.hasher.hash_one(key));
            }
        }
        Ok(top)
    }
}

/// Scans, then again every [`REFRESH`] in which another connection (this process's
/// writer, or another process) committed, until the store is dropped. After a failed
/// scan the set answers nothing (every load reads the disk) until a whole scan
/// succeeds.
fn scan_until_dropped(mut conn: Connection, set: &Weak<KeySet>, stopped: &std_mpsc::Receiver<()>) {
    let mut seen: Option<i64> = None;
    loop {
        let Some(set) = set.upgrade() else { return };
        let version = conn
            .query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0))
            .ok();
        if version.is_none() || version != seen {
            match set.scan(&mut conn) {
                Ok(()) => seen = version,
                Err(e) => {
                    // Answer nothing from the set until a whole scan succeeds again.
                    set.lock().scanned = None;
                    tracing::warn!(error = %e, "could not scan the store's intent keys (loads read the disk meanwhile)");
                }
            }
        }
        drop(set);
        match stopped.recv_timeout(REFRESH) {
            Err(std_mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}
