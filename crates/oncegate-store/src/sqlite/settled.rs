//! The settled-row cache: `applied` intents a load found, so a replay (the agent that
//! decides again and re-sends the same intent) is answered without a hop to a reader
//! thread, a SQLite read, a decode and a seal check.
//!
//! Why a stale entry is safe: only an `applied` row is kept, and an `applied` row is
//! only ever answered as a replay of its recorded result or, past its replay window, a
//! new generation whose commit checks the stored version (a row that moved meanwhile
//! makes that commit a conflict, which drops the entry and loads again). So an entry
//! can make the gateway execute *less*, never more. What bounds the staleness:
//! - this process's commits drop the key's entry once the commit is visible, and a load
//!   that raced a commit is not cached (the epoch below);
//! - another process's write (a CLI command beside the server, a row edited on disk) is
//!   seen after at most [`TTL`], the same staleness the kill-switch cache allows; an
//!   edited row is refused at its next load from disk, as before.
//!
//! Aged by the store's clock (the boot clock, which no wall-clock step or libfaketime
//! moves), passed in by the caller.
//!
//! Bounded: two generations of at most [`CAPACITY`] entries each; a hit in the old one
//! moves to the young one, and a full young generation retires the old.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use oncegate_core::intent::{IntentRecord, IntentState};
use oncegate_core::key::IntentKey;

/// How long an entry answers before the row is loaded from disk again.
pub(crate) const TTL: SignedDuration = SignedDuration::from_millis(500);
/// Entries per generation.
pub(crate) const CAPACITY: usize = 8192;

/// The cache. One per store; cheap to share behind the store's `Arc`.
#[derive(Default)]
pub(crate) struct Settled {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    young: HashMap<IntentKey, Entry>,
    old: HashMap<IntentKey, Entry>,
    /// Bumped by every commit that wrote an intent: a load that began before it may
    /// have read the row that commit replaced.
    epoch: u64,
}

#[derive(Clone)]
struct Entry {
    record: Arc<IntentRecord>,
    at: Timestamp,
}

impl Entry {
    /// Kept at `self.at`, still answering at `now` (a clock that ran back answers no
    /// entry kept after it).
    fn fresh(&self, now: Timestamp) -> bool {
        now >= self.at && now.duration_since(self.at) < TTL
    }
}

/// Forgets its key when dropped (see [`Settled::forget_on_drop`]).
pub(crate) struct Forget<'a> {
    cache: &'a Settled,
    key: IntentKey,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.cache.forget(&self.key);
    }
}

/// Where the cache stood when a load began (see [`Settled::offer`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket(u64);

impl Settled {
    /// The cached row of `key`, if one is fresh at `now`.
    pub(crate) fn get(&self, key: &IntentKey, now: Timestamp) -> Option<IntentRecord> {
        let mut inner = self.lock();
        if let Some(entry) = inner.young.get(key) {
            if entry.fresh(now) {
                return Some(IntentRecord::clone(&entry.record));
            }
            inner.young.remove(key);
            return None;
        }
        let entry = inner.old.remove(key)?;
        if !entry.fresh(now) {
            return None;
        }
        let record = IntentRecord::clone(&entry.record);
        inner.insert(key.clone(), entry);
        Some(record)
    }

