//! Clocks: the only place time is read. Logic gets `now` injected.

use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};

/// A source of `now`.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock tests move by hand (lease expiry, replay windows).
#[derive(Clone, Debug)]
pub struct ManualClock(Arc<Mutex<Timestamp>>);

impl ManualClock {
    /// Starts at `at`.
    pub fn new(at: Timestamp) -> Self {
        Self(Arc::new(Mutex::new(at)))
    }

    /// Moves time forward.
    pub fn advance(&self, by: SignedDuration) {
        let mut t = self.0.lock().expect("clock lock");
        *t += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().expect("clock lock")
    }
}

/// A clock that reads tokio's time: under a paused runtime (`start_paused`, the
/// simulation) it is virtual and advances only when every task waits, so a run is
/// reproducible; otherwise it follows the monotonic clock from `base`.
#[derive(Clone, Debug)]
pub struct TokioClock {
    base: Timestamp,
    started: tokio::time::Instant,
}

impl TokioClock {
    /// Reads `base` now, and `base` plus tokio's elapsed time afterwards. Call it inside
    /// the runtime whose time it should follow.
    pub fn starting_at(base: Timestamp) -> Self {
        Self {
            base,
            started: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = self.started.elapsed();
        let nanos = i64::try_from(elapsed.as_nanos()).unwrap_or(i64::MAX);
        self.base
            .saturating_add(SignedDuration::from_nanos(nanos))
            .unwrap_or(self.base)
    }
}
