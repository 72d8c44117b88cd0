//! The PostgreSQL backend: one store shared by several gateway replicas.
//!
//! A plain commit (rows and their audit record, no control) is two statements
//! (`fused.rs`): one snapshot read of the database's `now()`, the row it replaces and the
//! audit record that sealed it (checked here), then one call of `oncegate_commit_v1`
//! (migration 0008), its own READ COMMITTED transaction, which locks the row and
//! requires the version and seal that were checked, locks its audit shard's head,
//! inserts a first version (`ON CONFLICT DO NOTHING`) or replaces the row, appends the
//! sealed record and moves the head. A commit with controls (kill switch, finding,
//! reservations, a release, a reconciliation) is one transaction of statements in the
//! same order (`commit.rs`). Two replicas appending to one shard queue on that head row;
//! different shards never wait on each other. A lost race (0 rows, a serialization
//! failure or deadlock, a unique violation of a concurrent insert) is
//! [`StoreError::Conflict`]; the engine re-reads and re-decides.
//!
//! Leases are judged by the database's clock, never a replica's: a commit re-times the
//! lease it writes to `now() + (lease.expires_at - event.at)` (the lease's length as
//! the engine meant it) in the stored body and in `lease_expires_at`, and a takeover
//! (`Commit::takes_over`) also requires `lease_expires_at <= now()`, else
//! [`StoreError::LeaseLive`]. A replica whose clock runs fast cannot steal a live lease.
//!
//! Loads read the row and its seals in one snapshot (`load` in one statement, the others
//! in one REPEATABLE READ, READ ONLY transaction), so a commit landing in between never
//! looks like a rolled-back row.
//!
//! Plain SQL only: no advisory locks of ours, no LISTEN/NOTIFY, so the same statements
//! suit Postgres-compatible distributed databases (sqlx's migrator takes its own lock
//! while migrating). TLS comes from the URL: `sslmode=require|verify-ca|verify-full`
//! and `sslrootcert=PATH` (rustls on ring; no OpenSSL).

mod clock;
mod commit;
mod controls;
mod fused;
mod limits;
mod pins;

pub use clock::AUTHORITY as CLOCK_AUTHORITY;
mod read;
mod util;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

use oncegate_core::audit::ChainKey;
use oncegate_core::redact;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Connection, Row};

use crate::StoreError;
use crate::options::{OpenMode, StoreOptions};

pub(crate) use util::{corrupt, db_error, from_micros, ts, unavailable};

/// The PostgreSQL store. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    /// The URL without its password, for people.
    shown: String,
    store_id: String,
    chain_key: Option<ChainKey>,
    /// The store's `controls_sealed_at` (µs): controls from before it may be unsealed.
    legacy_before: Option<i64>,
    /// The ledger entries this replica already checked.
    known: crate::ledger::Known,
    audit_shards: u32,
    /// When a rollback of this store was accepted, if ever (see
    /// [`crate::serve_anchor`]).
    rollback_accepted_at: Option<jiff::Timestamp>,
    /// The database's clock as this replica reads it (see clock.rs).
    clock: Arc<crate::clock::StoreClock>,
}

/// `url` naming database `name` instead (its query string kept): for tools that make
/// scratch databases on a server (`oncegate bench`, the tests).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    format!("{}/{name}{query}", &base[..path_start])
}

/// What is in the database's current schema before anything is created.
enum Found {
    Empty,
    Oncegate,
    Foreign(String),
}

