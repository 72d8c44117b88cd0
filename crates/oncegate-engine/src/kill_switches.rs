//! Kill switches as every replica sees them: the store holds them (set and cleared in
//! one commit with their audit event, controls.rs); each gate keeps a cache that is at
//! most [`FRESH_FOR`] old by the gate's clock, so a switch set through one replica stops
//! calls on the others within a second.
//!
//! A caller that finds the cache stale reloads it first; callers that arrive while a
//! reload runs wait for it and share its answer (one store read, not one per call).
//! They are woken together when it ends, not handed a lock one after another: with
//! hundreds of callers each hand-off waited behind every runnable task, and the last
//! waited 1.5 s (replays at c=512, answered from the settled cache, kept the runtime's
//! queues full).
//! When the reload fails, the caller gets the error together with the last switches
//! known: consequential calls fail closed on the error, reads go on with what was known.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use oncegate_store::{SharedRead, Store, StoreError};

/// How long a loaded set of switches is trusted, by the gate's clock.
pub(crate) const FRESH_FOR: SignedDuration = SignedDuration::from_millis(500);

/// Kill switches by target (`capability:NAME`, `agent:NAME`) with their reason.
pub(crate) type Switches = Arc<HashMap<String, String>>;

/// A reload that failed: the store's error, and the switches known before it.
pub(crate) struct Stale {
    /// Why the switches could not be read.
    pub(crate) error: Arc<StoreError>,
    /// The last switches read (empty if none ever was).
    pub(crate) last_known: Switches,
}

/// One gate's cache of the store's kill switches (shared by the gate's clones).
#[derive(Default)]
pub(crate) struct KillSwitchCache {
    state: Mutex<Cached>,
    /// Held by the one caller reloading.
    reload: tokio::sync::Mutex<()>,
    /// Wakes every caller waiting for the reload when it ends (or is dropped).
    reloaded: tokio::sync::Notify,
}

/// The reload's hold: lets go of the lock, then wakes the waiters (in that order: a
/// waiter woken by a reload that was dropped before it ended takes the lock itself).
struct Reloading<'a> {
    lock: Option<tokio::sync::MutexGuard<'a, ()>>,
    reloaded: &'a tokio::sync::Notify,
}

impl Drop for Reloading<'_> {
    fn drop(&mut self) {
        self.lock.take();
        self.reloaded.notify_waiters();
    }
}

#[derive(Default)]
struct Cached {
    switches: Switches,
    /// When the switches were read (by the gate's clock, sampled before the read).
    loaded_at: Option<Timestamp>,
    /// Bumped by every change this gate writes: a cache loaded before it is stale.
    changes: u64,
    /// `changes` as it was when `switches` were read.
    loaded_for: u64,
    /// Bumped by every reload that ends, with how it ended.
    reloads: u64,
    last_error: Option<Arc<StoreError>>,
}

impl Cached {
    fn fresh(&self, now: Timestamp) -> bool {
        self.loaded_for == self.changes
            && self
                .loaded_at
                .is_some_and(|at| now >= at && now.duration_since(at) < FRESH_FOR)
    }
}

