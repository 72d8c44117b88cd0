//! `oncegate serve`: the gateway.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use oncegate_core::Registry;
use oncegate_engine::Gate;
use oncegate_gateway::server::{AppState, app, http_client, null_app, serve_router};

use crate::registry::ConfigArg;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Listen address (default: the config's `gateway.listen`); port 0 picks a free one.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// How often unknown intents are reconciled in the background, e.g. "5s".
    #[arg(long, default_value = "5s")]
    sweep_every: String,
    /// Create the store if it is missing (first starts, scratch use). Without it a
    /// missing or empty store stops the gateway: it may be a lost volume. Do not leave
    /// it in a service definition.
    #[arg(long)]
    init: bool,
    /// Serve a store that is behind the anchor its server keeps beside it, because it
    /// was restored from a backup on purpose. Intents the store does not know (or knows
    /// only as not applied) are read from the provider, or held for approval, before
    /// anything executes, for as long as their replay window lasts. Once: the next start
    /// checks the anchor again.
    #[arg(long)]
    accept_rollback: bool,
    /// `oncegate bench` only: serve `POST /v1/calls` as a null gateway (authenticate and
    /// forward to the upstream, with no decision, no key and no store): the floor the
    /// bench compares the gateway with. Never for real traffic.
    #[arg(long, hide = true)]
    null_gateway: bool,
}

impl ServeArgs {
    /// The registry file.
    pub fn config(&self) -> &std::path::Path {
        &self.config.config
    }
}

/// Serves `registry` (read from [`ServeArgs::config`] before the log was set up, see
/// `crate::run`).
pub async fn run(args: ServeArgs, registry: Registry) -> anyhow::Result<ExitCode> {
    let sweep_every: jiff::SignedDuration = args
        .sweep_every
        .parse()
        .with_context(|| format!("--sweep-every `{}` is not a duration", args.sweep_every))?;
    let listen = args.listen.unwrap_or(registry.gateway.listen);
    let mode = if args.init {
        oncegate_store::OpenMode::CreateIfMissing
    } else {
        oncegate_store::OpenMode::Existing
    };
    // Serving makes this process the store's server: a second `serve` on the same
    // SQLite file is refused (the embedded store is single-process; replicas share a
    // PostgreSQL). `audit`, `intents` and `approvals` open it beside a running server.
    let serving = oncegate_store::Serving {
        accept_rollback: args.accept_rollback,
    };
    let store = crate::registry::open_serving_store(&registry, mode, serving).await?;
    // The same probe as `check-config --probe`, in the background: an unreachable
    // upstream must not keep the gateway from serving the others, but an operator
    // should read at startup what the first call would otherwise reveal.
    let probed = registry.clone();
    tokio::spawn(async move {
        for f in oncegate_gateway::probe::probe(&probed, http_client()).await {
            if let Some(problem) = &f.problem {
                tracing::warn!(
                    capability = %f.capability,
                    part = f.part,
                    target = %f.target,
                    problem = %problem,
                    "probe: {}",
                    f.line()
                );
            }
        }
    });
    let gate = Gate::on_store(registry, store);
    let (state, missing) = AppState::new(gate, http_client());
    for m in &missing {
        eprintln!("warning: principal {m}: token variable not set, this principal cannot log in");
    }
    let issuers = state
        .gate()
        .registry()
        .identity
        .as_ref()
        .map_or(0, |i| i.issuers.len());
    anyhow::ensure!(
        state.principal_count() > 0 || issuers > 0,
        "no principal can log in: set the token variables named by `token_env` in the config, or trust an issuer in [identity]"
    );
    // Fronted servers' tools are listed from the first request (one that cannot be read
    // is retried in the background, its tools refused until then).
    oncegate_gateway::fronted::read_all(&state).await;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    crate::output::emit(&format!("oncegate listening on http://{addr}\n"));
    let router = if args.null_gateway {
        tracing::warn!("serving as a null gateway (bench only): calls are forwarded undecided");
        null_app(state.clone())
    } else {
        app(state.clone())
    };
    serve_router(
        listener,
        state,
        router,
        sweep_every.unsigned_abs().max(Duration::from_millis(100)),
        shutdown_signal(),
    )
    .await?;
    eprintln!("oncegate: stopped (in-flight calls finished and were recorded)");
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