impl PgStore {
    /// Opens the database `url` names as `mode` says ([`OpenMode`]), applying pending
    /// migrations to an oncegate store (and the whole schema to an empty database
    /// when `mode` allows creating one).
    pub async fn open(
        url: &str,
        mode: OpenMode,
        options: StoreOptions,
    ) -> Result<Self, StoreError> {
        let shown = redact::url(url);
        // The statement timeout is a startup parameter of every connection the pool
        // opens (reconnections included), in milliseconds.
        let timeout_ms = options.statement_timeout.as_millis().max(1).to_string();
        let connect = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::UnsupportedUrl(format!("{shown} ({e})")))?
            .options([("statement_timeout", timeout_ms.as_str())])
            .application_name("oncegate");
        let pool = PgPoolOptions::new()
            .max_connections(options.pool_size.max(1))
            .acquire_timeout(std::time::Duration::from_secs(5))
            // No ping before each use: it was one more round trip in front of every
            // commit and load (sqlx still pings a connection as it goes back to the pool,
            // after the caller has its answer). A connection that died meanwhile fails
            // its statement as Unavailable and is closed; the engine retries a result's
            // record, and a claim that failed is retried by its caller.
            .test_before_acquire(false)
            .connect_with(connect)
            .await
            .map_err(|e| {
                StoreError::Unavailable(format!("cannot connect to PostgreSQL at {shown}: {e}"))
            })?;
        let found = inspect(&pool).await?;
        match (mode, found) {
            (_, Found::Foreign(what)) => {
                return Err(StoreError::NotInitialised(format!(
                    "the PostgreSQL database at {shown} is not an oncegate store ({what}); point `[store] url` at the gateway's own database (or schema), or at an empty one and run `oncegate migrate`"
                )));
            }
            (OpenMode::Existing, Found::Empty) => {
                return Err(StoreError::NotInitialised(format!(
                    "the PostgreSQL database at {shown} has no oncegate schema; run `oncegate migrate` (or `oncegate init`) to create it. If the gateway served from it before, the store is lost: restore it, since a fresh store would re-execute every intent it forgot"
                )));
            }
            (OpenMode::Create, Found::Oncegate) => {
                return Err(StoreError::AlreadyExists(format!(
                    "an oncegate store already exists in the PostgreSQL database at {shown}; nothing was changed (`oncegate migrate` applies pending migrations to it)"
                )));
            }
            _ => {}
        }
        migrate(url, &shown).await?;
        let store_id: String = sqlx::query("SELECT value FROM meta WHERE name = 'store_id'")
            .fetch_one(&pool)
            .await
            .map_err(unavailable)?
            .get(0);
        let clock = Arc::new(clock::first(&pool).await?);
        let chain_key = match options.chain_key {
            Some(key) => Some(trusting_history(&pool, key, &store_id).await?),
            None => None,
        };
        let rollback_accepted_at =
            sqlx::query_scalar::<_, String>("SELECT value FROM meta WHERE name = $1")
                .bind(crate::serve_anchor::ROLLBACK_ACCEPTED_AT)
                .fetch_optional(&pool)
                .await
                .map_err(db_error)?
                .and_then(|v| v.parse().ok());
        let legacy_before = sqlx::query_scalar::<_, String>(
            "SELECT value FROM meta WHERE name = 'controls_sealed_at'",
        )
        .fetch_optional(&pool)
        .await
        .map_err(db_error)?
        .and_then(|v| v.parse().ok());
        let inner = Arc::new(Inner {
            pool,
            shown,
            store_id,
            chain_key,
            legacy_before,
            known: Default::default(),
            rollback_accepted_at,
            audit_shards: options.audit_shards,
            clock,
        });
        let weak = Arc::downgrade(&inner);
        clock::keep_sampling(move || weak.upgrade().map(|i| (i.pool.clone(), i.clock.clone())));
        Ok(Self { inner })
    }

    /// The migrations of this build that the database has not applied yet (version and
    /// description), without applying them.
    pub async fn pending_migrations(&self) -> Result<Vec<(i64, String)>, StoreError> {
        pending(&self.inner.pool).await
    }

    /// The database, for people (the URL without its password).
    pub fn describe(&self) -> &str {
        &self.inner.shown
    }

    /// The store's identity, written once when its schema was created.
    pub fn store_id(&self) -> &str {
        &self.inner.store_id
    }

    /// The chain key this store seals with, if any.
    pub fn chain_key(&self) -> Option<&ChainKey> {
        self.inner.chain_key.as_ref()
    }

    /// When a rollback of this store to an earlier state was accepted, if ever.
    pub fn rollback_accepted_at(&self) -> Option<jiff::Timestamp> {
        self.inner.rollback_accepted_at
    }

    /// The database's clock as this replica reads it: the time every decision on this
    /// store is taken and judged by (see `clock.rs` beside this file).
    pub fn clock(&self) -> Arc<crate::clock::StoreClock> {
        self.inner.clock.clone()
    }

    /// The connection pool (diagnostics and tests; the store's writes go through its
    /// own methods).
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// Closes the pool: every clone stops working.
    pub async fn close(&self) {
        self.inner.pool.close().await;
    }

    /// A connection from the pool, timing the wait and updating the pool gauges.
    /// A pooled connection inside a transaction begun with `begin` (e.g. `BEGIN`):
    /// see [`InTransaction`].
    pub(crate) async fn begin(&self, begin: &'static str) -> Result<InTransaction, StoreError> {
        let mut conn = self.conn().await?;
        sqlx::query(begin)
            .execute(&mut *conn)
            .await
            .map_err(db_error)?;
        Ok(InTransaction(Some(conn)))
    }

    pub(crate) async fn conn(
        &self,
    ) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>, StoreError> {
        let started = Instant::now();
        let conn = self.inner.pool.acquire().await;
        metrics::histogram!("oncegate_store_pool_acquire_seconds")
            .record(started.elapsed().as_secs_f64());
        let size = self.inner.pool.size();
        let idle = u32::try_from(self.inner.pool.num_idle()).unwrap_or(size);
        metrics::gauge!("oncegate_store_pool_connections", "state" => "in_use")
            .set(f64::from(size.saturating_sub(idle)));
        metrics::gauge!("oncegate_store_pool_connections", "state" => "idle").set(f64::from(idle));
        conn.map_err(|e| {
            StoreError::Unavailable(format!(
                "no PostgreSQL connection ({}): {e}",
                self.inner.shown
            ))
        })
    }
}