impl KillSwitchCache {
    fn state(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The switches, reloaded from `store` first if the cache is stale at `now()`.
    pub(crate) async fn current(
        &self,
        store: &Store,
        now: impl Fn() -> Timestamp,
    ) -> Result<Switches, Stale> {
        let seen = {
            let state = self.state();
            if state.fresh(now()) {
                return Ok(state.switches.clone());
            }
            state.reloads
        };
        let _reloading = loop {
            let ended = self.reloaded.notified();
            let mut ended = std::pin::pin!(ended);
            // Registered before looking, so a reload that ends from here on wakes it.
            ended.as_mut().enable();
            if let Some(shared) = self.reloaded_since(seen) {
                return shared;
            }
            match self.reload.try_lock() {
                Ok(lock) => {
                    break Reloading {
                        lock: Some(lock),
                        reloaded: &self.reloaded,
                    };
                }
                Err(_) => ended.await,
            }
        };
        // Someone may have reloaded between the look and the lock (only a reload moves
        // `reloads`, and this caller now holds the only one).
        if let Some(shared) = self.reloaded_since(seen) {
            return shared;
        }
        let changes = self.state().changes;
        let started = now();
        let loaded = store.kill_switches().await;
        let mut state = self.state();
        state.reloads += 1;
        match loaded {
            Ok(list) => {
                state.last_error = None;
                let switches: Switches = Arc::new(
                    list.into_iter()
                        .map(|s| (s.target, s.reason))
                        .collect::<HashMap<_, _>>(),
                );
                // A change this gate wrote while the read ran may be missing from it:
                // keep the local view and leave the cache stale for the next caller.
                if state.changes == changes {
                    state.switches = switches.clone();
                    state.loaded_at = Some(started);
                    state.loaded_for = changes;
                }
                Ok(switches)
            }
            Err(e) => {
                let error = Arc::new(e);
                state.last_error = Some(error.clone());
                Err(Stale {
                    error,
                    last_known: state.switches.clone(),
                })
            }
        }
    }

    /// The answer of a reload that ended after `seen`, to share.
    fn reloaded_since(&self, seen: u64) -> Option<Result<Switches, Stale>> {
        let state = self.state();
        (state.reloads != seen).then(|| match &state.last_error {
            None => Ok(state.switches.clone()),
            Some(error) => Err(Stale {
                error: error.clone(),
                last_known: state.switches.clone(),
            }),
        })
    }

    /// A change this gate committed: seen here at once, and the cache is reloaded by
    /// the next caller (other gates' changes may have landed too).
    pub(crate) fn changed(&self, target: &str, reason: Option<&str>) {
        let mut state = self.state();
        let mut switches = (*state.switches).clone();
        match reason {
            Some(r) => switches.insert(target.to_owned(), r.to_owned()),
            None => switches.remove(target),
        };
        state.switches = Arc::new(switches);
        state.changes += 1;
    }

    /// Switches read from the store by someone else (the admin listing): the cache
    /// takes them as of `at` unless this gate changed a switch meanwhile.
    pub(crate) fn loaded(&self, switches: Switches, at: Timestamp, changes: u64) {
        let mut state = self.state();
        if state.changes == changes {
            state.switches = switches;
            state.loaded_at = Some(at);
            state.loaded_for = changes;
        }
    }

    /// The change counter, to pass back to [`KillSwitchCache::loaded`].
    pub(crate) fn changes(&self) -> u64 {
        self.state().changes
    }
}

/// The switch that stops `capability` for `principal`, if one is on.
pub(crate) fn switch_for(switches: &Switches, capability: &str, principal: &str) -> Option<String> {
    switches
        .get(&format!("capability:{capability}"))
        .or_else(|| switches.get(&format!("agent:{principal}")))
        .map(|r| format!("switched off by an admin: {r}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use oncegate_store::{MemoryStore, Store};

    use super::*;

    fn now() -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_hours(1)
    }

    fn caller(
        cache: &Arc<KillSwitchCache>,
        store: &Store,
    ) -> tokio::task::JoinHandle<Result<usize, String>> {
        let (cache, store) = (cache.clone(), store.clone());
        tokio::spawn(async move {
            cache
                .current(&store, now)
                .await
                .map(|s| s.len())
                .map_err(|stale| stale.error.to_string())
        })
    }

    /// Hundreds of callers on a stale cache: one store read, and every caller answered
    /// by it.
    #[tokio::test(start_paused = true)]
    async fn callers_of_a_stale_cache_share_one_reload() {
        let store = Store::from(MemoryStore::with_latency(7, Duration::from_millis(40)));
        let cache = Arc::new(KillSwitchCache::default());
        let callers: Vec<_> = (0..300).map(|_| caller(&cache, &store)).collect();
        for c in callers {
            assert_eq!(c.await.unwrap(), Ok(0));
        }
        assert_eq!(cache.state().reloads, 1);
    }

    /// The caller reloading is dropped while it reads (its request was cancelled): one
    /// of those waiting reloads instead, and none waits for ever.
    #[tokio::test(start_paused = true)]
    async fn a_reload_dropped_midway_leaves_no_caller_waiting() {
        let store = Store::from(MemoryStore::with_latency(7, Duration::from_millis(40)));
        let cache = Arc::new(KillSwitchCache::default());
        let first = caller(&cache, &store);
        tokio::task::yield_now().await;
        assert!(
            cache.reload.try_lock().is_err(),
            "the first caller is reloading"
        );
        let waiting: Vec<_> = (0..50).map(|_| caller(&cache, &store)).collect();
        tokio::task::yield_now().await;
        first.abort();
        for w in waiting {
            let answer = tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("no caller waits for ever");
            assert_eq!(answer.unwrap(), Ok(0));
        }
        assert_eq!(cache.state().reloads, 1, "one of those waiting reloaded");
    }
}
