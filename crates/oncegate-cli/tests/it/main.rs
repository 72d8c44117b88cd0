//! The `oncegate` binary, run as a user would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod args;
mod budgets;
mod clocks;
mod conformance;
mod connections;
mod console;
mod credentials;
mod demo;
mod detection;
mod doubts;
mod gateway;
mod late;
mod mcp;
mod mcp_headers;
mod mcp_in_band;
mod metrics;
mod openapi;
mod pins;
mod python_client;
mod single_server;
mod store_faults;
mod structured;
mod support;
mod telemetry;
mod throttle;
mod tidy;
mod typescript_client;
mod verify_live;

fn oncegate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn derive_key(config: &Path, args: &str) -> String {
    let out = oncegate(&[
        "keys",
        "derive",
        "--config",
        config.to_str().unwrap(),
        "--capability",
        "charge_card",
        "--args",
        args,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .next()
        .unwrap()
        .strip_prefix("key: ")
        .expect("first line is the key")
        .to_owned()
}

#[test]
fn keys_derive_ignores_drift_and_explains_itself() {
    let config = examples().join("payments.toml");
    let a = derive_key(
        &config,
        r#"{"order_id":"A-1","amount":"12.50","currency":"USD","memo":"x"}"#,
    );
    let b = derive_key(
        &config,
        r#"{"order_id":"A-1","amount":12.5,"currency":"USD","memo":"retry please"}"#,
    );
    assert_eq!(a, b);
    assert_eq!(a.len(), 64);
    let c = derive_key(
        &config,
        r#"{"order_id":"A-2","amount":"12.50","currency":"USD"}"#,
    );
    assert_ne!(a, c);

    let out = oncegate(&[
        "keys",
        "derive",
        "--config",
        config.to_str().unwrap(),
        "--capability",
        "charge_card",
        "--json",
        "--args",
        r#"{"order_id":"A-1","amount":"12.50","memo":"x"}"#,
    ]);
    let explanation: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(explanation["key"], serde_json::json!(a));
    assert_eq!(explanation["ignored"], serde_json::json!(["memo"]));
    assert_eq!(explanation["inputs"][0]["normalised"]["minor"], "1250");
}

#[test]
fn keys_derive_refuses_ambiguous_amounts() {
    let config = examples().join("payments.toml");
    let out = oncegate(&[
        "keys",
        "derive",
        "--config",
        config.to_str().unwrap(),
        "--capability",
        "charge_card",
        "--args",
        r#"{"order_id":"A-1","amount":"12.505"}"#,
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("never rounds"));
}

#[test]
fn check_config_accepts_the_example_and_locates_errors() {
    let ok = oncegate(&[
        "check-config",
        "--config",
        examples().join("payments.toml").to_str().unwrap(),
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("ok (5 capabilities"));

    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        examples().join("policies.cedar"),
        dir.path().join("policies.cedar"),
    )
    .unwrap();
    let text = std::fs::read_to_string(examples().join("payments.toml"))
        .unwrap()
        .replace("lease = \"30s\"", "lease = \"thirty\"");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, &text).unwrap();
    let out = oncegate(&["check-config", "--config", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let line = text
        .lines()
        .position(|l| l.contains("lease = \"thirty\""))
        .unwrap()
        + 1;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("bad.toml:{line}:")) && stderr.contains("capabilities[0].lease"),
        "{stderr}"
    );
}

#[test]
fn audit_verify_and_intents_read_the_store() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        examples().join("policies.cedar"),
        dir.path().join("policies.cedar"),
    )
    .unwrap();
    std::fs::copy(
        examples().join("payments.toml"),
        dir.path().join("oncegate.toml"),
    )
    .unwrap();
    let config = dir.path().join("oncegate.toml");
    let cfg = config.to_str().unwrap();

    // Decisions made through the library land in the store the CLI reads.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let registry = oncegate_engine::config::load_registry(&config).unwrap();
        let gate =
            oncegate_engine::Gate::open_with(registry, oncegate_store::OpenMode::CreateIfMissing)
                .await
                .unwrap();
        for order in ["A-1", "A-2", "A-1"] {
            gate.invoke(
                "planner",
                oncegate_engine::Call::new(
                    "charge_card",
                    serde_json::json!({"order_id": order, "amount": "9.99"}),
                ),
                |i| async move {
                    oncegate_core::EffectResult::Applied {
                        effect_ref: Some(format!("ch_{}", &i.key[..6])),
                        result: serde_json::json!({}),
                    }
                },
            )
            .await
            .unwrap();
        }
    });

    let list = oncegate(&["intents", "list", "--config", cfg, "--json"]);
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let intents: Vec<serde_json::Value> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(intents.len(), 2);
    let key = intents[0]["key"].as_str().unwrap().to_owned();
    let show = oncegate(&["intents", "show", "--config", cfg, &key]);
    assert!(String::from_utf8_lossy(&show.stdout).contains("\"state\": \"applied\""));

    let ok = oncegate(&["audit", "verify", "--config", cfg]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    // Two claims and two effects; the repeat of A-1 is a replay, which writes nothing.
    assert!(String::from_utf8_lossy(&ok.stdout).contains("ok: 4 audit records"));
    // The clean walk left a checkpoint: the next walk from it has nothing new to read.
    let since = oncegate(&["audit", "verify", "--since-checkpoint", "--config", cfg]);
    let since_out = String::from_utf8_lossy(&since.stdout);
    assert!(
        since.status.success()
            && since_out.contains("ok: 0 audit records since the checkpoint")
            && since_out.contains("(4 verified before it)"),
        "{since_out}"
    );

    rt.block_on(async {
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", dir.path().join("oncegate.db").display())).await.unwrap();
        sqlx::query("UPDATE audit SET body = replace(body, '9.99', '0.01') WHERE id = (SELECT MIN(id) FROM audit)").execute(&pool).await.unwrap();
        sqlx::query("UPDATE audit SET body = replace(body, '\"planner\"', '\"nobody\"') WHERE id = (SELECT MIN(id) FROM audit)").execute(&pool).await.unwrap();
        pool.close().await;
    });
    let broken = oncegate(&["audit", "verify", "--config", cfg]);
    assert!(!broken.status.success());
    let out = String::from_utf8_lossy(&broken.stdout);
    assert!(
        out.contains("BROKEN: shard") && out.contains("at seq 1"),
        "{out}"
    );
}

