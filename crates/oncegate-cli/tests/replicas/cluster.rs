//! Three (or N) `oncegate serve` replicas on one PostgreSQL database, in front of one
//! `oncegate sandbox`: how they are started, stopped, killed and called, and how a test
//! reads what they decided (the store, through the `oncegate` CLI) and what happened
//! (the sandbox's own ledger).

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::pg::Database;
use crate::support::{Proc, Setup, client, env_refs, spawn};

/// The registry the replica tests run: `examples/payments.toml` with test-sized
/// timeouts and leases, the store on `url`.
///
/// `send_email` (the provider ignores its key, so only the gateway stands between a
/// repeat and a second email) and `charge_card` get short leases and timeouts
/// ([`Timing`]): a stalled call turns `unknown` quickly, and a dead replica's claim
/// expires quickly.
pub(crate) fn registry(text: String, url: &str, timing: Timing) -> String {
    let Timing {
        timeout,
        lease,
        settle_horizon,
    } = timing;
    let text = text
        .replace(
            "url = \"sqlite://oncegate.db\"",
            &format!("url = \"{url}\""),
        )
        .replace("timeout = \"5s\"", &format!("timeout = \"{timeout}\""))
        .replacen("lease = \"30s\"", &format!("lease = \"{lease}\""), 1);
    let email = "name = \"send_email\"\n";
    assert!(text.contains(email), "the example declares send_email");
    let settle = settle_horizon
        .map(|h| format!("settle_horizon = \"{h}\"\n"))
        .unwrap_or_default();
    text.replacen(email, &format!("{email}lease = \"{lease}\"\n{settle}"), 1)
}

/// Upstream timeout and lease of the tests' capabilities.
#[derive(Clone, Copy)]
pub(crate) struct Timing {
    /// Every upstream's timeout.
    pub(crate) timeout: &'static str,
    /// The lease of `charge_card` and `send_email`.
    pub(crate) lease: &'static str,
    /// `send_email`'s settle horizon, when not the default (timeout + 120 s): how long
    /// a "not found" stays undecidable after an attempt ended.
    pub(crate) settle_horizon: Option<&'static str>,
}

/// A cluster of replicas. Fields drop in order: replicas first, then the sandbox and the
/// config directory, then the database.
pub(crate) struct Cluster {
    replicas: Vec<Option<Proc>>,
    setup: Setup,
    sweep_every: &'static str,
    env: fn(usize) -> Vec<(&'static str, String)>,
    next: AtomicUsize,
    /// The test's own database.
    pub(crate) db: Database,
}

/// How a cluster is built.
pub(crate) struct Plan {
    /// How many replicas.
    pub(crate) replicas: usize,
    /// Sandbox resources that ignore the idempotency key (`emails`, `charges`, ...).
    pub(crate) ignore: &'static [&'static str],
    /// `--sweep-every` of every replica.
    pub(crate) sweep_every: &'static str,
    /// Upstream timeouts and leases.
    pub(crate) timing: Timing,
    /// More edits of the registry text (limits, duplicate rules), after [`registry`]'s.
    pub(crate) edit: fn(String) -> String,
    /// More environment of replica `i` (libfaketime, for a replica with a wrong clock).
    pub(crate) env: fn(usize) -> Vec<(&'static str, String)>,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            replicas: 3,
            ignore: &["emails"],
            sweep_every: "250ms",
            timing: Timing {
                timeout: "1s",
                lease: "2s",
                settle_horizon: None,
            },
            edit: |text| text,
            env: |_| Vec::new(),
        }
    }
}

impl Cluster {
    /// A fresh database on the shared server, migrated, and `plan.replicas` replicas on it.
    pub(crate) fn start(plan: Plan) -> Self {
        Self::start_on(Database::create(), plan)
    }

    /// `plan.replicas` replicas on `db`, migrated first with `oncegate migrate` as a
    /// deployment does (the replicas start without `--init`).
    pub(crate) fn start_on(db: Database, plan: Plan) -> Self {
        let url = db.url.clone();
        let setup = Setup::with_registry(plan.ignore, |text| {
            (plan.edit)(registry(text, &url, plan.timing))
        });
        let mut cluster = Cluster {
            replicas: Vec::new(),
            setup,
            sweep_every: plan.sweep_every,
            env: plan.env,
            next: AtomicUsize::new(0),
            db,
        };
        cluster.cli_ok(&["migrate"]);
        for i in 0..plan.replicas {
            let replica = cluster.spawn_replica(i);
            cluster.replicas.push(Some(replica));
        }
        cluster
    }

    fn spawn_replica(&self, i: usize) -> Proc {
        spawn(self.serve_command(&(self.env)(i)))
    }

