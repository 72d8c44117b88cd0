//! How many round trips a PostgreSQL commit makes, counted on the wire: the store talks
//! to the real server through a byte-for-byte relay that counts the statements the
//! client sends (an extended-protocol batch that executes something, up to its `Sync`,
//! or a simple `Query`: each is one wait for the server's answer). A bare `Sync` is
//! sqlx's ping, which it sends as a connection goes back to the pool, after the caller
//! has its answer: counted apart.
//!
//! Before issue 35 a plain commit (an intent row and its audit record) made about nine:
//! BEGIN, `now()`, the shard head's upsert and its lock, the replaced row and its seal,
//! the row write, the audit insert, the head update, COMMIT. It makes two now, and a
//! load one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use jiff::Timestamp;
use oncegate_core::audit::{AuditEvent, AuditKind};
use oncegate_core::intent::IntentState;
use oncegate_store::conformance::sample_record;
use oncegate_store::{Commit, IntentsRead, IntentsWrite, OpenMode, PgStore, StoreOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::postgres::TestDb;

/// What the relay counts: statements (round trips on the caller's path) and pings.
#[derive(Clone, Default)]
struct Trips {
    statements: Arc<AtomicUsize>,
    pings: Arc<AtomicUsize>,
}

impl Trips {
    /// The statements and pings since the last take.
    fn take(&self) -> (usize, usize) {
        (
            self.statements.swap(0, Ordering::SeqCst),
            self.pings.swap(0, Ordering::SeqCst),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_postgres_commit_makes_two_round_trips_and_a_load_one() {
    let db = TestDb::create().await;
    let (server_host, rest) = host_of(&db.url);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_at = listener.local_addr().unwrap();
    let trips = Trips::default();
    tokio::spawn(relay(listener, server_host, trips.clone()));
    let (before, after) = rest;
    let sep = if after.contains('?') { '&' } else { '?' };
    let url = format!("{before}{relay_at}{after}{sep}sslmode=disable");
    let options = StoreOptions {
        // One connection: every statement is prepared once on it, by the warm-up.
        pool_size: 1,
        ..StoreOptions::default()
    };
    let store = PgStore::open(&url, OpenMode::CreateIfMissing, options)
        .await
        .unwrap();

    let intent = async |n: u64| {
        let key = format!("{n:04x}");
        let rec = sample_record(&key, 1);
        store
            .commit(Commit::new(Some(rec.clone()), None, event(&key, n)))
            .await
            .unwrap();
        let mut settled = rec;
        settled.version = 1;
        settled.state = IntentState::Applied;
        store
            .commit(Commit::new(Some(settled), None, event(&key, n)))
            .await
            .unwrap();
    };
    intent(0).await;
    let first = oncegate_core::key::IntentKey::from_hex("0000");
    store.load(&first).await.unwrap().expect("committed above");
    trips.take();
    let started = std::time::Instant::now();
    let intents = 20;
    for n in 1..=intents {
        intent(n).await;
    }
    let (counted, pings) = trips.take();
    // The store samples the database's clock once a second on its connection too.
    let samples = started.elapsed().as_secs() as usize + 1;
    let commits = 2 * intents as usize;
    eprintln!(
        "{commits} commits: {counted} round trips ({:.2} a commit), {pings} pings on release",
        counted as f64 / commits as f64
    );
    assert!(
        counted >= 2 * commits && counted <= 2 * commits + samples,
        "{counted} round trips for {commits} commits: two each expected"
    );
    assert!(
        pings <= commits + samples,
        "{pings} pings for {commits} commits: at most one each, as the connection goes back"
    );

    // A load is one statement too (it was BEGIN, the row, the newest sealed generation,
    // the row's seal, ROLLBACK).
    let started = std::time::Instant::now();
    for n in 1..=intents {
        let key = oncegate_core::key::IntentKey::from_hex(format!("{n:04x}"));
        let loaded = store.load(&key).await.unwrap().expect("committed above");
        assert_eq!(loaded.state, IntentState::Applied);
    }
    let (counted, _) = trips.take();
    let samples = started.elapsed().as_secs() as usize + 1;
    eprintln!("{intents} loads: {counted} round trips");
    assert!(
        counted >= intents as usize && counted <= intents as usize + samples,
        "{counted} round trips for {intents} loads: one each expected"
    );
    store.close().await;
    db.drop().await;
}

fn event(key: &str, n: u64) -> AuditEvent {
    AuditEvent {
        at: Timestamp::now(),
        kind: AuditKind::Call,
        key: Some(oncegate_core::key::IntentKey::from_hex(key)),
        generation: 1,
        capability: Some("charge_card".into()),
        actor: "planner".into(),
        run_id: None,
        from: None,
        to: Some(IntentState::InFlight),
        status: None,
        code: None,
        detail: serde_json::json!({"n": n}),
    }
}

/// The URL's `host:port`, and what comes before and after it.
fn host_of(url: &str) -> (String, (String, String)) {
    let start = url.find("://").unwrap() + 3;
    let start = url[start..].find('@').map_or(start, |at| start + at + 1);
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    let mut host = url[start..end].to_owned();
    if !host.contains(':') {
        host.push_str(":5432");
    }
    (host, (url[..start].to_owned(), url[end..].to_owned()))
}

/// Relays every connection to `server`, counting what the client sends ([`count`]).
async fn relay(listener: TcpListener, server: String, trips: Trips) {
    while let Ok((client, _)) = listener.accept().await {
        let server = TcpStream::connect(&server).await.unwrap();
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        });
        let trips = trips.clone();
        tokio::spawn(async move {
            let mut pending = Vec::new();
            let mut started = false;
            let mut executes = false;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match client_read.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if server_write.write_all(&buf[..n]).await.is_err() {
                    return;
                }
                pending.extend_from_slice(&buf[..n]);
                count(&mut pending, &mut started, &mut executes, &trips);
            }
        });
    }
}

/// Consumes the whole messages at the front of `pending`: first the untyped startup
/// message, then typed ones (a type byte, then a length that counts itself). `executes`
/// says whether the batch since the last `Sync` executed a statement.
fn count(pending: &mut Vec<u8>, started: &mut bool, executes: &mut bool, trips: &Trips) {
    loop {
        let header = usize::from(*started);
        if pending.len() < header + 4 {
            return;
        }
        let len = u32::from_be_bytes(pending[header..header + 4].try_into().unwrap()) as usize;
        if pending.len() < header + len {
            return;
        }
        if !*started {
            *started = true;
        } else {
            match pending[0] {
                b'Q' => {
                    trips.statements.fetch_add(1, Ordering::SeqCst);
                }
                b'E' | b'P' => *executes = true,
                b'S' if std::mem::take(executes) => {
                    trips.statements.fetch_add(1, Ordering::SeqCst);
                }
                b'S' => {
                    trips.pings.fetch_add(1, Ordering::SeqCst);
                }
                _ => {}
            }
        }
        pending.drain(..header + len);
    }
}
