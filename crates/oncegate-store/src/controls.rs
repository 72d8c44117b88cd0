//! Kill switches (and holds) and findings as read: each row checked against the audit
//! record that sealed it, as intents are, by rules written once for every backend.
//!
//! A switch whose row cannot be trusted (edited, rolled back, unsealed, or deleted: a
//! cleared switch keeps its row, so a missing one is always a deletion) is on, with the
//! problem as its reason: consequential calls fail closed until an admin sets or clears
//! it again (which seals a new row). A finding whose row cannot be trusted is listed
//! with its problem and never delivered. Rows from before controls were sealed (no
//! seal, older than the store's `controls_sealed_at`) are taken as found.

use oncegate_core::audit::{AuditRecord, ChainKey, RowKind, StoredRow, add_control_seal};

use crate::rows::{self, RowData, body_hash};
use crate::storage::{FindingRowV1, SwitchRowV1};
use crate::{FindingRow, KillSwitch};

/// A kill switch row as read, with its seal columns.
pub(crate) struct SwitchRead {
    pub(crate) row: SwitchRowV1,
    pub(crate) row_hash: Option<String>,
    pub(crate) link: Option<(u32, u64)>,
}

impl SwitchRead {
    fn data(&self) -> RowData {
        RowData {
            id: self.row.target.clone(),
            generation: 0,
            version: 0,
            body: serde_json::to_string(&self.row).expect("storage forms serialise"),
            row_hash: self.row_hash.clone(),
            link: self.link,
        }
    }

    /// The row as `audit verify` checks it.
    pub(crate) fn stored(&self) -> StoredRow {
        stored(RowKind::Switch, &self.data())
    }
}

/// A finding row as read, with its seal columns.
pub(crate) struct FindingRead {
    pub(crate) finding: FindingRow,
    pub(crate) row_hash: Option<String>,
    pub(crate) link: Option<(u32, u64)>,
}

impl FindingRead {
    fn data(&self) -> RowData {
        RowData {
            id: self.finding.id.clone(),
            generation: 0,
            version: 0,
            body: serde_json::to_string(&FindingRowV1::from(&self.finding))
                .expect("storage forms serialise"),
            row_hash: self.row_hash.clone(),
            link: self.link,
        }
    }

    /// The row as `audit verify` checks it.
    pub(crate) fn stored(&self) -> StoredRow {
        stored(RowKind::Finding, &self.data())
    }

    /// The finding, with its problem if its row does not match its seal (checked
    /// against the seal column only: listings do not read the chain per row).
    pub(crate) fn listed(self, legacy_before: Option<i64>) -> FindingRow {
        let data = self.data();
        let legacy = self.row_hash.is_none()
            && legacy_before.is_some_and(|t| self.finding.raised_at.as_millisecond() < t);
        let matches =
            body_hash(&data.body).is_ok_and(|(_, h)| self.row_hash.as_deref() == Some(h.as_str()));
        FindingRow {
            problem: (!legacy && !matches).then(|| {
                "the row does not match its audit seal (edited, or written outside oncegate); it is not delivered; run `oncegate audit verify`".into()
            }),
            ..self.finding
        }
    }
}

fn stored(kind: RowKind, data: &RowData) -> StoredRow {
    StoredRow {
        kind,
        key: data.id.clone(),
        generation: 0,
        body_hash: body_hash(&data.body).map(|(_, h)| h),
        sealed_hash: data.row_hash.clone(),
        link: data.link,
    }
}

/// Writes the seals of the kill switch and the finding `commit` writes into its event
/// (before it is chained), and returns them.
pub(crate) fn seal_controls(
    commit: &crate::Commit,
    event: &mut oncegate_core::audit::AuditEvent,
) -> (
    Option<oncegate_core::audit::RowSeal>,
    Option<oncegate_core::audit::RowSeal>,
) {
    let switch = commit
        .kill_switch
        .as_ref()
        .map(|c| SwitchRowV1::from(c).seal());
    let finding = commit
        .finding
        .as_ref()
        .map(|f| FindingRowV1::from(f).seal());
    if let Some(seal) = &switch {
        add_control_seal(event, RowKind::Switch, seal.clone());
    }
    if let Some(seal) = &finding {
        add_control_seal(event, RowKind::Finding, seal.clone());
    }
    (switch, finding)
}

/// The switches that are on: each stored row checked against `newest` (the newest audit
/// record that sealed its target), plus `deleted`, targets the chain sealed that have no
/// row. `legacy_before` is the store's `controls_sealed_at` in milliseconds.
pub(crate) fn switches_on(
    read: Vec<(SwitchRead, Option<AuditRecord>)>,
    deleted: Vec<(String, jiff::Timestamp)>,
    key: Option<&ChainKey>,
    legacy_before: Option<i64>,
) -> Vec<KillSwitch> {
    let mut on = Vec::new();
    for (switch, newest) in read {
        let legacy =
            switch.row_hash.is_none() && legacy_before.is_some_and(|t| switch.row.set_at_ms < t);
        let problem = if legacy {
            None
        } else {
            rows::check_sealed(RowKind::Switch, &switch.data(), newest, key)
                .err()
                .map(|e| e.to_string())
        };
        let set_at = jiff::Timestamp::from_millisecond(switch.row.set_at_ms)
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let SwitchRowV1 {
            target,
            reason,
            set_by,
            ..
        } = switch.row;
        match (reason, problem) {
            (_, Some(problem)) => on.push(unreadable(target, set_at, problem)),
            (Some(reason), None) => on.push(KillSwitch {
                target,
                reason,
                set_by,
                set_at,
                problem: None,
            }),
            (None, None) => {}
        }
    }
    for (target, at) in deleted {
        let problem = rows::deleted(&RowKind::Switch.name(&target, 0)).to_string();
        on.push(unreadable(target, at, problem));
    }
    on.sort_by(|a, b| a.target.cmp(&b.target));
    on
}

fn unreadable(target: String, set_at: jiff::Timestamp, problem: String) -> KillSwitch {
    KillSwitch {
        target,
        reason: format!("its stored row cannot be trusted, so it is on (fail closed): {problem}"),
        set_by: "oncegate".into(),
        set_at,
        problem: Some(problem),
    }
}
