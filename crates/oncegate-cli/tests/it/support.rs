//! Real processes for the end-to-end tests: `oncegate sandbox` and `oncegate serve` on
//! loopback, a scratch copy of the example registry, the sandbox's own ledger and
//! fault API to count and provoke effects, and libfaketime to give a gateway a wrong or
//! stepping wall clock.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub(crate) const TOKENS: [(&str, &str); 5] = [
    ("ONCEGATE_TOKEN_PLANNER", "tok-planner"),
    ("ONCEGATE_TOKEN_SUBAGENT", "tok-subagent"),
    ("ONCEGATE_TOKEN_ALICE", "tok-alice"),
    ("ONCEGATE_TOKEN_BOB", "tok-bob"),
    ("ONCEGATE_TOKEN_OPS", "tok-ops"),
];
pub(crate) const API_KEY: &str = "sk_test_gateway";

/// The example's `charge_card` with a hold-escalating duplicate rule ticking every
/// second and the sandbox's effects listing as upstream truth.
pub(crate) const CHARGE_DETECTION: &str = r#"
[capabilities.duplicates]
on = ["business_ref", "amount"]
within = "24h"
every = "1s"
escalation = "hold"

[capabilities.listing]
kind = "http"
url = "{env.SANDBOX_URL}/v1/effects"
headers = { Authorization = "Bearer {env.SANDBOX_API_KEY}" }
params = { kind = "charge" }
effect_ref = "/id"
key = "/idempotency_key"
arguments = { order_id = "/order_id", amount = { minor = "/amount_minor", currency = "/currency" } }

"#;