#[test]
fn check_config_says_which_capabilities_are_claim_only() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("oncegate.toml");
    std::fs::write(
        &config,
        r#"
[store]
url = "sqlite://oncegate.db"

[[principals]]
name = "worker"
role = "agent"
token_env = "ONCEGATE_TOKEN_WORKER"

[[capabilities]]
name = "charge_card"
category = "keyed"
key = { business_ref = "order_id" }

[capabilities.reconcile]
kind = "http"
url = "http://127.0.0.1:9/v1/charges?idempotency_key={key}"
found = "/found"

[[capabilities]]
name = "send_email"
category = "non_idempotent"
key = { business_ref = "order_id" }

[[capabilities]]
name = "lookup"
category = "read"

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:9/v1/orders"
"#,
    )
    .unwrap();
    let out = oncegate(&["check-config", "--config", config.to_str().unwrap()]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("claim-only (no upstream")
            && stdout.contains("): charge_card, send_email\n"),
        "{stdout}"
    );
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(line("charge_card").ends_with("executed by its callers (claim-only)"));
    assert!(line("lookup").ends_with("executed by the gateway"));
    // Without a reconciliation read, a dead claim waits for a human: said once, where.
    assert!(
        stderr.contains("`send_email` has no upstream (claim-only")
            && !stderr.contains("`charge_card` has no upstream"),
        "{stderr}"
    );
}
