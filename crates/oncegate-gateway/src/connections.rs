//! Connections: how many the gateway holds, and which it lets go under pressure.
//!
//! A connection costs a file descriptor and some memory before it has said a word, so
//! an unauthenticated client can exhaust them. The accept loop therefore
//!
//! - admits at most `max` connections, and `per_address` from one client address (an
//!   IPv4 address or an IPv6 /64);
//! - at either cap, makes room by closing first the oldest connection that has not sent
//!   a whole request yet, then the one idle longest (no request running): a caller that
//!   shares the attacker's address (a NAT, a proxy, loopback) and sends its request at
//!   once always gets in, as long as the connections are not all busy with requests;
//!   only then is the new connection refused (`oncegate_connections_refused_total`);
//! - closes a connection that sends nothing for `first_byte_timeout` (whatever protocol
//!   it would speak: the HTTP/1 header timeout starts only once hyper knows the
//!   protocol), and one with no request running for `idle_timeout`; HTTP/2 connections
//!   are pinged every `http2_keep_alive` and closed when a ping goes unanswered.
//!
//! A connection's requests are counted from their head to the end of their response
//! body, so a long MCP stream is busy, never idle.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncegate_core::config::ConnectionSettings;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// File descriptors kept for everything but client connections (the store, upstream
/// connections, log files), when the file limit lowers `max`.
pub const RESERVED_FILES: u64 = 256;

/// Why a connection was closed by the gateway rather than by its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// Evicted to make room, having never sent a whole request.
    NeverRequested,
    /// Evicted to make room, idle.
    Idle,
}

impl Closed {
    fn label(self) -> &'static str {
        match self {
            Closed::NeverRequested => "never_requested",
            Closed::Idle => "idle",
        }
    }
}

/// One open connection's activity, shared by its task and the requests on it.
#[derive(Debug)]
pub struct Activity {
    started: Instant,
    /// Requests whose head arrived.
    requests: AtomicU64,
    /// Requests whose response body has not ended yet.
    running: AtomicU64,
    /// Milliseconds after `started` of the last time `running` went to zero.
    idle_since_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            requests: AtomicU64::new(0),
            running: AtomicU64::new(0),
            idle_since_ms: AtomicU64::new(0),
        }
    }

    fn requested(&self) -> bool {
        self.requests.load(Ordering::Acquire) > 0
    }

    /// When the connection last became idle; `None` while a request runs.
    fn idle_since(&self) -> Option<Instant> {
        if self.running.load(Ordering::Acquire) > 0 {
            return None;
        }
        let ms = self.idle_since_ms.load(Ordering::Acquire);
        Some(self.started + Duration::from_millis(ms))
    }

    /// A request's head arrived; the returned guard ends it (hold it until the response
    /// body is done).
    pub fn begin(self: &Arc<Self>) -> RequestGuard {
        self.requests.fetch_add(1, Ordering::AcqRel);
        self.running.fetch_add(1, Ordering::AcqRel);
        RequestGuard(Arc::clone(self))
    }

    /// Resolves once no request has run for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let wait = match self.idle_since() {
                Some(since) => match (since + idle).checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return,
                },
                None => idle,
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// One running request: dropping it (when the response body ends) may make the
/// connection idle.
#[derive(Debug)]
pub struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let ms = u64::try_from(self.0.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.idle_since_ms.store(ms, Ordering::Release);
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

struct Entry {
    block: IpAddr,
    activity: Arc<Activity>,
    close: CancellationToken,
}

#[derive(Default)]
struct Open {
    next_id: u64,
    /// By accept order: the first is the oldest.
    entries: BTreeMap<u64, Entry>,
    per_block: HashMap<IpAddr, usize>,
}

impl Open {
    fn remove(&mut self, id: u64) -> Option<Entry> {
        let entry = self.entries.remove(&id)?;
        if let Some(n) = self.per_block.get_mut(&entry.block) {
            *n -= 1;
            if *n == 0 {
                self.per_block.remove(&entry.block);
            }
        }
        Some(entry)
    }

    /// The connection to close to make room (among `block`'s when given): the oldest
    /// that never sent a whole request, else the one idle longest.
    fn victim(&self, block: Option<IpAddr>) -> Option<(u64, Closed)> {
        let mine = self
            .entries
            .iter()
            .filter(|(_, e)| block.is_none_or(|b| e.block == b));
        let mut idle: Option<(u64, Instant)> = None;
        for (id, entry) in mine {
            if !entry.activity.requested() {
                return Some((*id, Closed::NeverRequested));
            }
            if let Some(since) = entry.activity.idle_since()
                && idle.is_none_or(|(_, best)| since < best)
            {
                idle = Some((*id, since));
            }
        }
        idle.map(|(id, _)| (id, Closed::Idle))
    }
}

/// The open connections and their caps.
pub struct Connections {
    settings: ConnectionSettings,
    open: Mutex<Open>,
    /// Woken when the last connection is forgotten.
    emptied: tokio::sync::Notify,
}

/// An admitted connection: its activity and the token that closes it. Dropping it
/// forgets the connection.
pub struct Admitted {
    id: u64,
    connections: Arc<Connections>,
    /// The connection's activity, for the requests on it.
    pub activity: Arc<Activity>,
    /// Cancelled when the connection is evicted.
    pub evicted: CancellationToken,
}

impl Admitted {
    /// Whether a whole request ever arrived on this connection.
    pub fn activity_requested(&self) -> bool {
        self.activity.requested()
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.connections.lock();
        open.remove(self.id);
        if open.entries.is_empty() {
            self.connections.emptied.notify_waiters();
        }
    }
}

/// The client's block: an IPv4 address, or an IPv6 /64 (the low 64 bits cleared), the
/// block a single host is usually given.
pub fn client_block(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
        v4 => v4,
    }
}