    /// Taken before a load from disk, and handed back to [`Settled::offer`] with what
    /// it found.
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket(self.lock().epoch)
    }

    /// Keeps what a load found, if it is `applied` and no commit wrote an intent since
    /// `ticket` was taken (the load may have read a row that commit replaced).
    pub(crate) fn offer(&self, ticket: Ticket, record: &IntentRecord, now: Timestamp) {
        if record.state != IntentState::Applied {
            return;
        }
        let mut inner = self.lock();
        if inner.epoch != ticket.0 {
            return;
        }
        let entry = Entry {
            record: Arc::new(record.clone()),
            at: now,
        };
        inner.insert(record.key.clone(), entry);
    }

    /// A commit that wrote `key`'s row has returned (whether it landed or not): its
    /// entry goes, and loads begun before it are not cached.
    pub(crate) fn forget(&self, key: &IntentKey) {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.young.remove(key);
        inner.old.remove(key);
    }

    /// [`Settled::forget`] when the guard drops: after a commit returned, or when the
    /// caller gave up on it (the commit may still land).
    pub(crate) fn forget_on_drop(&self, key: IntentKey) -> Forget<'_> {
        Forget { cache: self, key }
    }

    /// How many entries are held (both generations).
    #[cfg(test)]
    fn len(&self) -> usize {
        let inner = self.lock();
        inner.young.len() + inner.old.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    fn insert(&mut self, key: IntentKey, entry: Entry) {
        if self.young.len() >= CAPACITY && !self.young.contains_key(&key) {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(key, entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &str, state: IntentState) -> IntentRecord {
        let mut r: IntentRecord = serde_json::from_value(serde_json::json!({
            "key": key, "generation": 1, "capability": "c", "tenant": "t",
            "principal": "p", "run_id": null, "step_id": null, "business_ref": null,
            "cross_key": null, "args_digest": "d", "normalised": {}, "arguments": {},
            "state": "applied", "attempts": 1, "executions": 1, "lease": null,
            "effect_ref": null, "result": null, "error": null, "approval_id": null,
            "breaker_tripped": false, "created_at": "2026-12-07T00:00:00Z",
            "updated_at": "2026-12-07T00:00:00Z", "version": 2,
        }))
        .unwrap_or_else(|e| panic!("a record: {e}"));
        r.state = state;
        r
    }

    fn key(k: &str) -> IntentKey {
        IntentKey::from_hex(k)
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn only_applied_rows_offered_in_a_quiet_epoch_are_kept() {
        let cache = Settled::default();
        let t = cache.ticket();
        cache.offer(t, &record("a", IntentState::InFlight), at(0));
        cache.offer(t, &record("b", IntentState::Unknown), at(0));
        assert!(cache.get(&key("a"), at(1)).is_none());
        assert!(cache.get(&key("b"), at(1)).is_none());
        cache.offer(t, &record("c", IntentState::Applied), at(0));
        let hit = cache.get(&key("c"), at(1)).map(|r| r.state);
        assert_eq!(hit, Some(IntentState::Applied));
    }

    #[test]
    fn an_entry_answers_for_its_ttl_by_the_clock_given_and_never_before_it_was_kept() {
        let cache = Settled::default();
        let t = cache.ticket();
        cache.offer(t, &record("a", IntentState::Applied), at(1_000));
        assert!(cache.get(&key("a"), at(1_000 + 499)).is_some());
        assert!(cache.get(&key("a"), at(1_000 + 500)).is_none(), "aged out");
        assert!(cache.get(&key("a"), at(1_000)).is_none(), "and dropped");
        cache.offer(
            cache.ticket(),
            &record("b", IntentState::Applied),
            at(1_000),
        );
        assert!(
            cache.get(&key("b"), at(999)).is_none(),
            "a clock that ran back"
        );
    }

    #[test]
    fn a_load_that_raced_a_commit_is_not_kept_and_a_commit_drops_its_key() {
        let cache = Settled::default();
        let before = cache.ticket();
        cache.forget(&key("other"));
        cache.offer(before, &record("a", IntentState::Applied), at(0));
        assert!(
            cache.get(&key("a"), at(1)).is_none(),
            "read before a commit landed"
        );
        cache.offer(cache.ticket(), &record("a", IntentState::Applied), at(0));
        assert!(cache.get(&key("a"), at(1)).is_some());
        drop(cache.forget_on_drop(key("a")));
        assert!(cache.get(&key("a"), at(1)).is_none());
    }

    #[test]
    fn two_generations_bound_the_entries() {
        let cache = Settled::default();
        for i in 0..(3 * CAPACITY) {
            let t = cache.ticket();
            cache.offer(t, &record(&format!("k{i}"), IntentState::Applied), at(0));
        }
        assert!(cache.len() <= 2 * CAPACITY, "{} entries", cache.len());
        // The newest are still there; the oldest are gone.
        let newest = key(&format!("k{}", 3 * CAPACITY - 1));
        assert!(cache.get(&newest, at(1)).is_some());
        assert!(cache.get(&key("k0"), at(1)).is_none());
    }
}
