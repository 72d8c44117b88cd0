//! `oncegate demo`: the red-team scenarios, run twice each — once through a naive
//! executor (a fresh UUID key per attempt, as agent harnesses do today) and once through
//! oncegate — counting effects in the sandbox provider's ledger.
//!
//! Why one file: the twelve scenarios share one running world (sandbox, gateway, clients),
//! hence one long file.
//!
//! Everything runs on loopback: the sandbox and one gateway in this process, plus a
//! gateway child process for the crash scenario (it must really be SIGKILLed).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Serialize;
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

/// One scenario's result.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// 1..=10.
    pub id: u8,
    /// Short name.
    pub name: &'static str,
    /// The one-line story.
    pub story: &'static str,
    /// Effects the naive executor caused.
    pub naive_effects: usize,
    /// Effects with oncegate in front.
    pub oncegate_effects: usize,
    /// What oncegate must produce.
    pub expected: usize,
    /// Whatever else was checked (alerts, approvals, breaker), and whether it held.
    pub notes: String,
    /// oncegate met its expectation.
    pub ok: bool,
}

/// The running demo world.
pub struct World {
    /// The sandbox's URL.
    pub sandbox: String,
    /// The in-process gateway's URL.
    pub gateway: String,
    dir: tempfile::TempDir,
    http: reqwest::Client,
    naive: reqwest::Client,
    gateway_exe: PathBuf,
}

