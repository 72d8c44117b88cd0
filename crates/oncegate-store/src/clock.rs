//! Time: the one place it is read, and the store's clock, which judges every instant
//! that decides an effect (DESIGN principle 7, "one clock decides").
//!
//! A gateway's wall clock may be wrong by any amount and may step (an NTP correction, a
//! VM resumed, a container host with a bad clock); the store's clock is the one time
//! authority, so that two replicas, or one gateway before and after a step, never judge
//! the same lease, settle horizon, approval or window by two clocks. [`StoreClock`] is
//! that clock as one process reads it:
//!
//! - **SQLite** (one process): the store's time is an origin plus the kernel's boot clock
//!   (`CLOCK_BOOTTIME`, which no wall-clock step moves and which counts a suspend). The
//!   origin is kept in the store with the boot it belongs to, so every process and every
//!   restart within one boot reads one timeline, however the wall clock moved meanwhile.
//!   After a reboot (or on another machine) the timeline resumes at the wall clock, never
//!   earlier than the newest instant the store holds (see `sqlite::clock`).
//! - **PostgreSQL** (replicas): the database's `now()`. Each replica samples it (at open,
//!   every second, and on every commit, whose transaction reads `now()` anyway) and runs
//!   its estimate on the boot clock between samples; the estimate is within half the
//!   sample's round trip (a fraction of a millisecond on a LAN). Leases, attempt ends
//!   and limit windows are moreover written and judged by `now()` inside the commit.
//! - **Memory** (tests, the simulation): a clock the test gives the store.
//!
//! The boot clock is read through rustix, which calls the kernel's vDSO itself rather
//! than libc's `clock_gettime`: a process under libfaketime (the time tests) sees a
//! faked wall clock, as a host with a wrong clock would, while the elapsed time the store
//! clock runs on stays the kernel's.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// A source of `now`.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;

    /// The earliest the current time can be: [`Clock::now`] less what this process
    /// cannot know about the clock it reads (a store clock sampled over a round trip).
    /// What must never end early (a settle horizon) is judged by it.
    fn earliest(&self) -> Timestamp {
        self.now()
    }
}

/// The system's wall clock: tests and tools that decide nothing durable.
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
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *t += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
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
        add(self.base, self.started.elapsed())
    }
}

/// What a store clock counts elapsed time with between two readings of the store's
/// time: a count no wall-clock step moves.
#[derive(Clone, Copy, Debug)]
pub enum Ticks {
    /// The kernel's boot clock (`CLOCK_BOOTTIME`): time since boot, a suspend included.
    Boot,
    /// tokio's clock since this origin: virtual under a paused runtime (the simulation).
    Tokio(tokio::time::Instant),
}

impl Ticks {
    /// tokio's clock, counted from now.
    pub fn tokio() -> Self {
        Ticks::Tokio(tokio::time::Instant::now())
    }

    /// The count now.
    pub fn read(&self) -> Duration {
        match self {
            Ticks::Boot => boot_time(),
            Ticks::Tokio(origin) => origin.elapsed(),
        }
    }
}

/// The kernel's boot clock, from the vDSO (never libc's `clock_gettime`, which a
/// preloaded library may replace).
pub fn boot_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// This boot's identity (`/proc/sys/kernel/random/boot_id`): the boot clock counts from
/// a new origin after every boot. `None` where the kernel does not say.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// How far two clocks that are not stepped may run apart per second: both the boot
/// clock and a database host's clock are slewed by NTP by at most 500 ppm.
const DRIFT_PER_SECOND: Duration = Duration::from_micros(500);

fn drift(over: Duration) -> Duration {
    DRIFT_PER_SECOND.mul_f64(over.as_secs_f64())
}

fn add(at: Timestamp, d: Duration) -> Timestamp {
    let d = SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX);
    at.saturating_add(d).unwrap_or(at)
}

