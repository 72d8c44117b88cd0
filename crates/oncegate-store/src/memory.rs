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
//! Why one file: every operation takes the one lock over `Data` and, with latency
//! injected, is one await point; the commit's checks (compare-and-set, limits, finding
//! ids) and its writes must stay inside that one critical section to keep SQLite's
//! atomicity, and the reads are short views of the same maps. Split by table it would
//! spread one critical section over several files. (It keeps no limit ledgers: nothing
//! outside the process can edit it, so there is nothing for a ledger to prove.) Its
//! length follows the store API's width (intents, approvals, audit, sessions, work
//! claims, findings, switches, limits, pins); when issue 34 cuts that API by table, the
//! read views move with their traits and the one critical section stays here.
//!
//! It is not durable across process restarts of the real program, only across
//! simulated ones (the simulation keeps the store and restarts the gate on it).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use oncegate_core::audit::{
    AuditRecord, ChainHead, RowKind, RowSeal, StoredRow, add_row_seals, row_hash, seal,
};
use oncegate_core::intent::{Approval, ApprovalState, IntentRecord, IntentState};
use oncegate_core::key::IntentKey;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::clock::Clock;
use crate::storage::{ApprovalRowV1, AuditRowV1, IntentRowV1};
use crate::{
    ApprovalFilter, AuditRead, AuditWrite, Backend, ClientKeyBinding, Commit, IntentFilter,
    IntentsRead, IntentsWrite, KillSwitch, LimitsRead, LimitsWrite, Listing, McpSession, PinsRead,
    PinsWrite, SharedRead, SharedWrite, StoreError,
};

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

impl IntentsRead for MemoryStore {
    async fn load(&self, key: &IntentKey) -> Result<Option<IntentRecord>, StoreError> {
        let data = self.reach().await?;
        Ok(data
            .intents
            .range((key.as_str().to_owned(), 0)..=(key.as_str().to_owned(), u32::MAX))
            .next_back()
            .map(|(_, r)| r.clone().into()))
    }

    async fn load_generation(
        &self,
        key: &IntentKey,
        generation: u32,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let data = self.reach().await?;
        Ok(data
            .intents
            .get(&id_key(key, generation))
            .cloned()
            .map(Into::into))
    }

    async fn find_other_run(
        &self,
        cross_key: &IntentKey,
        run_id: Option<&str>,
    ) -> Result<Option<IntentRecord>, StoreError> {
        let data = self.reach().await?;
        // SQLite: cross_key = ? AND run_id IS NOT ? AND state NOT IN (...) ORDER BY
        // updated_at DESC LIMIT 1.
        Ok(data
            .intents
            .values()
            .filter(|r| r.cross_key.as_deref() == Some(cross_key.as_str()))
            .filter(|r| r.run_id.as_deref() != run_id)
            .filter(|r| {
                !matches!(
                    r.state,
                    IntentState::Denied | IntentState::Failed | IntentState::NotApplied
                )
            })
            .max_by_key(|r| r.updated_at)
            .cloned()
            .map(Into::into))
    }

    async fn list_intents(
        &self,
        filter: &IntentFilter,
    ) -> Result<Listing<IntentRecord>, StoreError> {
        let data = self.reach().await?;
        let limit = if filter.limit == 0 { 100 } else { filter.limit } as usize;
        let mut rows: Vec<&IntentRowV1> = data
            .intents
            .values()
            .filter(|r| filter.state.is_none_or(|s| r.state == s))
            .filter(|r| {
                filter
                    .capability
                    .as_deref()
                    .is_none_or(|c| r.capability == c)
            })
            .filter(|r| !filter.breaker_tripped || r.breaker_tripped)
            .filter(|r| filter.updated_since.is_none_or(|t| r.updated_at >= t))
            .filter(|r| {
                filter
                    .run_id
                    .as_deref()
                    .is_none_or(|run| r.run_id.as_deref() == Some(run))
            })
            .filter(|r| {
                filter
                    .business_ref
                    .as_deref()
                    .is_none_or(|b| r.business_ref.as_deref() == Some(b))
            })
            .collect();
        // The SQL backends' order: time, then key, then generation.
        let position = |r: &IntentRowV1| (r.updated_at, r.key.clone(), r.generation);
        rows.sort_by_key(|r| position(r));
        if !filter.oldest_first {
            rows.reverse();
        }
        if let Some(after) = &filter.after {
            let after = (after.at, after.id.clone(), after.generation);
            rows.retain(|r| {
                if filter.oldest_first {
                    position(r) > after
                } else {
                    position(r) < after
                }
            });
        }
        let next = (rows.len() > limit).then(|| {
            let last = rows[limit - 1];
            crate::PageAfter {
                at: last.updated_at,
                id: last.key.clone(),
                generation: last.generation,
            }
        });
        // Rows in memory are always readable: nothing can edit them behind the store.
        Ok(Listing {
            items: rows
                .into_iter()
                .take(limit)
                .map(|r| r.clone().into())
                .collect(),
            unreadable: Vec::new(),
            next,
        })
    }

