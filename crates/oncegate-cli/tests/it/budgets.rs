//! Per-principal budgets, against real `oncegate serve` processes on loopback: one
//! agent's session flood stays under `mcp_sessions_per_principal` (the oldest session
//! is ended with a clear 404, the newest works, the process's memory stays bounded);
//! a listing over a store of large agent-written arguments pages through every intent
//! exactly once while the gateway's peak RSS (VmHWM) stays bounded; an agent at
//! `pending_approvals_per_agent` is refused with OG-0058 and the alert is raised.

use std::time::Duration;

use oncegate_store::conformance::sample_record;
use oncegate_store::{Commit, IntentsWrite, SqliteStore};
use serde_json::{Value, json};

use crate::support::{Proc, Setup, client};

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn metric(gw: &Proc, prefix: &str) -> f64 {
    let text = client()
        .get(format!("{}/metrics", gw.url))
        .send()
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

/// A raw 2025-11-25 `POST /mcp`: (status, new session id, body).
fn post_mcp(
    http: &reqwest::blocking::Client,
    gw: &Proc,
    session: Option<&str>,
    body: &Value,
) -> (u16, Option<String>, String) {
    let mut request = http
        .post(format!("{}/mcp", gw.url))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .bearer_auth("tok-planner");
    if let Some(id) = session {
        request = request
            .header("Mcp-Session-Id", id)
            .header("MCP-Protocol-Version", "2025-11-25");
    }
    let response = request.body(body.to_string()).send().unwrap();
    let status = response.status().as_u16();
    let id = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, id, response.text().unwrap())
}

/// Opens one session as a flooding agent does: `initialize`, then `initialized`.
fn open_session(http: &reqwest::blocking::Client, gw: &Proc, n: usize) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": format!("flood-{n}"), "version": "0"}}});
    let (status, session, body) = post_mcp(http, gw, None, &initialize);
    assert_eq!(status, 200, "{body}");
    let session = session.expect("a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post_mcp(http, gw, Some(&session), &initialized).0, 202);
    session
}

const SESSIONS: usize = 2000;
const SESSION_CAP: usize = 64;

#[test]
fn a_session_flood_by_one_principal_stays_under_its_cap() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    let pid = gw.child.id();
    let http = client();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let first = open_session(&http, &gw, 0);
    assert_eq!(post_mcp(&http, &gw, Some(&first), &list).0, 200);
    let before = status_kib(pid, "VmRSS");
    let mut newest = first.clone();
    for n in 1..SESSIONS {
        newest = open_session(&http, &gw, n);
    }
    // Let the background closes finish.
    std::thread::sleep(Duration::from_millis(500));
    let after = status_kib(pid, "VmRSS");
    let grown_mib = after.saturating_sub(before) / 1024;
    eprintln!(
        "{SESSIONS} sessions of one principal (cap {SESSION_CAP}): RSS {before} KiB -> {after} KiB (+{grown_mib} MiB)"
    );

    // The oldest session was ended to make room, and its next request says why.
    let (status, _, body) = post_mcp(&http, &gw, Some(&first), &list);
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains("mcp_sessions_per_principal"),
        "the evicted session is told why: {body}"
    );
    // The newest works.
    let (status, _, body) = post_mcp(&http, &gw, Some(&newest), &list);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("charge_card"), "{body}");
    let evicted = metric(&gw, "oncegate_mcp_sessions_evicted_total");
    assert_eq!(
        evicted as usize,
        SESSIONS - SESSION_CAP,
        "every session past the cap ended one"
    );
    // Unbounded, 2,000 sessions cost this process about 145 MB; with the cap, a few.
    assert!(
        grown_mib < 64,
        "RSS grew by {grown_mib} MiB for {SESSIONS} sessions under a cap of {SESSION_CAP}"
    );
}

/// Intents in the store, each with `ARG_BYTES` of agent-written arguments.
const INTENTS: usize = 600;
const ARG_BYTES: usize = 100 * 1024;

