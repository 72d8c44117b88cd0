//! The closed-loop load generator: `concurrency` workers, each with its own connection
//! (or whatever state its target needs), each sending its next request as soon as the
//! last one answered, for a fixed time. Latencies go into one HDR histogram per worker,
//! merged at the end, so recording costs no lock.
//!
//! Every request gets a number `n` from one counter shared by the whole run, so targets
//! can make every intent distinct (`order_id = "{run}-{n}"`) or map `n` onto a fixed set
//! for replays.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::world::cpu_time;

/// Something the generator can drive.
pub trait Target: Send + Sync + 'static {
    /// A worker's own state: a connection, usually.
    type Conn: Send + 'static;

    /// Opens a worker's state.
    fn connect(&self) -> impl Future<Output = Result<Self::Conn, String>> + Send;

    /// Makes request number `n` on `conn`. An error is counted; the worker reconnects
    /// before its next request.
    fn call(
        &self,
        conn: &mut Self::Conn,
        n: u64,
    ) -> impl Future<Output = Result<(), String>> + Send;

    /// Units one request stands for (rows, for a batched floor). 1 for everything else.
    fn weight(&self) -> u64 {
        1
    }
}

/// What one run of the generator measured.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Requests that succeeded, times the target's weight.
    pub ops: u64,
    /// Requests that failed.
    pub errors: u64,
    /// The first failure's text.
    pub first_error: Option<String>,
    /// Wall time the workers ran for.
    pub elapsed: Duration,
    /// Latencies of the successful requests, in microseconds.
    pub latency: Histogram<u64>,
    /// CPU time the target's process spent while the workers ran (user + system, from
    /// /proc), when the target names a process to watch.
    pub cpu: Option<Duration>,
}

impl Sample {
    fn empty() -> Self {
        Self {
            ops: 0,
            errors: 0,
            first_error: None,
            elapsed: Duration::ZERO,
            latency: histogram(),
            cpu: None,
        }
    }

    /// A sample measured elsewhere (the peer's own load generator): its latencies in
    /// microseconds go into the same kind of histogram, so rounds merge exactly.
    pub fn reported(
        errors: u64,
        first_error: Option<String>,
        elapsed: Duration,
        latencies_us: &[u64],
    ) -> Self {
        let mut sample = Self::empty();
        for &us in latencies_us {
            sample.latency.saturating_record(us.max(1));
        }
        sample.ops = latencies_us.len() as u64;
        sample.errors = errors;
        sample.first_error = first_error;
        sample.elapsed = elapsed;
        sample
    }

    /// A sample of nothing but one failure (a driver that could not run at all).
    pub fn failed(error: String) -> Self {
        let mut sample = Self::empty();
        sample.errors = 1;
        sample.first_error = Some(error);
        sample
    }

    /// Adds another sample of the same row (interleaved rounds are summed).
    pub fn absorb(&mut self, other: Sample) {
        self.ops += other.ops;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.elapsed += other.elapsed;
        self.cpu = match (self.cpu, other.cpu) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.latency
            .add(&other.latency)
            .expect("histograms of one shape add");
    }

    /// Units per second.
    pub fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs == 0.0 {
            0.0
        } else {
            self.ops as f64 / secs
        }
    }

    /// Microseconds of the watched process's CPU per successful unit.
    pub fn cpu_us_per_op(&self) -> Option<f64> {
        let cpu = self.cpu?;
        (self.ops > 0).then(|| cpu.as_secs_f64() * 1e6 / self.ops as f64)
    }

    /// The latency at quantile `q` (0..1), in milliseconds.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        self.latency.value_at_quantile(q) as f64 / 1000.0
    }
}

/// 1 µs to 60 s at 3 significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// Drives `target` with `concurrency` workers for `duration` and returns what they saw.
/// `numbers` hands out request numbers (shared across runs of one target, so intents
/// stay distinct from one round to the next).
///
/// Only the measured window counts: every worker connects first, the window opens when
/// all have (connection setup is not the target's throughput), and a request that ends
/// after the window closed (a straggler) counts as neither an operation nor time; its
/// failure still counts, so no error is hidden.
///
/// With `watch`, the CPU time that process spent in the window (from its start to its
/// deadline, stragglers' tails left out) goes into the sample.
pub async fn closed_loop<T: Target>(
    target: Arc<T>,
    concurrency: usize,
    duration: Duration,
    numbers: Arc<AtomicU64>,
    watch: Option<u32>,
) -> Sample {
    let ready = Arc::new(tokio::sync::Barrier::new(concurrency + 1));
    let window = Arc::new(std::sync::OnceLock::new());
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (target, numbers) = (target.clone(), numbers.clone());
            let (ready, window) = (ready.clone(), window.clone());
            tokio::spawn(async move { worker(&*target, &numbers, &ready, &window).await })
        })
        .collect();
    ready.wait().await;
    let deadline = Instant::now() + duration;
    let cpu_before = watch.and_then(cpu_time);
    let _ = window.set(deadline);
    let cpu_after = tokio::spawn(async move {
        tokio::time::sleep_until(deadline.into()).await;
        watch.and_then(cpu_time)
    });
    let mut total = Sample::empty();
    for w in workers {
        match w.await {
            Ok(sample) => total.absorb(sample),
            Err(e) => {
                total.errors += 1;
                total
                    .first_error
                    .get_or_insert(format!("a worker panicked: {e}"));
            }
        }
    }
    total.ops *= target.weight();
    // Each worker's `elapsed` was summed; the row's time is the window's.
    total.elapsed = duration;
    total.cpu = match (cpu_before, cpu_after.await.ok().flatten()) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    total
}