    async fn approval(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        let data = self.reach().await?;
        Ok(data.approvals.get(id).cloned().map(Into::into))
    }

    async fn list_approvals(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<Listing<Approval>, StoreError> {
        let data = self.reach().await?;
        let after = filter.after.as_ref().map(|a| (a.at, a.id.as_str()));
        let mut rows: Vec<Approval> = data
            .approvals
            .values()
            .filter(|a| filter.state.is_none_or(|s| a.state == s))
            .filter(|a| {
                after.is_none_or(|after| {
                    let here = (a.created_at, a.id.as_str());
                    if filter.newest_first {
                        here < after
                    } else {
                        here > after
                    }
                })
            })
            .map(|a| a.clone().into())
            .collect();
        rows.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        if filter.newest_first {
            rows.reverse();
        }
        let limit = filter.limit as usize;
        let next = (filter.limit > 0 && rows.len() > limit).then(|| {
            rows.truncate(limit);
            crate::PageAfter::of_approval(&rows[limit - 1])
        });
        Ok(Listing {
            items: rows,
            unreadable: Vec::new(),
            next,
        })
    }

    async fn pending_approvals_of(
        &self,
        principal: &str,
        now: jiff::Timestamp,
    ) -> Result<u32, StoreError> {
        let data = self.reach().await?;
        let live = data
            .approvals
            .values()
            .filter(|a| {
                a.state == ApprovalState::Pending && a.principal == principal && a.expires_at > now
            })
            .count();
        Ok(u32::try_from(live).unwrap_or(u32::MAX))
    }

    async fn stored_rows(&self) -> Result<Vec<StoredRow>, StoreError> {
        let data = self.reach().await?;
        let row = |kind: RowKind, key: &str, generation: u32, value: serde_json::Value| {
            let seal = data.seals.get(&(kind, key.to_owned(), generation));
            StoredRow {
                kind,
                key: key.to_owned(),
                generation,
                body_hash: Ok(row_hash(&value)),
                sealed_hash: seal.map(|(_, h)| h.clone()),
                link: seal.map(|(l, _)| *l),
            }
        };
        let mut out: Vec<StoredRow> = data
            .intents
            .values()
            .map(|r| row(RowKind::Intent, &r.key, r.generation, r.to_body()))
            .collect();
        out.extend(
            data.approvals
                .values()
                .map(|a| row(RowKind::Approval, &a.id, 0, a.to_body())),
        );
        Ok(out)
    }
}

impl IntentsWrite for MemoryStore {
    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let store_now = self.time();
        let applied = self.reach().await?.apply(commit, store_now);
        // The caller hears about the commit only after a second wait: a process killed
        // here has committed without knowing it.
        self.pause().await;
        applied
    }

    async fn bind_client_key(
        &self,
        binding: ClientKeyBinding,
    ) -> Result<ClientKeyBinding, StoreError> {
        let held = {
            let mut data = self.reach().await?;
            let id = (
                binding.principal.clone(),
                binding.capability.clone(),
                binding.client_key.clone(),
            );
            data.client_keys.entry(id).or_insert(binding).clone()
        };
        self.pause().await;
        Ok(held)
    }
}

