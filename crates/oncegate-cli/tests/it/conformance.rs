//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! tests/conformance/package.json) against `oncegate serve` fronting an upstream that
//! implements the suite's tools, resources and prompts: tests/conformance/run.sh starts
//! them and a loopback proxy that adds the bearer token the suite cannot send. Every
//! server scenario must pass except those tests/conformance/expected-failures.yml lists
//! (docs/mcp-conformance.md says why); one of those passing fails the run too.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::mcp::run_client;

#[test]
fn the_official_conformance_suite_passes_every_scenario_a_tools_gateway_can() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // `timeout` ends the script with SIGTERM before the harness gives up, so its traps
    // stop the gateway, the upstream, the proxy and the suite.
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=20", "540", "bash"])
        .arg(root.join("tests/conformance/run.sh"))
        .args(["--oncegate", env!("CARGO_BIN_EXE_oncegate")])
        .stdin(Stdio::null());
    let (ok, output) = run_client(cmd, Duration::from_secs(600));
    assert!(ok, "the conformance suite failed:\n{output}");
    assert!(
        output.contains("Baseline check passed"),
        "the suite did not check its baseline:\n{output}"
    );
    // The suite ran its scenarios against the gateway (not zero of them).
    assert!(output.contains("✓ tools-call-with-progress"), "{output}");
    assert!(output.contains("✓ prompts-get-with-args"), "{output}");
}

/// A scenario outside the suite's active set that the gateway passes, kept by name
/// (docs/mcp-conformance.md): a tool whose input schema is JSON Schema 2020-12.
#[test]
fn the_json_schema_2020_12_scenario_outside_the_active_suite_passes_too() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=20", "240", "bash"])
        .arg(root.join("tests/conformance/run.sh"))
        .args(["--oncegate", env!("CARGO_BIN_EXE_oncegate")])
        .args(["--scenario", "json-schema-2020-12"])
        .stdin(Stdio::null());
    let (ok, output) = run_client(cmd, Duration::from_secs(300));
    assert!(ok, "json-schema-2020-12 failed:\n{output}");
    assert!(output.contains("0 failed"), "{output}");
}
