//! The bench's groups: what each one stands up, drives and pairs.

use std::path::Path;

use anyhow::Context;
use indicatif::ProgressBar;
use oncegate_engine::Gate;
use oncegate_store::postgres::ScratchDatabase;
use oncegate_store::{OpenMode, SqliteStore, StoreOptions};

use super::load::Target;
use super::plan::{Fact, Group, Plan, driven, watched};
use super::targets::{
    GateTarget, Mode, PgFloor, REPLAY_SET, SqliteBatchedFloor, SqliteFloor, gateway_calls,
    gateway_mcp, sandbox_charges, sandbox_mcp,
};
use super::world::{self, World};
use super::{http, peer, scale};

/// A gateway on a store of `plan.store_intents` settled intents vs one on an empty
/// store; the fill rate, idle CPU and `audit verify` time go into `facts`.
pub(super) async fn scale_group(
    world: &World,
    plan: &Plan,
    bar: &ProgressBar,
    facts: &mut Vec<Fact>,
) -> anyhow::Result<Group> {
    let n = plan.store_intents;
    let site = &world.site;
    let empty_config = site.prepare("empty").await?;
    let big_config = site.prepare("big").await?;
    bar.set_message(format!("filling a store with {n} intents"));
    let rate = scale::fill(&big_config, 0, n, bar).await?;
    facts.push(Fact::new(
        format!("fill: {n} settled intents through the store API"),
        rate,
        "intents/s",
    ));
    // Both walks run before the gateway serves the file (it holds the writer's lock).
    bar.set_message(format!("audit verify over {n} intents"));
    let big_arg = big_config.to_string_lossy().into_owned();
    let verify_started = std::time::Instant::now();
    site.oncegate(&["audit", "verify", "--config", &big_arg])
        .await?;
    facts.push(Fact::new(
        format!("audit verify (full walk), {n} intents"),
        verify_started.elapsed().as_secs_f64(),
        "s",
    ));
    let since = (n / 100).max(1);
    scale::fill(&big_config, n, since, bar).await?;
    bar.set_message(format!("audit verify of {since} new intents"));
    let verify_started = std::time::Instant::now();
    site.oncegate(&[
        "audit",
        "verify",
        "--since-checkpoint",
        "--config",
        &big_arg,
    ])
    .await?;
    facts.push(Fact::new(
        format!("audit verify --since-checkpoint, {since} new intents on {n}"),
        verify_started.elapsed().as_secs_f64(),
        "s",
    ));
    let empty = site.serve(&empty_config, "empty-gateway").await?;
    let big = site.serve(&big_config, "big-gateway").await?;

    // Two windows: the first right after the gateways answer ready (what a start costs,
    // its first sweep included), then the steady idle cost.
    for phase in ["after start", "steady"] {
        bar.set_message(format!("watching idle gateways ({phase})"));
        let idle = scale::idle_cpu(&[&big, &empty], plan.idle).await;
        for (label, share) in [
            (format!("{n} intents"), idle[0]),
            ("an empty store".to_owned(), idle[1]),
        ] {
            if let Some(share) = share {
                facts.push(Fact::new(
                    format!("idle gateway CPU ({phase}), {label}"),
                    share * 100.0,
                    "% of a core",
                ));
            }
        }
    }

    Ok(Group {
        name: "store at scale",
        targets: vec![
            (
                "/v1/calls, large store",
                driven(gateway_calls(
                    &big.url,
                    "charge_card",
                    "BD",
                    Mode::Distinct,
                )?),
            ),
            (
                "/v1/calls, empty store",
                driven(gateway_calls(
                    &empty.url,
                    "charge_card",
                    "ED",
                    Mode::Distinct,
                )?),
            ),
            (
                "?state=unknown, large store",
                driven(scale::unknown_listing(&big)?),
            ),
            (
                "?state=unknown, empty store",
                driven(scale::unknown_listing(&empty)?),
            ),
        ],
        pairs: vec![(0, 1), (2, 3)],
        services: vec![big, empty],
        uncounted: Vec::new(),
        concurrencies: None,
        peer: false,
    })
}

/// In-process `Gate` on a SQLite store vs the raw SQLite floor.
pub(super) async fn gate_group(world: &World, dir: &Path) -> anyhow::Result<Group> {
    let gate = sqlite_gate(world, &dir.join("gate.db")).await?;
    let replays = GateTarget::new(gate.clone(), "GR", Mode::Replay);
    seed_gate(&gate, "GR").await?;
    // This process's CPU: the Gate's, the load generator's (a loop of direct calls) and
    // the floors' idle threads.
    let me = Some(std::process::id());
    Ok(Group {
        name: "in-process Gate (SQLite)",
        targets: vec![
            (
                "Gate, distinct intents",
                watched(GateTarget::new(gate, "GD", Mode::Distinct), me),
            ),
            ("Gate, replays", watched(replays, me)),
            (
                "SQLite floor, 1 row/txn",
                driven(SqliteFloor::open(&dir.join("floor1.db")).await?),
            ),
            (
                "SQLite floor, group commit",
                driven(SqliteBatchedFloor::open(&dir.join("floorb.db"), 1).await?),
            ),
            (
                "group commit, 2 commits/intent",
                driven(SqliteBatchedFloor::open(&dir.join("floor2.db"), 2).await?),
            ),
        ],
        pairs: vec![(0, 2), (0, 3), (0, 4), (1, 3)],
        services: Vec::new(),
        uncounted: Vec::new(),
        concurrencies: None,
        peer: false,
    })
}

