//! The 2026-07-28 protocol, all the way, against `oncegate serve` in front of `oncegate
//! sandbox` (the example's refund above 100.00 waits for an approver):
//!
//! - in-band approvals: a held `tools/call` answers `input_required` with the console's
//!   page of the approval (a URL-mode elicitation) and a sealed `requestState`; the
//!   same call retried with it answers the decision's outcome. Driven by the PyPI `mcp`
//!   client's own multi round-trip support (approve and deny), and with raw JSON-RPC for
//!   what no client sends on purpose (a state used twice, altered, another principal's,
//!   for other arguments; a client without URL mode; a 2025-11-25 session, which keeps
//!   the held answer whatever it declares).
//! - long outcomes as tasks (`io.modelcontextprotocol/tasks`), with raw JSON-RPC as the
//!   extension's spec describes it (no released client here drives it yet): a call that
//!   finds the intent in flight is a task whose id is the intent key, and `tasks/get`
//!   and a repeat of the call agree.
//!
//! Every test counts effects in the sandbox's own ledger.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::mcp::{MODERN, clients, jsonrpc, post_legacy, post_mcp, run_client};
use crate::support::{Proc, Setup, client, effects_where, fault};

const OUTCOME: &str = "dev.oncegate/outcome";

fn python_approval(decide: &str, order: &str) {
    let clients = clients();
    let setup = Setup::example();
    let gw = setup.gateway();
    let mut cmd = Command::new(&clients.python);
    cmd.arg(clients.root.join("tests/clients/python/approval_agent.py"))
        .args(["--url", &format!("{}/mcp", gw.url)])
        .args(["--token", "tok-planner", "--api", &gw.url])
        .args(["--approver-token", "tok-alice", "--order", order])
        .args(["--decide", decide])
        .env("PYTHONUNBUFFERED", "1");
    let (ok, output) = run_client(cmd, Duration::from_secs(120));
    assert!(ok, "the approval agent ({decide}) failed:\n{output}");
    assert!(output.contains("every check holds"), "{output}");
    // Counted here too, so the script cannot pass by checking the wrong thing.
    let refunds = effects_where(&setup.sandbox, &format!("kind=refund&order_id={order}"));
    let expected = usize::from(decide == "approve");
    assert_eq!(refunds.len(), expected, "{decide}: {refunds:?}");
}

#[test]
fn a_python_agents_held_refund_completes_in_band_once_approved() {
    python_approval("approve", "IB-PY-1");
}

#[test]
fn a_python_agents_held_refund_denied_in_band_answers_the_approvers_reason() {
    python_approval("deny", "IB-PY-2");
}

/// A 2026-07-28 `tools/call` from a client that declares `capabilities` (and, when
/// retrying, sends `requestState` and its answer to the approval page).
fn call(name: &str, arguments: Value, capabilities: Value, state: Option<&str>) -> String {
    let mut body = json!({
        "jsonrpc": "2.0",
        "id": 9,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": capabilities,
            },
        },
    });
    if let Some(state) = state {
        body["params"]["requestState"] = json!(state);
        body["params"]["inputResponses"] = json!({"oncegate_approval": {"action": "accept"}});
    }
    body.to_string()
}

fn url_mode() -> Value {
    json!({"elicitation": {"url": {}}})
}

fn answer(gw: &Proc, token: &str, body: String) -> Value {
    let (status, _, text) = post_mcp(gw, Some(token), body);
    assert_eq!(status, 200, "{text}");
    jsonrpc(&text)
}

/// [`answer`] by the gateway's URL alone (from another thread).
fn answer_at(url: &str, token: &str, body: String) -> Value {
    let (status, answer) = post_at(url, token, body);
    assert_eq!(status, 200, "{answer}");
    answer
}

