//! Each budget's ledger of reservations, and the checks a reservation makes against it.
//!
//! A limit's `reservations` rows are what a window's sum reads; alone they are not
//! evidence (delete one and the budget has room again). So every reservation made (or
//! made again) and every release is also an entry in its budget's ledger, chained to the
//! entry before it, and the ledger's head (last entry and its chain value) is sealed by
//! the audit record of the commit that appended it ([`LimitSeal`] in
//! `detail.row_limits`). Before a new reservation, the store walks the ledger back
//! through the window, checks each link, replays what the window holds, and compares
//! that with the active reservations the sum reads. A deleted or edited entry, a head
//! the chain did not seal, or a reservation missing from (or added to) the table
//! refuses new reservations on that budget ([`StoreError::Integrity`]) until an admin
//! reconciles it; the usage that counts is the ledger's.
//!
//! Pure functions only: each backend reads the head, the entries and the table rows in
//! its own dialect and hands them here. Instants are in the store's own unit
//! (milliseconds on SQLite, microseconds on PostgreSQL), the same unit as its
//! reservations' `reserved_at`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use oncegate_core::audit::{
    AuditRecord, ChainKey, GENESIS, LedgerEntry, LimitSeal, RowKind, ledger_link, limit_seals,
};

use crate::StoreError;
use crate::rows::{integrity, trusted_record};

/// Every budget's ledger as stored, for `audit verify`.
#[derive(Clone, Debug, Default)]
pub struct LimitLedgers {
    pub(crate) heads: BTreeMap<String, Head>,
    /// Each budget's entries, oldest first.
    pub(crate) entries: BTreeMap<String, Vec<StoredEntry>>,
    /// Each budget's reservations (active or not), leaving out those from before
    /// ledgers existed in a budget that has none yet.
    pub(crate) table: BTreeMap<String, Vec<(Active, bool)>>,
}

impl LimitLedgers {
    /// Keeps only the budgets `keep` names.
    pub(crate) fn keep(&mut self, keep: impl Fn(&str) -> bool) {
        self.heads.retain(|s, _| keep(s));
        self.entries.retain(|s, _| keep(s));
        self.table.retain(|s, _| keep(s));
    }
}

/// Where a commit's audit record lands and the chain key: what the controls it writes
/// are sealed with (both backends' writers fill it in as they go).
pub(crate) struct Sealing<'a> {
    pub(crate) link: (u32, u64),
    pub(crate) key: Option<&'a ChainKey>,
    /// The entries this process already checked.
    pub(crate) known: &'a Known,
    /// Reservations made before this instant (the store's unit) with no ledger are
    /// from before ledgers existed and are adopted as found.
    pub(crate) legacy_before: Option<i64>,
    /// The ledger heads this commit moved (the audit record seals the last of each).
    pub(crate) limits: Vec<LimitSeal>,
    /// What a reconciliation did, for the audit record's detail.
    pub(crate) reconciled: Option<serde_json::Value>,
}

impl<'a> Sealing<'a> {
    /// Nothing sealed yet, for a record landing at `link`.
    pub(crate) fn new(
        link: (u32, u64),
        key: Option<&'a ChainKey>,
        legacy_before: Option<i64>,
        known: &'a Known,
    ) -> Self {
        Self {
            link,
            key,
            known,
            legacy_before,
            limits: Vec::new(),
            reconciled: None,
        }
    }

    /// A budget's head moved to `seal` (the last move of each budget is what is sealed).
    pub(crate) fn moved(&mut self, seal: LimitSeal) {
        match self.limits.iter_mut().find(|s| s.scope == seal.scope) {
            Some(s) => *s = seal,
            None => self.limits.push(seal),
        }
    }

    /// Nothing for the audit record to carry.
    pub(crate) fn is_empty(&self) -> bool {
        self.limits.is_empty() && self.reconciled.is_none()
    }

    /// Writes the moved heads and what a reconciliation did into `event`.
    pub(crate) fn seal_into(&mut self, event: &mut oncegate_core::audit::AuditEvent) {
        oncegate_core::audit::add_limit_seals(event, &self.limits);
        if let Some(outcome) = self.reconciled.take() {
            oncegate_core::audit::add_reconciled(event, outcome);
        }
    }
}