/// A pooled connection inside a transaction this backend opened with a plain `BEGIN`
/// statement (sqlx does not track those). Ended with [`InTransaction::end`] (`COMMIT` or
/// `ROLLBACK`); dropped before that (a cancelled read, a panic), or when ending fails,
/// the connection is closed instead of going back to the pool mid-transaction, where
/// the next user would read an old snapshot or write inside someone else's transaction.
/// Closing the session makes PostgreSQL roll the transaction back.
pub(crate) struct InTransaction(Option<sqlx::pool::PoolConnection<sqlx::Postgres>>);

impl InTransaction {
    /// The connection, for the transaction's statements.
    pub(crate) fn conn(&mut self) -> &mut sqlx::PgConnection {
        self.0
            .as_deref_mut()
            .expect("the connection is held until the transaction ends")
    }

    /// Ends the transaction with `end` (`COMMIT` or `ROLLBACK`); the connection goes back
    /// to the pool only when that succeeded.
    pub(crate) async fn end(mut self, end: &'static str) -> Result<(), StoreError> {
        let result = sqlx::query(end)
            .execute(self.conn())
            .await
            .map(drop)
            .map_err(db_error);
        if result.is_ok() {
            // Back to the pool, outside any transaction.
            drop(self.0.take());
        }
        result
    }
}

impl Drop for InTransaction {
    fn drop(&mut self) {
        if let Some(conn) = self.0.as_mut() {
            conn.close_on_drop();
        }
    }
}

/// The migrations of this build that the database at `url` has not applied (none are
/// applied here). An unreachable database is [`StoreError::Unavailable`].
pub async fn pending_at(url: &str) -> Result<Vec<(i64, String)>, StoreError> {
    let shown = redact::url(url);
    let connect = PgConnectOptions::from_str(url)
        .map_err(|e| StoreError::UnsupportedUrl(format!("{shown} ({e})")))?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(std::time::Duration::from_secs(5))
        .connect_with(connect)
        .await
        .map_err(|e| {
            StoreError::Unavailable(format!("cannot connect to PostgreSQL at {shown}: {e}"))
        })?;
    let result = pending(&pool).await;
    pool.close().await;
    result
}

/// How long a migration waits for a lock before it gives up (and can be run again at a
/// quieter time): a DDL statement queued behind a long transaction would otherwise queue
/// every reader and writer of the table behind itself.
pub const MIGRATION_LOCK_TIMEOUT: &str = "10s";

/// Applies pending migrations on a connection of its own, without the store's
/// `statement_timeout` (building an index on a large table takes as long as it takes)
/// but with [`MIGRATION_LOCK_TIMEOUT`]. The settings travel as startup parameters of
/// that connection, so no migration's SQL (whose checksum sqlx keeps) changes.
async fn migrate(url: &str, shown: &str) -> Result<(), StoreError> {
    let failed = |e: &dyn std::fmt::Display| {
        StoreError::Unavailable(format!(
            "cannot migrate the PostgreSQL store at {shown}: {e}"
        ))
    };
    let connect = PgConnectOptions::from_str(url)
        .map_err(|e| StoreError::UnsupportedUrl(format!("{shown} ({e})")))?
        .options([
            ("statement_timeout", "0"),
            ("lock_timeout", MIGRATION_LOCK_TIMEOUT),
        ])
        .application_name("oncegate migrate");
    let mut conn = sqlx::PgConnection::connect_with(&connect)
        .await
        .map_err(|e| failed(&e))?;
    let result = migrator().run(&mut conn).await.map_err(|e| failed(&e));
    let _ = sqlx::Connection::close(conn).await;
    result
}

