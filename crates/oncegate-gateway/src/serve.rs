//! The accept loop: hyper driven directly (rather than through `axum::serve`) for its
//! per-connection header read timeout, the sweep beside it, and a graceful drain that
//! lets running requests, and the effects they started, finish and be recorded.

use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

use crate::router::app;
use crate::state::AppState;
use crate::sweep::sweep;

/// How long a client may take to send its request headers (slowloris guard).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves until `shutdown` resolves, then stops accepting and lets running requests
/// (and the effects they started) finish and be recorded.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    sweep_every: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let sweeper = tokio::spawn(sweep(state.clone(), sweep_every));
    let detector = tokio::spawn(crate::detection::detect_loop(
        state.clone(),
        Duration::from_secs(1),
    ));
    let deliverer = tokio::spawn(crate::detection::deliver_loop(
        state.clone(),
        Duration::from_millis(500),
    ));
    let fronting = tokio::spawn(crate::fronting::front_servers(state.clone()));
    let skew = tokio::spawn(crate::clock::watch(state.clone()));
    let inflight = state.inflight().clone();
    let state_shutdown = state.mcp_shutdown().clone();
    let router = app(state);
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, addr) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: back off, keep serving.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Every request names its connection, for the authentication throttle.
                let peer = crate::throttle::Peer::new(addr);
                let service = TowerToHyperService::new(tower::ServiceExt::map_request(
                    router.clone(),
                    move |mut request: axum::http::Request<hyper::body::Incoming>| {
                        request.extensions_mut().insert(peer.clone());
                        request
                    },
                ));
                let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
                let watched = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(e) = watched.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    // MCP sessions hold streams open; end them so the connections can close.
    state_shutdown.cancel();
    graceful.shutdown().await;
    // Callers that hung up left their effects running: record them before exiting.
    let left = inflight.drain(Duration::from_secs(60)).await;
    if left > 0 {
        tracing::error!(
            left,
            "exiting with effects still running; their intents read unknown after the lease and are reconciled"
        );
    }
    sweeper.abort();
    detector.abort();
    deliverer.abort();
    fronting.abort();
    skew.abort();
    Ok(())
}
