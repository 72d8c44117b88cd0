//! `oncegate limits list|reconcile`: the budgets of every limit, and the reconciliation
//! of one refused because its reservations disagree with its ledger, on a running
//! gateway (admin token). A reconciliation is audited with the admin's name and reason.

use std::process::ExitCode;

use anyhow::bail;
use clap::Subcommand;
use serde_json::json;

use super::approvals::Remote;

#[derive(Debug, Subcommand)]
pub enum LimitsCommand {
    /// Every limit's budget: max, used and remaining in its window (JSON).
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// Reconcile a budget refused with OG-0030 ("... do not match its ledger"): its
    /// reservations are restored from its ledger when the ledger holds.
    Reconcile {
        #[command(flatten)]
        remote: Remote,
        /// The budget: the limit's name, or `name@principal` for a per-principal one
        /// (as the refusal names it).
        scope: String,
        /// When the ledger itself does not hold (its entries deleted or edited too):
        /// accept the reservations as they are now and write the ledger again from them.
        #[arg(long)]
        accept_table: bool,
        /// Why (kept in the audit chain).
        #[arg(long)]
        reason: Option<String>,
    },
}

pub async fn run(command: LimitsCommand) -> anyhow::Result<ExitCode> {
    oncegate_gateway::server::install_crypto();
    let client = reqwest::Client::new();
    let (status, body) = match &command {
        LimitsCommand::List { remote } => remote.send(client.get(remote.at("/v1/limits"))).await?,
        LimitsCommand::Reconcile {
            remote,
            scope,
            accept_table,
            reason,
        } => {
            // The scope is one path segment, escaped (a principal may hold `/`).
            let mut url = reqwest::Url::parse(&remote.at("/v1/admin/limits"))?;
            url.path_segments_mut()
                .map_err(|()| anyhow::anyhow!("the gateway URL cannot take a path"))?
                .push(scope)
                .push("reconcile");
            remote
                .send(
                    client
                        .post(url)
                        .json(&json!({"accept_table": accept_table, "reason": reason})),
                )
                .await?
        }
    };
    crate::output::emit(&format!("{}\n", serde_json::to_string_pretty(&body)?));
    if body.get("error").is_some() || !status.is_success() {
        bail!("the gateway answered {status}");
    }
    Ok(ExitCode::SUCCESS)
}
