//! How a row is measured: the plan (how long and how wide), a group of targets driven
//! interleaved round by round, and the rows and figures that come out. Below both the
//! run (`super`) and the groups that stand targets up (`groups`, `peer`).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use futures::future::BoxFuture;
use indicatif::ProgressBar;
use serde::Serialize;

use super::load::{Sample, Target, closed_loop};
use super::world::Service;

/// How long and how wide each row runs.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    /// Concurrent workers, one row each.
    pub concurrencies: Vec<usize>,
    /// Interleaved rounds per row (subject, baseline, subject, baseline, ...).
    pub rounds: u32,
    /// One side of one round.
    #[serde(with = "seconds")]
    pub segment: Duration,
    /// Run (and thrown away) before the first round, per side.
    #[serde(with = "seconds")]
    pub warmup: Duration,
    /// Settled intents in the large store of the scale rows (0: no scale rows).
    pub store_intents: u64,
    /// How long an idle gateway's CPU is watched.
    #[serde(with = "seconds")]
    pub idle: Duration,
}

impl Plan {
    /// The full run: five concurrencies, three rounds of 2 s.
    pub fn full() -> Self {
        Self {
            concurrencies: vec![1, 8, 32, 128, 512],
            rounds: 3,
            segment: Duration::from_secs(2),
            warmup: Duration::from_millis(500),
            store_intents: 1_000_000,
            idle: Duration::from_secs(10),
        }
    }

    /// The smoke run (about 20 seconds of load): two concurrencies, one short round.
    pub fn quick() -> Self {
        Self {
            concurrencies: vec![1, 32],
            rounds: 1,
            segment: Duration::from_millis(600),
            warmup: Duration::from_millis(150),
            store_intents: 5_000,
            idle: Duration::from_secs(2),
        }
    }
}

mod seconds {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

/// One side of a row.
#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    /// What was driven.
    pub name: String,
    /// Successful requests (or rows) per second.
    pub rate: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// Successful requests (or rows).
    pub ops: u64,
    pub errors: u64,
    /// The first error, when there were any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// CPU of the process that serves it (the gateway's, or this process's for the
    /// in-process rows) per successful request, in microseconds, from /proc.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_us: Option<f64>,
}

impl Stats {
    fn of(name: &str, s: &Sample) -> Self {
        Self {
            name: name.to_owned(),
            rate: s.rate(),
            p50_ms: s.quantile_ms(0.5),
            p99_ms: s.quantile_ms(0.99),
            p999_ms: s.quantile_ms(0.999),
            ops: s.ops,
            errors: s.errors,
            first_error: s.first_error.clone(),
            cpu_us: s.cpu_us_per_op(),
        }
    }
}

/// One line of the table: a subject against its baseline at one concurrency.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub group: &'static str,
    pub concurrency: usize,
    pub subject: Stats,
    pub baseline: Stats,
    /// subject rate / baseline rate.
    pub ratio: f64,
    /// The baseline is the peer: its errors are its own, not a failed run.
    pub peer: bool,
}

/// A single measured figure that is not a pair (a fill rate, an idle cost).
#[derive(Clone, Debug, Serialize)]
pub struct Fact {
    pub name: String,
    pub value: f64,
    pub unit: &'static str,
}

impl Fact {
    pub(super) fn new(name: impl Into<String>, value: f64, unit: &'static str) -> Self {
        Self {
            name: name.into(),
            value,
            unit,
        }
    }
}

/// A target behind a trait object, with the request counter its rounds share.
pub(super) trait Drive: Send + Sync {
    fn drive(&self, concurrency: usize, duration: Duration) -> BoxFuture<'static, Sample>;
}

struct Driven<T: Target> {
    target: Arc<T>,
    numbers: Arc<AtomicU64>,
    /// The process whose CPU is read around each round.
    watch: Option<u32>,
}

impl<T: Target> Drive for Driven<T> {
    fn drive(&self, concurrency: usize, duration: Duration) -> BoxFuture<'static, Sample> {
        Box::pin(closed_loop(
            self.target.clone(),
            concurrency,
            duration,
            self.numbers.clone(),
            self.watch,
        ))
    }
}

pub(super) fn driven<T: Target>(target: T) -> Box<dyn Drive> {
    Box::new(Driven {
        target: Arc::new(target),
        numbers: Arc::default(),
        watch: None,
    })
}

/// [`driven`], with the CPU time of process `pid` per request in its rows (a gateway
/// child's, or this process's for an in-process target).
pub(super) fn watched<T: Target>(target: T, pid: Option<u32>) -> Box<dyn Drive> {
    Box::new(Driven {
        target: Arc::new(target),
        numbers: Arc::default(),
        watch: pid,
    })
}

