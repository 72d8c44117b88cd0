//! Throttled guessing: failed authentications (bearer tokens on `/v1` and `/mcp`,
//! console sign-ins) are counted per client address and per presented principal, each
//! in a bucket of `gateway.auth_failures_per_minute` that refills at that rate.
//!
//! - An address whose bucket is empty is refused with 429 `OG-0057` *before its token
//!   is checked*, so the guesses it sends learn nothing until the bucket refills. A
//!   connection that has already authenticated is exempt: a legitimate agent that
//!   shares the attacker's address (a NAT, a proxy, loopback) keeps its pooled
//!   connection and is never slowed. Only a new connection from that address waits.
//! - A principal named by a JWT that failed (its unverified `iss` and principal claim)
//!   gets its own bucket; when it is empty, that principal's failures are answered 429
//!   too, but its tokens are still checked: a JWT's signature cannot be guessed, and
//!   refusing them unchecked would let anyone lock a user out by naming them.
//!
//! Successes never count. The counts live in this process's memory (a replica counts
//! its own), bounded by [`MAX_TRACKED`]; IPv6 addresses count by their /64, the block a
//! single host is usually given.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// How many addresses and principals are tracked at once. Past it, buckets that have
/// refilled are dropped first; if none has, the oldest is.
pub const MAX_TRACKED: usize = 65_536;

/// The client end of a connection, put on each of its requests by the accept loop.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The client's address.
    pub addr: SocketAddr,
    /// Set once a request on this connection authenticated.
    proven: Arc<AtomicBool>,
}

impl Peer {
    /// A new connection from `addr`, not yet authenticated.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            proven: Arc::new(AtomicBool::new(false)),
        }
    }

    fn proven(&self) -> bool {
        self.proven.load(Ordering::Relaxed)
    }
}

tokio::task_local! {
    /// The connection the request being handled came on (set by [`with_peer`]).
    static PEER: Peer;
}

/// Middleware: makes the request's [`Peer`] (when the accept loop set one) known to
/// the authentication below it, whichever surface's handler authenticates.
pub async fn with_peer(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match request.extensions().get::<Peer>().cloned() {
        Some(peer) => PEER.scope(peer, next.run(request)).await,
        None => next.run(request).await,
    }
}

