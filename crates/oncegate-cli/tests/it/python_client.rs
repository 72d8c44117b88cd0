//! The Python client (`clients/python`) as its users get it: installed with pip into a
//! virtualenv of its own (`tests/clients/setup.sh`, with LangGraph and the OpenAI Agents
//! SDK pinned beside it), type-checked with `mypy --strict`, and its pytest suite run
//! against this build's `oncegate sandbox` and `oncegate serve` (the harness in
//! `clients/python/tests/integration/conftest.py` starts them from `ONCEGATE_BIN`).

use std::process::Command;
use std::time::Duration;

use crate::mcp::{clients, run_client};

fn python() -> Command {
    let root = &clients().root;
    let mut cmd = Command::new(root.join("target/python-client/venv/bin/python"));
    cmd.current_dir(root);
    cmd
}

#[test]
fn the_python_client_passes_mypy_strict_on_its_own_source() {
    let mut cmd = python();
    cmd.args(["-m", "mypy", "--strict", "clients/python/src"]);
    let (ok, output) = run_client(cmd, Duration::from_secs(300));
    assert!(ok, "mypy --strict failed:\n{output}");
}

#[test]
fn mypy_strict_rejects_each_bad_call_to_a_protected_function() {
    // protect() keeps a KeyContext-first function's parameters and return type: a wrong
    // argument type and a caller-supplied idempotency_key do not type-check.
    let mut cmd = python();
    cmd.args([
        "-m",
        "mypy",
        "--strict",
        "--no-incremental",
        "clients/python/tests/typing/bad_calls.py",
    ])
    .env("MYPYPATH", "clients/python/src");
    let (ok, output) = run_client(cmd, Duration::from_secs(300));
    assert!(!ok, "mypy --strict accepted bad_calls.py:\n{output}");
    let source = std::fs::read_to_string(
        clients()
            .root
            .join("clients/python/tests/typing/bad_calls.py"),
    )
    .expect("read bad_calls.py");
    let marked: Vec<usize> = source
        .lines()
        .enumerate()
        .filter(|(_, line)| line.contains("# E:"))
        .map(|(index, _)| index + 1)
        .collect();
    assert_eq!(marked.len(), 7, "{source}");
    for line in marked {
        let needle = format!("bad_calls.py:{line}: error:");
        assert!(
            output.contains(&needle),
            "no mypy error on line {line}:\n{output}"
        );
    }
}

#[test]
fn the_python_client_s_suite_passes_against_a_real_gateway_and_sandbox() {
    let mut cmd = python();
    cmd.args([
        "-m",
        "pytest",
        "clients/python/tests",
        "-q",
        "-p",
        "no:cacheprovider",
    ])
    .env("ONCEGATE_BIN", env!("CARGO_BIN_EXE_oncegate"));
    let started = std::time::Instant::now();
    let (ok, output) = run_client(cmd, Duration::from_secs(600));
    println!("the Python client's suite took {:.1?}", started.elapsed());
    assert!(ok, "the Python client's suite failed:\n{output}");
    // The suite ran for real: pytest's summary counts passes, never only skips.
    assert!(
        output.contains(" passed") && !output.contains(" skipped"),
        "{output}"
    );
}