impl AuditRead for MemoryStore {
    async fn audit_after(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<(i64, AuditRecord)>, StoreError> {
        let data = self.reach().await?;
        Ok(data
            .audit
            .iter()
            .filter(|(p, _)| *p > after)
            .take(limit as usize)
            .map(|(p, r)| (*p, r.clone().into()))
            .collect())
    }

    async fn audit_shard(&self, shard: u32) -> Result<Vec<AuditRecord>, StoreError> {
        let data = self.reach().await?;
        let mut records: Vec<AuditRecord> = data
            .audit
            .iter()
            .filter(|(_, r)| r.shard == shard)
            .map(|(_, r)| r.clone().into())
            .collect();
        records.sort_by_key(|r| r.seq);
        Ok(records)
    }

    async fn audit_shard_after(
        &self,
        shard: u32,
        after: u64,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let mut records = self.audit_shard(shard).await?;
        records.retain(|r| r.seq > after);
        records.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        Ok(records)
    }

    async fn audit_checkpoint(&self) -> Result<Option<String>, StoreError> {
        Ok(self.reach().await?.audit_checkpoint.clone())
    }

    async fn audit_of_intent(
        &self,
        key: &IntentKey,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let data = self.reach().await?;
        // `audit` is in chain order (by position): the newest `limit`, in that order.
        let mut newest: Vec<AuditRecord> = data
            .audit
            .iter()
            .rev()
            .map(|(_, r)| AuditRecord::from(r.clone()))
            .filter(|r| r.event.key.as_ref() == Some(key))
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .collect();
        newest.reverse();
        Ok(newest)
    }

    async fn audit_shards(&self) -> Result<Vec<u32>, StoreError> {
        let data = self.reach().await?;
        Ok(data.heads.keys().copied().collect())
    }
}

impl AuditWrite for MemoryStore {
    async fn put_audit_checkpoint(&self, checkpoint: String) -> Result<(), StoreError> {
        self.reach().await?.audit_checkpoint = Some(checkpoint);
        self.pause().await;
        Ok(())
    }
}

impl SharedRead for MemoryStore {
    async fn kill_switches(&self) -> Result<Vec<KillSwitch>, StoreError> {
        let data = self.reach().await?;
        Ok(data.kill_switches.values().cloned().collect())
    }

    async fn mcp_session(&self, id: &str) -> Result<Option<McpSession>, StoreError> {
        let data = self.reach().await?;
        Ok(data.mcp_sessions.get(id).cloned())
    }
}

impl SharedWrite for MemoryStore {
    async fn put_mcp_session(&self, session: McpSession) -> Result<(), StoreError> {
        {
            let mut data = self.reach().await?;
            let stored = data
                .mcp_sessions
                .entry(session.id.clone())
                .or_insert_with(|| McpSession {
                    principal: None,
                    state: None,
                    ..session.clone()
                });
            stored.principal = session.principal.or(stored.principal.take());
            stored.state = session.state.or(stored.state.take());
            stored.updated_at = session.updated_at;
        }
        self.pause().await;
        Ok(())
    }

    async fn delete_mcp_session(
        &self,
        id: &str,
        idle_before: jiff::Timestamp,
    ) -> Result<(), StoreError> {
        {
            let mut data = self.reach().await?;
            data.mcp_sessions
                .retain(|k, s| k != id && s.updated_at >= idle_before);
        }
        self.pause().await;
        Ok(())
    }

    async fn claim_work(
        &self,
        work: &str,
        owner: &str,
        now: jiff::Timestamp,
        ttl: jiff::SignedDuration,
    ) -> Result<bool, StoreError> {
        // A store with its own clock judges a claim's expiry by it.
        let now = self.time().unwrap_or(now);
        let taken = {
            let mut data = self.reach().await?;
            let free = data
                .work
                .get(work)
                .is_none_or(|(held_by, until)| held_by == owner || *until <= now);
            if free {
                data.work
                    .insert(work.to_owned(), (owner.to_owned(), now + ttl));
            }
            free
        };
        self.pause().await;
        Ok(taken)
    }

    async fn release_work(&self, work: &str, owner: &str) -> Result<(), StoreError> {
        {
            let mut data = self.reach().await?;
            if data
                .work
                .get(work)
                .is_some_and(|(held_by, _)| held_by == owner)
            {
                data.work.remove(work);
            }
        }
        self.pause().await;
        Ok(())
    }
}

impl LimitsRead for MemoryStore {
    async fn limit_used(&self, scope: &str, since: jiff::Timestamp) -> Result<i64, StoreError> {
        let data = self.reach().await?;
        Ok(data
            .reservations
            .iter()
            .filter(|((s, _, _), (_, at, active))| s == scope && *active && *at >= since)
            .map(|(_, (amount, _, _))| amount)
            .sum())
    }

