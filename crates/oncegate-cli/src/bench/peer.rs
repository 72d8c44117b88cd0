//! The peer: CTRLRun, measured on the same workload by `peer.py` (its own closed loop,
//! in a throwaway virtualenv the bench creates), interleaved with oncegate's rows.
//!
//! Three drivers: CTRLRun's in-process `@protect` on its default SQLite store; its MCP
//! gateway in front of the sandbox's MCP server; and the official Python MCP SDK as a
//! client of any MCP server (CTRLRun's gateway, oncegate's `/mcp`, the sandbox itself:
//! that last one is the Python client's own bound).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use futures::future::BoxFuture;
use serde::Deserialize;
use tokio::process::Command;

use super::load::Sample;
use super::plan::Drive;
use super::world::{SANDBOX_KEY, Service, start_program};

const SCRIPT: &str = include_str!("peer.py");

/// The virtualenv with CTRLRun and the MCP SDK, and the script.
#[derive(Clone)]
pub struct Peer {
    python: PathBuf,
    script: PathBuf,
    dir: PathBuf,
}

impl Peer {
    /// Creates `dir/peer-venv` and installs the script's pinned requirements into it.
    pub async fn install(dir: &Path) -> anyhow::Result<Self> {
        let script = dir.join("peer.py");
        std::fs::write(&script, SCRIPT)?;
        let requirements = run(Command::new("python3").arg(&script).arg("requirements"))
            .await
            .context("python3 is needed for the peer rows")?;
        let venv = dir.join("peer-venv");
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv)).await?;
        let python = venv.join("bin").join("python");
        run(Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(requirements.split_whitespace()))
        .await
        .context("cannot install CTRLRun and the MCP SDK into a virtualenv")?;
        Ok(Self {
            python,
            script,
            dir: dir.to_owned(),
        })
    }

    /// CTRLRun's `@protect` around a no-op effect, a new intent per call.
    pub fn protect(&self) -> Box<dyn Drive> {
        let state = self
            .dir
            .join("ctrlrun-protect")
            .to_string_lossy()
            .into_owned();
        Box::new(PeerRun {
            peer: self.clone(),
            args: vec!["protect".into(), "--dir".into(), state],
        })
    }

    /// The Python MCP SDK calling `tool` on `url`, a new intent per call.
    pub fn mcp_client(
        &self,
        url: &str,
        tool: &str,
        token: Option<&str>,
        template: Option<&str>,
    ) -> Box<dyn Drive> {
        let mut args = vec![
            "mcp".into(),
            "--url".into(),
            url.into(),
            "--tool".into(),
            tool.into(),
        ];
        if let Some(t) = token {
            args.extend(["--token".into(), t.into()]);
        }
        if let Some(t) = template {
            args.extend(["--args-template".into(), t.into()]);
        }
        Box::new(PeerRun {
            peer: self.clone(),
            args,
        })
    }

    /// Starts CTRLRun's MCP gateway in front of the sandbox's MCP server.
    pub async fn gateway(&self, sandbox: &str) -> anyhow::Result<Service> {
        let state = self.dir.join("ctrlrun-gateway");
        let script = self.script.to_string_lossy();
        let upstream = format!("{sandbox}/mcp");
        let state = state.to_string_lossy();
        start_program(
            &self.python,
            &[
                &script,
                "gateway",
                "--upstream",
                &upstream,
                "--listen",
                "127.0.0.1:0",
                "--dir",
                &state,
            ],
            &self.dir,
            "ctrlrun-gateway",
            &[("SANDBOX_API_KEY", SANDBOX_KEY)],
        )
        .await
    }
}

/// Runs a command to the end; answers its stdout, or fails with its stderr.
async fn run(command: &mut Command) -> anyhow::Result<String> {
    let out = command.output().await?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One `peer.py` measuring mode.
struct PeerRun {
    peer: Peer,
    args: Vec<String>,
}

/// What `peer.py` prints at the end of a measuring run.
#[derive(Deserialize)]
struct Measured {
    errors: u64,
    seconds: f64,
    latencies_us: Vec<u64>,
}

impl Drive for PeerRun {
    fn drive(&self, concurrency: usize, duration: Duration) -> BoxFuture<'static, Sample> {
        let mut command = Command::new(&self.peer.python);
        command
            .arg(&self.peer.script)
            .args(&self.args)
            .arg("--concurrency")
            .arg(concurrency.to_string())
            .arg("--seconds")
            .arg(duration.as_secs_f64().to_string())
            .current_dir(&self.peer.dir)
            .kill_on_drop(true);
        Box::pin(async move {
            let out = match command.output().await {
                Ok(out) => out,
                Err(e) => return Sample::failed(format!("cannot run peer.py: {e}")),
            };
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let first_error = stderr
                .lines()
                .find(|l| l.contains("first error"))
                .map(str::to_owned);
            match stdout.lines().last().map(serde_json::from_str::<Measured>) {
                Some(Ok(m)) if out.status.success() => Sample::reported(
                    m.errors,
                    first_error,
                    Duration::from_secs_f64(m.seconds.max(0.001)),
                    &m.latencies_us,
                ),
                _ => Sample::failed(format!("peer.py failed: {}", stderr.trim())),
            }
        })
    }
}