/// Fills the store the gateway will serve directly (one commit at a time, so the
/// filling itself never holds more than one record).
fn fill(setup: &Setup) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = SqliteStore::scratch(&setup.db()).await.unwrap();
        let memo = "m".repeat(ARG_BYTES);
        for i in 0..INTENTS {
            let key = format!("{i:064x}");
            let mut r = sample_record(&key, 1);
            r.arguments = json!({"order_id": format!("BIG-{i}"), "amount": "1.00", "memo": memo});
            r.updated_at += jiff::SignedDuration::from_millis((i / 3) as i64);
            let event = oncegate_core::audit::AuditEvent {
                at: r.updated_at,
                kind: oncegate_core::audit::AuditKind::Call,
                key: Some(r.key.clone()),
                generation: 1,
                capability: Some("charge_card".into()),
                actor: "planner".into(),
                run_id: None,
                from: None,
                to: Some(r.state),
                status: None,
                code: None,
                detail: json!({}),
            };
            store
                .commit(Commit::new(Some(r), None, event))
                .await
                .unwrap();
        }
        store.close().await;
    });
}

#[test]
fn a_listing_over_large_arguments_stays_under_a_memory_bound() {
    let setup = Setup::new(&[]);
    fill(&setup);
    let gw = setup.gateway();
    let pid = gw.child.id();
    let http = client();
    // Warm up (the first request's allocations), then the peak before the listings.
    let warm = http
        .get(format!("{}/v1/intents?limit=1", gw.url))
        .bearer_auth("tok-ops")
        .send()
        .unwrap();
    assert_eq!(warm.status().as_u16(), 200);
    let before = status_kib(pid, "VmHWM");

    // Two approvers at once, each asking for everything and following the cursor.
    let walk = |token: &'static str| {
        let http = client();
        let url = gw.url.clone();
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut cursor: Option<String> = None;
            let mut pages = 0;
            loop {
                let mut page = format!("{url}/v1/intents?limit=1000000");
                if let Some(c) = &cursor {
                    page.push_str(&format!("&cursor={c}"));
                }
                let response = http.get(page).bearer_auth(token).send().unwrap();
                assert_eq!(response.status().as_u16(), 200);
                let body: Value = response.json().unwrap();
                let intents = body["intents"].as_array().unwrap();
                assert!(intents.len() <= 500, "limit is clamped to 500");
                for r in intents {
                    seen.push(r["key"].as_str().unwrap().to_owned());
                }
                pages += 1;
                match body["next_cursor"].as_str() {
                    Some(next) => cursor = Some(next.to_owned()),
                    None => break,
                }
                assert!(pages < 1000, "paging ends");
            }
            (seen, pages)
        })
    };
    let walks = [walk("tok-ops"), walk("tok-alice")];
    for w in walks {
        let (seen, pages) = w.join().unwrap();
        let unique: std::collections::HashSet<&String> = seen.iter().collect();
        assert_eq!(seen.len(), INTENTS, "every intent listed");
        assert_eq!(unique.len(), INTENTS, "each exactly once");
        // About 2 MiB of JSON per page: ~20 intents of 100 KiB, not 500.
        assert!(pages >= INTENTS * ARG_BYTES / (8 << 20), "{pages} pages");
        eprintln!("{INTENTS} intents of {ARG_BYTES} B arguments listed in {pages} pages");
    }
    let after = status_kib(pid, "VmHWM");
    eprintln!(
        "after: RssAnon {} KiB RssFile {} KiB",
        status_kib(pid, "RssAnon"),
        status_kib(pid, "RssFile")
    );
    let grown_mib = after.saturating_sub(before) / 1024;
    eprintln!(
        "listing {} MB of arguments twice at once: peak RSS {before} KiB -> {after} KiB (+{grown_mib} MiB)",
        INTENTS * ARG_BYTES / 1_000_000
    );
    // Unbounded, one listing of 57 MB of arguments raised the peak by 1.1 GiB.
    assert!(
        grown_mib < 192,
        "peak RSS grew by {grown_mib} MiB listing {INTENTS} intents"
    );

    // A malformed cursor is a 422 with a stable code, not a restarted listing.
    let bad = http
        .get(format!("{}/v1/intents?cursor=not-a-cursor", gw.url))
        .bearer_auth("tok-ops")
        .send()
        .unwrap();
    assert_eq!(bad.status().as_u16(), 422);
    let body: Value = bad.json().unwrap();
    assert_eq!(body["error"]["code"], "OG-0009", "{body}");
}