/// A `Gate` in this process, on the bench registry and a new SQLite store at `db`,
/// opened as `oncegate serve` opens its store (the file's only writer).
async fn sqlite_gate(world: &World, db: &Path) -> anyhow::Result<Gate> {
    let registry = crate::registry::load(&world.config)?;
    let options = StoreOptions {
        single_writer: true,
        ..StoreOptions::default()
    };
    let store = SqliteStore::open_with(db, OpenMode::CreateIfMissing, options).await?;
    Ok(Gate::on_store(registry, store))
}

/// The peer's rows: at concurrency 1 and 32 only (CTRLRun's gateway already resets
/// connections at 32: its HTTP server's listen backlog is 5).
pub(super) async fn peer_group(
    world: &World,
    dir: &Path,
    peer: &peer::Peer,
) -> anyhow::Result<Group> {
    let gate = sqlite_gate(world, &dir.join("gate-peer.db")).await?;
    let ctrlrun = peer.gateway(&world.sandbox.url).await?;
    let ours = format!("{}/mcp", world.gateway.url);
    let sandbox = format!("{}/mcp", world.sandbox.url);
    let ours_args = r#"{"order_id": "PY-{n}", "amount": "12.50"}"#;
    Ok(Group {
        name: "peer: CTRLRun 0.12.2",
        targets: vec![
            (
                "oncegate Gate, in-process",
                driven(GateTarget::new(gate, "PG", Mode::Distinct)),
            ),
            ("CTRLRun @protect, in-process", peer.protect()),
            (
                "oncegate /mcp, Python SDK",
                peer.mcp_client(&ours, "charge_card", Some(world::TOKEN), Some(ours_args)),
            ),
            (
                "CTRLRun gateway, Python SDK",
                peer.mcp_client(&ctrlrun.url, "create_charge", None, None),
            ),
            (
                "oncegate /mcp, bench client",
                driven(gateway_mcp(&world.gateway.url, "PM")?),
            ),
            (
                "sandbox MCP, Python SDK",
                peer.mcp_client(&sandbox, "create_charge", Some(world::SANDBOX_KEY), None),
            ),
        ],
        pairs: vec![(0, 1), (2, 3), (4, 3), (5, 3)],
        // CTRLRun's targets and the sandbox read through the Python SDK are there to
        // compare against: their failures are reported in their rows, not the run's.
        uncounted: vec![1, 3, 5],
        services: vec![ctrlrun],
        concurrencies: Some(vec![1, 32]),
        peer: true,
    })
}

/// Settles the intents a replay row repeats.
async fn seed_gate(gate: &Gate, prefix: &str) -> anyhow::Result<()> {
    let seed = GateTarget::new(gate.clone(), prefix, Mode::Distinct);
    for n in 0..REPLAY_SET {
        seed.call(&mut (), n)
            .await
            .map_err(|e| anyhow::anyhow!("seeding replays: {e}"))?;
    }
    Ok(())
}

/// Settles the intents an HTTP replay row repeats, through a distinct-mode twin.
async fn seed_http(twin: http::HttpTarget) -> anyhow::Result<()> {
    for n in 0..REPLAY_SET {
        twin.once(n)
            .await
            .map_err(|e| anyhow::anyhow!("seeding replays: {e}"))?;
    }
    Ok(())
}

/// `POST /v1/calls` through `oncegate serve` vs the same charges straight at the sandbox,
/// and vs a null gateway (the same server and router forwarding with no decision and
/// no store: what a gateway costs before it decides anything).
pub(super) async fn calls_group(world: &World) -> anyhow::Result<Group> {
    let (gw, sb) = (&world.gateway.url, &world.sandbox.url);
    seed_http(gateway_calls(gw, "charge_card", "CR", Mode::Distinct)?).await?;
    seed_http(sandbox_charges(sb, "SR", Mode::Distinct)?).await?;
    let null_config = world.site.prepare("null").await?;
    let null = world.site.serve_null(&null_config, "null-gateway").await?;
    let (gw_pid, sb_pid) = (world.gateway.pid(), world.sandbox.pid());
    Ok(Group {
        name: "/v1/calls, HTTP upstream",
        targets: vec![
            (
                "/v1/calls, distinct",
                watched(
                    gateway_calls(gw, "charge_card", "CD", Mode::Distinct)?,
                    gw_pid,
                ),
            ),
            (
                "sandbox direct, distinct",
                watched(sandbox_charges(sb, "SD", Mode::Distinct)?, sb_pid),
            ),
            (
                "/v1/calls, replays",
                watched(
                    gateway_calls(gw, "charge_card", "CR", Mode::Replay)?,
                    gw_pid,
                ),
            ),
            (
                "sandbox direct, replays",
                watched(sandbox_charges(sb, "SR", Mode::Replay)?, sb_pid),
            ),
            (
                "null gateway, distinct",
                watched(
                    gateway_calls(&null.url, "charge_card", "ND", Mode::Distinct)?,
                    null.pid(),
                ),
            ),
        ],
        pairs: vec![(0, 1), (2, 3), (4, 1), (0, 4), (2, 4)],
        services: vec![null],
        uncounted: Vec::new(),
        concurrencies: None,
        peer: false,
    })
}