impl Connections {
    /// Caps and timeouts from `settings`, `max` lowered to what `files` (the process's
    /// file limit) leaves after [`RESERVED_FILES`].
    pub fn new(mut settings: ConnectionSettings, files: Option<u64>) -> Self {
        if let Some(files) = files {
            let room =
                usize::try_from(files.saturating_sub(RESERVED_FILES).max(1)).unwrap_or(usize::MAX);
            if room < settings.max {
                tracing::warn!(
                    configured = settings.max,
                    file_limit = files,
                    max = room,
                    "gateway.connections.max lowered to what the open-file limit allows"
                );
                settings.max = room;
            }
        }
        Self {
            settings,
            open: Mutex::new(Open::default()),
            emptied: tokio::sync::Notify::new(),
        }
    }

    /// The caps and timeouts in force.
    pub fn settings(&self) -> &ConnectionSettings {
        &self.settings
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves once no connection is open (after the accept loop stopped).
    pub async fn drained(&self) {
        loop {
            let emptied = self.emptied.notified();
            let mut emptied = std::pin::pin!(emptied);
            emptied.as_mut().enable();
            if self.open() == 0 {
                return;
            }
            emptied.await;
        }
    }

    /// How many connections are open.
    pub fn open(&self) -> usize {
        self.lock().entries.len()
    }

    /// Admits a connection from `addr`, closing another to make room when a cap is
    /// reached; `None`: every connection in the way is busy, refuse this one.
    pub fn admit(self: &Arc<Self>, addr: SocketAddr) -> Option<Admitted> {
        let block = client_block(addr.ip());
        let mut open = self.lock();
        let evict = |open: &mut Open, within: Option<IpAddr>| -> bool {
            let Some((id, why)) = open.victim(within) else {
                return false;
            };
            if let Some(entry) = open.remove(id) {
                entry.close.cancel();
                metrics::counter!("oncegate_connections_evicted_total", "reason" => why.label())
                    .increment(1);
            }
            true
        };
        if open.per_block.get(&block).copied().unwrap_or(0) >= self.settings.per_address
            && !evict(&mut open, Some(block))
        {
            drop(open);
            refused("per_address");
            return None;
        }
        if open.entries.len() >= self.settings.max && !evict(&mut open, None) {
            drop(open);
            refused("max");
            return None;
        }
        let id = open.next_id;
        open.next_id += 1;
        let activity = Arc::new(Activity::new());
        let evicted = CancellationToken::new();
        open.entries.insert(
            id,
            Entry {
                block,
                activity: Arc::clone(&activity),
                close: evicted.clone(),
            },
        );
        *open.per_block.entry(block).or_insert(0) += 1;
        Some(Admitted {
            id,
            connections: Arc::clone(self),
            activity,
            evicted,
        })
    }

    /// Makes room for a file descriptor (after the process ran out): closes the oldest
    /// connection that never sent a whole request, if any.
    pub fn shed_one(&self) -> bool {
        let mut open = self.lock();
        match open.victim(None) {
            Some((id, Closed::NeverRequested)) => {
                if let Some(entry) = open.remove(id) {
                    entry.close.cancel();
                    metrics::counter!("oncegate_connections_evicted_total", "reason" => "never_requested")
                        .increment(1);
                }
                true
            }
            _ => false,
        }
    }
}

fn refused(cap: &'static str) {
    metrics::counter!("oncegate_connections_refused_total", "cap" => cap).increment(1);
}

/// How a connection's life ended, as far as the gateway decided it.
#[derive(Debug, PartialEq, Eq)]
pub enum Ending {
    /// Closed by the client or the protocol.
    Finished,
    /// Silent past `first_byte_timeout`.
    Silent,
    /// Evicted to make room.
    Evicted,
    /// No request ran for `idle_timeout`.
    Idle,
}

/// Waits for the connection's first byte; `false`: it stayed silent past the timeout,
/// closed, or was evicted.
pub async fn first_byte(
    stream: &tokio::net::TcpStream,
    timeout: Duration,
    evicted: &CancellationToken,
) -> Result<(), Ending> {
    let mut byte = [0u8; 1];
    tokio::select! {
        peeked = tokio::time::timeout(timeout, stream.peek(&mut byte)) => match peeked {
            Ok(Ok(n)) if n > 0 => Ok(()),
            Ok(_) => Err(Ending::Finished),
            Err(_) => {
                metrics::counter!("oncegate_connections_closed_total", "reason" => "first_byte_timeout")
                    .increment(1);
                Err(Ending::Silent)
            }
        },
        () = evicted.cancelled() => Err(Ending::Evicted),
    }
}

/// Resolves when the connection should be let go: evicted, or idle for `idle`.
pub async fn let_go(admitted: &Admitted, idle: Duration) -> Ending {
    tokio::select! {
        () = admitted.evicted.cancelled() => Ending::Evicted,
        () = admitted.activity.idle_for(idle) => {
            metrics::counter!("oncegate_connections_closed_total", "reason" => "idle").increment(1);
            Ending::Idle
        }
    }
}

/// Raises the soft open-file limit to the hard one; returns the limit in force.
pub fn raise_file_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let soft = limit.current?;
    match limit.maximum {
        Some(hard) if hard > soft => {
            let raised = rustix::process::Rlimit {
                current: Some(hard),
                maximum: Some(hard),
            };
            match setrlimit(Resource::Nofile, raised) {
                Ok(()) => {
                    tracing::debug!(from = soft, to = hard, "open-file limit raised");
                    Some(hard)
                }
                Err(e) => {
                    tracing::warn!(error = %e, soft, hard, "could not raise the open-file limit");
                    Some(soft)
                }
            }
        }
        Some(_) => Some(soft),
        // No hard limit: keep the soft one, it is what accept() will hit.
        None => Some(soft),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(max: usize, per_address: usize) -> ConnectionSettings {
        ConnectionSettings {
            max,
            per_address,
            ..ConnectionSettings::default()
        }
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[tokio::test]
    async fn at_the_cap_the_oldest_silent_connection_makes_room_then_the_idle_one() {
        let connections = Arc::new(Connections::new(settings(3, 3), None));
        let a = connections.admit(addr("10.0.0.1:1")).unwrap();
        let b = connections.admit(addr("10.0.0.1:2")).unwrap();
        let c = connections.admit(addr("10.0.0.2:3")).unwrap();
        // `a` and `c` have spoken; `a` is done and idle, `c` still runs its request.
        drop(a.activity.begin());
        let _running = c.activity.begin();
        let d = connections.admit(addr("10.0.0.3:4")).unwrap();
        assert!(b.evicted.is_cancelled(), "the silent one goes first");
        assert!(!a.evicted.is_cancelled());
        drop(d.activity.begin());
        let _e = connections.admit(addr("10.0.0.3:5")).unwrap();
        assert!(
            a.evicted.is_cancelled(),
            "then the idle longest (a before d)"
        );
        assert!(!c.evicted.is_cancelled() && !d.evicted.is_cancelled());
        assert_eq!(connections.open(), 3);
    }

    #[tokio::test]
    async fn busy_connections_are_never_evicted_and_the_newcomer_is_refused() {
        let connections = Arc::new(Connections::new(settings(10, 2), None));
        let a = connections.admit(addr("[2001:db8::1]:1")).unwrap();
        let b = connections.admit(addr("[2001:db8::2]:1")).unwrap();
        let _ga = a.activity.begin();
        let _gb = b.activity.begin();
        assert!(
            connections.admit(addr("[2001:db8::3]:1")).is_none(),
            "one /64 is one address"
        );
        assert!(connections.admit(addr("[2001:db9::3]:1")).is_some());
        drop(b);
        assert!(connections.admit(addr("[2001:db8::3]:1")).is_some());
    }

    #[test]
    fn the_file_limit_lowers_the_cap() {
        let connections = Connections::new(settings(10_000, 1_000), Some(1_024));
        assert_eq!(connections.settings().max, 768);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_is_counted_from_the_end_of_the_last_request() {
        let connections = Arc::new(Connections::new(settings(10, 10), None));
        let a = connections.admit(addr("127.0.0.1:1")).unwrap();
        let guard = a.activity.begin();
        tokio::time::sleep(Duration::from_secs(100)).await;
        drop(guard);
        let started = Instant::now();
        assert_eq!(let_go(&a, Duration::from_secs(5)).await, Ending::Idle);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }
}
