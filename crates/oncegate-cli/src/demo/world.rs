//! The demo's running world: the sandbox provider and a gateway in this process (on an
//! embedded store in a scratch directory), the clients that drive them, and the
//! gateway child process the crash scenario SIGKILLs. Every scenario runs over one
//! world; scenarios.rs holds them.
//!
//! Everything runs on loopback.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use oncegate_engine::Gate;
use oncegate_gateway::server::{AppState, http_client, serve as serve_gateway};
use oncegate_sandbox::{SandboxConfig, serve as serve_sandbox};
use oncegate_store::{OpenMode, StoreOptions};

const API_KEY: &str = "sk_demo";
/// The principals' demo tokens.
pub const TOKENS: [(&str, &str); 6] = [
    ("planner", "tok-planner"),
    ("subagent", "tok-subagent"),
    ("swarm", "tok-swarm"),
    ("alice", "tok-alice"),
    ("bob", "tok-bob"),
    ("ops", "tok-ops"),
];

/// The running demo world.
pub struct World {
    /// The sandbox's URL.
    pub sandbox: String,
    /// The in-process gateway's URL.
    pub gateway: String,
    /// The scratch directory: configs and the embedded store.
    pub(super) dir: tempfile::TempDir,
    /// The client for the gateway and the sandbox.
    pub(super) http: reqwest::Client,
    /// The naive executor's client (a 1 s timeout, as a harness would set).
    pub(super) naive: reqwest::Client,
    /// This binary, for the crash scenario's gateway child.
    pub(super) gateway_exe: PathBuf,
}

/// The demo's additions to the example registry: `charge_card` gains a duplicate
/// rule that runs every second over the sandbox's own listing and holds the order,
/// and a daily spend limit per agent; the `swarm` agent is scenario 12's.
const DEMO_CONTROLS: &str = r#"
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

[[capabilities.limits]]
name = "charge_budget"
argument = "amount"
max = "4500.00"
currency = "USD"
window = "24h"
per = "principal"

"#;

fn demo_config(sandbox: &str) -> String {
    include_str!("../../../../examples/payments.toml")
        .replacen("# --- refund:", &format!("{DEMO_CONTROLS}# --- refund:"), 1)
        .replace("{env.SANDBOX_URL}", sandbox)
        .replace("{env.SANDBOX_API_KEY}", API_KEY)
        .replace("timeout = \"5s\"", "timeout = \"1s\"")
        .replacen("lease = \"30s\"", "lease = \"2s\"", 1)
        .replacen("attempt_ceiling = 10", "attempt_ceiling = 100", 1)
        // The refund's window is short so scenario 7 can step past it.
        .replace("description = \"Refund (part of) an order's charge. Refunds above 100.00 wait for an approver.\"\ncategory = \"keyed\"\nreplay_window = \"24h\"",
                 "description = \"Refund (part of) an order's charge. Refunds above 100.00 wait for an approver.\"\ncategory = \"keyed\"\nreplay_window = \"2s\"")
        .replace("url = \"sqlite://oncegate.db\"", "url = \"sqlite://demo.db\"")
        .replacen(
            "[[principals]]\nname = \"alice\"",
            "[[principals]]\nname = \"swarm\"\nrole = \"agent\"\ntoken_env = \"ONCEGATE_TOKEN_SWARM\"\n\n[[principals]]\nname = \"alice\"",
            1,
        )
}

