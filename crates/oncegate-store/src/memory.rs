//! An in-memory store backend, for the deterministic simulation (and any test that wants
//! a store without a file).
//!
//! It keeps the semantics of `sqlite.rs` exactly, because the simulation is only worth
//! something if the engine meets the same store it meets in production: one atomic
//! compare-and-set of (intent record, approval, audit event) on the stored version, an
//! insert (`version == 0`) that conflicts when the (key, generation) exists, and the
//! sharded audit chain sealed inside the same critical section. It passes the same
//! [`conformance`](crate::conformance) suite.
//!
//! What SQLite cannot do on demand, this backend can: [`MemoryStore::set_unavailable`]
//! makes every read and write fail with [`StoreError::Unavailable`] (a store that blinks
//! or is lost for a window), and [`MemoryStore::with_latency`] makes each operation an
//! await point of seeded, random (virtual) duration, so that a process killed "during a
//! commit" may have had its commit applied without hearing about it, just as a crash
//! after fsync and before the reply. Nothing here reads a clock or the operating
//! system's randomness: under tokio's paused clock a run is reproducible from its seed.
//!
//! Rows and audit records are held in their storage forms ([`crate::storage`]), and
//! their seals hash those forms, exactly as `sqlite.rs` stores and seals them.
//!
//! The commit stays in this file: every operation takes the one lock over `Data` and,
//! with latency injected, is one await point; the commit's checks (compare-and-set,
//! limits, finding ids) and its writes stay inside that one critical section to keep
//! SQLite's atomicity. The reads are short views of the same maps, one module per table
//! (`memory/{intents,audit,shared,limits,pins}.rs`), as the store API is cut. (It keeps
//! no limit ledgers: nothing outside the process can edit it, so there is nothing for a
//! ledger to prove.)
//!
//! It is not durable across process restarts of the real program, only across
//! simulated ones (the simulation keeps the store and restarts the gate on it).

mod audit;
mod intents;
mod limits;
mod pins;
mod shared;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use oncegate_core::audit::{ChainHead, RowKind, RowSeal, add_row_seals, row_hash, seal};
use oncegate_core::key::IntentKey;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::clock::Clock;
use crate::storage::{ApprovalRowV1, AuditRowV1, IntentRowV1};
use crate::{Backend, ClientKeyBinding, Commit, KillSwitch, McpSession, StoreError};

/// The in-memory store. Cheap to clone; clones share the data (one "database").
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    data: Mutex<Data>,
    /// The store's own clock, when it keeps one (the PostgreSQL model: see
    /// [`MemoryStore::with_clock`]).
    clock: Mutex<Option<Arc<dyn Clock>>>,
    down: AtomicBool,
    /// Seeded per-operation latency: (rng, maximum). `None`: operations take no time.
    latency: Mutex<Option<(StdRng, Duration)>>,
}

#[derive(Default)]
struct Data {
    /// (key, generation) -> record as stored (version already advanced).
    intents: BTreeMap<(String, u32), IntentRowV1>,
    approvals: BTreeMap<String, ApprovalRowV1>,
    /// The global audit order: (position, record). Positions start at 1, like SQLite's
    /// rowid.
    audit: Vec<(i64, AuditRowV1)>,
    heads: BTreeMap<u32, ChainHead>,
    client_keys: BTreeMap<(String, String, String), ClientKeyBinding>,
    /// Each row's seal: the audit record that wrote its current version, (shard, seq),
    /// and the row hash that record carries (what `sqlite.rs` keeps in its columns).
    seals: BTreeMap<RowId, Seal>,
    /// Kill switches that are on, by target.
    kill_switches: BTreeMap<String, KillSwitch>,
    mcp_sessions: BTreeMap<String, McpSession>,
    /// Background work claimed: work -> (owner, until).
    work: BTreeMap<String, (String, jiff::Timestamp)>,
    audit_checkpoint: Option<String>,
    /// (scope, key, generation) -> (amount, reserved_at, active).
    reservations: BTreeMap<(String, String, u32), (i64, jiff::Timestamp, bool)>,
    findings: BTreeMap<String, crate::FindingRow>,
    /// Pinned tool definitions, by (server, tool).
    tool_pins: BTreeMap<(String, String), crate::ToolPin>,
}

/// A row: its table, intent key or approval id, and generation (0 for approvals).
type RowId = (RowKind, String, u32);
/// Where a row was sealed, (shard, seq), and the row hash that audit record carries.
type Seal = ((u32, u64), String);

impl MemoryStore {
    /// An empty store whose operations take no time.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose every operation waits a random duration in `[0, max]`
    /// (tokio time, so virtual under a paused clock), drawn from a generator seeded
    /// with `seed`. A write is applied between two such waits.
    pub fn with_latency(seed: u64, max: Duration) -> Self {
        let store = Self::default();
        *lock(&store.inner.latency) = Some((StdRng::seed_from_u64(seed), max));
        store
    }

