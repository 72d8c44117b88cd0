//! What ran across a gap in the store's time, judged the safe way.
//!
//! The SQLite store keeps its time on the boot clock; after a reboot it cannot know how
//! long the machine was down, so its timeline resumes at the host's wall clock (never
//! before the newest instant it holds) and says where ([`Resumption`]). A wall clock
//! that was wrong at boot would otherwise move every duration running across the gap:
//! the records and approvals written before it are read here with the gap counted the
//! safe way, before any decision sees them.
//!
//! - A settle horizon, a lease and a replay window count from the resumption at the
//!   earliest (the gap as zero): they never end early.
//! - An approval pending across the gap has expired at the resumption (the gap as
//!   endless): it never outlives its TTL.
//! - A limit's window reaches back over the reservations made before the gap as if the
//!   gap were zero: a budget never opens early.

use jiff::Timestamp;
use oncegate_core::intent::{Approval, ApprovalState, IntentRecord, IntentState};
use oncegate_store::clock::Resumption;

use crate::gate::Gate;

impl Gate {
    /// `record` as the decisions must see it after the store's time resumed over a gap.
    pub(crate) fn across_gap(&self, record: IntentRecord) -> IntentRecord {
        match self.store.resumption() {
            Some(r) => record_across(&r, record),
            None => record,
        }
    }

    /// [`Gate::across_gap`] for a loaded intent, if any.
    pub(crate) fn maybe_across_gap(&self, record: Option<IntentRecord>) -> Option<IntentRecord> {
        record.map(|r| self.across_gap(r))
    }

    /// `approval` as the decisions must see it after the store's time resumed over a gap.
    pub(crate) fn approval_across_gap(&self, approval: Option<Approval>) -> Option<Approval> {
        match (self.store.resumption(), approval) {
            (Some(r), Some(a)) => Some(approval_across(&r, a)),
            (_, approval) => approval,
        }
    }

    /// Where a limit window starting at `since` begins among the reservations: as far
    /// back again as the gap, when the window reaches before the resumption.
    pub(crate) fn window_since(&self, since: Timestamp) -> Timestamp {
        match self.store.resumption() {
            Some(r) => since_across(&r, since),
            None => since,
        }
    }
}

fn record_across(r: &Resumption, mut record: IntentRecord) -> IntentRecord {
    if record.updated_at >= r.at {
        return record;
    }
    match record.state {
        // The attempt may still land: its horizon counts from the resumption at the
        // earliest.
        IntentState::Unknown => {
            let ended = record.attempt_ended_at.unwrap_or(record.updated_at);
            record.attempt_ended_at = Some(ended.max(r.at));
        }
        // Held after an unknown attempt: the same, once it is executed again.
        IntentState::PendingApproval => {
            record.attempt_ended_at = record.attempt_ended_at.map(|t| t.max(r.at));
        }
        // Its holder's lease (and so its attempt's end) runs until the resumption at
        // the earliest.
        IntentState::InFlight => {
            if let Some(lease) = record.lease.as_mut() {
                lease.expires_at = lease.expires_at.max(r.at);
            }
        }
        IntentState::Applied
        | IntentState::Failed
        | IntentState::NotApplied
        | IntentState::Denied => {}
    }
    // The replay window runs from the settlement: from the resumption at the earliest.
    record.settled_at = record.settled_at.map(|t| t.max(r.at));
    record
}

fn approval_across(r: &Resumption, mut approval: Approval) -> Approval {
    // Asked before the gap: a timeline that resumed at the newest instant it held
    // (a clock behind at boot) resumes at the ask itself.
    if approval.state == ApprovalState::Pending && approval.created_at <= r.at {
        approval.expires_at = approval.expires_at.min(r.at);
    }
    approval
}

fn since_across(r: &Resumption, since: Timestamp) -> Timestamp {
    if since < r.at {
        since.checked_sub(r.gap).unwrap_or(since)
    } else {
        since
    }
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;

    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("valid")
    }

    /// The timeline resumed at t(1000), 600 s after the newest instant before the
    /// reboot (t(400)): a wall clock that may have been 600 s fast at boot.
    fn resumed() -> Resumption {
        Resumption {
            at: t(1000),
            gap: SignedDuration::from_secs(600),
        }
    }

    fn record(state: IntentState, updated: i64) -> IntentRecord {
        let mut r: IntentRecord = serde_json::from_value(serde_json::json!({
            "key": "ab".repeat(32), "generation": 1, "capability": "send_email",
            "principal": "planner", "tenant": "acme", "state": state.as_str(),
            "arguments": {}, "normalised": {}, "args_digest": "d", "breaker_tripped": false,
            "attempts": 1, "executions": 1, "created_at": t(0), "updated_at": t(updated),
            "version": 1,
        }))
        .expect("a record");
        r.attempt_ended_at = (state == IntentState::Unknown).then(|| t(updated));
        r
    }

    #[test]
    fn horizons_and_replay_windows_across_the_gap_count_from_the_resumption() {
        let r = resumed();
        let unknown = record_across(&r, record(IntentState::Unknown, 390));
        assert_eq!(unknown.attempt_ended_at, Some(t(1000)));
        let mut applied = record(IntentState::Applied, 390);
        applied.settled_at = Some(t(390));
        assert_eq!(record_across(&r, applied).settled_at, Some(t(1000)));
        // Written after the resumption: its own times.
        let fresh = record_across(&r, record(IntentState::Unknown, 1010));
        assert_eq!(fresh.attempt_ended_at, Some(t(1010)));
    }

    #[test]
    fn an_approval_pending_across_the_gap_has_expired() {
        let approval: Approval = serde_json::from_value(serde_json::json!({
            "id": "ap_1", "key": "ab".repeat(32), "generation": 1, "capability": "refund",
            "principal": "planner", "args_digest": "d", "policy_hash": "p",
            "reason": "policy", "detail": "", "state": "pending",
            "created_at": t(400), "expires_at": t(400 + 86_400), "version": 1,
        }))
        .expect("an approval");
        assert_eq!(
            approval_across(&resumed(), approval.clone()).expires_at,
            t(1000)
        );
        // Asked after the resumption: its own TTL.
        let mut later = approval;
        later.created_at = t(1001);
        assert_eq!(
            approval_across(&resumed(), later).expires_at,
            t(400 + 86_400)
        );
    }

    #[test]
    fn a_window_reaching_before_the_gap_counts_it_as_zero() {
        let r = resumed();
        // 100 s after the resumption, a 1 h window: it started 3500 s before the
        // resumption by the timeline, 2900 s before the newest instant in truth.
        assert_eq!(since_across(&r, t(1100 - 3600)), t(1100 - 3600 - 600));
        // A window that starts after the resumption is the timeline's own.
        assert_eq!(since_across(&r, t(1050)), t(1050));
    }
}
