//! `oncegate bench`: what oncegate costs, measured against what it stands in front of.
//!
//! Every row is a pair: a subject (oncegate doing its job) and a baseline (the same load
//! without oncegate: the sandbox called directly, or the raw database floor with the
//! same durability). The two are measured interleaved, round by round, at the same
//! concurrency in the same run, so the ratio survives a noisy machine even when the
//! absolute numbers do not.
//!
//! - `plan`: how long and how wide rows run, a group of targets measured interleaved,
//!   and the rows and figures it makes;
//! - `groups`: what each group of rows stands up, drives and pairs;
//! - `load`: the closed-loop generator and its histograms;
//! - `http`: the bare HTTP/1 client the generator drives servers with;
//! - `targets`: what is driven (gateway surfaces, the sandbox, the in-process `Gate`,
//!   the SQLite and PostgreSQL floors);
//! - `world`: the sandbox and the gateway as child processes on a scratch store;
//! - `scale`: a store filled with many intents, and what an idle gateway costs on it;
//! - `peer`: CTRLRun on the same workload, driven by `peer.py` in a throwaway virtualenv.

mod groups;
mod http;
mod load;
mod peer;
mod plan;
mod scale;
mod targets;
mod world;

use std::path::{Path, PathBuf};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use groups::{calls_group, gate_group, mcp_group, peer_group, pg_group, pg_scratch, scale_group};
use world::World;

pub use plan::{Fact, Plan, Row};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    pub plan: Plan,
    /// PostgreSQL server for the PostgreSQL rows (a scratch database is created there
    /// and dropped afterwards).
    pub postgres: Option<String>,
    /// Where the scratch stores go (a directory on the disk being measured).
    pub dir: Option<PathBuf>,
    /// Measure the peer (CTRLRun) too.
    pub peer: bool,
    /// Run only these groups (`gate`, `calls`, `mcp`, `postgres`, `scale`, `peer`);
    /// empty: all.
    pub only: Vec<String>,
    /// Draw a progress bar on stderr.
    pub progress: bool,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub plan: Plan,
    pub rows: Vec<Row>,
    /// Figures that are not pairs.
    pub facts: Vec<Fact>,
    /// Groups not run, and why.
    pub skipped: Vec<String>,
    /// When requests failed: the last lines each process logged, by process.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<(String, String)>,
    /// Wall time of the whole run, seconds.
    pub seconds: f64,
    /// Failed requests of the targets that count (see [`Report::errors`]).
    failed: u64,
}

impl Report {
    /// oncegate's (and the baselines' own) requests that failed, warm-ups included, each
    /// counted once however many rows show its target; the peer's targets' failures are
    /// reported in their rows and do not count.
    pub fn errors(&self) -> u64 {
        self.failed
    }
}

/// Runs the benchmark.
pub async fn run(exe: &Path, options: &Options) -> anyhow::Result<Report> {
    let started = std::time::Instant::now();
    let plan = &options.plan;
    let dir = match &options.dir {
        Some(d) => tempfile::Builder::new()
            .prefix("oncegate-bench-")
            .tempdir_in(d),
        None => tempfile::Builder::new().prefix("oncegate-bench-").tempdir(),
    }
    .context("cannot make a scratch directory")?;
    let bar = if options.progress {
        ProgressBar::new(0)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}")
            .expect("a valid progress template")
            .progress_chars("=> "),
    );
    bar.set_message("starting the sandbox and the gateway");
    let world = World::start(exe, dir.path())
        .await
        .context("cannot start the sandbox and the gateway")?;
    let mut skipped = Vec::new();
    let mut facts = Vec::new();
    let wants = |group: &str| options.only.is_empty() || options.only.iter().any(|g| g == group);
    let mut groups = Vec::new();
    if wants("gate") {
        groups.push(gate_group(&world, dir.path()).await?);
    }
    if wants("calls") {
        groups.push(calls_group(&world).await?);
    }
    if wants("mcp") {
        groups.push(mcp_group(&world)?);
    }
    let pg = match &options.postgres {
        // Dropped on every path out of here, an error included.
        Some(url) if wants("postgres") => Some(pg_scratch(url).await?),
        Some(_) => None,
        None => {
            if wants("postgres") {
                skipped.push("PostgreSQL: skipped, no PostgreSQL URL (--postgres URL)".to_owned());
            }
            None
        }
    };
    if let Some(pg) = &pg {
        groups.push(pg_group(&world, pg, plan).await?);
    }
    if plan.store_intents > 0 && wants("scale") {
        groups.push(scale_group(&world, plan, &bar, &mut facts).await?);
    }
    if options.peer && wants("peer") {
        bar.set_message("installing CTRLRun into a virtualenv");
        match peer::Peer::install(dir.path()).await {
            Ok(p) => groups.push(peer_group(&world, dir.path(), &p).await?),
            Err(e) => skipped.push(format!("peer (CTRLRun): skipped, {e:#}")),
        }
    } else if wants("peer") {
        skipped.push("peer (CTRLRun): not run (--peer runs it)".to_owned());
    }

    bar.set_length(groups.iter().map(|g| g.segments(plan)).sum());
    let mut rows = Vec::new();
    let mut failed = 0;
    for group in &groups {
        let (group_rows, group_failed) = group.run(plan, &bar).await;
        rows.extend(group_rows);
        failed += group_failed;
    }
    bar.finish_and_clear();
    let mut logs = Vec::new();
    if failed > 0 {
        let services = [&world.sandbox, &world.gateway]
            .into_iter()
            .chain(groups.iter().flat_map(|g| &g.services));
        for service in services {
            logs.push((service.name.clone(), service.log_tail()));
        }
    }
    drop(groups);
    if let Some(pg) = pg {
        pg.drop_now().await?;
    }
    Ok(Report {
        plan: plan.clone(),
        rows,
        facts,
        skipped,
        logs,
        seconds: started.elapsed().as_secs_f64(),
        failed,
    })
}