/// The ledger entries this process checked, by budget and sequence number, exactly as
/// they were read: a link between two entries read again unchanged needs no hash. (An
/// edited entry reads differently and is checked again; an entry of a commit that
/// rolled back reads differently or not at all.)
#[derive(Default)]
pub(crate) struct Known(Mutex<HashMap<String, BTreeMap<u64, StoredEntry>>>);

/// A budget's head as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) seq: u64,
    pub(crate) chain: String,
    /// The audit record that sealed it.
    pub(crate) link: (u32, u64),
}

/// A ledger entry as stored, with its chain value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StoredEntry {
    pub(crate) entry: LedgerEntry,
    pub(crate) chain: String,
}

/// An active reservation in the window, as the table holds it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Active {
    pub(crate) key: String,
    pub(crate) generation: u32,
    pub(crate) amount: i64,
}

fn what(scope: &str) -> String {
    RowKind::Limit.name(scope, 0)
}

fn refused(scope: &str, problem: impl std::fmt::Display) -> StoreError {
    integrity(
        &what(scope),
        format!(
            "{problem}; new charges on this limit are refused until an admin reconciles it (`oncegate limits reconcile {scope}`)"
        ),
    )
}

/// Checks a budget's head against the audit record that sealed it.
pub(crate) fn check_head(
    scope: &str,
    head: &Head,
    record: Option<AuditRecord>,
    key: Option<&ChainKey>,
) -> Result<(), StoreError> {
    let Some(record) = record else {
        return Err(refused(
            scope,
            format!(
                "its head names audit record {:?}, which does not exist",
                head.link
            ),
        ));
    };
    let sealed = LimitSeal {
        scope: scope.to_owned(),
        seq: head.seq,
        chain: head.chain.clone(),
    };
    if !limit_seals(&record.event).contains(&sealed) {
        return Err(refused(
            scope,
            "its head differs from what its audit record sealed (edited head)",
        ));
    }
    trusted_record(&what(scope), &record, key)
}