/// One reading of the store's time: it was `at` (within `half_width`) when the ticks
/// read `tick`.
#[derive(Clone, Copy, Debug)]
struct Sample {
    at: Timestamp,
    tick: Duration,
    half_width: Duration,
}

/// What [`StoreClock::observe`] made of a reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed {
    /// It agrees with the estimate; kept if it is the tighter one.
    Agrees,
    /// It disagrees with the estimate by more than both could be wrong: the store's
    /// clock was stepped (by about this much). The reading is taken: the store decides.
    Stepped(SignedDuration),
}

/// The store's clock as this process reads it: the newest (tightest) reading of the
/// store's time, run forward on [`Ticks`]. Never moves backwards within a process.
#[derive(Debug)]
pub struct StoreClock {
    authority: &'static str,
    ticks: Ticks,
    sample: Mutex<Sample>,
    /// The ticks are the store's own clock (SQLite's timeline): nothing drifts between
    /// them. A sampled clock's estimate drifts from the store's between samples.
    exact: bool,
    /// The latest `now` answered, in nanoseconds since the epoch: answers never go back.
    newest: AtomicI64,
}

impl StoreClock {
    /// A clock whose time was exactly `at` when `ticks` read `tick`: the store's time is
    /// kept by this process's own ticks (SQLite), or a test fixed it.
    pub fn anchored(authority: &'static str, ticks: Ticks, at: Timestamp, tick: Duration) -> Self {
        Self {
            authority,
            ticks,
            sample: Mutex::new(Sample {
                at,
                tick,
                half_width: Duration::ZERO,
            }),
            exact: true,
            newest: AtomicI64::new(i64::MIN),
        }
    }

    /// A clock from a first reading of a store's time: between `before` and `after` (two
    /// readings of `ticks`) the store said `at`.
    pub fn sampled(
        authority: &'static str,
        ticks: Ticks,
        before: Duration,
        at: Timestamp,
        after: Duration,
    ) -> Self {
        let (tick, half_width) = midpoint(before, after);
        Self {
            authority,
            ticks,
            sample: Mutex::new(Sample {
                at,
                tick,
                half_width,
            }),
            exact: false,
            newest: AtomicI64::new(i64::MIN),
        }
    }

