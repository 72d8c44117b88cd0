//! `oncegate demo` is also the red-team integration test: a failing oncegate row fails CI.

use std::process::Command;

use serde_json::Value;

#[test]
fn every_demo_scenario_holds_and_the_naive_executor_duplicates() {
    let out = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(["demo", "--json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let rows = report["scenarios"].as_array().unwrap();
    assert_eq!(rows.len(), 12);
    for row in rows {
        assert_eq!(row["ok"], true, "oncegate row failed: {row}");
        assert_eq!(row["oncegate_effects"], row["expected"], "{row}");
        if row["id"] != 10 {
            assert!(
                row["naive_effects"].as_u64() > row["expected"].as_u64(),
                "the naive executor should duplicate: {row}"
            );
        }
    }
    assert!(out.status.success());
}

#[test]
fn one_scenario_prints_a_table() {
    let out = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(["demo", "--scenario", "5"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("parallel subagents") && text.contains("naive") && text.contains(" ok "),
        "{text}"
    );
    assert!(
        !text.contains("\x1b["),
        "no colour when stdout is not a terminal"
    );
}

fn verify(config: &std::path::Path) -> (bool, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(["verify", "--json", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.success(), report)
}

#[test]
fn verify_passes_the_example_registry() {
    let config =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/payments.toml");
    let (ok, report) = verify(&config);
    assert!(ok, "{report:#}");
    assert_eq!(
        report["capabilities"].as_array().unwrap().len(),
        4,
        "every non-read capability is verified"
    );
}

#[test]
fn verify_flags_recipes_that_cannot_be_safe() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broken.toml");
    std::fs::write(
        &config,
        r#"
[[principals]]
name = "agent"
role = "agent"
token_env = "T"

# The amount is declared as text: "12.5" and "12.50" become two charges;
# reconcile promised but no read declared; the business ref never reaches the provider.
[[capabilities]]
name = "pay"
category = "keyed"
on_unknown = "reconcile"
key = { business_ref = "order_id", significant = [{ arg = "amount", type = "text" }] }

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:9/pay"
body = { amount = "{arg.amount}" }
"#,
    )
    .unwrap();
    let (ok, report) = verify(&config);
    assert!(!ok, "{report:#}");
    let caps = report["capabilities"].as_array().unwrap();
    let findings =
        |name: &str| caps.iter().find(|c| c["capability"] == name).unwrap()["findings"].to_string();
    let pay = findings("pay");
    assert!(
        pay.contains("no [capabilities.reconcile] read") && pay.contains("business_ref"),
        "{pay}"
    );
    assert!(
        pay.contains("looks like an amount"),
        "a money amount declared as text is flagged: {pay}"
    );
}
