//! The bench's targets: the gateway's two surfaces and the sandbox's, the in-process
//! `Gate`, and the raw database floors beside them.
//!
//! Every distinct request is a new intent (`order_id = "{prefix}-{n}"`, a fresh
//! provider key); a replay maps `n` onto [`REPLAY_SET`] intents executed beforehand.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use oncegate_core::EffectResult;
use oncegate_core::intent::Status;
use oncegate_engine::{Call, Gate};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{Connection, PgPool, SqliteConnection};
use tokio::sync::{Mutex, mpsc, oneshot};

use super::http::HttpTarget;
use super::load::Target;
use super::world::{SANDBOX_KEY, TOKEN};

/// Intents a replay row cycles through (executed once before it runs).
pub const REPLAY_SET: u64 = 256;

/// Bytes of payload per floor row: about the size of a stored intent record.
const FLOOR_BODY_BYTES: usize = 640;

/// Distinct intents or replays of a fixed set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every request a new intent.
    Distinct,
    /// Requests cycle through [`REPLAY_SET`] intents that already settled.
    Replay,
}

impl Mode {
    /// The order number request `n` uses.
    fn order(self, n: u64) -> u64 {
        match self {
            Mode::Distinct => n,
            Mode::Replay => n % REPLAY_SET,
        }
    }
}

/// The status a gateway answer must carry.
fn expected_status(mode: Mode) -> &'static str {
    match mode {
        Mode::Distinct => r#""status":"applied""#,
        Mode::Replay => r#""status":"replayed""#,
    }
}

/// `POST /v1/calls` of `capability` on the gateway at `url`.
pub fn gateway_calls(
    url: &str,
    capability: &str,
    prefix: &str,
    mode: Mode,
) -> anyhow::Result<HttpTarget> {
    let capability = capability.to_owned();
    let prefix = prefix.to_owned();
    let make = move |n: u64| {
        let body = json!({
            "capability": capability,
            "arguments": {"order_id": format!("{prefix}-{}", mode.order(n)), "amount": "12.50"},
        });
        (Bytes::from(body.to_string()), Vec::new())
    };
    Ok(
        HttpTarget::post(&format!("{url}/v1/calls"), Box::new(make))?
            .header("authorization", &format!("Bearer {TOKEN}"))?
            .expect(expected_status(mode)),
    )
}