/// A scratch database on a server, for tools that need one (`oncegate bench`, the
/// tests): created by [`ScratchDatabase::create`] and dropped (`WITH (FORCE)`) when the
/// guard goes, on every path: [`ScratchDatabase::drop_now`] where the caller can await
/// it, else from `Drop` (an error, a panic) on a thread of its own.
pub struct ScratchDatabase {
    server: String,
    name: String,
    dropped: bool,
}

impl ScratchDatabase {
    /// Creates database `name` on the server `server` names.
    pub async fn create(server: &str, name: &str) -> Result<Self, StoreError> {
        let shown = redact::url(server);
        let mut admin = sqlx::PgConnection::connect(server).await.map_err(|e| {
            StoreError::Unavailable(format!("cannot connect to PostgreSQL at {shown}: {e}"))
        })?;
        let created = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await;
        let _ = sqlx::Connection::close(admin).await;
        created.map_err(|e| {
            StoreError::Unavailable(format!("cannot create database {name} at {shown}: {e}"))
        })?;
        Ok(Self {
            server: server.to_owned(),
            name: name.to_owned(),
            dropped: false,
        })
    }

    /// The database's URL.
    pub fn url(&self) -> String {
        with_database(&self.server, &self.name)
    }

    /// Drops the database now.
    pub async fn drop_now(mut self) -> Result<(), StoreError> {
        self.dropped = true;
        drop_database(&self.server, &self.name).await
    }
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        let (server, name) = (self.server.clone(), self.name.clone());
        // Drop cannot await, and may run inside a runtime (which cannot block on
        // another): a thread with its own small runtime drops the database.
        let dropping = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime
                && let Err(e) = runtime.block_on(drop_database(&server, &name))
            {
                tracing::warn!(database = name, error = %e, "a scratch database was left behind");
            }
        });
        let _ = dropping.join();
    }
}

async fn drop_database(server: &str, name: &str) -> Result<(), StoreError> {
    let mut admin = sqlx::PgConnection::connect(server)
        .await
        .map_err(unavailable)?;
    let dropped = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await;
    let _ = sqlx::Connection::close(admin).await;
    dropped.map(|_| ()).map_err(unavailable)
}

/// The migrations this build carries.
fn migrator() -> sqlx::migrate::Migrator {
    sqlx::migrate!("migrations/postgres")
}

