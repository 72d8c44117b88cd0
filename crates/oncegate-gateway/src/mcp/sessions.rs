//! 2025-11-25 MCP sessions in the store, so a session opened on one replica continues
//! on another (and on this one after a restart): rmcp's [`SessionStore`] and the
//! session's principal, through `SharedWrite::put_mcp_session` / `SharedRead::mcp_session`
//! / `SharedWrite::delete_mcp_session`, whatever the backend.
//!
//! A session is the client's `initialize` parameters (rmcp replays the handshake from
//! them when a request names a session this process does not hold) plus the principal
//! that opened it (the session binding `/mcp` enforces). Without this, every deploy,
//! and every request a load balancer sends to another replica, would answer 404 to a
//! connected legacy client, which today's SDKs surface as an error instead of
//! re-initialising.
//!
//! Owners are cached in memory for at most [`CONFIRM_EVERY`] (so a session ended on
//! another replica is refused here within a second); a miss reads the store. A session in use is touched in
//! the store every [`TOUCH_EVERY`], and sessions idle for longer than rmcp keeps an
//! idle session ([`IDLE`]) are pruned from it.
//!
//! Each principal holds at most `gateway.mcp_sessions_per_principal` live sessions in
//! one process: opening one more ends its least recently used session (closed in rmcp,
//! deleted from the store), never refuses the new one, so an agent that lost its
//! session id is never locked out. The ended session's next request is answered 404
//! with the reason (`oncegate_mcp_sessions_evicted_total` counts them). A session
//! idle past [`IDLE`] is closed in rmcp too when the cache drops it: rmcp's worker
//! ends at its keep-alive, but its handle stays in the manager's map until closed.
//! What one session costs inside rmcp (its worker task, channels and the handler) is
//! rmcp's; the cap is what bounds it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use oncegate_engine::{Clock, Gate};
use oncegate_store::{McpSession, SharedRead, SharedWrite, Store};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::session::{
    SessionManager, SessionState, SessionStore, SessionStoreError,
};

/// How long an unused session lives: rmcp's keep-alive of an idle session (the default
/// of the `LocalSessionManager` that `/mcp` runs).
pub const IDLE: SignedDuration =
    SignedDuration::from_secs(SessionConfig::DEFAULT_KEEP_ALIVE.as_secs() as i64);

/// How often a session in use is marked used in the store (and idle ones pruned): often
/// enough that a session in use is never pruned, rarely enough that a busy session is not
/// one store write per request.
pub const TOUCH_EVERY: SignedDuration = SignedDuration::from_secs(60);

/// How long a cached owner is trusted before the store is asked again: a session ended
/// (DELETE) on another replica is refused here within this long.
pub const CONFIRM_EVERY: SignedDuration = SignedDuration::from_secs(1);

/// How many ended sessions' ids are kept to tell their next request why.
const EVICTED_KEPT: usize = 4096;

/// Recently evicted session ids: a set to look up, a queue to forget the oldest.
#[derive(Default)]
struct Evicted {
    ids: HashSet<String>,
    order: VecDeque<String>,
}

/// Who opened each MCP session, and rmcp's session state: in the store, owners cached.
#[derive(Clone)]
pub struct Sessions {
    store: Store,
    clock: Arc<dyn Clock>,
    /// Session id -> the principal that opened it, when it was last used here, and when
    /// this process last marked it used in the store.
    owners: Arc<Mutex<HashMap<String, Cached>>>,
    /// When idle sessions were last pruned from the store.
    pruned: Arc<Mutex<Option<Timestamp>>>,
    /// rmcp's live sessions in this process: an evicted or idle one is closed there.
    manager: Arc<LocalSessionManager>,
    /// Live sessions one principal may hold in this process.
    per_principal: usize,
    /// Sessions recently ended to make room (at most [`EVICTED_KEPT`], oldest dropped
    /// first).
    evicted: Arc<Mutex<Evicted>>,
}

#[derive(Clone)]
struct Cached {
    principal: String,
    used: Timestamp,
    touched: Timestamp,
    /// When the store last said the session exists.
    confirmed: Timestamp,
}