    /// Who keeps this time, for people (`/readyz`, logs).
    pub fn authority(&self) -> &'static str {
        self.authority
    }

    /// The ticks now: read one before and one after asking the store, for
    /// [`StoreClock::observe`].
    pub fn ticks(&self) -> Duration {
        self.ticks.read()
    }

    /// How far [`Clock::now`] may be from the store's time now.
    pub fn uncertainty(&self) -> Duration {
        self.estimate().1
    }

    fn drift(&self, over: Duration) -> Duration {
        if self.exact {
            Duration::ZERO
        } else {
            drift(over)
        }
    }

    /// Takes a reading of the store's time, `at`, asked between the ticks `before` and
    /// `after`. The estimate moves to it when it is tighter than the one held (aged by
    /// the drift allowance), or when the two cannot both be right (the store's clock
    /// stepped: the store decides).
    pub fn observe(&self, before: Duration, at: Timestamp, after: Duration) -> Observed {
        let (tick, half_width) = midpoint(before, after);
        let mut s = self.lock();
        let age = tick.saturating_sub(s.tick);
        let estimate = add(s.at, age);
        let held = s.half_width + self.drift(age);
        let off = at.duration_since(estimate);
        let tolerance = SignedDuration::try_from(held + half_width + Duration::from_millis(1))
            .unwrap_or(SignedDuration::MAX);
        let stepped = off.abs() > tolerance;
        if stepped || half_width <= held {
            *s = Sample {
                at,
                tick,
                half_width,
            };
        }
        if stepped {
            Observed::Stepped(off)
        } else {
            Observed::Agrees
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sample> {
        self.sample.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn estimate(&self) -> (Timestamp, Duration) {
        let s = *self.lock();
        let age = self.ticks.read().saturating_sub(s.tick);
        (add(s.at, age), s.half_width + self.drift(age))
    }
}

impl Clock for StoreClock {
    fn now(&self) -> Timestamp {
        let (estimate, _) = self.estimate();
        let nanos = i64::try_from(estimate.as_nanosecond()).unwrap_or(i64::MAX);
        let newest = self.newest.fetch_max(nanos, Ordering::AcqRel).max(nanos);
        Timestamp::from_nanosecond(i128::from(newest)).unwrap_or(estimate)
    }

    fn earliest(&self) -> Timestamp {
        let (estimate, uncertainty) = self.estimate();
        let uncertainty = SignedDuration::try_from(uncertainty).unwrap_or(SignedDuration::MAX);
        estimate.saturating_sub(uncertainty).unwrap_or(estimate)
    }
}

fn midpoint(before: Duration, after: Duration) -> (Duration, Duration) {
    let after = after.max(before);
    let half = (after - before) / 2;
    (before + half, half)
}

/// Where a store's timeline resumed after a gap of unknown length (the SQLite store's
/// after a reboot): at `at`, `gap` after the newest instant it held before. How long the
/// machine was really down is unknown, so what was running across the gap is judged
/// the safe way (the engine's `Gate` applies it): a settle horizon, a replay window or a
/// lease counts no earlier than from `at` (the gap as zero), an approval pending across
/// it has expired (the gap as endless), and a limit's window reaches `gap` further back
/// over the reservations made before it (the gap as zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resumption {
    /// The store's time when its timeline resumed.
    pub at: Timestamp,
    /// How far the timeline jumped over the gap (from the newest instant held).
    pub gap: SignedDuration,
}

/// How far `wall` (this host's clock) is ahead of the store's time `store` (negative:
/// behind). Reported, never used to decide.
pub fn skew(wall: Timestamp, store: Timestamp) -> SignedDuration {
    wall.duration_since(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn an_anchored_clock_runs_on_its_ticks_alone() {
        let ticks = Ticks::tokio();
        let clock = StoreClock::anchored("test", ticks, t(0), ticks.read());
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(clock.now(), t(7));
        // Its ticks are the store's clock: nothing to be unsure of.
        assert_eq!(clock.earliest(), t(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_tighter_reading_replaces_a_wider_one_and_time_never_goes_back() {
        let ticks = Ticks::tokio();
        let before = ticks.read();
        tokio::time::advance(Duration::from_millis(10)).await;
        let after = ticks.read();
        // The store said t(100) somewhere in those 10 ms: the estimate takes the middle.
        let clock = StoreClock::sampled("test", ticks, before, t(100), after);
        assert_eq!(clock.now(), t(100) + SignedDuration::from_millis(5));
        assert!(clock.uncertainty() >= Duration::from_millis(5));
        // A tight reading 2 ms behind the estimate (within its 5 ms): taken, but `now`
        // holds where it was until the ticks catch up.
        let at = ticks.read();
        let observed = clock.observe(at, t(100) + SignedDuration::from_millis(3), at);
        assert_eq!(observed, Observed::Agrees);
        assert_eq!(clock.now(), t(100) + SignedDuration::from_millis(5));
        assert_eq!(clock.uncertainty(), Duration::ZERO);
        assert_eq!(clock.earliest(), t(100) + SignedDuration::from_millis(3));
        tokio::time::advance(Duration::from_millis(3)).await;
        assert_eq!(clock.now(), t(100) + SignedDuration::from_millis(6));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stepped_store_clock_is_followed() {
        let ticks = Ticks::tokio();
        let clock = StoreClock::anchored("test", ticks, t(0), ticks.read());
        let at = ticks.read();
        let observed = clock.observe(at, t(600), at);
        assert_eq!(observed, Observed::Stepped(SignedDuration::from_secs(600)));
        assert_eq!(clock.now(), t(600));
    }

    #[test]
    fn the_boot_clock_moves_forward() {
        let a = boot_time();
        std::thread::sleep(Duration::from_millis(2));
        assert!(boot_time() > a);
    }
}