/// A 2026-07-28 `POST /mcp` with its `Mcp-*` headers: the HTTP status and the message.
fn post_at(url: &str, token: &str, body: String) -> (u16, Value) {
    let parsed: Value = serde_json::from_str(&body).unwrap();
    let response = client()
        .post(format!("{url}/mcp"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", MODERN)
        .header("Mcp-Method", parsed["method"].as_str().unwrap())
        .header(
            "Mcp-Name",
            parsed["params"]["name"]
                .as_str()
                .or(parsed["params"]["taskId"].as_str())
                .unwrap(),
        )
        .bearer_auth(token)
        .body(body)
        .send()
        .unwrap();
    let status = response.status().as_u16();
    (status, jsonrpc(&response.text().unwrap()))
}

/// The `requestState` of an `input_required` answer, after checking its shape.
fn input_required(answer: &Value) -> (String, String) {
    let result = &answer["result"];
    assert_eq!(result["resultType"], "input_required", "{answer}");
    let page = &result["inputRequests"]["oncegate_approval"];
    assert_eq!(page["method"], "elicitation/create", "{answer}");
    assert_eq!(page["params"]["mode"], "url", "{answer}");
    let url = page["params"]["url"].as_str().unwrap();
    let approval = url.rsplit_once("/console/approvals/").unwrap().1.to_owned();
    assert!(approval.starts_with("ap_"), "{url}");
    assert_eq!(
        result["_meta"][OUTCOME]["status"], "pending_approval",
        "{answer}"
    );
    (
        result["requestState"].as_str().unwrap().to_owned(),
        approval,
    )
}

fn refused_with(answer: &Value, code: &str) {
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(answer["error"]["data"]["code"], code, "{answer}");
}

#[test]
fn a_request_state_answers_one_retry_of_its_own_call_by_its_own_principal() {
    let setup = Setup::example();
    let gw = setup.gateway();
    let refund = json!({"order_id": "IB-RAW-1", "amount": "250.00"});
    let refunds = || effects_where(&setup.sandbox, "kind=refund&order_id=IB-RAW-1").len();

    // Held: the console's page of the approval, on this gateway, and a state.
    let held = answer(
        &gw,
        "tok-planner",
        call("refund", refund.clone(), url_mode(), None),
    );
    let (first, approval) = input_required(&held);
    let url = held["result"]["inputRequests"]["oncegate_approval"]["params"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(url, format!("{}/console/approvals/{approval}", gw.url));
    // The link is the console's (a browser not signed in is sent to sign in first).
    let page = client().get(&url).send().unwrap();
    assert!(
        page.status().is_success() || page.status().is_redirection(),
        "the link opens the console: {}",
        page.status()
    );

    // Retried while still pending: held again, with a fresh state.
    let again = answer(
        &gw,
        "tok-planner",
        call("refund", refund.clone(), url_mode(), Some(&first)),
    );
    let (second, same) = input_required(&again);
    assert_eq!(same, approval);
    assert_ne!(second, first);

    // The first state was used; an altered one, another principal's use, another
    // call's: refused before anything is decided (and none of them uses the state up).
    let reused = answer(
        &gw,
        "tok-planner",
        call("refund", refund.clone(), url_mode(), Some(&first)),
    );
    refused_with(&reused, "OG-0061");
    let mut altered = second.clone().into_bytes();
    let at = altered.len() / 2;
    altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    let tampered = answer(
        &gw,
        "tok-planner",
        call("refund", refund.clone(), url_mode(), Some(&altered)),
    );
    refused_with(&tampered, "OG-0060");
    let stolen = answer(
        &gw,
        "tok-subagent",
        call("refund", refund.clone(), url_mode(), Some(&second)),
    );
    refused_with(&stolen, "OG-0060");
    let drifted = json!({"order_id": "IB-RAW-1", "amount": "260.00"});
    let other = answer(
        &gw,
        "tok-planner",
        call("refund", drifted, url_mode(), Some(&second)),
    );
    refused_with(&other, "OG-0060");
    let garbage = answer(
        &gw,
        "tok-planner",
        call("refund", refund.clone(), url_mode(), Some("og1.e30.AAAA")),
    );
    refused_with(&garbage, "OG-0060");
    assert_eq!(refunds(), 0, "nothing ran while pending");

    // Approved (the JSON API, as the console's button): the retry completes, once.
    let approved = client()
        .post(format!("{}/v1/approvals/{approval}/approve", gw.url))
        .bearer_auth("tok-alice")
        .send()
        .unwrap();
    assert_eq!(approved.status().as_u16(), 200);
    let done = answer(
        &gw,
        "tok-planner",
        call("refund", refund.clone(), url_mode(), Some(&second)),
    );
    let result = &done["result"];
    assert_ne!(result["resultType"], "input_required", "{done}");
    assert_ne!(result["isError"], true, "{done}");
    let status = result["_meta"][OUTCOME]["status"].as_str().unwrap();
    assert!(["applied", "replayed"].contains(&status), "{done}");
    assert_eq!(refunds(), 1);
    let twice = answer(
        &gw,
        "tok-planner",
        call("refund", refund, url_mode(), Some(&second)),
    );
    refused_with(&twice, "OG-0061");
    assert_eq!(refunds(), 1);
}

#[test]
fn clients_without_url_mode_keep_the_held_answer() {
    let setup = Setup::example();
    let gw = setup.gateway();
    let refund = json!({"order_id": "IB-RAW-2", "amount": "250.00"});
    // A 2026-07-28 client that declared no URL-mode elicitation (only forms).
    for capabilities in [json!({}), json!({"elicitation": {"form": {}}})] {
        let held = answer(
            &gw,
            "tok-planner",
            call("refund", refund.clone(), capabilities, None),
        );
        let result = &held["result"];
        assert_eq!(result["isError"], true, "{held}");
        assert_eq!(
            result["_meta"][OUTCOME]["status"], "pending_approval",
            "{held}"
        );
        let line = result["content"][0]["text"].as_str().unwrap();
        assert!(line.starts_with("HELD FOR HUMAN APPROVAL ap_"), "{line}");
        assert!(result.get("requestState").is_none(), "{held}");
    }
    assert!(effects_where(&setup.sandbox, "kind=refund&order_id=IB-RAW-2").is_empty());
}

#[test]
fn a_2025_session_keeps_the_held_answer_whatever_it_declares() {
    let setup = Setup::example();
    let gw = setup.gateway();
    // Declared at `initialize`: URL-mode elicitation and the Tasks extension.
    let (status, session, body) = post_legacy(
        &gw,
        "tok-planner",
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"url": {}}, "extensions": {"io.modelcontextprotocol/tasks": {}}},
            "clientInfo": {"name": "raw-test", "version": "0"}}}),
    );
    assert_eq!(status, 200, "{body}");
    let session = session.unwrap();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post_legacy(&gw, "tok-planner", Some(&session), &initialized).0,
        202
    );
    let refund = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "refund", "arguments": {"order_id": "IB-LEG-1", "amount": "250.00"}}});
    let (status, _, body) = post_legacy(&gw, "tok-planner", Some(&session), &refund);
    assert_eq!(status, 200, "{body}");
    let held = jsonrpc(&body);
    let result = &held["result"];
    assert_eq!(result["isError"], true, "{held}");
    assert!(
        result.get("resultType").is_none_or(|t| t == "complete"),
        "{held}"
    );
    let line = result["content"][0]["text"].as_str().unwrap();
    assert!(line.starts_with("HELD FOR HUMAN APPROVAL ap_"), "{line}");
    assert!(line.ends_with("- do not call again."), "{line}");
    assert!(effects_where(&setup.sandbox, "kind=refund&order_id=IB-LEG-1").is_empty());
}

