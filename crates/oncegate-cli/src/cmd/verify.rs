//! `oncegate verify`: the red-team scenarios against your own registry, with a
//! simulated upstream (no real effect is ever sent); with `--live`, one capability's
//! real request against a provider's test mode (see `crate::verify_live`).

use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::registry::ConfigArg;

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The principal to call as (default: the config's first agent).
    #[arg(long)]
    principal: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Send the capability's REAL request twice with one idempotency key and check the
    /// provider answers the same effect, then run its reconciliation read. Makes real
    /// effects: point the registry at the provider's test mode or sandbox.
    #[arg(long, requires_all = ["capability", "args"])]
    live: bool,
    /// With --live: the `keyed` or `idempotent_write` capability to check.
    #[arg(long, requires = "live")]
    capability: Option<String>,
    /// With --live: the call's arguments, as JSON.
    #[arg(long, requires = "live")]
    args: Option<String>,
    /// With --live: how long the reconciliation read may take to find the effect
    /// (providers index new effects late).
    #[arg(long, requires = "live", default_value = "10s")]
    read_within: String,
}

/// Exit code of a live check refused before anything was sent (1: a check failed).
const REFUSED: u8 = 2;

pub async fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let registry = match oncegate_engine::config::load_registry(&args.config.config) {
        Ok(r) => r,
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!(
                "{}: the registry does not load, so nothing can be verified",
                args.config.config.display()
            );
            return Ok(ExitCode::FAILURE);
        }
    };
    let principal = match args
        .principal
        .clone()
        .or_else(|| registry.first_agent().map(|p| p.name.clone()))
    {
        Some(p) => p,
        None => bail!("the config declares no agent: pass --principal"),
    };
    if args.live {
        return live(&args, &registry, &principal).await;
    }
    let reports = crate::verify::verify(&registry, &principal)
        .await
        .map_err(anyhow::Error::msg)?;
    let failed = reports.iter().filter(|r| !r.ok()).count();
    if args.json {
        crate::output::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(
                &serde_json::json!({"capabilities": reports, "failed": failed})
            )?
        ));
    } else {
        let mut out = String::new();
        for r in &reports {
            out.push_str(&format!(
                "{} {}\n",
                if r.ok() { "ok  " } else { "FAIL" },
                r.capability
            ));
            for f in &r.findings {
                out.push_str(&format!("       finding: {f}\n"));
            }
            for c in &r.checks {
                out.push_str(&format!("  {} {}\n", status(c.ok), row(c)));
            }
        }
        out.push_str(&format!(
            "\n{} of {} capabilities hold (simulated upstream: no real effect was sent)\n",
            reports.len() - failed,
            reports.len()
        ));
        crate::output::emit(&out);
    }
    Ok(exit(failed == 0))
}

/// `--live`: two real requests and a reconciliation read for one capability.
async fn live(
    args: &VerifyArgs,
    registry: &oncegate_core::Registry,
    principal: &str,
) -> anyhow::Result<ExitCode> {
    let read_within: jiff::SignedDuration = args
        .read_within
        .parse()
        .with_context(|| format!("--read-within `{}` is not a duration", args.read_within))?;
    let (name, call) = (
        args.capability.as_deref().unwrap_or_default(),
        args.args.as_deref().unwrap_or_default(),
    );
    let prepared = match crate::verify_live::prepare(registry, name, principal, call) {
        Ok(p) => p,
        Err(refusal) => {
            eprintln!(
                "cannot verify `{name}` live (nothing was sent): {}",
                refusal.0
            );
            return Ok(ExitCode::from(REFUSED));
        }
    };
    eprintln!(
        "sending `{name}`'s real request twice with idempotency key {}",
        prepared.key()
    );
    let report = prepared.run(read_within.unsigned_abs()).await;
    if args.json {
        crate::output::emit(&format!("{}\n", serde_json::to_string_pretty(&report)?));
    } else {
        let mut out = format!(
            "{} {name} (live, idempotency key {})\n",
            status(report.ok()),
            report.idempotency_key
        );
        for c in &report.checks {
            out.push_str(&format!("  {} {}\n", status(c.ok), row(c)));
        }
        out.push_str(&format!(
            "\nkey honoured: {}; reconciliation read finds the effect: {}\n",
            if report.key_honoured { "yes" } else { "NO" },
            match report.reconcile_finds {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "not checked",
            }
        ));
        crate::output::emit(&out);
    }
    Ok(exit(report.ok()))
}

fn status(ok: bool) -> &'static str {
    if ok { "ok  " } else { "FAIL" }
}

fn row(c: &crate::verify::Check) -> String {
    format!("{:<28} {}", c.name, c.detail)
}

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