/// MCP `tools/call` (protocol 2026-07-28, stateless: no session to set up) of `tool`.
fn mcp_call(
    url: &str,
    token: &str,
    tool: &'static str,
    arguments: impl Fn(u64) -> serde_json::Value + Send + Sync + 'static,
) -> anyhow::Result<HttpTarget> {
    let make = move |n: u64| {
        let body = json!({
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {
                "name": tool,
                "arguments": arguments(n),
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "oncegate-bench", "version": env!("CARGO_PKG_VERSION")},
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        });
        (Bytes::from(body.to_string()), Vec::new())
    };
    Ok(HttpTarget::post(&format!("{url}/mcp"), Box::new(make))?
        .header("authorization", &format!("Bearer {token}"))?
        .header("accept", "application/json, text/event-stream")?
        .header("mcp-protocol-version", "2026-07-28")?
        .header("mcp-method", "tools/call")?
        .header("mcp-name", tool)?
        .expect(r#""result""#)
        .reject(r#""isError":true"#))
}

/// The gateway's `/mcp`: `charge_card` (its HTTP upstream).
pub fn gateway_mcp(url: &str, prefix: &str) -> anyhow::Result<HttpTarget> {
    let prefix = prefix.to_owned();
    // Every order is new: anything but an applied call (a replay, `unknown`, a denial)
    // is a failed request, not a fast one.
    Ok(mcp_call(
        url,
        TOKEN,
        "charge_card",
        move |n| json!({"order_id": format!("{prefix}-{n}"), "amount": "12.50"}),
    )?
    .expect(r#""status":"applied""#))
}

/// The sandbox's own MCP server: `create_charge` with a fresh key each time.
pub fn sandbox_mcp(url: &str, prefix: &str) -> anyhow::Result<HttpTarget> {
    let prefix = prefix.to_owned();
    mcp_call(url, SANDBOX_KEY, "create_charge", move |n| {
        json!({
            "order_id": format!("{prefix}-{n}"),
            "amount_minor": 1250,
            "currency": "USD",
            "memo": "bench",
            "idempotency_key": format!("{prefix}-{n}"),
        })
    })
}

/// The sandbox's `POST /v1/charges`, with a fresh `Idempotency-Key` per distinct
/// request and a repeated one per replay: what the gateway itself sends.
pub fn sandbox_charges(url: &str, prefix: &str, mode: Mode) -> anyhow::Result<HttpTarget> {
    let prefix = prefix.to_owned();
    let make = move |n: u64| {
        let order = format!("{prefix}-{}", mode.order(n));
        let body =
            json!({"order_id": order, "amount_minor": 1250, "currency": "USD", "memo": "bench"});
        let key = HeaderValue::from_str(&order).expect("an order id is a header value");
        (
            Bytes::from(body.to_string()),
            vec![(HeaderName::from_static("idempotency-key"), key)],
        )
    };
    Ok(
        HttpTarget::post(&format!("{url}/v1/charges"), Box::new(make))?
            .header("authorization", &format!("Bearer {SANDBOX_KEY}"))?
            .expect(r#""id""#),
    )
}

/// `Gate::invoke` in this process, with an effect that applies at once.
pub struct GateTarget {
    gate: Gate,
    prefix: String,
    mode: Mode,
}

impl GateTarget {
    pub fn new(gate: Gate, prefix: &str, mode: Mode) -> Self {
        Self {
            gate,
            prefix: prefix.to_owned(),
            mode,
        }
    }
}

impl Target for GateTarget {
    type Conn = ();

    async fn connect(&self) -> Result<(), String> {
        Ok(())
    }

    async fn call(&self, _conn: &mut (), n: u64) -> Result<(), String> {
        let call = Call::new(
            "charge_card",
            json!({"order_id": format!("{}-{}", self.prefix, self.mode.order(n)), "amount": "12.50"}),
        );
        let outcome = self
            .gate
            .invoke("agent", call, |_intent| async {
                EffectResult::Applied {
                    effect_ref: Some("ch_bench".into()),
                    result: json!({"id": "ch_bench"}),
                }
            })
            .await
            .map_err(|e| e.to_string())?;
        let want = match self.mode {
            Mode::Distinct => Status::Applied,
            Mode::Replay => Status::Replayed,
        };
        if outcome.status == want {
            Ok(())
        } else {
            Err(format!(
                "the gate answered {:?}, not {want:?}",
                outcome.status
            ))
        }
    }
}

/// The floor table: one row per intent, about a record's size, a unique key.
const FLOOR_TABLE: &str = "CREATE TABLE IF NOT EXISTS floor (
    id   INTEGER PRIMARY KEY,
    k    TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL
)";

fn floor_body() -> String {
    "x".repeat(FLOOR_BODY_BYTES)
}

/// A connection with the store's durability: WAL, `synchronous=FULL`.
async fn floor_connection(db: &Path) -> anyhow::Result<SqliteConnection> {
    let options = SqliteConnectOptions::from_str("sqlite://")?
        .filename(db)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(5));
    let mut conn = SqliteConnection::connect_with(&options).await?;
    sqlx::query(FLOOR_TABLE).execute(&mut conn).await?;
    Ok(conn)
}

/// One floor write: a new row, or (an intent's second commit, as a record replaces its
/// claim) a new body for a row written before.
#[derive(Clone, Copy)]
enum FloorWrite {
    Insert(u64),
    Update(u64),
}

/// Writes `writes` in one `BEGIN IMMEDIATE ... COMMIT`; a failed write rolls back, so
/// the shared connection is not left inside a transaction (where every later `BEGIN`
/// would fail, turning one error into all of them).
async fn floor_write(
    conn: &mut SqliteConnection,
    writes: &[FloorWrite],
    body: &str,
) -> sqlx::Result<()> {
    sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
    let written = async {
        for write in writes {
            let (sql, k) = match *write {
                FloorWrite::Insert(k) => ("INSERT INTO floor (k, body) VALUES (?, ?)", k),
                FloorWrite::Update(k) => ("UPDATE floor SET body = ?2 WHERE k = ?1", k),
            };
            sqlx::query(sql)
                .bind(format!("{k:064x}"))
                .bind(body)
                .execute(&mut *conn)
                .await?;
        }
        sqlx::query("COMMIT").execute(&mut *conn).await.map(|_| ())
    }
    .await;
    if written.is_err() {
        let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
    }
    written
}

/// The raw SQLite floor, one row per transaction: callers take turns on one connection.
pub struct SqliteFloor {
    conn: Mutex<SqliteConnection>,
    body: String,
}

impl SqliteFloor {
    pub async fn open(db: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            conn: Mutex::new(floor_connection(db).await?),
            body: floor_body(),
        })
    }
}

impl Target for SqliteFloor {
    type Conn = ();

    async fn connect(&self) -> Result<(), String> {
        Ok(())
    }

    async fn call(&self, _conn: &mut (), n: u64) -> Result<(), String> {
        let mut conn = self.conn.lock().await;
        floor_write(&mut conn, &[FloorWrite::Insert(n)], &self.body)
            .await
            .map_err(|e| e.to_string())
    }
}

type Ack = oneshot::Sender<Result<(), String>>;

/// The raw SQLite floor with group commit: one writer owns the connection and puts
/// every write that is waiting into its next transaction, each caller answered after
/// the commit. The best a batching store writer could do with the same durability.
/// With `commits` = 2, each request is an intent's two commits one after the other
/// (its row inserted, then its body replaced, each waiting for its own commit), as a
/// claim and its record: the floor under a decision's two durable commits.
pub struct SqliteBatchedFloor {
    queue: mpsc::Sender<(FloorWrite, Ack)>,
    commits: u8,
}

impl SqliteBatchedFloor {
    pub async fn open(db: &Path, commits: u8) -> anyhow::Result<Self> {
        let mut conn = floor_connection(db).await?;
        let (queue, mut writes) = mpsc::channel::<(FloorWrite, Ack)>(4096);
        let body = floor_body();
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(1024);
            while writes.recv_many(&mut batch, 1024).await > 0 {
                let each: Vec<FloorWrite> = batch.iter().map(|(w, _)| *w).collect();
                let result = floor_write(&mut conn, &each, &body)
                    .await
                    .map_err(|e| e.to_string());
                for (_, ack) in batch.drain(..) {
                    let _ = ack.send(result.clone());
                }
            }
        });
        Ok(Self { queue, commits })
    }

    async fn commit(&self, write: FloorWrite) -> Result<(), String> {
        let (ack, done) = oneshot::channel();
        self.queue
            .send((write, ack))
            .await
            .map_err(|_| "the floor writer stopped".to_owned())?;
        done.await
            .map_err(|_| "the floor writer stopped".to_owned())?
    }
}

