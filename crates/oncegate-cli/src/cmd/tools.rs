//! `oncegate tools list|accept`: fronted MCP servers' pinned tool definitions, on a
//! running gateway (admin token). oncegate pins each undeclared tool's definition
//! (description, input schema, annotations, output schema) when it first offers it; a
//! server that changes one has that tool held (not listed, calls refused with
//! `OG-0059`) until an admin accepts the new definition here, by its digest.

use std::process::ExitCode;

use anyhow::bail;
use clap::Subcommand;
use serde_json::{Value, json};

use super::approvals::Remote;

#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// List every pinned tool and the changed definitions held until accepted.
    List {
        #[command(flatten)]
        remote: Remote,
        /// Print the gateway's JSON answer (the definitions in full).
        #[arg(long)]
        json: bool,
    },
    /// Accept a changed definition: it becomes the pin and the tool is offered again.
    /// Read it first (`oncegate tools list --json`): only the digest pending now is
    /// accepted.
    Accept {
        #[command(flatten)]
        remote: Remote,
        /// The server's alias (`[[mcp_servers]] alias`).
        server: String,
        /// The server's name for the tool.
        tool: String,
        /// The changed definition's digest (`sha256:...`).
        digest: String,
    },
}

pub async fn run(command: ToolsCommand) -> anyhow::Result<ExitCode> {
    oncegate_gateway::server::install_crypto();
    let client = reqwest::Client::new();
    match command {
        ToolsCommand::List { remote, json } => {
            if let Some(tools) = remote
                .list(&client, "/v1/admin/tools", "tools", json)
                .await?
            {
                crate::output::emit(&table(&tools));
                let held = tools.iter().filter(|t| t["state"] == "changed").count();
                eprintln!("{} pinned tool(s), {held} changed and held", tools.len());
            }
            Ok(ExitCode::SUCCESS)
        }
        ToolsCommand::Accept {
            remote,
            server,
            tool,
            digest,
        } => {
            let (status, body) = remote
                .send(
                    client
                        .post(remote.at(&format!("/v1/admin/tools/{server}/{tool}/accept")))
                        .json(&json!({"digest": digest})),
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

fn table(tools: &[Value]) -> String {
    let mut out = format!(
        "{:<12} {:<24} {:<8} {:<73} {}\n",
        "SERVER", "TOOL", "STATE", "PINNED", "CHANGED TO"
    );
    for t in tools {
        let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
        out.push_str(&format!(
            "{:<12} {:<24} {:<8} {:<73} {}\n",
            text(&t["server"]),
            text(&t["tool"]),
            text(&t["state"]),
            text(&t["digest"]),
            text(&t["pending"]["digest"]),
        ));
    }
    out
}