/// The scenarios, in order: (id, name, story).
pub const SCENARIOS: [(u8, &str, &str); 12] = [
    (
        1,
        "timeout-retry",
        "the provider commits then stalls past the timeout; the harness retries 3x",
    ),
    (
        2,
        "injected re-plan",
        "a page says the charge \"failed, reissue it\"; re-plans drift 12.5 / \"12.50\" / 1250 minor",
    ),
    (
        3,
        "crash replay",
        "the gateway is SIGKILLed between the provider's commit and the record, restarted, the run resumes",
    ),
    (
        4,
        "double approval",
        "a refund over the limit needs approval; two approvers click at once",
    ),
    (
        5,
        "parallel subagents",
        "16 subagents fire the same charge at once",
    ),
    (
        6,
        "retry storm",
        "50 repeats of a sent email are replays and raise an alert; 50 against a provider answering 429 trip the breaker",
    ),
    (
        7,
        "outside the window",
        "a second refund after the replay window is a new intent and goes to approval",
    ),
    (
        8,
        "cross-run duplicate",
        "the same ledger entry from a second run raises an alert and is held",
    ),
    (
        9,
        "provider ignores keys",
        "the email provider ignores Idempotency-Key; the send times out once",
    ),
    (
        10,
        "control",
        "5 different orders give 5 charges (no false dedupe)",
    ),
    (
        11,
        "bypass held",
        "a direct credential charges an order the gateway charged; detection holds it, the next charge is refused",
    ),
    (
        12,
        "spend limit",
        "16 subagents charge 16 different orders of 1,500.00 at once against a 4,500.00 USD daily budget",
    ),
];

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
    include_str!("../../../examples/payments.toml")
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
            include_str!("../../../examples/policies.cedar"),
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

    async fn fault(&self, path: &str, fault: &str, times: u32, delay_ms: u64) {
        let _ = self
            .http
            .post(format!("{}/_sandbox/faults", self.sandbox))
            .json(&json!({"path": path, "fault": fault, "times": times, "delay_ms": delay_ms}))
            .send()
            .await;
    }

    /// Effects whose order id (or ledger entry ref) is `reference`.
    async fn effects(&self, reference: &str) -> usize {
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
    async fn naive(&self, path: &str, body: Value) -> bool {
        let key = format!("uuid-{:016x}", rand::random::<u64>());
        matches!(
            self.naive.post(format!("{}{path}", self.sandbox)).bearer_auth(API_KEY).header("Idempotency-Key", key).json(&body).send().await,
            Ok(r) if r.status().is_success()
        )
    }

    /// A call through a gateway.
    async fn call(
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

    async fn approve(&self, token: &str, id: &str) -> Value {
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

    /// Runs one scenario.
    pub async fn run(&self, id: u8) -> Row {
        // A fault left queued by an earlier scenario must not leak into this one.
        let _ = self
            .http
            .delete(format!("{}/_sandbox/faults", self.sandbox))
            .send()
            .await;
        let (_, name, story) = SCENARIOS[usize::from(id - 1)];
        let g = self.gateway.clone();
        let (naive, ours, expected, notes, extra_ok) = match id {
            1 => {
                self.fault("/v1/charges", "stall_after_commit", 3, 3000)
                    .await;
                for _ in 0..4 {
                    if self
                        .naive(
                            "/v1/charges",
                            json!({"order_id": "N1", "amount_minor": 1250, "currency": "USD"}),
                        )
                        .await
                    {
                        break;
                    }
                }
                self.fault("/v1/charges", "stall_after_commit", 1, 3000)
                    .await;
                let mut statuses = Vec::new();
                for _ in 0..4 {
                    let o = self
                        .call(
                            &g,
                            "tok-planner",
                            "charge_card",
                            json!({"order_id": "O1", "amount": "12.50"}),
                            None,
                        )
                        .await;
                    statuses.push(o["status"].as_str().unwrap_or("?").to_owned());
                }
                let ok = statuses.first().map(String::as_str) == Some("unknown")
                    && statuses[1..].iter().all(|s| s == "replayed");
                (
                    self.effects("N1").await,
                    self.effects("O1").await,
                    1,
                    format!("oncegate answered {}", statuses.join(", ")),
                    ok,
                )
            }
            2 => {
                for amount in [1250, 1250, 1250, 1250] {
                    self.naive(
                        "/v1/charges",
                        json!({"order_id": "N2", "amount_minor": amount, "currency": "USD"}),
                    )
                    .await;
                }
                let mut statuses = Vec::new();
                for (amount, memo) in [
                    (json!("12.50"), "first"),
                    (json!(12.5), "it failed, reissue"),
                    (json!("12.50"), "retry"),
                    (json!({"minor": 1250}), "really reissue"),
                ] {
                    let o = self.call(&g, "tok-planner", "charge_card", json!({"order_id": "O2", "amount": amount, "currency": "USD", "memo": memo}), None).await;
                    statuses.push(o["status"].as_str().unwrap_or("?").to_owned());
                }
                let ok = statuses[0] == "applied" && statuses[1..].iter().all(|s| s == "replayed");
                (
                    self.effects("N2").await,
                    self.effects("O2").await,
                    1,
                    format!("oncegate answered {}", statuses.join(", ")),
                    ok,
                )
            }
            3 => {
                // Naive: the harness crashed after the provider committed, forgot, resumed.
                self.naive(
                    "/v1/charges",
                    json!({"order_id": "N3", "amount_minor": 999, "currency": "USD"}),
                )
                .await;
                self.naive(
                    "/v1/charges",
                    json!({"order_id": "N3", "amount_minor": 999, "currency": "USD"}),
                )
                .await;
                let (replayed, note) = match self.crash_replay().await {
                    Ok(s) => (
                        s == "replayed",
                        format!("after restart oncegate answered {s}"),
                    ),
                    Err(e) => (false, format!("crash run failed: {e}")),
                };
                (
                    self.effects("N3").await,
                    self.effects("O3").await,
                    1,
                    note,
                    replayed,
                )
            }
            4 => {
                self.naive(
                    "/v1/refunds",
                    json!({"order_id": "N4", "amount_minor": 25000, "currency": "USD"}),
                )
                .await;
                self.naive(
                    "/v1/refunds",
                    json!({"order_id": "N4", "amount_minor": 25000, "currency": "USD"}),
                )
                .await;
                let held = self
                    .call(
                        &g,
                        "tok-planner",
                        "refund",
                        json!({"order_id": "O4", "amount": "250.00"}),
                        None,
                    )
                    .await;
                let id = held["approval_id"].as_str().unwrap_or_default().to_owned();
                let (a, b) =
                    tokio::join!(self.approve("tok-alice", &id), self.approve("tok-bob", &id));
                let one_result = [&a, &b]
                    .iter()
                    .all(|o| o["status"] == "applied" || o["status"] == "replayed")
                    && a["effect_ref"] == b["effect_ref"]
                    && a["effect_ref"].is_string();
                let ok = held["status"] == "pending_approval" && !id.is_empty() && one_result;
                (
                    self.effects("N4").await,
                    self.effects("O4").await,
                    1,
                    format!(
                        "held as {id}; clicks answered {} and {}",
                        a["status"], b["status"]
                    ),
                    ok,
                )
            }
            5 => {
                let naive: Vec<_> = (0..16)
                    .map(|_| {
                        self.naive(
                            "/v1/charges",
                            json!({"order_id": "N5", "amount_minor": 500, "currency": "USD"}),
                        )
                    })
                    .collect();
                futures::future::join_all(naive).await;
                let calls: Vec<_> = (0..16)
                    .map(|i| self.call(&g, if i % 2 == 0 { "tok-planner" } else { "tok-subagent" }, "charge_card", json!({"order_id": "O5", "amount": "5.00", "memo": format!("subagent {i}")}), None))
                    .collect();
                let outcomes = futures::future::join_all(calls).await;
                let applied = outcomes.iter().filter(|o| o["status"] == "applied").count();
                (
                    self.effects("N5").await,
                    self.effects("O5").await,
                    1,
                    format!(
                        "{applied} applied, {} in flight or replayed",
                        outcomes.len() - applied
                    ),
                    applied == 1,
                )
            }
            6 => {
                for _ in 0..50 {
                    self.naive(
                        "/v1/emails",
                        json!({"order_id": "N6", "to": "a@b.co", "template": "receipt"}),
                    )
                    .await;
                }
                // A storm against an intent that took effect: every repeat is a replay
                // with the effect reference (nothing runs, nothing is written), and the
                // loop itself raises an alert.
                let (mut replays, mut storm) = (0, false);
                for _ in 0..50 {
                    let o = self
                        .call(
                            &g,
                            "tok-planner",
                            "send_email",
                            json!({"order_id": "O6", "to": "a@b.co", "template": "receipt"}),
                            None,
                        )
                        .await;
                    replays += usize::from(o["status"] == "replayed");
                    storm |= o["alerts"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|x| x["kind"] == "replay_storm"));
                }
                // A storm of executions: the provider keeps answering 429, so every
                // repeat executes again, until the attempt ceiling trips the breaker.
                self.fault("/v1/emails", "rate_limit", 50, 0).await;
                let mut refused = 0;
                for _ in 0..50 {
                    let o = self
                        .call(
                            &g,
                            "tok-planner",
                            "send_email",
                            json!({"order_id": "O6-429", "to": "a@b.co", "template": "receipt"}),
                            None,
                        )
                        .await;
                    if o["status"] == "refused" && o["reason"]["code"] == "OG-0004" {
                        refused += 1;
                    }
                }
                let _ = self
                    .http
                    .delete(format!("{}/_sandbox/faults", self.sandbox))
                    .send()
                    .await;
                (
                    self.effects("N6").await,
                    self.effects("O6").await + self.effects("O6-429").await,
                    1,
                    format!(
                        "{replays} of 49 repeats replayed{}; under 429s the breaker refused {refused} of 50",
                        if storm {
                            " with a replay-storm alert"
                        } else {
                            ", NO replay-storm alert"
                        }
                    ),
                    replays == 49 && storm && refused == 45,
                )
            }
            7 => {
                self.naive(
                    "/v1/refunds",
                    json!({"order_id": "N7", "amount_minor": 5000, "currency": "USD"}),
                )
                .await;
                self.naive(
                    "/v1/refunds",
                    json!({"order_id": "N7", "amount_minor": 5000, "currency": "USD"}),
                )
                .await;
                let first = self
                    .call(
                        &g,
                        "tok-planner",
                        "refund",
                        json!({"order_id": "O7", "amount": "50.00"}),
                        None,
                    )
                    .await;
                tokio::time::sleep(Duration::from_millis(2200)).await;
                let second = self
                    .call(
                        &g,
                        "tok-planner",
                        "refund",
                        json!({"order_id": "O7", "amount": "50"}),
                        None,
                    )
                    .await;
                let ok = first["status"] == "applied"
                    && second["status"] == "pending_approval"
                    && second["generation"] == 2;
                (
                    self.effects("N7").await,
                    self.effects("O7").await,
                    1,
                    format!(
                        "after the window: {} (generation {})",
                        second["status"], second["generation"]
                    ),
                    ok,
                )
            }
            8 => {
                let entry = |r: &str| json!({"entry_ref": r, "account": "4000", "amount": "10.00"});
                self.naive("/v1/ledger", entry("N8")).await;
                self.naive("/v1/ledger", entry("N8")).await;
                let first = self
                    .call(
                        &g,
                        "tok-planner",
                        "append_ledger",
                        entry("O8"),
                        Some("run-1"),
                    )
                    .await;
                let second = self
                    .call(
                        &g,
                        "tok-planner",
                        "append_ledger",
                        entry("O8"),
                        Some("run-2"),
                    )
                    .await;
                let alerted = second["alerts"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x["kind"] == "cross_run"));
                let ok = first["status"] == "applied"
                    && second["status"] == "pending_approval"
                    && alerted;
                (
                    self.effects("N8").await,
                    self.effects("O8").await,
                    1,
                    format!(
                        "second run: {} with a cross-run alert: {alerted}",
                        second["status"]
                    ),
                    ok,
                )
            }
            9 => {
                self.fault("/v1/emails", "stall_after_commit", 1, 3000)
                    .await;
                for _ in 0..3 {
                    if self.naive("/v1/emails", json!({"order_id": "N9", "to": "ann@example.com", "template": "receipt"})).await {
                        break;
                    }
                }
                self.naive(
                    "/v1/emails",
                    json!({"order_id": "N9", "to": "ann@example.com", "template": "receipt"}),
                )
                .await;
                self.fault("/v1/emails", "stall_after_commit", 1, 3000)
                    .await;
                let mut statuses = Vec::new();
                for to in ["ann@example.com", " ann@EXAMPLE.com", "ann@example.COM"] {
                    let o = self
                        .call(
                            &g,
                            "tok-planner",
                            "send_email",
                            json!({"order_id": "O9", "to": to, "template": "receipt"}),
                            None,
                        )
                        .await;
                    statuses.push(o["status"].as_str().unwrap_or("?").to_owned());
                }
                (
                    self.effects("N9").await,
                    self.effects("O9").await,
                    1,
                    format!("oncegate answered {}", statuses.join(", ")),
                    statuses[1..].iter().all(|s| s == "replayed"),
                )
            }
            11 => self.bypass_held().await,
            12 => self.spend_limit().await,
            _ => {
                let mut total_naive = 0;
                let mut total = 0;
                for i in 0..5 {
                    self.naive("/v1/charges", json!({"order_id": format!("N10-{i}"), "amount_minor": 100, "currency": "USD"})).await;
                    self.call(
                        &g,
                        "tok-planner",
                        "charge_card",
                        json!({"order_id": format!("O10-{i}"), "amount": "1.00"}),
                        None,
                    )
                    .await;
                    total_naive += self.effects(&format!("N10-{i}")).await;
                    total += self.effects(&format!("O10-{i}")).await;
                }
                (
                    total_naive,
                    total,
                    5,
                    "one charge per order".to_owned(),
                    true,
                )
            }
        };
        Row {
            id,
            name,
            story,
            naive_effects: naive,
            oncegate_effects: ours,
            expected,
            ok: extra_ok && ours == expected,
            notes,
        }
    }

    /// Scenario 3: a gateway child process, SIGKILLed while the provider holds a
    /// committed charge, then restarted on the same store.
    async fn crash_replay(&self) -> Result<String, String> {
        let dir = self.dir.path();
        let gw = spawn_gateway(&self.gateway_exe, dir).await?;
        self.fault("/v1/charges", "stall_after_commit", 1, 30_000)
            .await;
        let url = gw.1.clone();
        let http = self.http.clone();
        let pending = tokio::spawn(async move {
            let _ = http.post(format!("{url}/v1/calls")).bearer_auth("tok-planner").json(&json!({"capability": "charge_card", "arguments": {"order_id": "O3", "amount": "9.99"}})).send().await;
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.effects("O3").await == 0 {
            if tokio::time::Instant::now() > deadline {
                return Err("the provider never committed".into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (mut child, _) = gw;
        child.kill().await.map_err(|e| e.to_string())?;
        pending.abort();
        let (mut child, url) = spawn_gateway(&self.gateway_exe, dir).await?;
        tokio::time::sleep(Duration::from_millis(2100)).await; // the dead gateway's lease
        let o = self
            .call(
                &url,
                "tok-planner",
                "charge_card",
                json!({"order_id": "O3", "amount": 9.99, "memo": "resumed run"}),
                None,
            )
            .await;
        let _ = child.kill().await;
        Ok(o["status"].as_str().unwrap_or("?").to_owned())
    }

    /// Scenario 11: the gateway charges an order, a direct credential charges it
    /// again; detection (every second, over the sandbox's listing) finds the bypass
    /// and holds the order, so the agent's next charge on it is refused; an admin
    /// clears the hold. The naive world has no backstop: its next charge lands too.
    async fn bypass_held(&self) -> (usize, usize, usize, String, bool) {
        let g = self.gateway.clone();
        let direct =
            |order: &str| json!({"order_id": order, "amount_minor": 1200, "currency": "USD"});
        for _ in 0..2 {
            self.naive("/v1/charges", direct("N11")).await;
        }
        self.naive(
            "/v1/charges",
            json!({"order_id": "N11", "amount_minor": 300, "currency": "USD"}),
        )
        .await;
        let first = self
            .call(
                &g,
                "tok-planner",
                "charge_card",
                json!({"order_id": "O11", "amount": "12.00"}),
                None,
            )
            .await;
        self.naive("/v1/charges", direct("O11")).await; // the bypass
        let started = tokio::time::Instant::now();
        let deadline = started + Duration::from_secs(10);
        let finding = loop {
            let listed = self
                .http
                .get(format!("{g}/v1/findings"))
                .bearer_auth("tok-ops")
                .send()
                .await;
            let body: Value = match listed {
                Ok(r) => r.json().await.unwrap_or(Value::Null),
                Err(_) => Value::Null,
            };
            let found = body["findings"].as_array().and_then(|all| {
                all.iter()
                    .find(|f| f["kind"] == "bypass" && f["effects"].to_string().contains("\"O11\""))
                    .cloned()
            });
            if let Some(f) = found {
                break Some(f);
            }
            if tokio::time::Instant::now() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let found_in = started.elapsed().as_millis();
        let next = self
            .call(
                &g,
                "tok-planner",
                "charge_card",
                json!({"order_id": "O11", "amount": "3.00", "memo": "the rest"}),
                None,
            )
            .await;
        let hold = finding
            .as_ref()
            .and_then(|f| f["hold_id"].as_str())
            .unwrap_or_default()
            .to_owned();
        let cleared = self
            .http
            .post(format!("{g}/v1/admin/holds/{hold}/clear"))
            .bearer_auth("tok-ops")
            .json(&json!({"reason": "demo: the bypass was refunded by hand"}))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        let ok = first["status"] == "applied"
            && finding.is_some()
            && next["status"] == "refused"
            && next["reason"]["code"] == "OG-0026"
            && cleared;
        let notes = match &finding {
            Some(f) => format!(
                "bypass {} found in {found_in} ms, hold {hold}; next charge {} {}; cleared: {cleared}",
                f["id"].as_str().unwrap_or("?"),
                next["status"].as_str().unwrap_or("?"),
                next["reason"]["code"].as_str().unwrap_or("")
            ),
            None => "no finding within 10 s".to_owned(),
        };
        (
            self.effects("N11").await,
            self.effects("O11").await,
            2,
            notes,
            ok,
        )
    }

    /// Scenario 12: sixteen parallel charges of distinct orders by one agent, with
    /// room for three in its daily budget: three execute, thirteen are refused with
    /// the limit's code. Naive, all sixteen land.
    async fn spend_limit(&self) -> (usize, usize, usize, String, bool) {
        let g = self.gateway.clone();
        let naive: Vec<_> = (0..16)
            .map(|i| {
                self.naive(
                    "/v1/charges",
                    json!({"order_id": format!("N12-{i}"), "amount_minor": 150_000, "currency": "USD"}),
                )
            })
            .collect();
        futures::future::join_all(naive).await;
        let calls: Vec<_> = (0..16)
            .map(|i| {
                self.call(
                    &g,
                    "tok-swarm",
                    "charge_card",
                    json!({"order_id": format!("O12-{i}"), "amount": "1500.00"}),
                    None,
                )
            })
            .collect();
        let outcomes = futures::future::join_all(calls).await;
        let applied = outcomes.iter().filter(|o| o["status"] == "applied").count();
        let limited = outcomes
            .iter()
            .filter(|o| o["status"] == "refused" && o["reason"]["code"] == "OG-0027")
            .count();
        let mut naive_total = 0;
        let mut total = 0;
        for i in 0..16 {
            naive_total += self.effects(&format!("N12-{i}")).await;
            total += self.effects(&format!("O12-{i}")).await;
        }
        (
            naive_total,
            total,
            3,
            format!("{applied} applied, {limited} refused OG-0027 (budget 4,500.00 USD)"),
            applied == 3 && limited == 13,
        )
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

async fn spawn_gateway(exe: &Path, dir: &Path) -> Result<(tokio::process::Child, String), String> {
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