/// A child process killed when dropped.
pub(crate) struct Proc {
    pub(crate) child: Child,
    pub(crate) url: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cmd` and waits for its first stdout line, which ends with the URL it listens on.
pub(crate) fn spawn(cmd: Command) -> Proc {
    start(cmd, Stdio::inherit())
}

/// [`spawn`], keeping the process's log (its stderr) for the test to read. Each line is
/// echoed to the test's own stderr as well, so a failing test still shows it.
pub(crate) fn spawn_logged(cmd: Command) -> (Proc, Log) {
    let mut proc = start(cmd, Stdio::piped());
    let stderr = proc.child.stderr.take().expect("stderr is piped");
    let log = Log::default();
    let lines = Arc::clone(&log.0);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    });
    (proc, log)
}

/// The lines a process has logged so far ([`spawn_logged`]).
#[derive(Clone, Default)]
pub(crate) struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    /// Every line logged so far.
    pub(crate) fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits up to `deadline` for a line that satisfies `wanted`; answers it, or every
    /// line logged by then.
    pub(crate) fn wait_for(
        &self,
        deadline: Duration,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<String, Vec<String>> {
        let until = Instant::now() + deadline;
        loop {
            let lines = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(line) = lines.iter().find(|l| wanted(l)) {
                return Ok(line.clone());
            }
            if Instant::now() >= until {
                return Err(lines);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn start(mut cmd: Command, stderr: Stdio) -> Proc {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn oncegate");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the listening line");
    let url = line
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_owned();
    assert!(url.starts_with("http://"), "unexpected first line `{line}`");
    Proc { child, url }
}

pub(crate) fn sandbox(ignore: &[&str]) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oncegate"));
    cmd.args(["sandbox", "--listen", "127.0.0.1:0", "--api-key", API_KEY]);
    if !ignore.is_empty() {
        cmd.args(["--ignore-idempotency-key", &ignore.join(",")]);
    }
    spawn(cmd)
}

/// A scratch copy of the example registry (and its store) in front of a fresh sandbox.
pub(crate) struct Setup {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) sandbox: Proc,
}

impl Setup {
    /// The example registry with test-sized timeouts, leases and ceilings.
    pub(crate) fn new(ignore: &[&str]) -> Self {
        Self::with_registry(ignore, |text| {
            text.replace("timeout = \"5s\"", "timeout = \"2s\"")
                .replacen("lease = \"30s\"", "lease = \"3s\"", 1)
                .replacen("attempt_ceiling = 10", "attempt_ceiling = 100", 1)
                .replace(
                    "listen = \"127.0.0.1:7878\"",
                    "listen = \"127.0.0.1:7878\"\nread_rate_per_second = 3\nalert_webhook = \"{env.TEST_ALERT_URL}\"",
                )
                .replace(
                    "name = \"append_ledger\"\n",
                    "name = \"append_ledger\"\nrequire_client_key = true\n",
                )
        })
    }

    /// `examples/payments.toml` exactly as a user runs it (only the store moves, with it).
    pub(crate) fn example() -> Self {
        Self::with_registry(&[], |text| text)
    }

    /// The example registry with `edit` applied to its text.
    pub(crate) fn with_registry(ignore: &[&str], edit: impl FnOnce(String) -> String) -> Self {
        Self::with_example("payments.toml", ignore, edit)
    }

    /// `examples/<file>` with `edit` applied to its text, as this directory's config.
    pub(crate) fn with_example(
        file: &str,
        ignore: &[&str],
        edit: impl FnOnce(String) -> String,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        std::fs::copy(
            examples.join("policies.cedar"),
            dir.path().join("policies.cedar"),
        )
        .unwrap();
        let text = edit(std::fs::read_to_string(examples.join(file)).unwrap());
        std::fs::write(dir.path().join("oncegate.toml"), text).unwrap();
        Self {
            dir,
            sandbox: sandbox(ignore),
        }
    }

    pub(crate) fn db(&self) -> PathBuf {
        self.dir.path().join("oncegate.db")
    }

    pub(crate) fn gateway(&self) -> Proc {
        self.gateway_with(&[])
    }

    pub(crate) fn gateway_with(&self, env: &[(&str, &str)]) -> Proc {
        self.gateway_sweeping(env, "1h")
    }

    pub(crate) fn gateway_sweeping(&self, env: &[(&str, &str)], sweep_every: &str) -> Proc {
        // Tests run on scratch stores: `--init` creates the store on the first start and
        // opens it on restarts.
        spawn(self.serve_command(env, sweep_every, &["--init"]))
    }

    /// The `oncegate serve` command line of [`Setup::gateway_sweeping`], for a test that
    /// reads the gateway's log itself.
    pub(crate) fn gateway_command(&self, env: &[(&str, &str)], sweep_every: &str) -> Command {
        self.serve_command(env, sweep_every, &["--init"])
    }

    /// `oncegate serve` on this directory's config, as a deployment runs it (no
    /// `--init`), with extra arguments.
    pub(crate) fn serve_command(
        &self,
        env: &[(&str, &str)],
        sweep_every: &str,
        extra: &[&str],
    ) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_oncegate"));
        cmd.args([
            "serve",
            "--config",
            self.dir.path().join("oncegate.toml").to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--sweep-every",
            sweep_every,
        ])
        .args(extra)
        .env("SANDBOX_URL", &self.sandbox.url)
        .env("SANDBOX_API_KEY", API_KEY);
        for (k, v) in TOKENS.iter().chain(env) {
            cmd.env(k, v);
        }
        cmd
    }
}

impl Setup {
    /// `oncegate` run as a user runs it beside the gateway, with the sandbox's variables.
    pub(crate) fn oncegate(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_oncegate"))
            .args(args)
            .env("SANDBOX_URL", &self.sandbox.url)
            .env("SANDBOX_API_KEY", API_KEY)
            .output()
            .unwrap()
    }
}

/// A loopback port nothing listens on (bound, then released).
pub(crate) fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

pub(crate) fn client() -> reqwest::blocking::Client {
    oncegate_gateway::server::install_crypto();
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// Every effect of `kind` (`charge`, `refund`, `email`, `ledger`) the sandbox committed.
pub(crate) fn effects(sb: &Proc, kind: &str) -> Vec<Value> {
    effects_where(sb, &format!("kind={kind}"))
}

/// The sandbox's `GET /v1/effects` with a raw query (`kind=charge&order_id=A-1`).
pub(crate) fn effects_where(sb: &Proc, query: &str) -> Vec<Value> {
    let body: Value = client()
        .get(format!("{}/v1/effects?{query}", sb.url))
        .bearer_auth(API_KEY)
        .send()
        .unwrap()
        .json()
        .unwrap();
    body["effects"].as_array().cloned().unwrap_or_default()
}

/// Queues one fault on the sandbox's next `POST` to `path`.
pub(crate) fn fault(sb: &Proc, path: &str, fault: &str, delay_ms: u64) {
    let r = client()
        .post(format!("{}/_sandbox/faults", sb.url))
        .json(&json!({"path": path, "fault": fault, "times": 1, "delay_ms": delay_ms}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "queue fault: {}", r.status());
}

/// `oncegate_clock_skew_seconds` on the gateway at `url`'s `/metrics`: how far its wall
/// clock is ahead of the store's (negative: behind).
pub(crate) fn clock_skew(url: &str) -> f64 {
    let text = client()
        .get(format!("{url}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("oncegate_clock_skew_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no oncegate_clock_skew_seconds on {url}/metrics:\n{text}"))
}

/// Runs SQL statements on the store file, as `sqlite3` would.
pub(crate) fn sql(db: &Path, statements: &[&'static str]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        for s in statements {
            sqlx::query(*s).execute(&mut conn).await.unwrap();
        }
        conn.close().await.unwrap();
    });
}

/// `POST /v1/calls` as the planner agent: (HTTP status, body).
pub(crate) fn call(gw: &Proc, capability: &str, arguments: &Value) -> (u16, Value) {
    let r = client()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .json(&json!({"capability": capability, "arguments": arguments}))
        .send()
        .unwrap();
    (r.status().as_u16(), r.json().unwrap_or(Value::Null))
}

/// An intent as the JSON API shows it to an admin (`tok-ops`).
pub(crate) fn intent(gw: &Proc, key: &str) -> Value {
    client()
        .get(format!("{}/v1/intents/{key}", gw.url))
        .bearer_auth("tok-ops")
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// Runs `tests/clients/setup.sh <part>` (flock-serialised across the test processes),
/// failing the test loudly when it fails: the test command stays the only command.
pub(crate) fn setup_part(part: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(root.join("tests/clients/setup.sh"))
        .arg(part)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run tests/clients/setup.sh {part}: {e}"));
    assert!(
        out.status.success(),
        "tests/clients/setup.sh {part} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Prometheus's `promtool`, unpacked by `tests/clients/setup.sh promtool` into
/// `target/promtool` when missing (never skipped: a machine where that fails fails).
pub(crate) fn promtool() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = root.join("target/promtool/usr/bin/promtool");
    if bin.is_file() {
        return bin;
    }
    setup_part("promtool");
    assert!(bin.is_file(), "setup.sh promtool left no {}", bin.display());
    bin
}

/// The libfaketime library to preload: where Debian's `faketime` package puts it (the
/// multiarch directory of this machine, or a plain one), installed by
/// `tests/clients/setup.sh faketime` when missing. A machine where that fails fails the
/// test, loudly: the clock tests are never skipped.
pub(crate) fn libfaketime() -> String {
    let places = [
        format!(
            "/usr/lib/{}-linux-gnu/faketime/libfaketime.so.1",
            std::env::consts::ARCH
        ),
        "/usr/lib/faketime/libfaketime.so.1".to_owned(),
    ];
    let found = || places.iter().find(|p| Path::new(p).is_file()).cloned();
    if let Some(lib) = found() {
        return lib;
    }
    // Installed by the test setup, as the browser is (flock-serialised across the test
    // processes); the test command stays the only command to run.
    setup_part("faketime");
    found().unwrap_or_else(|| {
        panic!(
            "libfaketime is not installed (looked for {places:?}) though \
             `bash tests/clients/setup.sh faketime` succeeded"
        )
    })
}

/// The environment that runs a process with its wall clock `offset` off the real one
/// (`"+130s"`, `"-600s"`, `"+25h"`): libfaketime preloaded. Only the wall clock is
/// faked (`DONT_FAKE_MONOTONIC`): tokio's timers and the upstream timeouts keep real
/// time, as on a host whose clock is merely set wrong. The store clock reads the
/// kernel's boot clock past libc, so libfaketime cannot move it either.
pub(crate) fn faketime_env(offset: &str) -> Vec<(&'static str, String)> {
    vec![
        ("LD_PRELOAD", libfaketime()),
        ("FAKETIME", offset.to_owned()),
        ("DONT_FAKE_MONOTONIC", "1".to_owned()),
    ]
}

/// A wall clock the test steps while the process runs, as an NTP correction or a
/// resumed VM would: libfaketime reads the offset from a file at every clock read
/// (`FAKETIME_NO_CACHE`). It starts right (`+0`).
pub(crate) struct SteppedClock {
    file: PathBuf,
}

impl SteppedClock {
    /// A clock whose offset is kept in `dir`.
    pub(crate) fn in_dir(dir: &Path) -> Self {
        let clock = SteppedClock {
            file: dir.join("faketime-offset"),
        };
        clock.step_to("+0");
        clock
    }

    /// The environment of a process that runs on this clock.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LD_PRELOAD", libfaketime()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.display().to_string()),
            ("FAKETIME_NO_CACHE", "1".to_owned()),
            ("DONT_FAKE_MONOTONIC", "1".to_owned()),
        ]
    }

    /// Sets the clock `offset` off the real one (`"+200"`, `"-200"`, in seconds). The
    /// file is replaced whole (a rename), so no read sees it half written.
    pub(crate) fn step_to(&self, offset: &str) {
        let next = self.file.with_extension("next");
        std::fs::write(&next, format!("{offset}\n")).unwrap();
        std::fs::rename(&next, &self.file).unwrap();
    }
}

/// `env` as [`Setup::serve_command`] takes it.
pub(crate) fn env_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}