impl Target for SqliteBatchedFloor {
    type Conn = ();

    async fn connect(&self) -> Result<(), String> {
        Ok(())
    }

    async fn call(&self, _conn: &mut (), n: u64) -> Result<(), String> {
        self.commit(FloorWrite::Insert(n)).await?;
        if self.commits >= 2 {
            self.commit(FloorWrite::Update(n)).await?;
        }
        Ok(())
    }
}

/// The raw PostgreSQL floor: one row per transaction on a pool as wide as the load, the
/// same table shape, default durability (`synchronous_commit = on`).
pub struct PgFloor {
    pool: PgPool,
    body: String,
}

impl PgFloor {
    pub async fn open(url: &str, connections: u32) -> anyhow::Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            .connect(url)
            .await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS floor (id BIGSERIAL PRIMARY KEY, k TEXT NOT NULL UNIQUE, body TEXT NOT NULL)",
        )
        .execute(&pool)
        .await?;
        Ok(Self {
            pool,
            body: floor_body(),
        })
    }
}

impl Target for PgFloor {
    type Conn = ();

    async fn connect(&self) -> Result<(), String> {
        Ok(())
    }

    async fn call(&self, _conn: &mut (), n: u64) -> Result<(), String> {
        let run = async {
            let mut tx = self.pool.begin().await?;
            sqlx::query("INSERT INTO floor (k, body) VALUES ($1, $2)")
                .bind(format!("{n:064x}"))
                .bind(&self.body)
                .execute(&mut *tx)
                .await?;
            tx.commit().await
        };
        run.await.map_err(|e: sqlx::Error| e.to_string())
    }
}
