//! `oncegate verify`: the red-team scenarios against your own registry, with a
//! simulated upstream (no real effect is ever sent).

use std::process::ExitCode;

use anyhow::bail;

use crate::ConfigArg;

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
}

pub async fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let registry = match oncegate_store::load_registry(&args.config.config) {
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
        .or_else(|| registry.first_agent().map(|p| p.name.clone()))
    {
        Some(p) => p,
        None => bail!("the config declares no agent: pass --principal"),
    };
    let reports = crate::verify::verify(&registry, &principal)
        .await
        .map_err(anyhow::Error::msg)?;
    let failed = reports.iter().filter(|r| !r.ok()).count();
    if args.json {
        crate::emit(&format!(
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
                out.push_str(&format!(
                    "  {} {:<28} {}\n",
                    if c.ok { "ok  " } else { "FAIL" },
                    c.name,
                    c.detail
                ));
            }
        }
        out.push_str(&format!(
            "\n{} of {} capabilities hold (simulated upstream: no real effect was sent)\n",
            reports.len() - failed,
            reports.len()
        ));
        crate::emit(&out);
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
