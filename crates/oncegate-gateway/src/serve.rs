//! The accept loop: hyper driven directly (rather than through `axum::serve`) for the
//! connection caps, timeouts and eviction of [`crate::connections`] and the header read
//! timeout, the sweep beside it, and a graceful drain that lets running requests, and
//! the effects they started, finish and be recorded.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::connections::{Admitted, Connections, Ending};
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
    let router = app(state.clone());
    serve_router(listener, state, router, sweep_every, shutdown).await
}

/// [`serve`] with another router on the same state (the bench's null gateway,
/// [`crate::router::null_app`]).
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    state: AppState,
    router: axum::Router,
    sweep_every: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let sweeper = tokio::spawn(sweep(state.clone(), sweep_every));
    let detector = tokio::spawn(crate::detection_scheduler::detect_loop(
        state.clone(),
        Duration::from_secs(1),
    ));
    let deliverer = tokio::spawn(crate::detection_scheduler::deliver_loop(
        state.clone(),
        Duration::from_millis(500),
    ));
    let fronting = tokio::spawn(crate::fronted::front_servers(state.clone()));
    let skew = tokio::spawn(crate::clock::watch(state.clone()));
    let inflight = state.inflight().clone();
    let state_shutdown = state.mcp_shutdown().clone();
    let files = crate::connections::raise_file_limit();
    let connections = Arc::new(Connections::new(
        state.gate().registry().gateway.connections.clone(),
        files,
    ));
    let settings = connections.settings().clone();
    drop(state);
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(settings.http2_keep_alive)
        .keep_alive_timeout(settings.http2_keep_alive);
    let builder = Arc::new(builder);
    let draining = CancellationToken::new();
    let mut accept_errors = AcceptErrors::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, addr) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: make room by closing a
                        // connection that never spoke, back off, keep serving.
                        accept_errors.failed(&e);
                        if !connections.shed_one() {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        continue;
                    }
                };
                // Answers streamed in several writes (MCP, SSE) must not wait on
                // Nagle for the client's delayed ACK (40 ms).
                let _ = stream.set_nodelay(true);
                let Some(admitted) = connections.admit(addr) else {
                    // Every connection in the way is busy: refuse this one (closed here).
                    continue;
                };
                tokio::spawn(connection(
                    stream,
                    addr,
                    admitted,
                    Arc::clone(&builder),
                    router.clone(),
                    settings.clone(),
                    draining.clone(),
                ));
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    // MCP sessions hold streams open; end them so the connections can close.
    state_shutdown.cancel();
    draining.cancel();
    connections.drained().await;
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

/// One connection's life: its first byte within the timeout, then hyper, until the
/// client closes it, it is evicted, it idles out, or the gateway drains.
async fn connection(
    stream: tokio::net::TcpStream,
    addr: SocketAddr,
    admitted: Admitted,
    builder: Arc<Builder<TokioExecutor>>,
    router: axum::Router,
    settings: oncegate_core::config::ConnectionSettings,
    draining: CancellationToken,
) {
    let first =
        crate::connections::first_byte(&stream, settings.first_byte_timeout, &admitted.evicted);
    tokio::select! {
        spoke = first => if spoke.is_err() { return },
        () = draining.cancelled() => return,
    }
    // Every request names its connection (for the authentication throttle) and counts
    // as running on it until its response body ends (for the idle timeout and eviction).
    let peer = crate::throttle::Peer::new(addr);
    let activity = Arc::clone(&admitted.activity);
    let service = tower::service_fn(
        move |mut request: axum::http::Request<hyper::body::Incoming>| {
            let running = activity.begin();
            request.extensions_mut().insert(peer.clone());
            let response = router.clone().oneshot(request);
            async move {
                let response = response.await?;
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    Body::new(body.map_frame(move |frame| {
                        let _running = &running;
                        frame
                    }))
                }))
            }
        },
    );
    let connection = builder
        .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service));
    let mut connection = std::pin::pin!(connection);
    let mut closing = false;
    loop {
        tokio::select! {
            ended = connection.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            ending = crate::connections::let_go(&admitted, settings.idle_timeout), if !closing => {
                if ending == Ending::Evicted && !admitted.activity_requested() {
                    // Never spoke a whole request: nothing to finish.
                    return;
                }
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
            () = draining.cancelled(), if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
        }
    }
}

/// Accept failures, logged at most once a second with how many there were.
#[derive(Default)]
struct AcceptErrors {
    last_logged: Option<tokio::time::Instant>,
    since: u64,
}

impl AcceptErrors {
    fn failed(&mut self, error: &std::io::Error) {
        metrics::counter!("oncegate_connections_refused_total", "cap" => "accept_failed")
            .increment(1);
        self.since += 1;
        let now = tokio::time::Instant::now();
        if self
            .last_logged
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
        {
            tracing::warn!(error = %error, failures = self.since, "accept failed");
            self.last_logged = Some(now);
            self.since = 0;
        }
    }
}