/// A group of targets measured together, and the (subject, baseline) pairs it reports.
pub(super) struct Group {
    pub(super) name: &'static str,
    pub(super) targets: Vec<(&'static str, Box<dyn Drive>)>,
    pub(super) pairs: Vec<(usize, usize)>,
    /// Processes the targets talk to, kept alive while the group runs.
    pub(super) services: Vec<Service>,
    /// Concurrencies of its own instead of the plan's.
    pub(super) concurrencies: Option<Vec<usize>>,
    /// The baselines are the peer's.
    pub(super) peer: bool,
    /// Targets whose failures do not fail the run (the peer's, and what is measured
    /// only to compare with it).
    pub(super) uncounted: Vec<usize>,
}

impl Group {
    fn concurrencies<'a>(&'a self, plan: &'a Plan) -> &'a [usize] {
        self.concurrencies.as_deref().unwrap_or(&plan.concurrencies)
    }

    pub(super) fn segments(&self, plan: &Plan) -> u64 {
        (self.targets.len() * self.concurrencies(plan).len()) as u64 * u64::from(plan.rounds + 1)
    }

    /// Runs every target at every concurrency, interleaved, and makes the rows; also
    /// the failed requests of its counted targets (warm-ups included, each target once).
    pub(super) async fn run(&self, plan: &Plan, bar: &ProgressBar) -> (Vec<Row>, u64) {
        let mut rows = Vec::new();
        let mut failed = 0;
        for &c in self.concurrencies(plan) {
            let mut samples: Vec<Option<Sample>> = vec![None; self.targets.len()];
            for (i, (name, target)) in self.targets.iter().enumerate() {
                bar.set_message(format!("{}: {name}, concurrency {c} (warm-up)", self.name));
                let warm = target.drive(c, plan.warmup).await;
                if !self.uncounted.contains(&i) {
                    failed += warm.errors;
                }
                bar.inc(1);
            }
            for round in 0..plan.rounds {
                for (i, (name, target)) in self.targets.iter().enumerate() {
                    bar.set_message(format!(
                        "{}: {name}, concurrency {c}, round {}/{}",
                        self.name,
                        round + 1,
                        plan.rounds
                    ));
                    let s = target.drive(c, plan.segment).await;
                    match &mut samples[i] {
                        Some(total) => total.absorb(s),
                        slot => *slot = Some(s),
                    }
                    bar.inc(1);
                }
            }
            failed += samples
                .iter()
                .enumerate()
                .filter(|(i, _)| !self.uncounted.contains(i))
                .filter_map(|(_, s)| s.as_ref().map(|s| s.errors))
                .sum::<u64>();
            for &(subject, baseline) in &self.pairs {
                let (Some(s), Some(b)) = (&samples[subject], &samples[baseline]) else {
                    continue;
                };
                rows.push(Row {
                    group: self.name,
                    concurrency: c,
                    subject: Stats::of(self.targets[subject].0, s),
                    baseline: Stats::of(self.targets[baseline].0, b),
                    ratio: if b.rate() > 0.0 {
                        s.rate() / b.rate()
                    } else {
                        0.0
                    },
                    peer: self.peer,
                });
            }
        }
        (rows, failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails one request each time it is driven.
    struct Failing;

    impl Drive for Failing {
        fn drive(&self, _: usize, _: Duration) -> BoxFuture<'static, Sample> {
            Box::pin(async { Sample::failed("refused".into()) })
        }
    }

    /// A failing target in two pairs counts once per failed request (warm-up included),
    /// not once per row; an uncounted target (the peer's) counts nothing.
    #[tokio::test]
    async fn failed_requests_are_counted_per_request_not_per_row() {
        let group = Group {
            name: "test",
            targets: vec![
                ("subject", Box::new(Failing)),
                ("other subject", Box::new(Failing)),
                ("shared baseline", Box::new(Failing)),
                ("peer", Box::new(Failing)),
            ],
            pairs: vec![(0, 2), (1, 2), (3, 2)],
            services: Vec::new(),
            concurrencies: Some(vec![1]),
            peer: true,
            uncounted: vec![3],
        };
        let plan = Plan {
            rounds: 2,
            ..Plan::quick()
        };
        let (rows, failed) = group.run(&plan, &ProgressBar::hidden()).await;
        assert_eq!(rows.len(), 3);
        // Three counted targets, each failing once in the warm-up and once per round.
        assert_eq!(failed, 3 * (1 + 2));
    }
}