    /// The `oncegate serve` command line of a replica on this cluster's store, with
    /// `env` added: for a test that starts (and reads the log of) one itself.
    pub(crate) fn serve_command(&self, env: &[(&'static str, String)]) -> Command {
        self.setup
            .serve_command(&env_refs(env), self.sweep_every, &[])
    }

    /// How many replica slots (running or not).
    pub(crate) fn len(&self) -> usize {
        self.replicas.len()
    }

    /// Replica `i`'s base URL. Panics if it is not running.
    pub(crate) fn url(&self, i: usize) -> &str {
        &self.replicas[i]
            .as_ref()
            .unwrap_or_else(|| panic!("replica {i} is not running"))
            .url
    }

    /// SIGKILLs replica `i`: no shutdown, no last write, its leases left to expire.
    pub(crate) fn kill(&mut self, i: usize) {
        let mut proc = self.replicas[i].take().expect("replica is running");
        proc.child.kill().expect("SIGKILL the replica");
        proc.child.wait().expect("reap the replica");
    }

    /// Stops every replica (SIGKILL), then starts them all again on the same store.
    pub(crate) fn restart_all(&mut self) {
        for i in 0..self.replicas.len() {
            if self.replicas[i].is_some() {
                self.kill(i);
            }
        }
        for i in 0..self.replicas.len() {
            self.replicas[i] = Some(self.spawn_replica(i));
        }
    }

    /// `GET {path}` on replica `i` as the admin.
    pub(crate) fn admin_get(&self, i: usize, path: &str) -> Value {
        client()
            .get(format!("{}{path}", self.url(i)))
            .bearer_auth("tok-ops")
            .send()
            .unwrap()
            .json()
            .unwrap()
    }

    /// The sandbox in front of which the replicas run.
    pub(crate) fn sandbox(&self) -> &Proc {
        &self.setup.sandbox
    }

    /// `POST /v1/calls` on replica `i` as the planner: (HTTP status, body). A transport
    /// failure (the replica died mid-call) is status 0.
    pub(crate) fn call(&self, i: usize, capability: &str, arguments: &Value) -> (u16, Value) {
        call_at(self.url(i), capability, arguments)
    }

    /// [`Cluster::call`] on the next running replica, round robin, as a load balancer
    /// without stickiness would send it. Answers the replica's index too.
    pub(crate) fn call_next(&self, capability: &str, arguments: &Value) -> (usize, u16, Value) {
        let i = self.next_replica();
        let (status, body) = self.call(i, capability, arguments);
        (i, status, body)
    }

    /// The next running replica, round robin.
    pub(crate) fn next_replica(&self) -> usize {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed) % self.replicas.len();
            if self.replicas[i].is_some() {
                return i;
            }
        }
    }

    /// Runs `oncegate ARGS --config CONFIG` and answers (success, stdout, stderr).
    pub(crate) fn cli(&self, args: &[&str]) -> (bool, String, String) {
        let config = self.setup.dir.path().join("oncegate.toml");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oncegate"))
            .args(args)
            .arg("--config")
            .arg(&config)
            .output()
            .expect("the binary runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn cli_ok(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.cli(args);
        assert!(ok, "oncegate {}: {stdout}{stderr}", args.join(" "));
        stdout
    }

    /// Every intent in the store, as `oncegate intents list --json` prints it.
    pub(crate) fn intents(&self) -> Vec<Value> {
        self.cli_ok(&["intents", "list", "--json", "--limit", "100000"])
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("`{l}`: {e}")))
            .collect()
    }

    /// `oncegate audit verify`: (clean, what it printed).
    pub(crate) fn audit_verify(&self) -> (bool, String) {
        let (ok, stdout, stderr) = self.cli(&["audit", "verify"]);
        (ok, format!("{stdout}{stderr}"))
    }

    /// Every email the sandbox sent (its ledger, not the gateway's word).
    pub(crate) fn emails(&self) -> Vec<Value> {
        crate::support::effects(self.sandbox(), "email")
    }

    /// Queues `times` faults on the sandbox's next creates of `path`.
    pub(crate) fn faults(&self, path: &str, fault: &str, times: u32, delay_ms: u64) {
        let r = client()
            .post(format!("{}/_sandbox/faults", self.sandbox().url))
            .json(&json!({"path": path, "fault": fault, "times": times, "delay_ms": delay_ms}))
            .send()
            .unwrap();
        assert!(r.status().is_success(), "queue fault: {}", r.status());
    }
}

/// `POST {url}/v1/calls` as the planner.
pub(crate) fn call_at(url: &str, capability: &str, arguments: &Value) -> (u16, Value) {
    let sent = client()
        .post(format!("{url}/v1/calls"))
        .bearer_auth("tok-planner")
        .timeout(Duration::from_secs(30))
        .json(&json!({"capability": capability, "arguments": arguments}))
        .send();
    match sent {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.json().unwrap_or(Value::Null))
        }
        Err(e) => (0, json!({"transport_error": e.to_string()})),
    }
}

/// The stable code of a refusal or an error body (`reason.code` or `error.code`).
pub(crate) fn code(body: &Value) -> Option<&str> {
    body["reason"]["code"]
        .as_str()
        .or_else(|| body["error"]["code"].as_str())
}

/// The `status` of a decided call (`applied`, `replayed`, ...), or `error` for an error
/// body.
pub(crate) fn status(body: &Value) -> &str {
    body["status"].as_str().unwrap_or("error")
}

/// The email of order `order`: one intent per order.
pub(crate) fn email(order: &str) -> Value {
    json!({"order_id": order, "to": "ann@example.com", "template": "receipt", "body": "Thanks!"})
}

/// The intent key a sandbox effect was sent with (its `Idempotency-Key` header, which
/// the gateway sets to the intent key whether or not the provider honours it).
pub(crate) fn effect_key(effect: &Value) -> Option<&str> {
    effect["idempotency_key"].as_str()
}

/// The intents whose state is one of `states`.
pub(crate) fn in_states<'a>(intents: &'a [Value], states: &[&str]) -> Vec<&'a Value> {
    intents
        .iter()
        .filter(|i| i["state"].as_str().is_some_and(|s| states.contains(&s)))
        .collect()
}

/// `text` (the example registry) with a spend limit on `charge_card`: `max` USD per
/// rolling 24 h, named `name`.
pub(crate) fn with_charge_limit(text: String, name: &str, max: &str) -> String {
    text.replacen(
        "# --- refund:",
        &format!(
            r#"
[[capabilities.limits]]
name = "{name}"
argument = "amount"
max = "{max}"
currency = "USD"
window = "24h"

# --- refund:"#
        ),
        1,
    )
}
