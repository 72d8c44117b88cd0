//! The approval queue's budget per agent (`gateway.pending_approvals_per_agent`): a
//! call that would be held for approval while its agent already has that many pending
//! approvals is refused (`OG-0058`) instead of queued, so one agent cannot bury the
//! approvers' queue (and the calls of every other agent in it).
//!
//! An approval asked because an earlier attempt's outcome is unknown
//! (`UnknownFirstAttempt`, from a call or the sweep) is never refused: refusing it would
//! leave an effect that may have happened without anyone deciding it.
//!
//! The count is the store's (every replica's approvals, expired ones not counted), read
//! only when a decision would create an approval, so calls that need none never pay
//! for it. Within one process an agent's calls take turns from the count to the
//! commit ([`Gate::queue_turn`]), so a flood of parallel calls cannot all pass the
//! same count; across replicas two calls racing at the edge may both pass (at most one
//! more per replica). The refusal carries the `approval_queue_full`
//! alert at most once a minute per agent and process, so a flood does not flood the
//! alert webhook too.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use oncegate_core::codes::Code;
use oncegate_core::decide::{self, Decision};
use oncegate_core::intent::{Alert, ApprovalReason, ApprovalState, Outcome, Reason, Status};
use oncegate_store::IntentsRead;

use crate::gate::Gate;

/// How often one agent's full queue is alerted on (per process).
const ALERT_EVERY: SignedDuration = SignedDuration::from_mins(1);

impl Gate {
    /// The agent's turn at its approval queue when `decision` would queue a new approval
    /// (held until the caller drops it, after its commit); `None` otherwise.
    pub(crate) async fn queue_turn(
        &self,
        decision: &Decision,
        principal: &str,
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        if !queues_new_approval(decision) {
            return None;
        }
        let lock = {
            let mut turns = self.queue_turns.lock().unwrap_or_else(|e| e.into_inner());
            turns.retain(|_, l| Arc::strong_count(l) > 1);
            turns.entry(principal.to_owned()).or_default().clone()
        };
        Some(lock.lock_owned().await)
    }

    /// The refusal of `decision` when it would queue a new approval for `principal`
    /// beyond the budget; `None` when it queues none or the budget has room. A store
    /// that cannot count lets the call be held (the approval itself is the safe side).
    pub(crate) async fn approval_queue_full(
        &self,
        decision: &Decision,
        principal: &str,
        now: Timestamp,
    ) -> Option<Outcome> {
        let record = decision.record.as_ref()?;
        if !queues_new_approval(decision) {
            return None;
        }
        let max = self.registry.gateway.pending_approvals_per_agent;
        let pending = match self.store.pending_approvals_of(principal, now).await {
            Ok(pending) => pending,
            Err(e) => {
                tracing::warn!(%principal, error = %e, "pending approvals could not be counted; the call is held as usual");
                return None;
            }
        };
        if pending < max {
            return None;
        }
        tracing::warn!(%principal, pending, max, "approval queue full: held call refused (OG-0058)");
        metrics::counter!("oncegate_approval_queue_refusals_total").increment(1);
        let reason = Reason::new(
            Code::ApprovalQueueFull,
            format!(
                "{principal} already has {pending} calls waiting for approval (gateway.pending_approvals_per_agent = {max}); this call was not queued."
            ),
        );
        let mut refused = decide::outcome_of(record, Status::Refused, Some(reason));
        refused.attempt = decision.outcome.attempt;
        if self.alert_due(principal, now) {
            refused
                .alerts
                .push(Alert::ApprovalQueueFull { pending, max });
        }
        Some(refused)
    }

    /// Whether `principal`'s full queue is due an alert (and marks it alerted).
    fn alert_due(&self, principal: &str, now: Timestamp) -> bool {
        let mut alerted = self.queue_alerts.lock().unwrap_or_else(|e| e.into_inner());
        // Entries older than the interval are dropped: the map holds at most the agents
        // alerted on within the last minute.
        alerted.retain(|_, at| now.duration_since(*at) < ALERT_EVERY);
        if alerted.contains_key(principal) {
            return false;
        }
        alerted.insert(principal.to_owned(), now);
        true
    }
}

/// Whether `decision` queues a new approval the budget counts.
fn queues_new_approval(decision: &Decision) -> bool {
    decision.approval.as_ref().is_some_and(|a| {
        a.version == 0
            && a.state == ApprovalState::Pending
            && a.reason != ApprovalReason::UnknownFirstAttempt
    })
}