impl World {
    /// Starts the sandbox and a gateway (on an embedded store in a temp directory).
    pub async fn start(gateway_exe: PathBuf) -> std::io::Result<Self> {
        let http = http_client();
        let sandbox_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let sandbox = format!("http://{}", sandbox_listener.local_addr()?);
        tokio::spawn(serve_sandbox(
            sandbox_listener,
            SandboxConfig {
                ignore_idempotency_key: vec![oncegate_sandbox::Resource::Emails],
                api_key: Some(API_KEY.into()),
            },
        ));
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("oncegate.toml"), demo_config(&sandbox))?;
        // The crash gateway waits 30 s for the provider, so the SIGKILL surely lands
        // between the provider's commit and the gateway's record.
        std::fs::write(
            dir.path().join("crash.toml"),
            demo_config(&sandbox).replace("timeout = \"1s\"", "timeout = \"30s\""),
        )?;
        std::fs::write(
            dir.path().join("policies.cedar"),
            include_str!("../../../../examples/policies.cedar"),
        )?;
        let gateway = start_embedded(dir.path(), http.clone()).await?;
        let naive = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()
            .map_err(std::io::Error::other)?;
        Ok(Self {
            sandbox,
            gateway,
            dir,
            http,
            naive,
            gateway_exe,
        })
    }

    pub(super) async fn fault(&self, path: &str, fault: &str, times: u32, delay_ms: u64) {
        let _ = self
            .http
            .post(format!("{}/_sandbox/faults", self.sandbox))
            .json(&json!({"path": path, "fault": fault, "times": times, "delay_ms": delay_ms}))
            .send()
            .await;
    }

    /// Effects whose order id (or ledger entry ref) is `reference`.
    pub(super) async fn effects(&self, reference: &str) -> usize {
        let Ok(r) = self
            .http
            .get(format!("{}/v1/effects", self.sandbox))
            .bearer_auth(API_KEY)
            .send()
            .await
        else {
            return 0;
        };
        let body: Value = r.json().await.unwrap_or(Value::Null);
        body["effects"]
            .as_array()
            .map(|all| {
                all.iter()
                    .filter(|e| {
                        e["order_id"] == reference
                            || e["request"]["order_id"] == reference
                            || e["request"]["entry_ref"] == reference
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    /// A naive executor call: straight to the provider with a fresh key.
    pub(super) async fn naive(&self, path: &str, body: Value) -> bool {
        let key = format!("uuid-{:016x}", rand::random::<u64>());
        matches!(
            self.naive.post(format!("{}{path}", self.sandbox)).bearer_auth(API_KEY).header("Idempotency-Key", key).json(&body).send().await,
            Ok(r) if r.status().is_success()
        )
    }

    /// A call through a gateway.
    pub(super) async fn call(
        &self,
        gateway: &str,
        token: &str,
        capability: &str,
        arguments: Value,
        run: Option<&str>,
    ) -> Value {
        let mut req = self
            .http
            .post(format!("{gateway}/v1/calls"))
            .bearer_auth(token)
            .json(&json!({"capability": capability, "arguments": arguments}));
        if let Some(run) = run {
            req = req
                .header("Oncegate-Run-Id", run)
                .header("Oncegate-Step-Id", "step-1");
        }
        match req.timeout(Duration::from_secs(15)).send().await {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(e) => json!({"status": "transport_error", "error": e.to_string()}),
        }
    }

    pub(super) async fn approve(&self, token: &str, id: &str) -> Value {
        match self
            .http
            .post(format!("{}/v1/approvals/{id}/approve", self.gateway))
            .bearer_auth(token)
            .send()
            .await
        {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(e) => json!({"error": e.to_string()}),
        }
    }

    /// Prints where everything listens, for `--keep`.
    pub fn describe(&self) -> String {
        let tokens: Vec<String> = TOKENS.iter().map(|(p, t)| format!("{p}={t}")).collect();
        format!(
            "gateway: {} (MCP at {}/mcp, JSON API under /v1)\nsandbox: {} (API key {API_KEY}; ledger at /v1/effects; MCP at /mcp)\ntokens:  {}\nstore:   {} (config beside it: oncegate.toml)",
            self.gateway,
            self.gateway,
            self.sandbox,
            tokens.join(" "),
            self.dir.path().join("embedded.db").display()
        )
    }
}

async fn start_embedded(dir: &Path, http: reqwest::Client) -> std::io::Result<String> {
    let registry = oncegate_engine::config::load_registry(&dir.join("oncegate.toml"))
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let store = oncegate_store::open(
        "sqlite://embedded.db",
        dir,
        OpenMode::Create,
        StoreOptions::default(),
    )
    .await
    .map_err(std::io::Error::other)?;
    let gate = Gate::on_store(registry, store);
    let tokens = TOKENS
        .iter()
        .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
        .collect();
    let state = AppState::with_tokens(gate, http, tokens);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(serve_gateway(
        listener,
        state,
        Duration::from_secs(3600),
        std::future::pending(),
    ));
    Ok(url)
}

pub(super) async fn spawn_gateway(
    exe: &Path,
    dir: &Path,
) -> Result<(tokio::process::Child, String), String> {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(["serve", "--config"])
        .arg(dir.join("oncegate.toml"))
        // A scratch store in the demo's own directory: created on this first start.
        .args(["--listen", "127.0.0.1:0", "--sweep-every", "1h", "--init"]);
    for (p, t) in TOKENS {
        cmd.env(format!("ONCEGATE_TOKEN_{}", p.to_ascii_uppercase()), t);
    }
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    tokio::time::timeout(
        Duration::from_secs(30),
        BufReader::new(stdout).read_line(&mut line),
    )
    .await
    .map_err(|_| "the gateway did not start within 30 s".to_owned())?
    .map_err(|e| e.to_string())?;
    let url = line
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_owned();
    if !url.starts_with("http://") {
        return Err(format!("the gateway did not start: `{line}`"));
    }
    Ok((child, url))
}
