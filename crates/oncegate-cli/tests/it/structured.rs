//! The outcome reaches a model that reads only structured output: a pydantic-ai agent
//! (PyPI `pydantic-ai-slim[mcp]`, its MCP toolset, installed by `tests/clients/setup.sh
//! pydantic-ai`) with a scripted model charges one order twice through `oncegate serve`
//! in front of `oncegate sandbox`; the second tool return the model receives says
//! replayed and do not call again (`structuredContent.oncegate`), and the sandbox's own
//! ledger holds one charge.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::mcp::run_client;
use crate::support::{API_KEY, Setup, effects_where, setup_part};

#[test]
fn a_pydantic_ai_agent_reads_the_replay_in_structured_content_and_charges_once() {
    setup_part("pydantic-ai");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join("target/pydantic-ai/venv/bin/python");
    let setup = Setup::example();
    let gw = setup.gateway();
    let order = "PAI-1";
    let mut cmd = Command::new(python);
    cmd.arg(root.join("tests/clients/pydantic_ai/agent.py"))
        .args([
            "--url",
            &format!("{}/mcp", gw.url),
            "--token",
            "tok-planner",
        ])
        .args(["--sandbox", &setup.sandbox.url, "--sandbox-key", API_KEY])
        .args(["--order", order])
        .env("PYTHONUNBUFFERED", "1");
    let (ok, output) = run_client(cmd, Duration::from_secs(120));
    assert!(ok, "the pydantic-ai agent failed:\n{output}");
    assert!(output.contains("every check holds"), "{output}");
    assert!(
        output.contains("\"status\":\"replayed\"") && output.contains("\"do_not_call_again\":true"),
        "the model's second tool return, as pydantic-ai rendered it:\n{output}"
    );
    // Counted here too, so the script cannot pass by checking the wrong thing.
    let charges = effects_where(&setup.sandbox, &format!("kind=charge&order_id={order}"));
    assert_eq!(charges.len(), 1, "{charges:?}");
}
