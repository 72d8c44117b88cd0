//! What every test file of the engine starts its gates with: a scratch directory
//! holding a config (the shared one, or a test's own), and a gate on a SQLite store in
//! it, with the clock a test hands in or a manual one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use jiff::Timestamp;
use oncegate_engine::config::load_registry;
use oncegate_engine::{Clock, Gate, ManualClock};
use oncegate_store::OpenMode;

pub const CONFIG: &str = r#"
[gateway]
tenant = "acme"

[store]
url = "sqlite://oncegate.db"

[[principals]]
name = "agent"
role = "agent"
token_env = "T_AGENT"

[[principals]]
name = "agent2"
role = "agent"
token_env = "T_AGENT2"

[[principals]]
name = "alice"
role = "approver"
token_env = "T_ALICE"

[[principals]]
name = "bob"
role = "approver"
token_env = "T_BOB"

[[principals]]
name = "ops"
role = "admin"
token_env = "T_OPS"

[[capabilities]]
name = "pay"
category = "keyed"
attempt_ceiling = 1000
lease = "30s"
on_unknown = "reconcile"
policy = "policies.cedar"
key = { business_ref = "order_id", significant = [{ arg = "amount", type = "money", default_currency = "USD" }] }

[[capabilities]]
name = "refund"
category = "keyed"
on_unknown = "reconcile"
policy = "policies.cedar"
key = { business_ref = "order_id", significant = [{ arg = "amount", type = "money", default_currency = "USD" }] }

[[capabilities]]
name = "ledger"
category = "non_idempotent"
attempt_ceiling = 5
on_unknown = "refuse"
key = { business_ref = "entry" }
"#;

pub const POLICIES: &str = r#"
permit (principal, action, resource) when { principal.role == "agent" };
@id("big-refund")
@oncegate("require_approval")
permit (principal, action == Action::"refund", resource) when { context.amount > 10000 };
"#;

/// A scratch directory holding the test config, its policies and the database.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

impl Scratch {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("oncegate.toml"), CONFIG).unwrap();
        std::fs::write(dir.path().join("policies.cedar"), POLICIES).unwrap();
        Self { dir }
    }

    pub fn at(path: &Path) -> PathBuf {
        path.join("oncegate.toml")
    }

    pub fn config(&self) -> PathBuf {
        Self::at(self.dir.path())
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("oncegate.db")
    }

    pub async fn gate(&self, clock: Arc<dyn Clock>) -> Gate {
        gate_in(self.dir.path(), clock).await
    }
}

pub async fn gate_in(dir: &Path, clock: Arc<dyn Clock>) -> Gate {
    let registry = load_registry(&Scratch::at(dir)).unwrap_or_else(|e| panic!("{e}"));
    let store = oncegate_store::open(
        "sqlite://oncegate.db",
        dir,
        OpenMode::CreateIfMissing,
        Default::default(),
    )
    .await
    .unwrap();
    Gate::with_store(registry, store, clock)
}

/// A scratch directory holding `config` (and `policies`, for a config that names
/// policies.cedar), and a gate on its store whose clock stands at now until the test
/// moves it.
pub async fn manual_gate(
    config: &str,
    policies: Option<&str>,
) -> (tempfile::TempDir, Gate, ManualClock) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("oncegate.toml"), config).unwrap();
    if let Some(policies) = policies {
        std::fs::write(dir.path().join("policies.cedar"), policies).unwrap();
    }
    let clock = ManualClock::new(Timestamp::now());
    let gate = gate_in(dir.path(), Arc::new(clock.clone())).await;
    (dir, gate, clock)
}
