//! What a bench run stands up: the sandbox (the zero-latency upstream) and the gateway,
//! each as its own `oncegate` process, as a user would run them, on a store in a
//! scratch directory on the real disk. Children are killed when the world is dropped.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The bench principal's token (loopback only, a scratch store).
pub const TOKEN: &str = "tok-bench-agent";
/// The sandbox's API key.
pub const SANDBOX_KEY: &str = "sk_bench";

/// The bench registry: `charge_card` on the sandbox's HTTP API, `charge_card_mcp` on its
/// MCP server; the same key recipe, reconciliation and policy as examples/payments.toml.
fn registry(sandbox: &str, store_url: &str) -> String {
    let capability = |name: &str, upstream: &str| {
        format!(
            r#"
[[capabilities]]
name = "{name}"
description = "Charge the customer's card for an order. One order is charged at most once."
category = "keyed"
replay_window = "24h"
lease = "30s"
on_unknown = "reconcile"
cross_run = "require_approval"
policy = "bench.cedar"

[capabilities.key]
business_ref = "order_id"
scope = "global"
significant = [
  {{ arg = "amount", type = "money", currency_arg = "currency", default_currency = "USD" }},
]
{upstream}"#
        )
    };
    let http = capability(
        "charge_card",
        &format!(
            r#"
[capabilities.upstream]
kind = "http"
url = "{sandbox}/v1/charges"
timeout = "5s"
effect_ref = "/id"
headers = {{ Authorization = "Bearer {SANDBOX_KEY}" }}
body = {{ order_id = "{{business_ref}}", amount_minor = "{{norm.amount.minor}}", currency = "{{norm.amount.currency}}", memo = "{{arg.memo}}" }}

[capabilities.reconcile]
kind = "http"
url = "{sandbox}/v1/charges?idempotency_key={{key}}"
found = "/found"
effect_ref = "/charge/id"
result = "/charge"
"#
        ),
    );
    let mcp = capability(
        "charge_card_mcp",
        &format!(
            r#"
[capabilities.upstream]
kind = "mcp"
url = "{sandbox}/mcp"
tool = "create_charge"
timeout = "5s"
effect_ref = "/id"
headers = {{ Authorization = "Bearer {SANDBOX_KEY}" }}
body = {{ order_id = "{{business_ref}}", amount_minor = "{{norm.amount.minor}}", currency = "{{norm.amount.currency}}", memo = "{{arg.memo}}" }}

[capabilities.reconcile]
kind = "mcp"
tool = "find_charge"
arguments = {{ idempotency_key = "{{key}}" }}
found = "/found"
effect_ref = "/charge/id"
result = "/charge"
"#
        ),
    );
    format!(
        r#"# Written by `oncegate bench`.
[gateway]
tenant = "bench"
time_zone = "UTC"
listen = "127.0.0.1:0"

[store]
url = "{store_url}"

[[principals]]
name = "agent"
role = "agent"
token_env = "ONCEGATE_BENCH_TOKEN"
{http}{mcp}"#
    )
}

const POLICY: &str = r#"// Written by `oncegate bench`: the example's charge rules, for both upstreams.
permit (
  principal,
  action in [Action::"charge_card", Action::"charge_card_mcp"],
  resource
) when { principal.role == "agent" };

@id("charge-ceiling")
forbid (principal, action in [Action::"charge_card", Action::"charge_card_mcp"], resource)
when { context.amount > 500000 };
"#;

/// A child `oncegate` process and the URL it printed.
pub struct Service {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    child: Child,
    log: PathBuf,
}

impl Service {
    /// The child's process id (for reading its CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The last lines the child wrote to stderr.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// Starts `exe args...`, waiting for its first stdout line to name the URL it listens on.
async fn start(exe: &Path, args: &[&str], dir: &Path, name: &str) -> anyhow::Result<Service> {
    let log = dir.join(format!("{name}.log"));
    let mut child = Command::new(exe)
        .args(args)
        .current_dir(dir)
        .env("ONCEGATE_BENCH_TOKEN", TOKEN)
        .env("ONCEGATE_LOG", "error,rmcp=off")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log)?)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .with_context(|| format!("{name} did not start in 30 s"))??;
    let Some(url) = first
        .as_deref()
        .and_then(|l| l.split_whitespace().find(|w| w.starts_with("http://")))
    else {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        bail!("{name} did not start: {}", text.trim());
    };
    let url = url.to_owned();
    // Keep reading stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Service { url, child, log })
}

/// The sandbox and a gateway on a fresh store.
pub struct World {
    /// The sandbox.
    pub sandbox: Service,
    /// `oncegate serve` on the bench registry.
    pub gateway: Service,
    /// The registry file the gateway serves.
    pub config: PathBuf,
}

impl World {
    /// Starts both, in `dir`, with `store_url` as the gateway's store (`sqlite://...` in
    /// `dir`, or a PostgreSQL database).
    pub async fn start(exe: &Path, dir: &Path, store_url: &str) -> anyhow::Result<Self> {
        let sandbox = start(
            exe,
            &[
                "sandbox",
                "--listen",
                "127.0.0.1:0",
                "--api-key",
                SANDBOX_KEY,
            ],
            dir,
            "sandbox",
        )
        .await?;
        let config = dir.join("bench.toml");
        std::fs::write(&config, registry(&sandbox.url, store_url))?;
        std::fs::write(dir.join("bench.cedar"), POLICY)?;
        let config_arg = config.to_string_lossy().into_owned();
        let init = Command::new(exe)
            .args(["init", "--config", &config_arg])
            .current_dir(dir)
            .output()
            .await?;
        if !init.status.success() {
            bail!(
                "oncegate init failed: {}",
                String::from_utf8_lossy(&init.stderr).trim()
            );
        }
        let gateway = start(
            exe,
            &["serve", "--config", &config_arg, "--listen", "127.0.0.1:0"],
            dir,
            "gateway",
        )
        .await?;
        Ok(Self {
            sandbox,
            gateway,
            config,
        })
    }
}

/// CPU time (user + system) a process has used so far, from /proc (Linux only).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some(Duration::from_millis(ticks * 10))
}