async fn worker<T: Target>(
    target: &T,
    numbers: &AtomicU64,
    ready: &tokio::sync::Barrier,
    window: &std::sync::OnceLock<Instant>,
) -> Sample {
    let mut sample = Sample::empty();
    let mut conn: Option<T::Conn> = match target.connect().await {
        Ok(c) => Some(c),
        Err(e) => {
            fail(&mut sample, e);
            None
        }
    };
    ready.wait().await;
    // Set by the driver as soon as every worker has reached the barrier.
    let deadline = loop {
        if let Some(d) = window.get() {
            break *d;
        }
        tokio::task::yield_now().await;
    };
    while Instant::now() < deadline {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match target.connect().await {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    fail(&mut sample, e);
                    // A refused connection would otherwise spin.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let n = numbers.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        match target.call(c, n).await {
            Ok(()) if Instant::now() <= deadline => {
                let micros = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
                sample.latency.saturating_record(micros.max(1));
                sample.ops += 1;
            }
            // A straggler: it answered after the window closed.
            Ok(()) => {}
            Err(e) => {
                fail(&mut sample, e);
                conn = None;
            }
        }
    }
    sample
}

fn fail(sample: &mut Sample, error: String) {
    sample.errors += 1;
    sample.first_error.get_or_insert(error);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sleeps 1 ms per call and fails every tenth.
    struct Sleepy;

    impl Target for Sleepy {
        type Conn = ();

        async fn connect(&self) -> Result<(), String> {
            Ok(())
        }

        async fn call(&self, _conn: &mut (), n: u64) -> Result<(), String> {
            tokio::time::sleep(Duration::from_millis(1)).await;
            if n % 10 == 9 {
                Err(format!("call {n} failed"))
            } else {
                Ok(())
            }
        }
    }

    #[tokio::test]
    async fn workers_count_successes_and_failures_and_latencies() {
        let numbers = Arc::new(AtomicU64::new(0));
        let sample = closed_loop(
            Arc::new(Sleepy),
            4,
            Duration::from_millis(300),
            numbers.clone(),
            Some(std::process::id()),
        )
        .await;
        let issued = numbers.load(Ordering::Relaxed);
        // Only stragglers (at most one per worker) are neither.
        let counted = sample.ops + sample.errors;
        assert!(
            counted <= issued && issued - counted <= 4,
            "{counted} of {issued}"
        );
        assert!(sample.ops > 0 && sample.errors > 0, "{sample:?}");
        assert_eq!(sample.ops, sample.latency.len());
        assert!(sample.first_error.as_deref().unwrap().ends_with("failed"));
        // Every call slept at least 1 ms.
        assert!(
            sample.quantile_ms(0.0) >= 1.0,
            "{}",
            sample.quantile_ms(0.0)
        );
        assert_eq!(sample.elapsed, Duration::from_millis(300));
        // This process was watched: its CPU time in the window was read.
        assert!(sample.cpu.is_some(), "{sample:?}");
    }

    /// Takes 200 ms to connect, then answers at once.
    struct SlowToConnect;

    impl Target for SlowToConnect {
        type Conn = ();

        async fn connect(&self) -> Result<(), String> {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(())
        }

        async fn call(&self, _conn: &mut (), _n: u64) -> Result<(), String> {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok(())
        }
    }

    /// Connecting happens before the window: a 100 ms window of a target that takes
    /// 200 ms to connect still measures 100 ms of calls, not 0 calls in 300 ms.
    #[tokio::test]
    async fn the_window_excludes_connection_setup() {
        let sample = closed_loop(
            Arc::new(SlowToConnect),
            2,
            Duration::from_millis(100),
            Arc::default(),
            None,
        )
        .await;
        assert_eq!(sample.elapsed, Duration::from_millis(100));
        assert!(sample.ops >= 20, "{sample:?}");
    }
}