/// MCP through the gateway vs the sandbox's MCP server; MCP upstream vs HTTP upstream.
pub(super) fn mcp_group(world: &World) -> anyhow::Result<Group> {
    let (gw, sb) = (&world.gateway.url, &world.sandbox.url);
    let (gw_pid, sb_pid) = (world.gateway.pid(), world.sandbox.pid());
    Ok(Group {
        name: "MCP",
        targets: vec![
            (
                "/mcp tools/call, distinct",
                watched(gateway_mcp(gw, "MD")?, gw_pid),
            ),
            (
                "sandbox MCP direct, distinct",
                watched(sandbox_mcp(sb, "SM")?, sb_pid),
            ),
            (
                "/v1/calls, MCP upstream",
                watched(
                    gateway_calls(gw, "charge_card_mcp", "UM", Mode::Distinct)?,
                    gw_pid,
                ),
            ),
            (
                "/v1/calls, HTTP upstream",
                watched(
                    gateway_calls(gw, "charge_card", "UH", Mode::Distinct)?,
                    gw_pid,
                ),
            ),
        ],
        pairs: vec![(0, 1), (2, 3)],
        services: Vec::new(),
        uncounted: Vec::new(),
        concurrencies: None,
        peer: false,
    })
}

/// A scratch database on a PostgreSQL server, dropped when the run ends, on every path.
pub(super) async fn pg_scratch(url: &str) -> anyhow::Result<ScratchDatabase> {
    let name = format!(
        "oncegate_bench_{}_{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    ScratchDatabase::create(&plain_on_loopback(url), &name)
        .await
        .context("cannot make the bench's scratch database")
}

/// `url`, with `sslmode=disable` added when it names a server on this machine and
/// chooses no `sslmode`: sqlx's default (`prefer`) would put every round trip of the
/// store and of its floor through TLS on loopback, which measures rustls rather than
/// the store (BENCHMARKS.md, "PostgreSQL, profiled"). A chosen `sslmode` is kept.
fn plain_on_loopback(url: &str) -> String {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[after_scheme..];
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let loopback = ["127.0.0.1", "localhost", "[::1]"]
        .iter()
        .any(|l| host == *l || host.starts_with(&format!("{l}:")));
    if !loopback || url.contains("sslmode=") {
        return url.to_owned();
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}sslmode=disable")
}

/// In-process `Gate` on a PostgreSQL store vs the raw statement floor on the same server.
pub(super) async fn pg_group(
    world: &World,
    pg: &ScratchDatabase,
    plan: &Plan,
) -> anyhow::Result<Group> {
    let registry = crate::registry::load(&world.config)?;
    let widest = plan.concurrencies.iter().copied().max().unwrap_or(1);
    // Both pools together stay well under a default server's 100 connections.
    let connections = u32::try_from(widest.min(32)).unwrap_or(32);
    let store = oncegate_store::open(
        &pg.url(),
        Path::new("."),
        OpenMode::CreateIfMissing,
        StoreOptions {
            pool_size: connections,
            ..StoreOptions::default()
        },
    )
    .await
    .context("cannot open a PostgreSQL store in the scratch database")?;
    let gate = Gate::on_store(registry, store);
    Ok(Group {
        name: "PostgreSQL",
        targets: vec![
            (
                "Gate on PostgreSQL, distinct",
                watched(
                    GateTarget::new(gate, "PD", Mode::Distinct),
                    Some(std::process::id()),
                ),
            ),
            (
                "PostgreSQL floor, 1 row/txn",
                driven(PgFloor::open(&pg.url(), connections).await?),
            ),
        ],
        pairs: vec![(0, 1)],
        services: Vec::new(),
        uncounted: Vec::new(),
        concurrencies: None,
        peer: false,
    })
}

#[cfg(test)]
mod tests {
    use super::plain_on_loopback;

    #[test]
    fn the_bench_talks_to_a_loopback_postgres_without_tls_unless_told() {
        assert_eq!(
            plain_on_loopback("postgres://postgres@127.0.0.1:5432/test"),
            "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
        );
        assert_eq!(
            plain_on_loopback("postgres://u:p@localhost/test?application_name=b"),
            "postgres://u:p@localhost/test?application_name=b&sslmode=disable"
        );
        assert_eq!(
            plain_on_loopback("postgres://postgres@127.0.0.1:5432/test?sslmode=require"),
            "postgres://postgres@127.0.0.1:5432/test?sslmode=require"
        );
        assert_eq!(
            plain_on_loopback("postgres://db.example:5432/test"),
            "postgres://db.example:5432/test"
        );
    }
}
