//! `oncegate doubts list|clear`: what oncegate saw a provider fail at, on a running
//! gateway (admin token). A reconciliation read that could not find an applied effect
//! (`reconciliation_unproven`: its "not found" proves nothing) and idempotency keys not
//! honoured (`keys_ignored`: the capability is treated as `non_idempotent`) stay on
//! until cleared here; clearing is audited with the admin's name and reason.

use std::process::ExitCode;

use anyhow::bail;
use clap::Subcommand;
use serde_json::{Value, json};

use super::approvals::Remote;

#[derive(Debug, Subcommand)]
pub enum DoubtsCommand {
    /// List the doubts that are on.
    List {
        #[command(flatten)]
        remote: Remote,
        /// Print the gateway's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Clear a doubt: the capability's reads (or keys) are trusted again. Do it once
    /// the provider or the config is fixed (`oncegate verify --live` checks both).
    Clear {
        #[command(flatten)]
        remote: Remote,
        /// The capability.
        capability: String,
        /// `reconciliation_unproven` or `keys_ignored`.
        doubt: String,
        /// Why (kept in the audit chain).
        #[arg(long)]
        reason: Option<String>,
    },
}

pub async fn run(command: DoubtsCommand) -> anyhow::Result<ExitCode> {
    oncegate_gateway::server::install_crypto();
    let client = reqwest::Client::new();
    match command {
        DoubtsCommand::List { remote, json } => {
            if let Some(doubts) = remote
                .list(&client, "/v1/admin/doubts", "doubts", json)
                .await?
            {
                crate::output::emit(&table(&doubts));
                eprintln!("{} doubt(s) on", doubts.len());
            }
            Ok(ExitCode::SUCCESS)
        }
        DoubtsCommand::Clear {
            remote,
            capability,
            doubt,
            reason,
        } => {
            let (status, body) = remote
                .send(
                    client
                        .post(remote.at(&format!("/v1/admin/doubts/{capability}/{doubt}/clear")))
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

fn table(doubts: &[Value]) -> String {
    let mut out = format!(
        "{:<16} {:<24} {:<26} {}\n",
        "CAPABILITY", "DOUBT", "SET AT", "REASON"
    );
    for d in doubts {
        let text = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
        out.push_str(&format!(
            "{:<16} {:<24} {:<26} {}\n",
            text("capability"),
            text("doubt"),
            text("set_at"),
            text("reason"),
        ));
    }
    out
}
