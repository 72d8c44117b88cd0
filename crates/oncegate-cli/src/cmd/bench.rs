//! `oncegate bench`: its arguments and its table.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::bench::{Options, Plan, Report, run as run_bench};

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The smoke run: concurrency 1 and 32, one short round (about 20 s of load).
    #[arg(long)]
    quick: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Concurrencies to run (default 1,8,32,128,512; with --quick 1,32).
    #[arg(long, value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Seconds per side of each interleaved round (default 2; with --quick 0.6).
    #[arg(long)]
    seconds: Option<f64>,
    /// Interleaved rounds per row (default 3; with --quick 1).
    #[arg(long)]
    rounds: Option<u32>,
    /// A PostgreSQL server for the PostgreSQL rows; the bench creates a scratch database
    /// there and drops it afterwards. Without one those rows are skipped.
    #[arg(long, env = "ONCEGATE_BENCH_POSTGRES")]
    postgres: Option<String>,
    /// Settled intents in the large store of the scale rows (default 1000000; with
    /// --quick 5000; 0 skips those rows).
    #[arg(long)]
    store_intents: Option<u64>,
    /// Measure the peer, CTRLRun, too (the default for a full run): it is installed
    /// into a throwaway virtualenv (python3 and PyPI needed).
    #[arg(long, overrides_with = "no_peer")]
    peer: bool,
    /// Do not measure the peer.
    #[arg(long)]
    no_peer: bool,
    /// Run only these groups of rows.
    #[arg(long, value_delimiter = ',', value_parser = ["gate", "calls", "mcp", "postgres", "scale", "peer"])]
    only: Vec<String>,
    /// Directory for the scratch stores (default: the system temp directory). Put it on
    /// the disk you want measured, never on a tmpfs.
    #[arg(long)]
    dir: Option<PathBuf>,
}

pub async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let mut plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    if !args.concurrency.is_empty() {
        if args.concurrency.contains(&0) {
            anyhow::bail!("--concurrency: every value must be at least 1");
        }
        plan.concurrencies = args.concurrency;
    }
    if let Some(s) = args.seconds {
        if !(s.is_finite() && s > 0.0) {
            anyhow::bail!("--seconds must be a positive number of seconds, not {s}");
        }
        plan.segment = std::time::Duration::from_secs_f64(s);
    }
    if let Some(r) = args.rounds {
        if r == 0 {
            anyhow::bail!("--rounds must be at least 1");
        }
        plan.rounds = r;
    }
    if let Some(n) = args.store_intents {
        plan.store_intents = n;
    }
    let exe = std::env::current_exe().context("cannot find the oncegate binary")?;
    let options = Options {
        plan,
        postgres: args.postgres,
        dir: args.dir,
        peer: if args.quick { args.peer } else { !args.no_peer },
        only: args.only,
        progress: !args.json && std::io::stderr().is_terminal(),
    };
    let report = run_bench(&exe, &options).await?;
    if args.json {
        crate::output::emit(&format!("{}\n", serde_json::to_string_pretty(&report)?));
    } else {
        crate::output::emit(&table(&report));
    }
    let errors = report.errors();
    if errors > 0 {
        eprintln!(
            "error: {errors} request(s) failed during the run; the rows with errors say which"
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `1234.5` as `1.23k`, `28700` as `28.7k`.
fn rate(r: f64) -> String {
    if r >= 10_000.0 {
        format!("{:.1}k", r / 1000.0)
    } else if r >= 1000.0 {
        format!("{:.2}k", r / 1000.0)
    } else {
        format!("{r:.0}")
    }
}

fn table(report: &Report) -> String {
    let mut out = String::new();
    let mut group = "";
    for row in &report.rows {
        if row.group != group {
            group = row.group;
            out.push_str(&format!(
                "\n{group}\n{:<30} {:>5} {:>8} {:>8} {:>8} {:>8} {:>7}   {:<30} {:>8} {:>8} {:>7}\n",
                "subject",
                "conc",
                "per s",
                "p50 ms",
                "p99 ms",
                "p99.9",
                "cpu µs",
                "baseline",
                "per s",
                "p50 ms",
                "ratio"
            ));
        }
        let (s, b) = (&row.subject, &row.baseline);
        out.push_str(&format!(
            "{:<30} {:>5} {:>8} {:>8.2} {:>8.2} {:>8.2} {:>7}   {:<30} {:>8} {:>8.2} {:>7.3}\n",
            s.name,
            row.concurrency,
            rate(s.rate),
            s.p50_ms,
            s.p99_ms,
            s.p999_ms,
            s.cpu_us
                .map_or_else(|| "-".to_owned(), |c| format!("{c:.0}")),
            b.name,
            rate(b.rate),
            b.p50_ms,
            row.ratio
        ));
        for side in [s, b] {
            if let Some(e) = &side.first_error {
                out.push_str(&format!(
                    "    {}: {} error(s), first: {e}\n",
                    side.name, side.errors
                ));
            }
        }
    }
    if !report.facts.is_empty() {
        out.push('\n');
    }
    for f in &report.facts {
        out.push_str(&format!("{}: {:.2} {}\n", f.name, f.value, f.unit));
    }
    for (name, tail) in &report.logs {
        out.push_str(&format!("\nthe last lines {name} logged:\n{tail}\n"));
    }
    for s in &report.skipped {
        out.push_str(&format!("\n{s}\n"));
    }
    out.push_str(&format!(
        "\n{} rounds of {:.1} s per side, interleaved; ratio = subject / baseline in the same run ({:.0} s in all)\n",
        report.plan.rounds,
        report.plan.segment.as_secs_f64(),
        report.seconds
    ));
    out
}
