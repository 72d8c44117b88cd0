//! What an upstream MCP server says while a call runs, relayed to the agents waiting on
//! that call's intent: progress (under each agent's own `progressToken`), log lines
//! (from the level each agent asked for, and only when they can be told to be that
//! intent's), and the server's tool-list changes for a client that watches.
//!
//! Split from the client (`super`) because it is the one part that decides who hears
//! what: an agent must never read another intent's progress or log.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::ClientHandler;
// MCP logging is deprecated by SEP-2577; legacy clients still ask for it.
#[allow(deprecated)]
use rmcp::model::LoggingMessageNotificationParam;
use rmcp::model::{ClientConfig, ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleClient, RoleServer};

/// Where an upstream's progress and log notifications for an intent go: the agents'
/// requests waiting on that intent (their peer, their own `progressToken` if they gave
/// one, and the least severe log level they take). A route ends with the agent's
/// request, never with the upstream call.
#[derive(Clone, Default)]
pub struct ProgressRoutes(Arc<Mutex<ProgressMap>>);

type ProgressMap = HashMap<String, Vec<Waiting>>;

/// One agent request waiting on an intent.
#[derive(Clone)]
struct Waiting {
    id: u64,
    peer: Peer<RoleServer>,
    progress: Option<ProgressToken>,
    /// Log messages at least this severe reach it (`None`: none do).
    log_from: Option<u8>,
}

/// One agent request's route; dropped when the request ends.
pub struct ProgressRoute {
    routes: ProgressRoutes,
    key: String,
    id: u64,
}

/// A log level's rank, least severe first.
#[allow(deprecated)]
pub fn log_rank(level: rmcp::model::LoggingLevel) -> u8 {
    use rmcp::model::LoggingLevel as L;
    match level {
        L::Debug => 0,
        L::Info => 1,
        L::Notice => 2,
        L::Warning => 3,
        L::Error => 4,
        L::Critical => 5,
        L::Alert => 6,
        L::Emergency => 7,
    }
}

impl ProgressRoutes {
    /// Routes the upstream progress of intent `key` to `peer` as `progress` (if the
    /// agent asked for progress) and its log messages of rank `log_from` and up, while
    /// the returned route lives.
    pub fn route(
        &self,
        key: &str,
        peer: Peer<RoleServer>,
        progress: Option<ProgressToken>,
        log_from: Option<u8>,
    ) -> ProgressRoute {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        lock(&self.0)
            .entry(key.to_owned())
            .or_default()
            .push(Waiting {
                id,
                peer,
                progress,
                log_from,
            });
        ProgressRoute {
            routes: self.clone(),
            key: key.to_owned(),
            id,
        }
    }

    /// Relays one upstream notification to every agent waiting on `intent`, awaited in
    /// the task rmcp runs the notification in (no second task per agent).
    async fn relay(&self, intent: &str, params: ProgressNotificationParam) {
        let targets = lock(&self.0).get(intent).cloned().unwrap_or_default();
        for waiting in targets {
            let Some(token) = waiting.progress else {
                continue;
            };
            let mut relayed = params.clone();
            relayed.progress_token = token;
            relayed.meta = None;
            // The agent may have gone; its progress is best effort.
            let _ = waiting.peer.notify_progress(relayed).await;
        }
    }

    /// Relays one upstream log message to the agents waiting on `intent` that take
    /// messages of its level.
    #[allow(deprecated)]
    async fn relay_log(&self, intent: &str, params: LoggingMessageNotificationParam) {
        let rank = log_rank(params.level);
        let targets = lock(&self.0).get(intent).cloned().unwrap_or_default();
        for waiting in targets {
            if waiting.log_from.is_some_and(|from| rank >= from) {
                let mut relayed = params.clone();
                relayed.meta = None;
                let _ = waiting.peer.notify_logging_message(relayed).await;
            }
        }
    }
}

impl Drop for ProgressRoute {
    fn drop(&mut self) {
        let mut map = lock(&self.routes.0);
        if let Some(list) = map.get_mut(&self.key) {
            list.retain(|w| w.id != self.id);
            if list.is_empty() {
                map.remove(&self.key);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One upstream client's handler: the default client, plus progress relayed to agents.
/// rmcp names each request's progress with a token of its own (a counter per client),
/// so the client keeps which intent each of its running calls is for.
#[derive(Clone)]
pub(super) struct Relay {
    routes: ProgressRoutes,
    calls: Arc<Mutex<Calls>>,
    /// Woken when the server says its tool list changed (a watching client only).
    pub(super) tools_changed: Option<Arc<tokio::sync::Notify>>,
}

/// A client's requests: those running and those ended within [`LOG_GRACE`], and the
/// ended ones oldest first, so that pruning them costs only what has expired (a bind is
/// on every call's path).
#[derive(Default)]
struct Calls {
    by_token: HashMap<ProgressToken, Running>,
    ended: VecDeque<(Instant, ProgressToken)>,
}

impl Calls {
    fn prune(&mut self) {
        while let Some((at, _)) = self.ended.front()
            && at.elapsed() >= LOG_GRACE
        {
            if let Some((_, token)) = self.ended.pop_front() {
                self.by_token.remove(&token);
            }
        }
    }
}

/// One request on a client: the intent it is for (`None`: a read of the gateway's own,
/// such as a reconciliation).
struct Running {
    intent: Option<String>,
}

/// How long an ended request still counts for log lines: rmcp hands each notification
/// to a task of its own, so a line the server sent before its answer may be handled
/// after the call ended. Within this time it is still that call's (or nobody's).
const LOG_GRACE: Duration = Duration::from_secs(2);

/// A running request's entry in its client's [`Relay`]; queued to expire when it ends.
pub(super) struct Bound<'a>(&'a Relay, ProgressToken);

impl Relay {
    pub(super) fn new(routes: &ProgressRoutes) -> Self {
        Self {
            routes: routes.clone(),
            calls: Arc::default(),
            tools_changed: None,
        }
    }

    pub(super) fn bind(&self, token: ProgressToken, intent: Option<String>) -> Bound<'_> {
        let mut calls = lock(&self.calls);
        calls.prune();
        calls.by_token.insert(token.clone(), Running { intent });
        Bound(self, token)
    }

    /// The one intent this client's requests (running, or ended within the grace) are
    /// all for, if there is exactly one and no request of the gateway's own among them.
    fn sole_intent(&self) -> Option<String> {
        let mut calls = lock(&self.calls);
        calls.prune();
        let mut intents = calls.by_token.values().map(|r| r.intent.as_ref());
        let first = intents.next()??;
        intents.all(|i| i == Some(first)).then(|| first.clone())
    }
}

impl Drop for Bound<'_> {
    fn drop(&mut self) {
        lock(&self.0.calls)
            .ended
            .push_back((Instant::now(), self.1.clone()));
    }
}

impl ClientHandler for Relay {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::default()
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let intent = lock(&self.calls)
            .by_token
            .get(&params.progress_token)
            .and_then(|r| r.intent.clone());
        if let Some(intent) = intent {
            self.routes.relay(&intent, params).await;
        }
    }

    /// A log message has no request id: it is relayed when this client's requests (those
    /// running and those ended within [`LOG_GRACE`]) are all for one intent, so no
    /// agent ever reads another intent's log. Otherwise it goes to no one.
    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        match self.sole_intent() {
            Some(intent) => self.routes.relay_log(&intent, params).await,
            None => {
                tracing::debug!("an upstream log message not tied to one intent is not relayed")
            }
        }
    }

    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        if let Some(changed) = &self.tools_changed {
            changed.notify_one();
        }
    }
}
