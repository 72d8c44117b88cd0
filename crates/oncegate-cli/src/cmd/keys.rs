//! `oncegate keys derive`: which inputs entered a key, and why.

use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;
use oncegate_core::key::{CallScope, KeyExplanation, derive};

use crate::registry::ConfigArg;

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Derive and explain the intent key of a call, without executing anything.
    Derive {
        #[command(flatten)]
        config: ConfigArg,
        /// The capability.
        #[arg(long)]
        capability: String,
        /// The call's arguments, as JSON.
        #[arg(long)]
        args: String,
        /// The calling principal (default: the config's first agent).
        #[arg(long)]
        principal: Option<String>,
        /// The orchestrator's run id.
        #[arg(long)]
        run: Option<String>,
        /// The orchestrator's step id.
        #[arg(long)]
        step: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(command: KeysCommand) -> anyhow::Result<ExitCode> {
    let KeysCommand::Derive {
        config,
        capability,
        args,
        principal,
        run,
        step,
        json,
    } = command;
    let registry = crate::registry::load(&config.config)?;
    let cap = registry.capability(&capability).with_context(|| {
        format!(
            "no capability `{capability}` in {}",
            config.config.display()
        )
    })?;
    let principal = match principal {
        Some(p) => p,
        None => match registry.first_agent() {
            Some(p) => p.name.clone(),
            None => bail!("the config declares no agent: pass --principal"),
        },
    };
    let arguments: serde_json::Value =
        serde_json::from_str(&args).context("--args is not valid JSON")?;
    // The gateway refuses a number it cannot hold exactly; so does the explanation.
    oncegate_core::normalise::check_exact_numbers(args.as_bytes())
        .map_err(|e| anyhow::anyhow!("--args: {e}"))?;
    let scope = CallScope {
        run_id: run.as_deref(),
        step_id: step.as_deref(),
    };
    let derived = derive(
        &registry.gateway.tenant,
        &principal,
        cap,
        &arguments,
        &scope,
        jiff::Timestamp::now(),
        &registry.gateway.time_zone,
    )?;
    let text = if json {
        format!("{}\n", serde_json::to_string_pretty(&derived.explanation)?)
    } else {
        explain(&derived.explanation)
    };
    crate::output::emit(&text);
    Ok(ExitCode::SUCCESS)
}

fn explain(e: &KeyExplanation) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "key: {}", e.key);
    if let Some(cross) = &e.cross_run_key {
        let _ = writeln!(out, "cross-run key: {cross}");
    }
    let _ = writeln!(out, "tenant: {}", e.tenant);
    let _ = writeln!(out, "capability: {}", e.capability);
    let _ = writeln!(
        out,
        "principal: {} ({})",
        e.principal,
        if e.principal_in_key {
            "in the key: key_principal = \"principal\""
        } else {
            "recorded, not in the key: tenant-wide intent"
        }
    );
    match &e.business_ref {
        Some(b) => {
            let _ = writeln!(
                out,
                "business_ref: {} = {} (from {}){}",
                b.arg,
                b.normalised,
                b.raw,
                changes(&b.changes)
            );
        }
        None => {
            let _ = writeln!(out, "business_ref: none declared");
        }
    }
    let _ = writeln!(out, "significant arguments:");
    if e.inputs.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for i in &e.inputs {
        let _ = writeln!(
            out,
            "  {} [{}]: {} -> {}{}",
            i.arg,
            i.normaliser,
            i.raw,
            i.normalised,
            changes(&i.changes)
        );
    }
    let _ = writeln!(out, "scope: {}", e.scope);
    for n in &e.notes {
        let _ = writeln!(out, "note: {n}");
    }
    if e.ignored.is_empty() {
        let _ = writeln!(out, "ignored arguments: none");
    } else {
        let _ = writeln!(
            out,
            "ignored arguments (never enter the key): {}",
            e.ignored.join(", ")
        );
    }
    let _ = writeln!(out, "material: {}", e.material);
    out
}

/// What Unicode cleaning changed, as a suffix: ` (stripped U+200B ZERO WIDTH SPACE; NFC
/// changed the text)`.
fn changes(changes: &[String]) -> String {
    if changes.is_empty() {
        String::new()
    } else {
        format!(" ({})", changes.join("; "))
    }
}