impl Sessions {
    /// The sessions of a gateway on `gate`'s store (timed by its clock), rmcp's live
    /// ones in `manager`.
    pub fn of(gate: &Gate, manager: Arc<LocalSessionManager>) -> Self {
        let per_principal = gate.registry().gateway.mcp_sessions_per_principal;
        Self {
            store: gate.store().clone(),
            clock: gate.clock().clone(),
            owners: Arc::default(),
            pruned: Arc::default(),
            manager,
            per_principal: usize::try_from(per_principal).unwrap_or(usize::MAX),
            evicted: Arc::default(),
        }
    }

    /// rmcp's session manager these sessions live in.
    pub fn manager(&self) -> Arc<LocalSessionManager> {
        Arc::clone(&self.manager)
    }

    /// Whether session `id` was ended here to make room for a newer session of its
    /// principal (its next request is told so).
    pub fn was_evicted(&self, id: &str) -> bool {
        self.evicted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ids
            .contains(id)
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        self.owners.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The principal that opened a session (and marks it used); from the store when
    /// this process has not seen it (another replica opened it, or before a restart).
    /// `None` for a session nobody bound, or when the store cannot say (the session is
    /// then refused, never guessed).
    pub async fn owner(&self, id: &str) -> Option<String> {
        if !plausible(id) || self.was_evicted(id) {
            return None;
        }
        let now = self.clock.now();
        let touch = {
            let mut owners = self.owners();
            match owners.get_mut(id) {
                Some(cached)
                    if now.duration_since(cached.used) < IDLE
                        && now.duration_since(cached.confirmed) < CONFIRM_EVERY =>
                {
                    cached.used = now;
                    let due = now.duration_since(cached.touched) >= TOUCH_EVERY;
                    if due {
                        cached.touched = now;
                    }
                    Some((cached.principal.clone(), due))
                }
                _ => None,
            }
        };
        if let Some((principal, due)) = touch {
            if due {
                self.touch(id, now).await;
            }
            return Some(principal);
        }
        let stored = match self.store.mcp_session(id).await {
            Ok(stored) => stored?,
            Err(e) => {
                tracing::warn!(error = %e, "an MCP session's owner could not be read from the store; the request is refused");
                return None;
            }
        };
        if now.duration_since(stored.updated_at) >= IDLE {
            // Idle past rmcp's keep-alive: it would not have kept it either.
            return None;
        }
        let principal = stored.principal?;
        // Used now, here: mark it used in the store when that is due (another process,
        // or this one before the cache went stale, may have marked it recently).
        if now.duration_since(stored.updated_at) >= TOUCH_EVERY {
            self.touch(id, now).await;
        }
        let idle = self.remember(id, &principal, now);
        self.close_in_rmcp(idle);
        Some(principal)
    }

    /// Records who opened a session, in memory and in the store (and prunes idle ones
    /// at most every [`TOUCH_EVERY`]).
    pub async fn bind(&self, id: &str, principal: &str) {
        let now = self.clock.now();
        let idle = self.remember(id, principal, now);
        self.close_in_rmcp(idle);
        self.make_room(id, principal, now).await;
        let session = McpSession {
            id: id.to_owned(),
            principal: Some(principal.to_owned()),
            state: None,
            updated_at: now,
        };
        if let Err(e) = self.store.put_mcp_session(session).await {
            tracing::warn!(error = %e, "an MCP session's owner could not be stored; it is refused on other replicas and after a restart");
        }
        self.prune(now).await;
    }

    /// Forgets a session its owner ended (or rmcp no longer knows), here and in the
    /// store.
    pub async fn unbind(&self, id: &str) {
        self.owners().remove(id);
        if !plausible(id) {
            return;
        }
        let now = self.clock.now();
        if let Err(e) = self.store.delete_mcp_session(id, now - IDLE).await {
            tracing::warn!(error = %e, "an ended MCP session could not be removed from the store; it is pruned once idle");
        }
    }

    /// Cached owners idle longer than rmcp keeps an idle session are dropped here, so
    /// the map cannot grow without bound; their ids are returned, to be closed in rmcp.
    fn remember(&self, id: &str, principal: &str, now: Timestamp) -> Vec<String> {
        let mut owners = self.owners();
        let mut idle = Vec::new();
        owners.retain(|session, cached| {
            let live = now.duration_since(cached.used) < IDLE;
            if !live {
                idle.push(session.clone());
            }
            live
        });
        owners.insert(
            id.to_owned(),
            Cached {
                principal: principal.to_owned(),
                used: now,
                touched: now,
                confirmed: now,
            },
        );
        idle
    }

    /// Ends `principal`'s least recently used sessions while it holds more than
    /// `mcp_sessions_per_principal` (never `newest`, the one just opened).
    async fn make_room(&self, newest: &str, principal: &str, now: Timestamp) {
        let ended: Vec<String> = {
            let mut owners = self.owners();
            let mut held: Vec<(Timestamp, String)> = owners
                .iter()
                .filter(|(id, c)| c.principal == principal && id.as_str() != newest)
                .map(|(id, c)| (c.used, id.clone()))
                .collect();
            // The new session counts too: keep per_principal - 1 of the others.
            let over = (held.len() + 1).saturating_sub(self.per_principal);
            held.sort();
            held.truncate(over);
            for (_, id) in &held {
                owners.remove(id);
            }
            held.into_iter().map(|(_, id)| id).collect()
        };
        if ended.is_empty() {
            return;
        }
        {
            let mut evicted = self.evicted.lock().unwrap_or_else(|e| e.into_inner());
            for id in &ended {
                evicted.ids.insert(id.clone());
                evicted.order.push_back(id.clone());
            }
            while evicted.order.len() > EVICTED_KEPT {
                if let Some(old) = evicted.order.pop_front() {
                    evicted.ids.remove(&old);
                }
            }
        }
        metrics::counter!("oncegate_mcp_sessions_evicted_total").increment(ended.len() as u64);
        tracing::info!(%principal, ended = ended.len(), max = self.per_principal, "MCP sessions over the per-principal cap: least recently used ended");
        for id in &ended {
            if let Err(e) = self.store.delete_mcp_session(id, now - IDLE).await {
                tracing::warn!(error = %e, "an evicted MCP session could not be removed from the store; it is pruned once idle");
            }
        }
        self.close_in_rmcp(ended);
    }

    /// Closes sessions in rmcp (their worker, channels and handler; their handle in
    /// the manager's map), in the background: a busy worker does not delay the caller.
    fn close_in_rmcp(&self, ids: Vec<String>) {
        if ids.is_empty() {
            return;
        }
        let manager = Arc::clone(&self.manager);
        tokio::spawn(async move {
            for id in ids {
                let id: Arc<str> = id.into();
                if let Err(e) = manager.close_session(&id).await {
                    tracing::debug!(error = %e, "an MCP session could not be closed in rmcp");
                }
            }
        });
    }

    /// Marks a session used in the store (its `updated_at`), keeping what is stored.
    async fn touch(&self, id: &str, now: Timestamp) {
        let session = McpSession {
            id: id.to_owned(),
            principal: None,
            state: None,
            updated_at: now,
        };
        if let Err(e) = self.store.put_mcp_session(session).await {
            tracing::warn!(error = %e, "an MCP session could not be marked used in the store");
        }
    }

    /// Removes sessions idle past [`IDLE`] from the store, at most every
    /// [`TOUCH_EVERY`] per process.
    async fn prune(&self, now: Timestamp) {
        {
            let mut pruned = self.pruned.lock().unwrap_or_else(|e| e.into_inner());
            if pruned.is_some_and(|at| now.duration_since(at) < TOUCH_EVERY) {
                return;
            }
            *pruned = Some(now);
        }
        // No session has the empty id: this deletes only the idle ones.
        if let Err(e) = self.store.delete_mcp_session("", now - IDLE).await {
            tracing::warn!(error = %e, "idle MCP sessions could not be pruned from the store");
        }
    }
}

/// Only ids rmcp could have made (UUIDs) are looked up: nothing else reaches the store.
fn plausible(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

fn boxed(e: oncegate_store::StoreError) -> SessionStoreError {
    Box::new(e)
}

#[async_trait::async_trait]
impl SessionStore for Sessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        if !plausible(session_id) {
            return Ok(None);
        }
        let Some(stored) = self.store.mcp_session(session_id).await.map_err(boxed)? else {
            return Ok(None);
        };
        if self.clock.now().duration_since(stored.updated_at) >= IDLE {
            return Ok(None);
        }
        match stored.state {
            Some(state) => Ok(Some(serde_json::from_value(state)?)),
            None => Ok(None),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        if !plausible(session_id) {
            return Ok(());
        }
        let session = McpSession {
            id: session_id.to_owned(),
            principal: None,
            state: Some(serde_json::to_value(state)?),
            updated_at: self.clock.now(),
        };
        self.store.put_mcp_session(session).await.map_err(boxed)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.unbind(session_id).await;
        Ok(())
    }
}
