//! `oncegate holds list|clear`: the holds detection placed, on a running gateway
//! (admin token). Clearing is audited with the admin's name and reason.

use std::process::ExitCode;

use anyhow::bail;
use clap::Subcommand;
use serde_json::{Value, json};

use super::approvals::Remote;

#[derive(Debug, Subcommand)]
pub enum HoldsCommand {
    /// List the holds that are on.
    List {
        #[command(flatten)]
        remote: Remote,
        /// Print the gateway's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Clear a hold: calls it stopped go through again.
    Clear {
        #[command(flatten)]
        remote: Remote,
        /// The hold id (h_..., from `holds list` or the finding's hold_id).
        id: String,
        /// Why (kept in the audit chain).
        #[arg(long)]
        reason: Option<String>,
    },
}

pub async fn run(command: HoldsCommand) -> anyhow::Result<ExitCode> {
    oncegate_gateway::server::install_crypto();
    let client = reqwest::Client::new();
    match command {
        HoldsCommand::List { remote, json } => {
            if let Some(holds) = remote
                .list(&client, "/v1/admin/holds", "holds", json)
                .await?
            {
                crate::output::emit(&table(&holds));
                eprintln!("{} hold(s) on", holds.len());
            }
            Ok(ExitCode::SUCCESS)
        }
        HoldsCommand::Clear { remote, id, reason } => {
            let (status, body) = remote
                .send(
                    client
                        .post(remote.at(&format!("/v1/admin/holds/{id}/clear")))
                        .json(&json!({"reason": reason})),
                )
                .await?;
            crate::output::emit(&format!("{}\n", serde_json::to_string_pretty(&body)?));
            if body.get("error").is_some() || !status.is_success() {
                bail!("the gateway answered {status}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn table(holds: &[Value]) -> String {
    let mut out = format!(
        "{:<19} {:<16} {:<14} {:<20} {:<26} {}\n",
        "HOLD", "CAPABILITY", "ON", "VALUE", "SET AT", "REASON"
    );
    for h in holds {
        let text = |k: &str| h.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
        out.push_str(&format!(
            "{:<19} {:<16} {:<14} {:<20} {:<26} {}\n",
            text("id"),
            text("capability"),
            text("on"),
            text("value"),
            text("set_at"),
            text("reason"),
        ));
    }
    out
}
