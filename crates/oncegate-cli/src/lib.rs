//! The `oncegate` command line: parse into plain data, then build runtime objects.
//!
//! `cmd` holds one module per subcommand (its arguments and its printing); `demo` (a
//! sandbox and gateways driven as processes) and `verify` (the Gate against a simulated
//! upstream) are the machinery behind the two red-team subcommands, `verify_live` (the
//! gateway's executor against a provider's test mode) behind `oncegate verify --live`,
//! and `bench` (a load generator and what it drives) the machinery behind `oncegate
//! bench`. What they all share sits below them: `registry` (`--config`, loading the
//! registry, opening its store) and `output` (stdout). This file only parses and
//! dispatches.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

mod bench;
mod cmd;
mod demo;
mod logging;
mod output;
mod registry;
mod telemetry;
mod verify;
mod verify_live;

// The helpers every subcommand shares, at the paths they always had.
pub use output::emit;
pub use registry::{ConfigArg, load, open_serving_store, open_store, open_store_with};

/// oncegate: one intent, at most one effect.
#[derive(Debug, Parser)]
#[command(name = "oncegate", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a registry without starting anything.
    CheckConfig(cmd::check_config::CheckConfigArgs),
    /// Explain intent keys.
    #[command(subcommand)]
    Keys(cmd::keys::KeysCommand),
    /// Inspect intents in the store.
    #[command(subcommand)]
    Intents(cmd::intents::IntentsCommand),
    /// Verify or export the audit chain.
    #[command(subcommand)]
    Audit(cmd::audit::AuditCommand),
    /// Run the red-team scenarios: a naive executor vs oncegate, effects counted.
    Demo(cmd::demo::DemoArgs),
    /// Prove one intent gives one effect for your registry, against a simulated upstream
    /// (`--live`: check one capability's real provider honours the key).
    Verify(cmd::verify::VerifyArgs),
    /// Run the gateway: the JSON API in front of the registry's upstreams.
    Serve(cmd::serve::ServeArgs),
    /// Create and migrate a new store (the explicit first step; `serve` never creates one).
    Init(ConfigArg),
    /// Apply pending migrations to the store and exit (before a rolling deploy; creates
    /// the schema in an empty PostgreSQL database, never a missing SQLite file).
    Migrate(ConfigArg),
    /// Run the simulated payment/email/ledger provider (for the demo, tests, benchmarks).
    Sandbox(cmd::sandbox::SandboxArgs),
    /// List and decide approvals on a running gateway.
    #[command(subcommand)]
    Approvals(cmd::approvals::ApprovalsCommand),
    /// Run the duplicate rules now and print what they find (recorded once, as the
    /// gateway's scheduler records them).
    Detect(cmd::detect::DetectArgs),
    /// List and clear holds on a running gateway (admin).
    #[command(subcommand)]
    Holds(cmd::holds::HoldsCommand),
    /// List limits' budgets, and reconcile one refused because its reservations
    /// disagree with its ledger, on a running gateway (admin).
    #[command(subcommand)]
    Limits(cmd::limits::LimitsCommand),
    /// List and clear doubts about providers on a running gateway (admin): reads that
    /// could not find an applied effect, idempotency keys not honoured.
    #[command(subcommand)]
    Doubts(cmd::doubts::DoubtsCommand),
    /// List fronted MCP servers' pinned tool definitions and accept a changed one on a
    /// running gateway (admin): a changed tool is held until accepted.
    #[command(subcommand)]
    Tools(cmd::tools::ToolsCommand),
    /// Measure what the gateway costs next to its upstream and the raw store floor.
    Bench(cmd::bench::BenchArgs),
    /// Bridge a stdio MCP client (a desktop app) to a gateway's /mcp.
    Connect(cmd::connect::ConnectArgs),
}

pub fn run() -> ExitCode {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let cli = Cli::parse();
    // `serve` reads its registry before the log is set up: `[telemetry]` decides whether
    // an exporter is a layer of the one subscriber (and the exporter's blocking client
    // must be built before the async runtime starts).
    let (serving, exporter) = match &cli.command {
        Command::Serve(args) => match load(args.config()).and_then(|registry| {
            let exporter = telemetry::Exporter::start(&registry.telemetry)?;
            Ok((Some(registry), exporter))
        }) {
            Ok(loaded) => loaded,
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::FAILURE;
            }
        },
        _ => (None, None),
    };
    let log = tracing_subscriber::EnvFilter::try_from_env("ONCEGATE_LOG")
        // The demo's alerts are the point of the scenarios: its table says so. rmcp
        // reports agents that close their streams (routine for a gateway, and recorded by
        // oncegate itself) as errors: off unless asked for with ONCEGATE_LOG=rmcp=debug.
        .unwrap_or_else(|_| {
            if matches!(
                cli.command,
                Command::Demo(_) | Command::Verify(_) | Command::Bench(_)
            ) {
                "error,rmcp=off".into()
            } else {
                "warn,rmcp=off".into()
            }
        });
    // What the gateway fills in from its environment never reaches the log, nor any
    // URL's userinfo or query, whichever crate formatted the line.
    let secrets = serving
        .as_ref()
        .map(oncegate_gateway::server::registry_secrets)
        .unwrap_or_default();
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(logging::RedactedStderr::new(secrets))
                .with_filter(log),
        )
        .with(exporter.as_ref().map(telemetry::Exporter::layer))
        .init();
    let result = match cli.command {
        Command::CheckConfig(args) => cmd::check_config::run(&args),
        Command::Keys(c) => cmd::keys::run(c),
        Command::Intents(c) => runtime().and_then(|rt| rt.block_on(cmd::intents::run(c))),
        Command::Audit(c) => runtime().and_then(|rt| rt.block_on(cmd::audit::run(c))),
        Command::Demo(a) => runtime().and_then(|rt| rt.block_on(cmd::demo::run(a))),
        Command::Verify(a) => runtime().and_then(|rt| rt.block_on(cmd::verify::run(a))),
        Command::Serve(a) => {
            let registry = serving.expect("serve's registry is loaded above");
            runtime().and_then(|rt| rt.block_on(cmd::serve::run(a, registry)))
        }
        Command::Init(a) => runtime().and_then(|rt| rt.block_on(cmd::init::init(a))),
        Command::Migrate(a) => runtime().and_then(|rt| rt.block_on(cmd::migrate::migrate(a))),
        Command::Sandbox(a) => runtime().and_then(|rt| rt.block_on(cmd::sandbox::run(a))),
        Command::Approvals(c) => runtime().and_then(|rt| rt.block_on(cmd::approvals::run(c))),
        Command::Detect(a) => runtime().and_then(|rt| rt.block_on(cmd::detect::run(a))),
        Command::Holds(c) => runtime().and_then(|rt| rt.block_on(cmd::holds::run(c))),
        Command::Limits(c) => runtime().and_then(|rt| rt.block_on(cmd::limits::run(c))),
        Command::Doubts(c) => runtime().and_then(|rt| rt.block_on(cmd::doubts::run(c))),
        Command::Tools(c) => runtime().and_then(|rt| rt.block_on(cmd::tools::run(c))),
        Command::Bench(a) => runtime().and_then(|rt| rt.block_on(cmd::bench::run(a))),
        Command::Connect(a) => runtime().and_then(|rt| rt.block_on(cmd::connect::run(a))),
    };
    // After the runtime is gone: what is still queued is sent now.
    if let Some(exporter) = exporter {
        exporter.shutdown();
    }
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