    /// The store keeps its own time by `clock`, as a shared database does: every commit
    /// writes and judges leases (a takeover of one still live by it is
    /// [`StoreError::LeaseLive`]), attempt ends, limit windows and a decision's
    /// `valid_until` by it, and background work claims expire by it, whatever the
    /// deciding gate's clock says (what `postgres/commit.rs` does with `now()`). Without
    /// one the store is the single process's (SQLite's model): it takes the engine's
    /// times as they come.
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        *lock(&self.inner.clock) = Some(clock);
        self
    }

    /// The store's own clock, if it keeps one.
    pub fn clock(&self) -> Option<Arc<dyn Clock>> {
        lock(&self.inner.clock).clone()
    }

    /// The store's time as a query reads it (its clock, else `None`), after the store's
    /// latency: a gate samples it to run its estimate of the store's clock.
    pub async fn store_now(&self) -> Result<Option<jiff::Timestamp>, StoreError> {
        drop(self.reach().await?);
        let now = self.clock().map(|c| c.now());
        self.pause().await;
        Ok(now)
    }

    fn time(&self) -> Option<jiff::Timestamp> {
        lock(&self.inner.clock).as_ref().map(|c| c.now())
    }

    /// Makes the store unreachable (`true`) or reachable again (`false`). While it is
    /// down every read, write and ping fails with [`StoreError::Unavailable`].
    pub fn set_unavailable(&self, down: bool) {
        self.inner.down.store(down, Ordering::SeqCst);
    }

    /// Whether the store is currently unreachable.
    pub fn is_unavailable(&self) -> bool {
        self.inner.down.load(Ordering::SeqCst)
    }

    async fn pause(&self) {
        let wait = lock(&self.inner.latency)
            .as_mut()
            .map(|(rng, max)| {
                let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
                Duration::from_nanos(rng.random_range(0..=nanos))
            })
            .unwrap_or_default();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// Waits, then fails if the store is down, else hands out the data.
    async fn reach(&self) -> Result<MutexGuard<'_, Data>, StoreError> {
        self.pause().await;
        if self.is_unavailable() {
            return Err(StoreError::Unavailable(
                "the in-memory store is unavailable (injected fault)".into(),
            ));
        }
        Ok(lock(&self.inner.data))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn id_key(key: &IntentKey, generation: u32) -> (String, u32) {
    (key.as_str().to_owned(), generation)
}

impl Data {
    // Long on purpose: one commit's steps in the order every backend runs them (checks,
    // then writes), read side by side with postgres/commit.rs `apply` and
    // sqlite/writer/task.rs `apply_one`; the performance issue (35) rewrites this commit
    // path, and cutting it now would move the same code twice.
    /// The whole commit, or nothing: every compare-and-set is checked before anything
    /// is written (SQLite gets the same from its transaction).
    ///
    /// `store_now`: the store's own time, when it keeps one (see
    /// [`MemoryStore::with_clock`]); the commit is then written and judged by it.
    fn apply(
        &mut self,
        commit: Commit,
        store_now: Option<jiff::Timestamp>,
    ) -> Result<(), StoreError> {
        let judged_at = store_now.unwrap_or(commit.event.at);
        if commit.valid_until.is_some_and(|until| judged_at >= until) {
            return Err(StoreError::Conflict);
        }
        let mut current = None;
        if let Some(record) = &commit.record {
            let stored = self.intents.get(&id_key(&record.key, record.generation));
            let fits = match stored {
                None => record.version == 0,
                Some(s) => record.version != 0 && s.version == record.version,
            };
            if !fits {
                return Err(StoreError::Conflict);
            }
            current = stored.cloned();
        }
        if let (Some(now), true, Some(lease)) = (
            store_now,
            commit.takes_over,
            current.as_ref().and_then(|c| c.lease.as_ref()),
        ) && lease.expires_at > now
        {
            return Err(StoreError::LeaseLive(format!(
                "intent {} generation {}: the lease runs {:#} more by the store's clock",
                lease.owner,
                current.as_ref().map_or(0, |c| c.generation),
                lease.expires_at.duration_since(now)
            )));
        }
        let mut commit = commit;
        if let Some(now) = store_now {
            retime(&mut commit, current.as_ref(), now);
        }
        let commit = commit;
        if let Some(approval) = &commit.approval {
            let fits = match self.approvals.get(&approval.id) {
                None => approval.version == 0,
                Some(s) => approval.version != 0 && s.version == approval.version,
            };
            if !fits {
                return Err(StoreError::Conflict);
            }
        }
        if let Some(f) = &commit.finding
            && self.findings.contains_key(&f.id)
        {
            return Err(StoreError::Conflict);
        }
        if let Some(record) = &commit.record {
            let releases = crate::releases(record);
            let key = record.key.as_str().to_owned();
            let held = |r: &crate::Reservation| {
                !releases
                    && self
                        .reservations
                        .get(&(r.scope.clone(), key.clone(), record.generation))
                        .is_some_and(|(_, _, active)| *active)
            };
            for r in &commit.reservations {
                if held(r) {
                    continue;
                }
                let used: i64 = self
                    .reservations
                    .iter()
                    .filter(|((scope, k, g), (_, at, active))| {
                        *scope == r.scope
                            && *active
                            && *at >= r.since
                            && !(releases && *k == key && *g == record.generation)
                    })
                    .map(|(_, (amount, _, _))| amount)
                    .sum();
                if r.enforce && used.saturating_add(r.amount) > r.max {
                    return Err(StoreError::LimitReached {
                        scope: r.scope.clone(),
                        used,
                        max: r.max,
                        amount: r.amount,
                    });
                }
            }
            if releases {
                for ((_, k, g), (_, _, active)) in &mut self.reservations {
                    if *k == key && *g == record.generation {
                        *active = false;
                    }
                }
            }
            for r in &commit.reservations {
                let slot = self
                    .reservations
                    .entry((r.scope.clone(), key.clone(), record.generation))
                    .or_insert((r.amount, judged_at, false));
                if !slot.2 {
                    *slot = (r.amount, judged_at, true);
                }
            }
        }
        if let Some(f) = &commit.finding {
            self.findings.insert(f.id.clone(), f.clone());
        }
        // Every row written names the audit record that writes it, and that record
        // carries the row's hash (the same seals as `sqlite.rs`).
        let mut event = commit.event;
        let intent = commit.record.map(|record| {
            let mut row = IntentRowV1::from(&record);
            row.version += 1;
            let seal = row_seal_of(row.to_body(), &row.key, row.generation, row.version);
            (row, seal)
        });
        let approval = commit.approval.map(|approval| {
            let mut row = ApprovalRowV1::from(&approval);
            row.version += 1;
            let seal = row_seal_of(row.to_body(), &row.id, row.generation, row.version);
            (row, seal)
        });
        add_row_seals(
            &mut event,
            intent.as_ref().map(|(_, s)| s.clone()),
            approval.as_ref().map(|(_, s)| s.clone()),
        );
        let shard = event.shard();
        let head = self
            .heads
            .get(&shard)
            .cloned()
            .unwrap_or_else(ChainHead::genesis);
        let link = (shard, head.seq + 1);
        if let Some((record, seal)) = intent {
            self.seals.insert(
                (RowKind::Intent, seal.key.clone(), record.generation),
                (link, seal.hash),
            );
            self.intents
                .insert((record.key.clone(), record.generation), record);
        }
        if let Some((approval, seal)) = approval {
            self.seals
                .insert((RowKind::Approval, seal.key.clone(), 0), (link, seal.hash));
            self.approvals.insert(approval.id.clone(), approval);
        }
        let sealed = seal(event, &head);
        self.heads.insert(
            shard,
            ChainHead {
                seq: sealed.seq,
                hash: sealed.hash.clone(),
            },
        );
        let position = self.audit.last().map_or(1, |(p, _)| p + 1);
        self.audit.push((position, AuditRowV1::from(sealed)));
        if let Some(change) = commit.kill_switch {
            match change.reason {
                Some(reason) => {
                    self.kill_switches.insert(
                        change.target.clone(),
                        KillSwitch {
                            target: change.target,
                            reason,
                            set_by: change.actor,
                            set_at: change.at,
                            problem: None,
                        },
                    );
                }
                None => {
                    self.kill_switches.remove(&change.target);
                }
            }
        }
        Ok(())
    }
}

/// Re-times what a commit measured from its decision's `now` (`event.at`) to the store's
/// own time `now`, as `postgres/commit.rs` does with the database's `now()`: a new or
/// renewed lease, an attempt ended by this decision, and the reservations' window and
/// time. The event keeps its `at` (the audit says when the gate decided).
fn retime(commit: &mut Commit, current: Option<&IntentRowV1>, now: jiff::Timestamp) {
    let at = commit.event.at;
    let heartbeat = commit.event.detail.get("heartbeat").is_some();
    if let Some(record) = commit.record.as_mut() {
        let current_lease = current.and_then(|c| c.lease.as_ref());
        if let Some(lease) = record.lease.as_mut() {
            let unchanged = current_lease
                .is_some_and(|c| c.owner == lease.owner && c.expires_at == lease.expires_at);
            if heartbeat || !unchanged {
                let mut expires_at = crate::rows::retime(lease.expires_at, at, now);
                if heartbeat && let Some(c) = current_lease.filter(|c| c.owner == lease.owner) {
                    expires_at = expires_at.max(c.expires_at);
                }
                lease.expires_at = expires_at;
            }
        }
        if record.attempt_ended_at == Some(at)
            && record.attempt_ended_at != current.and_then(|c| c.attempt_ended_at)
        {
            record.attempt_ended_at = Some(now);
        }
    }
    for r in &mut commit.reservations {
        r.since = crate::rows::retime(r.since, at, now);
    }
}

/// The seal of a row's stored body (its version already advanced).
fn row_seal_of(body: serde_json::Value, key: &str, generation: u32, version: u64) -> RowSeal {
    RowSeal {
        key: key.to_owned(),
        generation,
        version,
        hash: row_hash(&body),
    }
}

impl Backend for MemoryStore {
    async fn ping(&self) -> Result<(), StoreError> {
        self.reach().await.map(drop)
    }
}
