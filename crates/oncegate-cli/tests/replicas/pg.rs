//! PostgreSQL for the replica tests: a fresh database per test on the shared server,
//! and, for the one test that restarts PostgreSQL, a private cluster of its own.
//!
//! Nothing here touches another test's database: connections are terminated only where
//! their `datname` is this test's own database, and the shared server is never stopped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rand::Rng;
use sqlx::Connection;

/// Where the shared server is: `ONCEGATE_TEST_POSTGRES_URL`, or the local default.
pub(crate) fn server_url() -> String {
    std::env::var("ONCEGATE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Runs statements on `url`, one connection, outside any transaction (as `psql -c`).
/// The statements are the tests' own (database names they generated), never input.
pub(crate) fn execute(url: &str, statements: &[String]) {
    runtime().block_on(async {
        let mut conn = sqlx::PgConnection::connect(url)
            .await
            .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        for s in statements {
            sqlx::raw_sql(sqlx::AssertSqlSafe(s.clone()))
                .execute(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("`{s}` on {url}: {e}"));
        }
        let _ = conn.close().await;
    });
}

/// One integer-valued query on `url`.
pub(crate) fn query_i64(url: &str, query: &str) -> Result<i64, sqlx::Error> {
    runtime().block_on(async {
        let mut conn = sqlx::PgConnection::connect(url).await?;
        let value: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(query.to_owned()))
            .fetch_one(&mut conn)
            .await?;
        let _ = conn.close().await;
        Ok(value)
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A database of this test's own (`og_<random>`), dropped with `WITH (FORCE)` when
/// the value is dropped.
pub(crate) struct Database {
    /// The database's name.
    pub(crate) name: String,
    /// A URL to it, for `[store] url`.
    pub(crate) url: String,
    /// A URL to the server's maintenance database, for statements about this one.
    admin_url: String,
}

impl Database {
    /// Creates `og_<random>` on the server `server` names.
    pub(crate) fn create_on(server: &str) -> Self {
        let name = format!("og_{:016x}", rand::rng().random::<u64>());
        execute(server, &[format!("CREATE DATABASE {name}")]);
        Database {
            url: oncegate_store::postgres::with_database(server, &name),
            admin_url: server.to_owned(),
            name,
        }
    }

    /// Creates `og_<random>` on the shared server.
    pub(crate) fn create() -> Self {
        Self::create_on(&server_url())
    }

    /// Terminates every backend connected to this database (and only those); answers
    /// how many were terminated.
    pub(crate) fn terminate_backends(&self) -> i64 {
        query_i64(
            &self.admin_url,
            &format!(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = '{}' AND pid <> pg_backend_pid()",
                self.name
            ),
        )
        .expect("terminate this database's backends")
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        // A private cluster may already be gone; the shared server never is.
        let name = self.name.clone();
        let admin = self.admin_url.clone();
        let dropped = runtime().block_on(async move {
            let mut conn = sqlx::PgConnection::connect(&admin).await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut conn)
            .await?;
            conn.close().await
        });
        if let Err(e) = dropped {
            eprintln!("could not drop test database {}: {e}", self.name);
        }
    }
}

const BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL cluster of this test's own (initdb, trust auth, a free loopback port,
/// its socket in its own directory), stopped and removed when dropped.
pub(crate) struct PrivateCluster {
    dir: tempfile::TempDir,
    port: u16,
    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub(crate) url: String,
}

impl PrivateCluster {
    /// `initdb` and `pg_ctl start` (as the postgres user when run as root: PostgreSQL
    /// refuses to run as root).
    pub(crate) fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("oncegate-pg-")
            .tempdir()
            .unwrap();
        if is_root() {
            let out = Command::new("chown")
                .args(["postgres:postgres", dir.path().to_str().unwrap()])
                .output()
                .unwrap();
            assert!(out.status.success(), "chown: {out:?}");
        }
        run_pg(&[
            &format!("{BIN}/initdb"),
            "-D",
            data_dir(dir.path()).to_str().unwrap(),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
        ]);
        let port = free_port();
        let cluster = PrivateCluster {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            port,
            dir,
        };
        cluster.pg_ctl(&["start"]);
        cluster
    }

    /// `pg_ctl restart -m fast`: every connection is cut, the server comes back on the
    /// same port. Answers when the server accepts connections again.
    pub(crate) fn restart(&self) {
        self.pg_ctl(&["-m", "fast", "restart"]);
    }

    /// `pg_ctl stop -m fast`: the server is down until [`PrivateCluster::resume`].
    pub(crate) fn stop(&self) {
        self.pg_ctl(&["-m", "fast", "stop"]);
    }

    /// `pg_ctl start` after [`PrivateCluster::stop`], on the same port.
    pub(crate) fn resume(&self) {
        self.pg_ctl(&["start"]);
    }

    /// `pg_ctl -D DATA -o OPTIONS -l LOG -w ARGS`. Always `-l`: without it the server
    /// would inherit pg_ctl's stdout and stderr, and reading them to their end would
    /// wait for the server to exit.
    fn pg_ctl(&self, args: &[&str]) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let data = data_dir(self.dir.path());
        let log = self.dir.path().join("server.log");
        let mut argv = vec![
            format!("{BIN}/pg_ctl"),
            "-D".to_owned(),
            data.display().to_string(),
            "-o".to_owned(),
            options,
            "-l".to_owned(),
            log.display().to_string(),
            "-w".to_owned(),
        ];
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        run_pg(&argv.iter().map(String::as_str).collect::<Vec<_>>());
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let data = data_dir(self.dir.path());
        let _ = pg_command(&[
            &format!("{BIN}/pg_ctl"),
            "-D",
            data.to_str().unwrap(),
            "-m",
            "immediate",
            "-w",
            "stop",
        ])
        .output();
    }
}

fn data_dir(dir: &Path) -> PathBuf {
    dir.join("data")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn pg_command(argv: &[&str]) -> Command {
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).args(argv);
        c
    } else {
        let mut c = Command::new(argv[0]);
        c.args(&argv[1..]);
        c
    };
    // The server's working directory must be readable by the postgres user.
    cmd.current_dir("/");
    cmd
}

fn run_pg(argv: &[&str]) {
    let started = Instant::now();
    let out = pg_command(argv)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run a PostgreSQL tool");
    assert!(
        out.status.success(),
        "`{}` failed after {:?}: {}{}",
        argv.join(" "),
        started.elapsed(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A loopback port nobody listens on right now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `condition` every 50 ms until it holds or `deadline` passes; answers whether it
/// held.
pub(crate) fn poll(deadline: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + deadline;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
