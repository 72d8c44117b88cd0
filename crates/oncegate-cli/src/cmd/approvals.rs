//! `oncegate approvals list|approve|deny`: talk to a running gateway's API.

use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;

#[derive(Debug, clap::Args)]
pub struct Remote {
    /// The gateway's URL.
    #[arg(long, env = "ONCEGATE_URL", default_value = "http://127.0.0.1:7878")]
    pub url: String,
    /// Your bearer token (an approver's or an admin's).
    #[arg(long, env = "ONCEGATE_TOKEN")]
    pub token: String,
}

impl Remote {
    /// `path` on the gateway.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url.trim_end_matches('/'))
    }

    /// Sends `request` with this token; the answer's JSON body and status.
    pub async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> anyhow::Result<(reqwest::StatusCode, serde_json::Value)> {
        let response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("cannot reach the gateway at {}", self.url))?;
        let status = response.status();
        let body = response
            .json()
            .await
            .context("the gateway's answer is not JSON")?;
        Ok((status, body))
    }

    /// `GET path` as an admin listing: `--json` prints the answer whole and gives
    /// `None`; otherwise the array under `field`, for a table. An error answer is
    /// printed and fails.
    pub async fn list(
        &self,
        client: &reqwest::Client,
        path: &str,
        field: &str,
        json: bool,
    ) -> anyhow::Result<Option<Vec<serde_json::Value>>> {
        let (status, body) = self.send(client.get(self.at(path))).await?;
        if body.get("error").is_some() || !status.is_success() {
            crate::output::emit(&format!("{}\n", serde_json::to_string_pretty(&body)?));
            anyhow::bail!("the gateway answered {status}");
        }
        if json {
            crate::output::emit(&format!("{}\n", serde_json::to_string_pretty(&body)?));
            return Ok(None);
        }
        Ok(Some(
            body.get(field)
                .and_then(serde_json::Value::as_array)
                .cloned()
                .unwrap_or_default(),
        ))
    }
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List approvals (pending by default).
    List {
        #[command(flatten)]
        remote: Remote,
        /// pending, approved, denied, expired, void, or all.
        #[arg(long, default_value = "pending")]
        state: String,
    },
    /// Approve: executes the held call once.
    Approve {
        #[command(flatten)]
        remote: Remote,
        /// The approval id (ap_...).
        id: String,
    },
    /// Deny: final for this intent generation.
    Deny {
        #[command(flatten)]
        remote: Remote,
        /// The approval id (ap_...).
        id: String,
    },
}

pub async fn run(command: ApprovalsCommand) -> anyhow::Result<ExitCode> {
    oncegate_gateway::server::install_crypto();
    let client = reqwest::Client::new();
    let (request, remote) = match &command {
        ApprovalsCommand::List { remote, state } => return list(&client, remote, state).await,
        ApprovalsCommand::Approve { remote, id } => (
            client.post(remote.at(&format!("/v1/approvals/{id}/approve"))),
            remote,
        ),
        ApprovalsCommand::Deny { remote, id } => (
            client.post(remote.at(&format!("/v1/approvals/{id}/deny"))),
            remote,
        ),
    };
    let (status, body) = remote.send(request).await?;
    crate::output::emit(&format!("{}\n", serde_json::to_string_pretty(&body)?));
    // A decided approval answers with an outcome envelope (a denial is HTTP 403 with
    // status "denied": that is success for `deny`); anything else is an error body.
    if body.get("error").is_some() {
        bail!("the gateway answered {status}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `approvals list`: every page of `GET /v1/approvals`, following `next_cursor`, printed
/// as one JSON document.
async fn list(client: &reqwest::Client, remote: &Remote, state: &str) -> anyhow::Result<ExitCode> {
    let mut approvals = Vec::new();
    let mut unreadable = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        // The state is one word and a cursor base64url: neither needs escaping.
        let mut query = "?limit=500".to_owned();
        if state != "all" {
            query.push_str(&format!("&state={state}"));
        }
        if let Some(c) = cursor.take() {
            query.push_str(&format!("&cursor={c}"));
        }
        let request = client.get(remote.at(&format!("/v1/approvals{query}")));
        let (status, body) = remote.send(request).await?;
        if body.get("error").is_some() || !status.is_success() {
            crate::output::emit(&format!("{}\n", serde_json::to_string_pretty(&body)?));
            bail!("the gateway answered {status}");
        }
        let page = |field: &str| {
            body.get(field)
                .and_then(serde_json::Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        approvals.extend(page("approvals"));
        unreadable.extend(page("unreadable"));
        match body.get("next_cursor").and_then(serde_json::Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let all = serde_json::json!({"approvals": approvals, "unreadable": unreadable});
    crate::output::emit(&format!("{}\n", serde_json::to_string_pretty(&all)?));
    Ok(ExitCode::SUCCESS)
}