    async fn findings(
        &self,
        limit: u32,
        after: Option<&crate::PageAfter>,
    ) -> Result<Vec<crate::FindingRow>, StoreError> {
        let data = self.reach().await?;
        let after = after.map(|a| (a.at, a.id.as_str()));
        let mut all: Vec<_> = data
            .findings
            .values()
            .filter(|f| after.is_none_or(|after| (f.raised_at, f.id.as_str()) < after))
            .cloned()
            .collect();
        all.sort_by(|a, b| (b.raised_at, &b.id).cmp(&(a.raised_at, &a.id)));
        all.truncate(limit.max(1) as usize);
        Ok(all)
    }

    async fn findings_due(
        &self,
        now: jiff::Timestamp,
        limit: u32,
    ) -> Result<Vec<crate::FindingRow>, StoreError> {
        let data = self.reach().await?;
        let mut due: Vec<_> = data
            .findings
            .values()
            .filter(|f| f.delivered_at.is_none() && f.next_attempt_at.is_some_and(|t| t <= now))
            .cloned()
            .collect();
        due.sort_by(|a, b| {
            a.next_attempt_at
                .cmp(&b.next_attempt_at)
                .then(a.id.cmp(&b.id))
        });
        due.truncate(limit.max(1) as usize);
        Ok(due)
    }

    /// The memory store keeps no ledgers: nothing outside the process can edit it.
    async fn ledgers(&self) -> Result<crate::LimitLedgers, StoreError> {
        Ok(crate::LimitLedgers::default())
    }
}

impl LimitsWrite for MemoryStore {
    async fn finding_delivery(
        &self,
        id: &str,
        attempts: u32,
        delivered_at: Option<jiff::Timestamp>,
        next_attempt_at: Option<jiff::Timestamp>,
    ) -> Result<(), StoreError> {
        {
            let mut data = self.reach().await?;
            if let Some(f) = data.findings.get_mut(id) {
                f.attempts = attempts;
                f.delivered_at = delivered_at;
                f.next_attempt_at = next_attempt_at;
            }
        }
        self.pause().await;
        Ok(())
    }
}

impl PinsRead for MemoryStore {
    async fn tool_pins(&self) -> Result<Vec<crate::ToolPin>, StoreError> {
        let data = self.reach().await?;
        Ok(data.tool_pins.values().cloned().collect())
    }
}

impl PinsWrite for MemoryStore {
    async fn pin_tool(&self, offered: crate::OfferedTool) -> Result<crate::ToolPin, StoreError> {
        let pin = {
            let mut data = self.reach().await?;
            let id = (offered.server.clone(), offered.tool.clone());
            let pin = data.tool_pins.entry(id).or_insert_with(|| crate::ToolPin {
                server: offered.server.clone(),
                tool: offered.tool.clone(),
                digest: offered.digest.clone(),
                definition: offered.definition.clone(),
                pinned_at: offered.at,
                pinned_by: "oncegate".into(),
                pending: None,
            });
            if pin.digest == offered.digest {
                pin.pending = None;
            } else if pin
                .pending
                .as_ref()
                .is_none_or(|p| p.digest != offered.digest)
            {
                pin.pending = Some(crate::PendingTool {
                    digest: offered.digest,
                    definition: offered.definition,
                    seen_at: offered.at,
                });
            }
            pin.clone()
        };
        self.pause().await;
        Ok(pin)
    }

    async fn accept_tool(
        &self,
        server: &str,
        tool: &str,
        digest: &str,
        by: &str,
        at: jiff::Timestamp,
    ) -> Result<bool, StoreError> {
        let accepted = {
            let mut data = self.reach().await?;
            match data
                .tool_pins
                .get_mut(&(server.to_owned(), tool.to_owned()))
            {
                Some(pin) if pin.pending.as_ref().is_some_and(|p| p.digest == digest) => {
                    let pending = pin.pending.take().expect("checked above");
                    pin.digest = pending.digest;
                    pin.definition = pending.definition;
                    pin.pinned_at = at;
                    pin.pinned_by = by.to_owned();
                    true
                }
                _ => false,
            }
        };
        self.pause().await;
        Ok(accepted)
    }
}

impl Backend for MemoryStore {
    async fn ping(&self) -> Result<(), StoreError> {
        self.reach().await.map(drop)
    }
}