/// The connection of the request being handled, if the accept loop named it.
pub(crate) fn current_peer() -> Option<Peer> {
    PEER.try_with(Clone::clone).ok()
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Subject {
    /// An IPv4 address, or an IPv6 /64 (the low 64 bits cleared).
    Address(IpAddr),
    Principal(String),
}

impl Subject {
    fn address(ip: IpAddr) -> Self {
        Subject::Address(crate::connections::client_block(ip))
    }
}

struct Bucket {
    tokens: f64,
    last: Instant,
    /// Whether "throttled" was logged since the bucket last had tokens (one line per
    /// episode, not one per guess).
    logged: bool,
}

/// Why an attempt is refused before its token is checked.
#[derive(Debug)]
pub struct Throttled {
    /// When the bucket has a token again.
    pub retry_after: Duration,
}

/// The failure buckets.
pub struct AuthThrottle {
    per_minute: u32,
    buckets: Mutex<HashMap<Subject, Bucket>>,
}

impl AuthThrottle {
    /// `per_minute` failures allowed per address and per principal (also the burst);
    /// 0 turns throttling off.
    pub fn new(per_minute: u32) -> Self {
        Self {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn rate(&self) -> f64 {
        f64::from(self.per_minute) / 60.0
    }

    /// The tokens `subject`'s bucket holds now (refilled), without creating it.
    fn level(
        &self,
        buckets: &mut HashMap<Subject, Bucket>,
        subject: &Subject,
        now: Instant,
    ) -> f64 {
        let cap = f64::from(self.per_minute);
        match buckets.get_mut(subject) {
            None => cap,
            Some(b) => {
                let refill = now.saturating_duration_since(b.last).as_secs_f64() * self.rate();
                b.tokens = (b.tokens + refill).min(cap);
                b.last = now;
                if b.tokens >= 1.0 {
                    b.logged = false;
                }
                b.tokens
            }
        }
    }

    fn wait(&self, level: f64) -> Duration {
        Duration::from_secs_f64(((1.0 - level) / self.rate()).max(0.0)).max(Duration::from_secs(1))
    }

    /// Whether an attempt from `peer` may be checked: refused when its address has no
    /// failures left and its connection has not authenticated before.
    pub fn admit(&self, peer: Option<&Peer>) -> Result<(), Throttled> {
        let Some(peer) = peer.filter(|p| self.per_minute > 0 && !p.proven()) else {
            return Ok(());
        };
        let subject = Subject::address(peer.addr.ip());
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let level = self.level(&mut buckets, &subject, Instant::now());
        if level >= 1.0 {
            return Ok(());
        }
        metrics::counter!("oncegate_auth_throttled_total", "by" => "address").increment(1);
        if let Some(b) = buckets.get_mut(&subject)
            && !b.logged
        {
            b.logged = true;
            tracing::warn!(address = %peer.addr.ip(), per_minute = self.per_minute, "authentication throttled: too many failed attempts from this address; its new connections are refused until the count refills");
        }
        Err(Throttled {
            retry_after: self.wait(level),
        })
    }

    /// Records a failed attempt from `peer` naming `principal` (a JWT's, unverified).
    /// `Err` when the principal's failures are now over the budget (the attempt is
    /// answered 429 rather than 401).
    pub fn failed(&self, peer: Option<&Peer>, principal: Option<&str>) -> Result<(), Throttled> {
        metrics::counter!("oncegate_auth_failures_total").increment(1);
        if self.per_minute == 0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let subjects = peer
            .map(|p| Subject::address(p.addr.ip()))
            .into_iter()
            .chain(principal.map(|p| Subject::Principal(p.to_owned())));
        let mut over = None;
        for subject in subjects {
            let level = self.level(&mut buckets, &subject, now);
            if !buckets.contains_key(&subject) {
                self.make_room(&mut buckets, now);
            }
            let bucket = buckets.entry(subject.clone()).or_insert(Bucket {
                tokens: level,
                last: now,
                logged: false,
            });
            bucket.tokens = (bucket.tokens - 1.0).max(-1.0);
            if let Subject::Principal(name) = &subject
                && bucket.tokens < 0.0
            {
                metrics::counter!("oncegate_auth_throttled_total", "by" => "principal")
                    .increment(1);
                if !bucket.logged {
                    bucket.logged = true;
                    tracing::warn!(principal = %name, per_minute = self.per_minute, "authentication throttled: too many failed tokens naming this principal");
                }
                over = Some(Throttled {
                    retry_after: self.wait(bucket.tokens),
                });
            }
        }
        over.map_or(Ok(()), Err)
    }

    /// Marks `peer`'s connection as authenticated: it is never refused unchecked again.
    pub fn succeeded(&self, peer: Option<&Peer>) {
        if let Some(peer) = peer {
            peer.proven.store(true, Ordering::Relaxed);
        }
    }

    /// Keeps the map under [`MAX_TRACKED`]: refilled buckets go first, then the one
    /// touched longest ago.
    fn make_room(&self, buckets: &mut HashMap<Subject, Bucket>, now: Instant) {
        if buckets.len() < MAX_TRACKED {
            return;
        }
        let cap = f64::from(self.per_minute);
        let rate = self.rate();
        buckets.retain(|_, b| {
            b.tokens + now.saturating_duration_since(b.last).as_secs_f64() * rate < cap
        });
        if buckets.len() >= MAX_TRACKED
            && let Some(oldest) = buckets
                .iter()
                .min_by_key(|(_, b)| b.last)
                .map(|(s, _)| s.clone())
        {
            buckets.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(ip: &str) -> Peer {
        Peer::new(SocketAddr::new(ip.parse().unwrap(), 40000))
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_is_refused_after_its_budget_until_it_refills() {
        let t = AuthThrottle::new(3);
        let p = peer("10.0.0.1");
        for _ in 0..3 {
            t.admit(Some(&p)).unwrap();
            t.failed(Some(&p), None).unwrap();
        }
        let refused = t.admit(Some(&p)).unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_secs(20));
        // Another address, and a connection that authenticated, are not refused.
        t.admit(Some(&peer("10.0.0.2"))).unwrap();
        let pooled = peer("10.0.0.1");
        t.succeeded(Some(&pooled));
        t.admit(Some(&pooled)).unwrap();
        tokio::time::advance(Duration::from_secs(20)).await;
        t.admit(Some(&p)).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn ipv6_addresses_count_by_their_64_and_mapped_v4_as_v4() {
        let t = AuthThrottle::new(1);
        t.failed(Some(&peer("2001:db8::1")), None).unwrap();
        assert!(t.admit(Some(&peer("2001:db8::ffff:2"))).is_err());
        assert!(t.admit(Some(&peer("2001:db8:0:1::1"))).is_ok());
        t.failed(Some(&peer("::ffff:10.1.1.1")), None).unwrap();
        assert!(t.admit(Some(&peer("10.1.1.1"))).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_principal_over_budget_is_answered_429_but_never_refused_unchecked() {
        let t = AuthThrottle::new(2);
        assert!(t.failed(None, Some("idp:alice")).is_ok());
        assert!(t.failed(None, Some("idp:alice")).is_ok());
        assert!(t.failed(None, Some("idp:alice")).is_err());
        // Admission looks at addresses only.
        assert!(t.admit(None).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn zero_turns_it_off() {
        let t = AuthThrottle::new(0);
        let p = peer("10.0.0.1");
        for _ in 0..100 {
            t.failed(Some(&p), Some("x")).unwrap();
        }
        t.admit(Some(&p)).unwrap();
    }
}
