//! Fault injection: what can go wrong with one create, and the queue of faults to come.
//!
//! The gateway, not the test, makes the upstream calls, so a test cannot put a header
//! on the request it wants to break; it queues the fault here first, by path. A queued
//! fault belongs to the resource, not the surface: the next create of it breaks,
//! whether a `POST` or an MCP tool call.

use std::{collections::VecDeque, time::Duration};

use serde::{Deserialize, Serialize};

use crate::resource::Resource;

/// What goes wrong with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum FaultKind {
    /// Commit, then wait before answering, past the caller's timeout.
    StallAfterCommit,
    /// Commit, then close the connection without an answer (over MCP: hold the call
    /// unanswered until the client cancels it).
    DropAfterCommit,
    /// Answer 500 (over MCP: a JSON-RPC internal error) and commit nothing.
    FailBeforeCommit,
    /// Wait, then behave normally (the commit happens even if the caller left).
    Slow,
    /// Wait, commit (even if the caller left), then never answer: close the connection
    /// (over MCP: hold the call unanswered until the client cancels it). A provider
    /// that commits late and whose answer is lost.
    SlowThenDrop,
    /// Answer 402 `card_declined` (over MCP: an error result) and commit nothing.
    Decline,
    /// Answer 429 `rate_limited` (over MCP: an error result) and commit nothing.
    RateLimit,
}

impl FaultKind {
    const ALL: [FaultKind; 7] = [
        FaultKind::StallAfterCommit,
        FaultKind::DropAfterCommit,
        FaultKind::FailBeforeCommit,
        FaultKind::Slow,
        FaultKind::SlowThenDrop,
        FaultKind::Decline,
        FaultKind::RateLimit,
    ];

    /// The wire name, as in the `Sandbox-Fault` header and the admin API.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            FaultKind::StallAfterCommit => "stall_after_commit",
            FaultKind::DropAfterCommit => "drop_after_commit",
            FaultKind::FailBeforeCommit => "fail_before_commit",
            FaultKind::Slow => "slow",
            FaultKind::SlowThenDrop => "slow_then_drop",
            FaultKind::Decline => "decline",
            FaultKind::RateLimit => "rate_limit",
        }
    }

    pub(super) fn parse(name: &str) -> Option<FaultKind> {
        FaultKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }

    /// A stall must outlast any sane caller timeout; a slow request should merely be
    /// noticeably slow.
    fn default_delay(self) -> Duration {
        match self {
            FaultKind::StallAfterCommit => Duration::from_secs(30),
            FaultKind::Slow | FaultKind::SlowThenDrop => Duration::from_secs(2),
            FaultKind::DropAfterCommit
            | FaultKind::FailBeforeCommit
            | FaultKind::Decline
            | FaultKind::RateLimit => Duration::ZERO,
        }
    }
}

/// One fault as applied to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Fault {
    pub(super) kind: FaultKind,
    /// How long `stall_after_commit`, `slow` and `slow_then_drop` wait; unused by the
    /// others.
    pub(super) delay: Duration,
}

impl Fault {
    pub(super) fn new(kind: FaultKind, delay_ms: Option<u64>) -> Fault {
        let delay = delay_ms.map_or_else(|| kind.default_delay(), Duration::from_millis);
        Fault { kind, delay }
    }
}

/// The body of `POST /_sandbox/faults`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FaultRequest {
    pub(super) path: String,
    pub(super) fault: FaultKind,
    #[serde(default = "one")]
    pub(super) times: u32,
    #[serde(default)]
    pub(super) delay_ms: Option<u64>,
}

fn one() -> u32 {
    1
}

/// Faults waiting for the requests they will break, oldest first.
#[derive(Debug, Default)]
pub(super) struct FaultQueue {
    pending: VecDeque<Queued>,
}

/// A queued fault and how many more requests it will break.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Queued {
    pub(super) path: &'static str,
    pub(super) fault: FaultKind,
    pub(super) times: u32,
    pub(super) delay_ms: u64,
    #[serde(skip)]
    resource: Resource,
}

impl FaultQueue {
    /// Queues a fault for the next `times` creates of `resource`.
    pub(super) fn push(&mut self, resource: Resource, fault: Fault, times: u32) -> Queued {
        let queued = Queued {
            path: resource.path(),
            fault: fault.kind,
            times,
            // Saturating: a delay beyond u64 milliseconds is as good as forever.
            delay_ms: u64::try_from(fault.delay.as_millis()).unwrap_or(u64::MAX),
            resource,
        };
        self.pending.push_back(queued.clone());
        queued
    }

    /// The fault for the next create of `resource`, if one is queued; uses it up once.
    pub(super) fn take(&mut self, resource: Resource) -> Option<Fault> {
        let index = self.pending.iter().position(|q| q.resource == resource)?;
        let queued = self.pending.get_mut(index)?;
        let fault = Fault {
            kind: queued.fault,
            delay: Duration::from_millis(queued.delay_ms),
        };
        queued.times = queued.times.saturating_sub(1);
        if queued.times == 0 {
            self.pending.remove(index);
        }
        Some(fault)
    }

    pub(super) fn pending(&self) -> Vec<Queued> {
        self.pending.iter().cloned().collect()
    }

    /// Drops every queued fault and says how many there were.
    pub(super) fn clear(&mut self) -> usize {
        let count = self.pending.len();
        self.pending.clear();
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_faults_apply_in_order_and_per_resource() {
        let mut queue = FaultQueue::default();
        queue.push(Resource::Charges, Fault::new(FaultKind::Decline, None), 2);
        queue.push(Resource::Charges, Fault::new(FaultKind::Slow, Some(5)), 1);
        assert_eq!(queue.take(Resource::Emails), None);
        let kinds: Vec<_> = std::iter::from_fn(|| queue.take(Resource::Charges))
            .map(|fault| fault.kind)
            .collect();
        assert_eq!(
            kinds,
            [FaultKind::Decline, FaultKind::Decline, FaultKind::Slow]
        );
        assert!(queue.pending().is_empty());
    }

    #[test]
    fn every_fault_name_round_trips() {
        for kind in FaultKind::ALL {
            assert_eq!(FaultKind::parse(kind.as_str()), Some(kind));
            let json = serde_json::to_value(kind).expect("a fault kind serialises");
            assert_eq!(json, kind.as_str());
        }
    }
}
