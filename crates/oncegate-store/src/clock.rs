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