/// `tasks/get` of `task`, from a client declaring the Tasks extension (its `Mcp-Name`
/// header is the task id, as the extension has it).
fn tasks_get(gw: &Proc, token: &str, task: &str) -> Value {
    let body = json!({
        "jsonrpc": "2.0",
        "id": 11,
        "method": "tasks/get",
        "params": {
            "taskId": task,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": tasks_capability(),
            },
        },
    });
    answer_at(&gw.url, token, body.to_string())
}

fn tasks_capability() -> Value {
    json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
}

#[test]
fn a_call_that_finds_its_intent_in_flight_is_a_task_polled_to_the_same_outcome() {
    let setup = Setup::example();
    let gw = setup.gateway();
    // The provider answers after 3 s (within the gateway's 5 s timeout): the first call
    // holds the intent that long.
    fault(&setup.sandbox, "/v1/charges", "slow", 3000);
    let charge = json!({"order_id": "TASK-1", "amount": "7.00", "currency": "USD", "memo": "t"});
    let first = {
        let (gw_url, body) = (
            gw.url.clone(),
            call("charge_card", charge.clone(), json!({}), None),
        );
        std::thread::spawn(move || answer_at(&gw_url, "tok-planner", body))
    };
    std::thread::sleep(Duration::from_millis(700));

    // The same call, from a client that declares the Tasks extension: a task.
    let second = answer(
        &gw,
        "tok-planner",
        call("charge_card", charge.clone(), tasks_capability(), None),
    );
    let task = &second["result"];
    assert_eq!(task["resultType"], "task", "{second}");
    assert_eq!(task["status"], "working", "{second}");
    let id = task["taskId"].as_str().unwrap().to_owned();
    assert!(task["pollIntervalMs"].as_u64().is_some(), "{second}");

    // Another principal's poll finds no such task; a client without the extension is
    // told it must declare it.
    let foreign = tasks_get(&gw, "tok-subagent", &id);
    assert_eq!(foreign["error"]["code"], -32602, "{foreign}");
    let (_, undeclared) = post_at(
        &gw.url,
        "tok-planner",
        json!({"jsonrpc": "2.0", "id": 12, "method": "tasks/get", "params": {"taskId": id, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }}})
        .to_string(),
    );
    assert_eq!(undeclared["error"]["code"], -32021, "{undeclared}");

    // Polled to its end: completed, with the outcome a repeat of the call answers.
    let deadline = Instant::now() + Duration::from_secs(30);
    let completed = loop {
        let polled = tasks_get(&gw, "tok-planner", &id);
        assert_eq!(polled["result"]["taskId"], id.as_str(), "{polled}");
        match polled["result"]["status"].as_str() {
            Some("completed") => break polled,
            Some("working") => {}
            other => panic!("unexpected task status {other:?}: {polled}"),
        }
        assert!(
            Instant::now() < deadline,
            "the task never completed: {polled}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let first = first.join().unwrap();
    let first_ref = first["result"]["_meta"][OUTCOME]["effectRef"].clone();
    assert_eq!(
        first["result"]["_meta"][OUTCOME]["status"], "applied",
        "{first}"
    );
    assert_eq!(
        first["result"]["_meta"][OUTCOME]["intentKey"],
        id.as_str(),
        "{first}"
    );
    let polled = &completed["result"]["result"];
    assert_eq!(
        polled["_meta"][OUTCOME]["status"], "replayed",
        "{completed}"
    );
    assert_eq!(
        polled["_meta"][OUTCOME]["effectRef"], first_ref,
        "{completed}"
    );
    let repeat = answer(
        &gw,
        "tok-planner",
        call("charge_card", charge, tasks_capability(), None),
    );
    assert_eq!(
        repeat["result"]["_meta"][OUTCOME]["status"], "replayed",
        "{repeat}"
    );
    assert_eq!(
        repeat["result"]["_meta"][OUTCOME]["effectRef"], first_ref,
        "{repeat}"
    );
    assert_eq!(
        repeat["result"]["content"][0], polled["content"][0],
        "the poll and the repeat agree"
    );
    assert_eq!(
        effects_where(&setup.sandbox, "kind=charge&order_id=TASK-1").len(),
        1
    );
}

#[test]
fn a_long_running_capabilitys_call_is_a_task_at_once_and_runs_to_one_effect() {
    let setup = Setup::with_registry(&[], |text| {
        text.replacen(
            "name = \"charge_card\"\n",
            "name = \"charge_card\"\nlong_running = true\n",
            1,
        )
    });
    let gw = setup.gateway();
    fault(&setup.sandbox, "/v1/charges", "slow", 3000);
    let charge = json!({"order_id": "TASK-2", "amount": "9.00", "currency": "USD", "memo": "t"});
    let asked = Instant::now();
    let answered = answer(
        &gw,
        "tok-planner",
        call("charge_card", charge.clone(), tasks_capability(), None),
    );
    assert!(
        asked.elapsed() < Duration::from_millis(2900),
        "answered before the provider did"
    );
    let task = &answered["result"];
    assert_eq!(task["resultType"], "task", "{answered}");
    assert_eq!(task["status"], "working", "{answered}");
    let id = task["taskId"].as_str().unwrap().to_owned();
    // Polled to its end: the one charge, as a repeat of the call reads it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let completed = loop {
        let polled = tasks_get(&gw, "tok-planner", &id);
        if polled["result"]["status"] == "completed" {
            break polled;
        }
        assert_eq!(polled["result"]["status"], "working", "{polled}");
        assert!(
            Instant::now() < deadline,
            "the task never completed: {polled}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let outcome = &completed["result"]["result"]["_meta"][OUTCOME];
    assert_eq!(outcome["intentKey"], id.as_str(), "{completed}");
    assert!(
        outcome["effectRef"]
            .as_str()
            .is_some_and(|r| r.starts_with("ch_")),
        "{completed}"
    );
    let repeat = answer(
        &gw,
        "tok-planner",
        call("charge_card", charge.clone(), json!({}), None),
    );
    assert_eq!(
        repeat["result"]["_meta"][OUTCOME]["effectRef"], outcome["effectRef"],
        "{repeat}"
    );
    // A client without the extension waits for the answer, as before.
    let plain = answer(
        &gw,
        "tok-planner",
        call("charge_card", charge, json!({}), None),
    );
    assert_eq!(
        plain["result"]["_meta"][OUTCOME]["status"], "replayed",
        "{plain}"
    );
    assert_eq!(
        effects_where(&setup.sandbox, "kind=charge&order_id=TASK-2").len(),
        1
    );
}
