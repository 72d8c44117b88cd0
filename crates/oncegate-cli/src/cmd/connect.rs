//! `oncegate connect`: a stdio MCP server for desktop clients that speak only stdio,
//! relaying every message to a gateway's `/mcp` (Streamable HTTP) and back.
//!
//! Both ends are rmcp transports: stdio towards the client (newline-delimited JSON-RPC),
//! rmcp's Streamable HTTP client towards the gateway (sessions, SSE streams, their
//! resumption, both protocol eras). The bridge adds nothing and decides nothing: the
//! gateway sees the same requests, so the outcomes are the same as over HTTP. Requests
//! run side by side (a long tool call does not hold up a `ping` or a cancellation);
//! notifications and responses keep their order. Nothing but MCP messages is written to
//! stdout; diagnostics go to stderr.

use std::process::ExitCode;

use anyhow::{Context, bail};
use rmcp::model::{ClientJsonRpcMessage, ErrorData, JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::{RoleClient, RoleServer};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{IntoTransport, StreamableHttpClientTransport, Transport};
use tokio::sync::mpsc;

#[derive(Debug, clap::Args)]
pub struct ConnectArgs {
    /// The gateway's MCP endpoint, e.g. http://127.0.0.1:7878/mcp.
    #[arg(long)]
    url: String,
    /// The environment variable holding the bearer token (a static token or a JWT);
    /// the token itself never appears on the command line.
    #[arg(long)]
    token_env: String,
}

pub async fn run(args: ConnectArgs) -> anyhow::Result<ExitCode> {
    let url = reqwest::Url::parse(&args.url)
        .with_context(|| format!("--url `{}` is not a URL", args.url))?;
    if !matches!(url.scheme(), "http" | "https") {
        bail!("--url `{url}` is not an http(s) URL");
    }
    let token = match std::env::var(&args.token_env) {
        Ok(t) if !t.trim().is_empty() => t.trim().to_owned(),
        _ => bail!(
            "${} is not set: export the bearer token there (--token-env names the variable)",
            args.token_env
        ),
    };
    oncegate_gateway::server::install_crypto();
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
    config.auth_header = Some(token);
    let mut up: StreamableHttpClientTransport<reqwest::Client> =
        StreamableHttpClientTransport::with_client(oncegate_gateway::server::http_client(), config);
    let mut down = IntoTransport::<RoleServer, _, _>::into_transport((
        tokio::io::stdin(),
        tokio::io::stdout(),
    ));

    // Answers for the client that the bridge makes itself (a request the gateway could
    // not be sent), merged with what the gateway sends.
    let (local_tx, mut local_rx) = mpsc::channel::<ServerJsonRpcMessage>(64);
    let mut started = false;
    let code = loop {
        tokio::select! {
            from_client = down.receive() => {
                let Some(message) = from_client else { break ExitCode::SUCCESS };
                // The first request opens the session: later ones wait for it.
                let in_order = !started || !matches!(message, JsonRpcMessage::Request(_));
                started = true;
                let failed = request_id(&message);
                let send = up.send(message);
                if in_order {
                    if let Err(e) = send.await {
                        eprintln!("oncegate connect: cannot reach {url}: {e}");
                        if let Some(id) = failed {
                            let _ = down.send(unreachable(id, &url, &e.to_string())).await;
                        }
                        break ExitCode::FAILURE;
                    }
                } else {
                    let local_tx = local_tx.clone();
                    let url = url.clone();
                    tokio::spawn(async move {
                        if let Err(e) = send.await {
                            eprintln!("oncegate connect: a request to {url} failed: {e}");
                            if let Some(id) = failed {
                                let _ = local_tx.send(unreachable(id, &url, &e.to_string())).await;
                            }
                        }
                    });
                }
            }
            from_gateway = up.receive() => {
                let Some(message) = from_gateway else {
                    eprintln!("oncegate connect: the gateway ended the session");
                    break ExitCode::FAILURE;
                };
                if down.send(message).await.is_err() {
                    break ExitCode::SUCCESS;
                }
            }
            Some(message) = local_rx.recv() => {
                if down.send(message).await.is_err() {
                    break ExitCode::SUCCESS;
                }
            }
        }
    };
    // Ends the gateway session (DELETE) when the client went away.
    let _ = Transport::<RoleClient>::close(&mut up).await;
    Ok(code)
}

fn request_id(message: &ClientJsonRpcMessage) -> Option<rmcp::model::RequestId> {
    match message {
        JsonRpcMessage::Request(r) => Some(r.id.clone()),
        _ => None,
    }
}

/// The client's request could not be delivered: it hears a JSON-RPC error instead of
/// waiting forever.
fn unreachable(id: rmcp::model::RequestId, url: &reqwest::Url, why: &str) -> ServerJsonRpcMessage {
    ServerJsonRpcMessage::error(
        ErrorData::internal_error(
            // rmcp's error names the URL as well: neither shows its userinfo or query.
            oncegate_core::redact::urls_in(&format!(
                "oncegate connect could not deliver the request to {url}: {why}"
            )),
            None,
        ),
        Some(id),
    )
}
