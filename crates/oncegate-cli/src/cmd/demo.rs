//! `oncegate demo`: the red-team scenarios, naive executor vs oncegate, counted in the
//! sandbox provider's ledger.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;

use crate::demo::{Row, SCENARIOS, World};

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Run one scenario (1-12).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=12))]
    scenario: Option<u8>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Leave the gateway and the sandbox running afterwards (Ctrl-C stops them).
    #[arg(long)]
    keep: bool,
}

pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let exe = std::env::current_exe()
        .context("cannot find the oncegate binary for the crash scenario")?;
    let world = World::start(exe)
        .await
        .context("cannot start the sandbox and the gateway")?;
    let ids: Vec<u8> = match args.scenario {
        Some(id) => vec![id],
        None => SCENARIOS.iter().map(|s| s.0).collect(),
    };
    let progress = std::io::stderr().is_terminal() && !args.json;
    let mut rows = Vec::new();
    for id in ids {
        let (_, name, _) = SCENARIOS[usize::from(id - 1)];
        if progress {
            eprint!("\r\x1b[2K[{id}/{}] {name} ...", SCENARIOS.len());
        }
        rows.push(world.run(id).await);
    }
    if progress {
        eprint!("\r\x1b[2K");
    }
    let failed = rows.iter().filter(|r| !r.ok).count();
    if args.json {
        crate::output::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(
                &serde_json::json!({"scenarios": rows, "failed": failed, "seconds": started.elapsed().as_secs_f64()})
            )?
        ));
    } else {
        crate::output::emit(&table(
            &rows,
            std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        ));
        crate::output::emit(&summary(&rows, started.elapsed().as_secs_f64()));
    }
    if args.keep {
        eprintln!("\n{}\nCtrl-C stops everything.", world.describe());
        let _ = tokio::signal::ctrl_c().await;
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn table(rows: &[Row], color: bool) -> String {
    let paint = |text: String, code: &str| {
        if color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text
        }
    };
    let mut out = format!(
        "{:<3} {:<22} {:>6} {:>9} {:>9}  {}\n",
        "#", "scenario", "naive", "oncegate", "expected", "verdict"
    );
    for r in rows {
        let naive = format!("{:>6}", r.naive_effects);
        let naive = if r.naive_effects > r.expected {
            paint(naive, "33")
        } else {
            naive
        };
        let verdict = if r.ok {
            paint("ok".into(), "32")
        } else {
            paint("FAIL".into(), "31;1")
        };
        out.push_str(&format!(
            "{:<3} {:<22} {naive} {:>9} {:>9}  {verdict}  {}\n",
            r.id, r.name, r.oncegate_effects, r.expected, r.notes
        ));
    }
    out
}

fn summary(rows: &[Row], seconds: f64) -> String {
    let naive: usize = rows.iter().map(|r| r.naive_effects).sum();
    let ours: usize = rows.iter().map(|r| r.oncegate_effects).sum();
    let expected: usize = rows.iter().map(|r| r.expected).sum();
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| !r.ok)
        .map(|r| r.id.to_string())
        .collect();
    let verdict = if failed.is_empty() {
        "every oncegate row met its expectation".to_owned()
    } else {
        format!("scenario(s) {} missed their expectation", failed.join(", "))
    };
    format!(
        "\nThe naive executor (a fresh UUID idempotency key per attempt, as agent harnesses do today) caused {naive} effects for {expected} intended ones; through oncegate there were {ours}: {verdict}. Each scenario counts effects in the sandbox provider's own ledger ({seconds:.1} s).\n"
    )
}