/// What the window holds by the ledger, checked: `entries` are the budget's entries from
/// just before the window (the newest one older than `since`, and the one before it, so
/// that its own link is checked too) up to the head, newest first. Returns the usage in
/// the window, after comparing the ledger's active reservations with `table`'s.
pub(crate) fn window_usage(
    scope: &str,
    head: Option<&Head>,
    entries: &[StoredEntry],
    since: i64,
    table: &[Active],
    known: &Known,
) -> Result<i64, StoreError> {
    let mut checked = known.0.lock().unwrap_or_else(|e| e.into_inner());
    let seen = checked.remove(scope).unwrap_or_default();
    // A link between two entries read exactly as this process checked them before is
    // not hashed again; any other is.
    let unchanged = |e: &StoredEntry| seen.get(&e.entry.seq) == Some(e);
    let Some(head) = head else {
        if entries.is_empty() && table.is_empty() {
            return Ok(0);
        }
        return Err(refused(
            scope,
            "its ledger has entries or reservations but no head (deleted head)",
        ));
    };
    match entries.first() {
        Some(newest) if newest.entry.seq == head.seq && newest.chain == head.chain => {}
        None if head.seq == 0 => {}
        _ => {
            return Err(refused(
                scope,
                format!(
                    "its ledger does not end at its head (entry {}: deleted or rolled back)",
                    head.seq
                ),
            ));
        }
    }
    for pair in entries.windows(2) {
        let (newer, older) = (&pair[0], &pair[1]);
        if older.entry.seq + 1 != newer.entry.seq {
            return Err(refused(
                scope,
                format!(
                    "its ledger lacks entries {}..{} (deleted)",
                    older.entry.seq + 1,
                    newer.entry.seq - 1
                ),
            ));
        }
        if !(unchanged(newer) && unchanged(older))
            && ledger_link(&older.chain, &newer.entry) != newer.chain
        {
            return Err(refused(
                scope,
                format!("ledger entry {} was edited", newer.entry.seq),
            ));
        }
    }
    if let Some(oldest) = entries.last() {
        // Every entry but the oldest is checked against the one before it. A walk that
        // stopped at two entries before the window has checked the one that bounds it;
        // one that ran out of entries must have reached the first, checked against the
        // chain's start (else the older entries were deleted).
        let cut = entries.iter().filter(|e| e.entry.at < since).count() >= 2;
        if !cut && oldest.entry.seq != 1 {
            return Err(refused(
                scope,
                format!(
                    "its ledger lacks entries 1..{} (deleted)",
                    oldest.entry.seq - 1
                ),
            ));
        }
        if oldest.entry.seq == 1
            && !unchanged(oldest)
            && ledger_link(GENESIS, &oldest.entry) != oldest.chain
        {
            return Err(refused(scope, "ledger entry 1 was edited"));
        }
    }
    let mut newest: HashMap<(&str, u32), &LedgerEntry> = HashMap::new();
    for e in entries.iter().filter(|e| e.entry.at >= since) {
        newest
            .entry((e.entry.key.as_str(), e.entry.generation))
            .or_insert(&e.entry);
    }
    let mut by_ledger: Vec<Active> = newest
        .values()
        .filter(|e| e.reserve)
        .map(|e| Active {
            key: e.key.clone(),
            generation: e.generation,
            amount: e.amount,
        })
        .collect();
    by_ledger.sort();
    let mut in_table = table.to_vec();
    in_table.sort();
    if by_ledger != in_table {
        let missing = by_ledger.iter().filter(|a| !in_table.contains(a)).count();
        let unexplained = in_table.iter().filter(|a| !by_ledger.contains(a)).count();
        return Err(refused(
            scope,
            format!(
                "its reservations in the window do not match its ledger ({missing} missing or changed, {unexplained} the ledger does not explain)"
            ),
        ));
    }
    // Checked: remembered as read (the window's entries only, so memory stays bounded
    // by the windows).
    checked.insert(
        scope.to_owned(),
        entries.iter().map(|e| (e.entry.seq, e.clone())).collect(),
    );
    Ok(by_ledger.iter().map(|a| a.amount).sum())
}

/// The next entry of a budget's ledger after `head` (None: the first), with its chain.
pub(crate) fn append(
    head: Option<&Head>,
    scope: &str,
    key: &str,
    generation: u32,
    amount: i64,
    at: i64,
    reserve: bool,
) -> StoredEntry {
    let entry = LedgerEntry {
        scope: scope.to_owned(),
        seq: head.map_or(0, |h| h.seq) + 1,
        key: key.to_owned(),
        generation,
        amount,
        at,
        reserve,
    };
    let chain = ledger_link(head.map_or(GENESIS, |h| h.chain.as_str()), &entry);
    StoredEntry { entry, chain }
}

/// A budget's whole ledger (oldest first) checked from its first entry to its head:
/// the problem, if it does not hold.
pub(crate) fn check_whole(head: Option<&Head>, entries: &[StoredEntry]) -> Option<String> {
    let mut prev = GENESIS;
    for (i, e) in entries.iter().enumerate() {
        if e.entry.seq != i as u64 + 1 {
            return Some(format!("its ledger lacks entry {} (deleted)", i + 1));
        }
        if ledger_link(prev, &e.entry) != e.chain {
            return Some(format!("ledger entry {} was edited", e.entry.seq));
        }
        prev = &e.chain;
    }
    match (head, entries.last()) {
        (None, None) => None,
        (Some(h), Some(last)) if last.entry.seq == h.seq && last.chain == h.chain => None,
        _ => Some("its ledger does not end at its head (deleted or rolled back)".into()),
    }
}

/// The reservations a whole ledger says the budget holds: (key, generation) ->
/// (active, amount, at).
pub(crate) fn replay(entries: &[StoredEntry]) -> BTreeMap<(String, u32), (bool, i64, i64)> {
    let mut state = BTreeMap::new();
    for e in entries {
        let slot = state
            .entry((e.entry.key.clone(), e.entry.generation))
            .or_insert((false, 0, e.entry.at));
        if e.entry.reserve {
            *slot = (true, e.entry.amount, e.entry.at);
        } else {
            slot.0 = false;
        }
    }
    state
}