/// Migrations not yet applied to the database `pool` reaches.
pub(crate) async fn pending(pool: &PgPool) -> Result<Vec<(i64, String)>, StoreError> {
    let table: Option<String> = sqlx::query("SELECT to_regclass('_sqlx_migrations')::text")
        .fetch_one(pool)
        .await
        .map_err(unavailable)?
        .get(0);
    let applied: Vec<i64> = if table.is_some() {
        sqlx::query("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(pool)
            .await
            .map_err(unavailable)?
            .iter()
            .map(|r| r.get(0))
            .collect()
    } else {
        Vec::new()
    };
    Ok(migrator()
        .iter()
        .filter(|m| !m.migration_type.is_down_migration() && !applied.contains(&m.version))
        .map(|m| (m.version, m.description.to_string()))
        .collect())
}

/// What the current schema holds.
async fn inspect(pool: &PgPool) -> Result<Found, StoreError> {
    let tables: Vec<String> = sqlx::query(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name",
    )
    .fetch_all(pool)
    .await
    .map_err(unavailable)?
    .iter()
    .map(|r| r.get(0))
    .collect();
    let has = |t: &str| tables.iter().any(|n| n == t);
    Ok(if tables.is_empty() {
        Found::Empty
    } else if has("meta") && has("intents") && has("audit") && has("audit_heads") {
        Found::Oncegate
    } else if tables.iter().all(|t| t == "_sqlx_migrations") {
        // A migration that failed before creating anything.
        Found::Empty
    } else {
        let mut shown = tables.join(", ");
        if shown.len() > 120 {
            shown.truncate(120);
            shown.push_str("...");
        }
        Found::Foreign(format!("its tables are {shown}"))
    })
}

#[cfg(test)]
mod migration_tests {
    use std::borrow::Cow;
    use std::time::Duration;

    use super::*;

    /// A store at migration 0001 with enough intents that building 0002's indexes takes
    /// longer than the store's statement timeout (50 ms, set the way the store sets it):
    /// opening it applies 0002 all the same, and the store then serves under that
    /// timeout.
    #[tokio::test]
    async fn migrations_outlast_the_statement_timeout_on_a_large_table() {
        let server = std::env::var("ONCEGATE_TEST_POSTGRES_URL")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into());
        let name = format!("og_migrate_{:016x}", rand::random::<u64>());
        let scratch = ScratchDatabase::create(&server, &name).await.unwrap();
        let url = scratch.url();
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        let mut first = migrator();
        first.migrations = Cow::Owned(
            first
                .migrations
                .iter()
                .filter(|m| m.version == 1)
                .cloned()
                .collect(),
        );
        first.run(&mut conn).await.unwrap();
        sqlx::raw_sql(
            "INSERT INTO intents (key, generation, capability, state, breaker_tripped, updated_at, version, body)
             SELECT 'k' || n, 1, 'cap' || (n % 7), CASE WHEN n % 3 = 0 THEN 'unknown' ELSE 'applied' END,
                    n % 11 = 0, now() - n * interval '1 second', 1, '{}'
             FROM generate_series(1, 400000) AS n",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        // The index builds of 0002, timed here without a timeout: each is what the
        // migration would have to fit in the store's.
        let started = std::time::Instant::now();
        sqlx::raw_sql(
            "CREATE INDEX probe ON intents (state, capability, updated_at); DROP INDEX probe",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        let one_index = started.elapsed();
        let _ = sqlx::Connection::close(conn).await;
        let timeout = Duration::from_millis(50);
        assert!(
            one_index > timeout,
            "one index builds in {one_index:?}: the table is too small to show anything"
        );
        let options = StoreOptions {
            statement_timeout: timeout,
            ..StoreOptions::default()
        };
        let store = PgStore::open(&url, OpenMode::Existing, options)
            .await
            .expect("the migration ran past the statement timeout");
        assert!(store.pending_migrations().await.unwrap().is_empty());
        store.close().await;
        scratch.drop_now().await.unwrap();
    }
}

#[cfg(test)]
mod url_tests {
    use super::with_database;

    #[test]
    fn a_scratch_database_replaces_the_urls_path_and_keeps_its_query() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/test", "og_1"),
            "postgres://postgres@127.0.0.1:5432/og_1"
        );
        assert_eq!(
            with_database("postgres://u:p@h:1/test?sslmode=disable", "og_1"),
            "postgres://u:p@h:1/og_1?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "og_1"), "postgres://h/og_1");
    }
}

/// `key`, trusting the records from before it was set as the store's key-since mark
/// says (written now by the first replica to open the store with a key; the others
/// read that one): see [`crate::key_since`].
async fn trusting_history(
    pool: &PgPool,
    key: ChainKey,
    store_id: &str,
) -> Result<ChainKey, StoreError> {
    let read = async || -> Result<Option<String>, StoreError> {
        sqlx::query_scalar("SELECT value FROM meta WHERE name = $1")
            .bind(crate::key_since::MARK)
            .fetch_optional(pool)
            .await
            .map_err(db_error)
    };
    if read().await?.is_none() {
        let shards = sqlx::query(
            "SELECT shard, MAX(seq), MIN(CASE WHEN hash LIKE 'hmac-sha256:%' THEN seq END) FROM audit GROUP BY shard",
        )
        .fetch_all(pool)
        .await
        .map_err(db_error)?;
        let (text, _) = crate::key_since::derive(
            &key,
            store_id,
            shards.iter().map(|r| {
                (
                    r.get::<i64, _>(0) as u32,
                    r.get::<i64, _>(1) as u64,
                    r.get::<Option<i64>, _>(2).map(|seq| seq as u64),
                )
            }),
        );
        sqlx::query("INSERT INTO meta (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING")
            .bind(crate::key_since::MARK)
            .bind(text)
            .execute(pool)
            .await
            .map_err(db_error)?;
    }
    let text = read().await?.unwrap_or_default();
    let heads = crate::key_since::read(&key, store_id, &text);
    Ok(key.trusting_unkeyed_until(heads))
}
