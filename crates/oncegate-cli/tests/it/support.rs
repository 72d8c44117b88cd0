//! Real processes for the end-to-end tests: `oncegate sandbox` and `oncegate serve` on
//! loopback, a scratch copy of the example registry, and the sandbox's own ledger and
//! fault API to count and provoke effects.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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
pub(crate) fn spawn(mut cmd: Command) -> Proc {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
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
