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
    assert_eq!(rows.len(), 10);
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
