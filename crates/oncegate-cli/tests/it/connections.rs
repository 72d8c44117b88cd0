//! Nobody locks the door without a token: `oncegate serve` with small connection caps is
//! flooded from the address its legitimate caller shares (loopback) with connections
//! that never send a byte, HTTP/2 connections that send only the preface, and HTTP/1
//! requests whose headers never end. While the flood holds, `/healthz` and a real charge
//! on a new connection answer at once; the gateway's descriptors stay bounded by its
//! caps; the silent connections are evicted to make room or closed by the first-byte
//! and idle timeouts; the metrics count it all.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Setup, call, client, effects, spawn_logged};

const PER_ADDRESS: usize = 60;

/// The HTTP/2 connection preface (RFC 9113 §3.4), and nothing after it.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

/// Whether the gateway closed `stream` within `within` (EOF or a reset on read).
fn closed_by_gateway(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            // The HTTP/2 server's SETTINGS, pings and GOAWAY: keep reading.
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn an_idle_connection_flood_from_a_shared_address_never_locks_out_a_caller() {
    oncegate_gateway::server::install_crypto();
    let setup = Setup::with_registry(&[], |text| {
        text.replace(
            "listen = \"127.0.0.1:7878\"",
            &format!(
                "listen = \"127.0.0.1:7878\"\nconnections = {{ max = 400, per_address = {PER_ADDRESS}, first_byte_timeout = \"3s\", idle_timeout = \"4s\", http2_keep_alive = \"1s\" }}"
            ),
        )
    });
    let (gw, log) = spawn_logged(setup.gateway_command(&[], "1h"));
    let addr = gw.url.trim_start_matches("http://").to_owned();
    let pid = gw.child.id();
    let baseline = open_descriptors(pid);

    // The flood: five times the per-address cap, from the caller's own address.
    let mut flood = Vec::new();
    for i in 0..PER_ADDRESS * 5 {
        let mut s = TcpStream::connect(&addr).unwrap();
        match i % 3 {
            0 => {}
            1 => s.write_all(H2_PREFACE).unwrap(),
            _ => s
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .unwrap(),
        }
        flood.push(s);
    }
    // Let the accept loop take them all in.
    std::thread::sleep(Duration::from_millis(300));
    let during = open_descriptors(pid);
    assert!(
        during <= baseline + PER_ADDRESS + 5,
        "{during} descriptors open during the flood (baseline {baseline}, per-address cap {PER_ADDRESS})"
    );

    // While the flood holds, a new caller from the same address gets in at once.
    let fresh = reqwest::blocking::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let started = Instant::now();
    let health = fresh.get(format!("{}/healthz", gw.url)).send().unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let (code, charged) = call(
        &gw,
        "charge_card",
        &json!({"order_id": "FLOOD-1", "amount": 1250, "memo": "during the flood"}),
    );
    assert_eq!(code, 200, "{charged}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the caller waited {:?}",
        started.elapsed()
    );
    assert_eq!(effects(&setup.sandbox, "charge").len(), 1);

    // The flood's survivors never spoke a whole request: the first-byte timeout, the
    // header timeout's, the HTTP/2 pings and the idle timeout close every one of them.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut open = 0;
    for s in &mut flood {
        let left = deadline.saturating_duration_since(Instant::now());
        if !closed_by_gateway(s, left.max(Duration::from_millis(10))) {
            open += 1;
        }
    }
    assert_eq!(open, 0, "{open} flood connections still open after 15 s");

    let metrics = client()
        .get(format!("{}/metrics", gw.url))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let evicted = metric(
        &metrics,
        "oncegate_connections_evicted_total{reason=\"never_requested\"}",
    );
    assert!(
        evicted >= (PER_ADDRESS * 4) as f64,
        "evicted {evicted}:\n{metrics}"
    );
    assert!(
        metric(
            &metrics,
            "oncegate_connections_closed_total{reason=\"first_byte_timeout\"}"
        ) >= 1.0,
        "{metrics}"
    );
    assert!(
        !log.lines().iter().any(|l| l.contains("accept failed")),
        "the process never ran out of descriptors"
    );
    drop(gw);
}

#[test]
fn busy_connections_are_kept_and_the_newcomer_is_refused_with_a_metric() {
    oncegate_gateway::server::install_crypto();
    let setup = Setup::with_registry(&[], |text| {
        text.replace(
            "listen = \"127.0.0.1:7878\"",
            "listen = \"127.0.0.1:7878\"\nconnections = { max = 3, per_address = 3 }",
        )
    });
    let (gw, _log) = spawn_logged(setup.gateway_command(&[], "1h"));
    let addr = gw.url.trim_start_matches("http://").to_owned();
    // Three MCP-style long responses keep three connections busy: a request whose body
    // never ends is running, so it is never evicted.
    let mut busy = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(
            b"POST /v1/calls HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok-planner\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
        )
        .unwrap();
        busy.push(s);
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut newcomer = TcpStream::connect(&addr).unwrap();
    newcomer
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    assert!(
        closed_by_gateway(&mut newcomer, Duration::from_secs(5)),
        "a fourth connection is refused while three run requests"
    );
    // The busy ones are intact: finishing a request's body gets its answer.
    drop(busy.pop());
    std::thread::sleep(Duration::from_millis(300));
    let metrics = reqwest::blocking::Client::new()
        .get(format!("{}/metrics", gw.url))
        .timeout(Duration::from_secs(5))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metric(
            &metrics,
            "oncegate_connections_refused_total{cap=\"per_address\"}"
        ) >= 1.0,
        "{metrics}"
    );
    drop(gw);
}
