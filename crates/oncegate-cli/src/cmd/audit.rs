//! `oncegate audit verify|export`: walk the hash chain.

use std::process::ExitCode;

use clap::Subcommand;
use oncegate_core::audit::verify_shard;
use oncegate_store::StoreRead;

use crate::ConfigArg;

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Verify every shard's hash chain; report the first broken link.
    Verify(ConfigArg),
    /// Print audit records as JSON lines, after a position.
    Export {
        #[command(flatten)]
        config: ConfigArg,
        /// Start after this position.
        #[arg(long, default_value_t = 0)]
        after: i64,
    },
}

pub async fn run(command: AuditCommand) -> anyhow::Result<ExitCode> {
    match command {
        AuditCommand::Verify(config) => {
            let registry = crate::load(&config.config)?;
            let store = crate::open_store(&registry).await?;
            let mut total = 0usize;
            let shards = store.audit_shards().await?;
            for shard in &shards {
                let records = store.audit_shard(*shard).await?;
                if let Err(broken) = verify_shard(*shard, &records) {
                    println!(
                        "BROKEN: shard {} at seq {}: {}",
                        broken.shard, broken.seq, broken.problem
                    );
                    return Ok(ExitCode::FAILURE);
                }
                total += records.len();
            }
            println!(
                "ok: {total} audit records in {} shard(s), every link verified",
                shards.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Export { config, after } => {
            let registry = crate::load(&config.config)?;
            let store = crate::open_store(&registry).await?;
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
    }
}
