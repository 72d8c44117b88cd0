//! Detached tasks still running in this process: shutdown waits for them.
//!
//! A call's decision and effect run in their own task (a caller that hangs up never
//! cancels an effect half-way), and an MCP upstream's `tools/call` may outlive its
//! timeout. Their results must be recorded before the process exits, so each registers
//! here and [`InFlight::drain`] waits for them. Below every other module: the upstreams
//! register their late answers, the front door its call tasks, the accept loop drains.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Counts the detached call tasks, so shutdown can wait for effects whose callers hung
/// up: their results must be recorded before the process exits.
#[derive(Clone, Default)]
pub struct InFlight(Arc<(AtomicUsize, tokio::sync::Notify)>);

/// Held by one detached task.
pub struct InFlightGuard(InFlight);

impl InFlight {
    /// Registers a task.
    pub fn enter(&self) -> InFlightGuard {
        self.0.0.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.clone())
    }

    /// Waits until no task is running, or `limit` passes; returns how many are left.
    pub async fn drain(&self, limit: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.0.1.notified();
            let left = self.0.0.load(Ordering::SeqCst);
            if left == 0 || tokio::time::Instant::now() >= deadline {
                return left;
            }
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.0.0.fetch_sub(1, Ordering::SeqCst);
        self.0.0.1.notify_waiters();
    }
}
