//! `oncegate sandbox`: the simulated provider, as its own process.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;
use oncegate_sandbox::{Resource, SandboxConfig, serve};

#[derive(Debug, clap::Args)]
pub struct SandboxArgs {
    /// Listen address; port 0 picks a free one (printed on the first line).
    #[arg(long, default_value = "127.0.0.1:7879")]
    listen: SocketAddr,
    /// Resources that ignore `Idempotency-Key` (charges, refunds, emails, ledger).
    #[arg(long = "ignore-idempotency-key", value_delimiter = ',')]
    ignore: Vec<Resource>,
    /// Require `Authorization: Bearer KEY` on /v1 and /mcp requests.
    #[arg(long, env = "SANDBOX_API_KEY")]
    api_key: Option<String>,
}

pub async fn run(args: SandboxArgs) -> anyhow::Result<ExitCode> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    crate::output::emit(&format!("sandbox listening on http://{addr}\n"));
    serve(
        listener,
        SandboxConfig {
            ignore_idempotency_key: args.ignore,
            api_key: args.api_key,
        },
    )
    .await?;
    Ok(ExitCode::SUCCESS)
}