/// A reservation as the table holds it: (key, generation, amount, reserved_at, active).
pub(crate) type TableRow = (String, u32, i64, i64, bool);

/// The entries that write a budget's ledger from its reservations as found (reserved,
/// then released for those no longer active), oldest first, after `head`.
pub(crate) fn from_table(scope: &str, rows: &[(String, u32, i64, i64, bool)]) -> Vec<StoredEntry> {
    let mut out: Vec<StoredEntry> = Vec::new();
    for (key, generation, amount, at, active) in rows {
        for reserve in [true, false] {
            if !reserve && *active {
                break;
            }
            let head = out.last().map(|e| Head {
                seq: e.entry.seq,
                chain: e.chain.clone(),
                link: (0, 0),
            });
            out.push(append(
                head.as_ref(),
                scope,
                key,
                *generation,
                if reserve { *amount } else { 0 },
                *at,
                reserve,
            ));
        }
    }
    out
}

/// What `audit verify` finds wrong with the ledgers: each budget's whole ledger against
/// its links, its head against the newest audit record that sealed it (`records`, in
/// store order), and the reservations table against the ledger's replay. Budgets whose
/// head moved after the walk read the chain (`later_than_walk`) are left for the next
/// walk.
pub(crate) fn verify_all(
    records: &[AuditRecord],
    ledgers: &LimitLedgers,
    later_than_walk: impl Fn(&Head) -> bool,
) -> Vec<(String, String)> {
    let LimitLedgers {
        heads,
        entries,
        table,
    } = ledgers;
    let mut newest: BTreeMap<String, (u32, u64, LimitSeal)> = BTreeMap::new();
    for r in records {
        for seal in limit_seals(&r.event) {
            newest.insert(seal.scope.clone(), (r.shard, r.seq, seal));
        }
    }
    let mut problems = Vec::new();
    let mut scopes: Vec<&String> = heads
        .keys()
        .chain(entries.keys())
        .chain(table.keys())
        .chain(newest.keys())
        .collect();
    scopes.sort();
    scopes.dedup();
    for scope in scopes {
        let head = heads.get(scope);
        if head.is_some_and(&later_than_walk) {
            continue;
        }
        let mut problem = |p: String| problems.push((scope.clone(), p));
        match (head, newest.get(scope)) {
            (Some(h), Some((shard, seq, seal))) => {
                if h.link != (*shard, *seq) {
                    problem(format!(
                        "its head names audit record {:?} but the newest record that sealed it is shard {shard} seq {seq} (rolled back)",
                        h.link
                    ));
                } else if seal.seq != h.seq || seal.chain != h.chain {
                    problem(
                        "its head differs from what its audit record sealed (edited head)".into(),
                    );
                }
            }
            (Some(_), None) => problem("no audit record sealed its head".into()),
            (None, Some((shard, seq, _))) => problem(format!(
                "the audit chain (shard {shard} seq {seq}) sealed its head, and it is gone (deleted)"
            )),
            (None, None) => {}
        }
        let list = entries.get(scope).map(Vec::as_slice).unwrap_or_default();
        if let Some(p) = check_whole(head, list) {
            problem(p);
        }
        let mut state: HashMap<(String, u32), (bool, i64)> = replay(list)
            .into_iter()
            .map(|(k, (reserve, amount, _))| (k, (reserve, amount)))
            .collect();
        for (active, is_active) in table.get(scope).map(Vec::as_slice).unwrap_or_default() {
            let by_ledger = state.remove(&(active.key.clone(), active.generation));
            let agrees = match by_ledger {
                Some((reserve, amount)) => {
                    reserve == *is_active && (!reserve || amount == active.amount)
                }
                None => false,
            };
            if !agrees {
                problem(format!(
                    "the reservation of intent {} generation {} does not match its ledger (edited or added)",
                    active.key, active.generation
                ));
            }
        }
        for ((key, generation), _) in state.into_iter().filter(|(_, (active, _))| *active) {
            problem(format!(
                "the ledger reserved for intent {key} generation {generation} and the reservation is gone (deleted)"
            ));
        }
    }
    problems
}