#[test]
fn an_agent_at_its_pending_approval_budget_is_refused_with_og_0058() {
    let setup = Setup::with_registry(&[], |text| {
        text.replace(
            "listen = \"127.0.0.1:7878\"",
            "listen = \"127.0.0.1:7878\"\npending_approvals_per_agent = 5",
        )
    });
    let gw = setup.gateway();
    let http = client();
    let refund = |token: &str, order: &str| {
        let r = http
            .post(format!("{}/v1/calls", gw.url))
            .bearer_auth(token)
            .json(&json!({"capability": "refund", "arguments": {"order_id": order, "amount": "150.00"}}))
            .send()
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().unwrap())
    };
    for i in 0..5 {
        let (status, body) = refund("tok-planner", &format!("Q-{i}"));
        assert_eq!(status, 202, "{body}");
        assert_eq!(body["status"], "pending_approval", "{body}");
    }
    let (status, body) = refund("tok-planner", "Q-5");
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["status"], "refused", "{body}");
    assert_eq!(body["reason"]["code"], "OG-0058", "{body}");
    assert!(
        body["alerts"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["kind"] == "approval_queue_full")),
        "the refusal carries the alert: {body}"
    );
    assert_eq!(
        metric(
            &gw,
            "oncegate_alerts_total{capability=\"refund\",kind=\"approval_queue_full\"}"
        ),
        1.0
    );
    // The alert is raised once a minute per agent, the refusal every time.
    let (status, body) = refund("tok-planner", "Q-6");
    assert_eq!(status, 429, "{body}");
    assert!(
        body["alerts"].as_array().is_none_or(Vec::is_empty),
        "{body}"
    );
    // Another agent's queue is its own; a call that needs no approval still passes.
    let (status, body) = refund("tok-subagent", "Q-7");
    assert_eq!(status, 202, "{body}");
    let charge = http
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .json(&json!({"capability": "charge_card", "arguments": {"order_id": "Q-8", "amount": "1.00"}}))
        .send()
        .unwrap();
    assert_eq!(charge.status().as_u16(), 200);
    // An approver's decision makes room again.
    let pending: Value = http
        .get(format!("{}/v1/approvals?state=pending&limit=1", gw.url))
        .bearer_auth("tok-alice")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(pending["next_cursor"].is_string(), "{pending}");
    let id = pending["approvals"][0]["id"].as_str().unwrap().to_owned();
    let denied = http
        .post(format!("{}/v1/approvals/{id}/deny", gw.url))
        .bearer_auth("tok-alice")
        .send()
        .unwrap();
    assert_eq!(denied.status().as_u16(), 403, "a denial answers 403 denied");
    let (status, body) = refund("tok-planner", "Q-9");
    assert_eq!(status, 202, "room again after a decision: {body}");
}

/// The flood of the issue, in parallel: 40 held calls from one agent at once against a
/// budget of 5 queue exactly 5 (an agent's calls take turns from the count to the
/// commit), the rest refused with OG-0058.
#[test]
fn a_parallel_flood_of_held_calls_queues_no_more_than_the_budget() {
    let setup = Setup::with_registry(&[], |text| {
        text.replace(
            "listen = \"127.0.0.1:7878\"",
            "listen = \"127.0.0.1:7878\"\npending_approvals_per_agent = 5",
        )
    });
    let gw = setup.gateway();
    let url = format!("{}/v1/calls", gw.url);
    let answers: Vec<u16> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..40)
            .map(|i| {
                let url = url.clone();
                s.spawn(move || {
                    client()
                        .post(url)
                        .bearer_auth("tok-planner")
                        .json(&json!({"capability": "refund", "arguments": {"order_id": format!("P-{i}"), "amount": "150.00"}}))
                        .send()
                        .unwrap()
                        .status()
                        .as_u16()
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let held = answers.iter().filter(|s| **s == 202).count();
    let refused = answers.iter().filter(|s| **s == 429).count();
    assert_eq!((held, refused), (5, 35), "{answers:?}");
    let pending: Value = client()
        .get(format!("{}/v1/approvals?state=pending", gw.url))
        .bearer_auth("tok-alice")
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(pending["approvals"].as_array().map(Vec::len), Some(5));
}
