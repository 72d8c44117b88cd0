//! `oncegate audit verify|export|anchor`: walk the hash chain, check every row against
//! it, and hold its heads elsewhere.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use oncegate_core::audit::Anchor;
use oncegate_store::AuditRead;
use oncegate_store::audit_check::{Walk, anchor, save_checkpoint, verify_audit};

use crate::registry::ConfigArg;

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Verify every shard's hash chain and every intent and approval row against the
    /// record that wrote it; report what is broken. A clean run leaves a checkpoint in
    /// the store for `--since-checkpoint`.
    Verify {
        #[command(flatten)]
        config: ConfigArg,
        /// An anchor file (`audit anchor --out`): the chain must still extend every
        /// head in it (catches dropped or rewritten records). Walks the whole chain.
        #[arg(long)]
        anchor: Vec<PathBuf>,
        /// Walk only the records written since the last clean verify, and the rows they
        /// wrote (a frequent job that costs what was written since, not what the store
        /// holds). The whole walk also catches an old record or row edited in place.
        #[arg(long, conflicts_with = "anchor")]
        since_checkpoint: bool,
    },
    /// Print audit records as JSON lines, after a position.
    Export {
        #[command(flatten)]
        config: ConfigArg,
        /// Start after this position.
        #[arg(long, default_value_t = 0)]
        after: i64,
    },
    /// Print the head of every shard as one JSON line, to keep outside the store.
    Anchor {
        #[command(flatten)]
        config: ConfigArg,
        /// Also append the line to this file.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Also POST it (JSON) to this URL.
        #[arg(long)]
        webhook: Option<String>,
    },
}

/// Reads every anchor (one JSON object per non-empty line) from the files.
fn read_anchors(files: &[PathBuf]) -> anyhow::Result<Vec<Anchor>> {
    let mut anchors = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the anchor file {}", file.display()))?;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            anchors
                .push(serde_json::from_str(line).with_context(|| {
                    format!("{}:{}: not an anchor line", file.display(), n + 1)
                })?);
        }
    }
    Ok(anchors)
}

pub async fn run(command: AuditCommand) -> anyhow::Result<ExitCode> {
    match command {
        AuditCommand::Verify {
            config,
            anchor,
            since_checkpoint,
        } => verify(&config, &anchor, since_checkpoint).await,
        AuditCommand::Export { config, after } => export(&config, after).await,
        AuditCommand::Anchor {
            config,
            out,
            webhook,
        } => anchor_heads(&config, out.as_deref(), webhook.as_deref()).await,
    }
}

/// `audit verify`: walks the chain (all of it, or since the checkpoint) and every row
/// it wrote; a clean walk leaves the next checkpoint.
async fn verify(
    config: &ConfigArg,
    anchor: &[PathBuf],
    since_checkpoint: bool,
) -> anyhow::Result<ExitCode> {
    let registry = crate::registry::load(&config.config)?;
    let anchors = read_anchors(anchor)?;
    let store = crate::registry::open_store(&registry).await?;
    let walk = if since_checkpoint {
        Walk::FromCheckpoint
    } else {
        Walk::Full
    };
    let report = verify_audit(&store, store.chain_key(), store.store_id(), &anchors, walk).await?;
    for b in &report.broken {
        println!("BROKEN: shard {} at seq {}: {}", b.shard, b.seq, b.problem);
    }
    for p in &report.row_problems {
        println!(
            "BROKEN ROW: {}: {}",
            p.kind.name(&p.key, p.generation),
            p.problem
        );
    }
    if !report.ok() {
        return Ok(ExitCode::FAILURE);
    }
    let walked = match &report.since {
        None => format!(
            "{} audit records in {} shard(s), every link verified; {} row(s) match the records that wrote them",
            report.records, report.shards, report.rows
        ),
        Some(since) => format!(
            "{} audit records since the checkpoint of {} ({} verified before it) in {} shard(s), every new link verified; {} row(s) they wrote match them (without --since-checkpoint the whole chain is walked)",
            report.records, since.at, since.records, report.shards, report.rows
        ),
    };
    println!(
        "ok: {walked}{}{}",
        if anchors.is_empty() {
            String::new()
        } else {
            format!(
                "; {} anchored head(s) still extended",
                report.anchored_heads
            )
        },
        if store.chain_key().is_some() {
            "; chain key checked"
        } else {
            ""
        }
    );
    // Where the next verify starts; failing to save it only costs the next one a
    // full walk.
    if let Err(e) = save_checkpoint(
        &store,
        store.chain_key(),
        store.store_id(),
        &report,
        jiff::Timestamp::now(),
    )
    .await
    {
        eprintln!("warning: the checkpoint for the next verify was not saved: {e}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `audit export`: every record after `after`, one JSON line each.
async fn export(config: &ConfigArg, after: i64) -> anyhow::Result<ExitCode> {
    let registry = crate::registry::load(&config.config)?;
    let store = crate::registry::open_store(&registry).await?;
    let mut position = after;
    loop {
        let page = store.audit_after(position, 1000).await?;
        let Some((last, _)) = page.last() else { break };
        position = *last;
        for (pos, record) in &page {
            println!("{}", serde_json::json!({"position": pos, "record": record}));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `audit anchor`: prints the heads of every shard, and keeps them in a file or sends
/// them to a webhook.
async fn anchor_heads(
    config: &ConfigArg,
    out: Option<&Path>,
    webhook: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let registry = crate::registry::load(&config.config)?;
    let store = crate::registry::open_store(&registry).await?;
    let a = anchor(&store, store.store_id(), jiff::Timestamp::now()).await?;
    let line = serde_json::to_string(&a)?;
    crate::output::emit(&format!("{line}\n"));
    if let Some(path) = out {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        writeln!(f, "{line}")
            .and_then(|()| f.sync_all())
            .with_context(|| format!("cannot append to {}", path.display()))?;
    }
    if let Some(url) = webhook {
        let response = oncegate_gateway::server::http_client()
            .post(url)
            .timeout(std::time::Duration::from_secs(10))
            .json(&a)
            .send()
            .await
            .with_context(|| format!("cannot POST the anchor to {url}"))?;
        anyhow::ensure!(
            response.status().is_success(),
            "the anchor webhook {url} answered {}",
            response.status()
        );
    }
    Ok(ExitCode::SUCCESS)
}
