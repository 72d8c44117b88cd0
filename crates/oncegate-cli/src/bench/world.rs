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
/// The bench admin's token (for the listing rows).
pub const ADMIN_TOKEN: &str = "tok-bench-admin";
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

[[principals]]
name = "ops"
role = "admin"
token_env = "ONCEGATE_BENCH_ADMIN_TOKEN"
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
    /// What it is (`sandbox`, `gateway`, ...).
    pub name: String,
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

impl Drop for Service {
    /// Kills the child and waits (briefly) until it has exited, so it never outlives
    /// the scratch directory it writes to: the directory is removed after the services,
    /// on every path out of a run.
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Starts `exe args...`, waiting for its first stdout line to name the URL it listens on.
async fn start(exe: &Path, args: &[&str], dir: &Path, name: &str) -> anyhow::Result<Service> {
    start_program(exe, args, dir, name, &[]).await
}

/// Starts `program args...` with `env` added, waiting for its first stdout line to name
/// the URL it listens on (the first word starting `http://`).
pub async fn start_program(
    program: &Path,
    args: &[&str],
    dir: &Path,
    name: &str,
    env: &[(&str, &str)],
) -> anyhow::Result<Service> {
    let log = dir.join(format!("{name}.log"));
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .env("ONCEGATE_BENCH_TOKEN", TOKEN)
        .env("ONCEGATE_BENCH_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("ONCEGATE_LOG", "error,rmcp=off")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log)?)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {}", program.display()))?;
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
    Ok(Service {
        name: name.to_owned(),
        url,
        child,
        log,
    })
}

/// The sandbox and a gateway on a fresh store.
pub struct World {
    /// The sandbox.
    pub sandbox: Service,
    /// `oncegate serve` on the bench registry.
    pub gateway: Service,
    /// The registry file the gateway serves.
    pub config: PathBuf,
    /// Where more gateways are made.
    pub site: Site,
}

impl World {
    /// Starts both, in `dir`, the gateway on `sqlite://bench.db` there.
    pub async fn start(exe: &Path, dir: &Path) -> anyhow::Result<Self> {
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
        std::fs::write(dir.join("bench.cedar"), POLICY)?;
        let site = Site {
            exe: exe.to_owned(),
            dir: dir.to_owned(),
            sandbox: sandbox.url.clone(),
        };
        let config = site.prepare("bench").await?;
        let gateway = site.serve(&config, "gateway").await?;
        Ok(Self {
            sandbox,
            gateway,
            config,
            site,
        })
    }
}

/// The scratch directory, the binary and the sandbox: what a gateway is made from.
pub struct Site {
    exe: PathBuf,
    dir: PathBuf,
    sandbox: String,
}

impl Site {
    /// Writes `{name}.toml` (the bench registry on `sqlite://{name}.db`) and creates
    /// its store with `oncegate init`. Returns the registry's path.
    pub async fn prepare(&self, name: &str) -> anyhow::Result<PathBuf> {
        let config = self.dir.join(format!("{name}.toml"));
        std::fs::write(
            &config,
            registry(&self.sandbox, &format!("sqlite://{name}.db")),
        )?;
        let config_arg = config.to_string_lossy().into_owned();
        self.oncegate(&["init", "--config", &config_arg]).await?;
        Ok(config)
    }

    /// Starts `oncegate serve` on a prepared registry.
    pub async fn serve(&self, config: &Path, name: &str) -> anyhow::Result<Service> {
        let config = config.to_string_lossy();
        start(
            &self.exe,
            &["serve", "--config", &config, "--listen", "127.0.0.1:0"],
            &self.dir,
            name,
        )
        .await
    }

    /// Starts `oncegate serve --null-gateway` on a prepared registry: the same server
    /// forwarding `POST /v1/calls` with no decision and no store.
    pub async fn serve_null(&self, config: &Path, name: &str) -> anyhow::Result<Service> {
        let config = config.to_string_lossy();
        start(
            &self.exe,
            &[
                "serve",
                "--config",
                &config,
                "--listen",
                "127.0.0.1:0",
                "--null-gateway",
            ],
            &self.dir,
            name,
        )
        .await
    }

    /// Runs `oncegate ARGS...` to the end and answers its stdout; fails with its output.
    pub async fn oncegate(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(&self.exe)
            .args(args)
            .current_dir(&self.dir)
            .env("ONCEGATE_LOG", "error,rmcp=off")
            .output()
            .await?;
        if !out.status.success() {
            bail!(
                "oncegate {} failed: {} {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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
