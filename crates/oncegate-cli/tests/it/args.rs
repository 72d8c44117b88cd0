//! Hostile and sloppy arguments at the real door, and configs that point at nothing:
//! `check-config --probe` and the startup warning of `serve`, against a real sandbox.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{API_KEY, Proc, Setup, client, closed_port, effects_where, sandbox};
use crate::{examples, oncegate};

/// An MCP capability on the sandbox, calling `tool`.
fn mcp_capability(name: &str, tool: &str) -> String {
    format!(
        r#"
[[capabilities]]
name = "{name}"
category = "keyed"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "mcp"
url = "{{env.SANDBOX_URL}}/mcp"
headers = {{ Authorization = "Bearer {{env.SANDBOX_API_KEY}}" }}
tool = "{tool}"
body = {{ order_id = "{{business_ref}}", amount_minor = 100, currency = "USD" }}
"#
    )
}

fn probe_config(port: u16) -> String {
    format!(
        r#"
[[principals]]
name = "agent"
role = "agent"
token_env = "T"
{}{}
[[capabilities]]
name = "gone"
category = "non_idempotent"
on_unknown = "escalate"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:{port}/v1/emails"

[[capabilities]]
name = "emails"
category = "non_idempotent"
on_unknown = "escalate"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "http"
url = "{{env.SANDBOX_URL}}/v1/emails"
"#,
        mcp_capability("charge_mcp", "create_charge"),
        mcp_capability("charge_typo", "create_chrage"),
    )
}

#[test]
fn check_config_probe_reports_an_unknown_mcp_tool_and_an_unreachable_upstream() {
    let sb = sandbox(&[]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("probe.toml");
    let port = closed_port();
    std::fs::write(&config, probe_config(port)).unwrap();
    let run = |probe: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_oncegate"));
        cmd.args(["check-config", "--config", config.to_str().unwrap()])
            .env("SANDBOX_URL", &sb.url)
            .env("SANDBOX_API_KEY", API_KEY);
        if probe {
            cmd.arg("--probe");
        }
        cmd.output().unwrap()
    };

    // Without --probe the config is valid: nothing is connected to.
    let plain = run(false);
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );

    let out = run(true);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("charge_typo upstream")
            && stderr.contains("the upstream has no tool `create_chrage`"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "gone upstream: http://127.0.0.1:{port}: unreachable"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("2 upstream problem(s)"),
        "exactly the two broken upstreams: {stderr}"
    );
    assert!(
        stdout.contains("charge_mcp upstream") && stdout.contains("tool `create_charge`: ok"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("emails upstream: {}: ok", sb.url)),
        "{stdout}"
    );
    // The probe sent no effect: the sandbox committed nothing.
    assert!(
        effects_where(&sb, "").is_empty(),
        "{:?}",
        effects_where(&sb, "")
    );
}

#[test]
fn check_config_probe_lists_every_tool_of_a_fronted_server_and_its_fate() {
    let sb = sandbox(&[]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fronted.toml");
    let text = r#"
[[principals]]
name = "agent"
role = "agent"
token_env = "T"

[[mcp_servers]]
alias = "pay"
url = "{env.SANDBOX_URL}/mcp"
headers = { Authorization = "Bearer {env.SANDBOX_API_KEY}" }
undeclared = "read"

[[capabilities]]
name = "charge"
category = "keyed"
key = { business_ref = "order_id" }

[capabilities.upstream]
kind = "mcp"
server = "pay"
tool = "create_charge"
body = { order_id = "{business_ref}", amount_minor = 100, currency = "USD" }

[[capabilities]]
name = "typo"
category = "keyed"
key = { business_ref = "order_id" }

[capabilities.upstream]
kind = "mcp"
server = "pay"
tool = "create_chrage"
"#;
    std::fs::write(&config, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args([
            "check-config",
            "--probe",
            "--config",
            config.to_str().unwrap(),
        ])
        .env("SANDBOX_URL", &sb.url)
        .env("SANDBOX_API_KEY", API_KEY)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("mcp server pay at {env.SANDBOX_URL}/mcp undeclared read"),
        "{stdout}"
    );
    assert!(stdout.contains("probe: server pay: 10 tool(s)"), "{stdout}");
    // The tool lines follow the server's probe line.
    let tools = stdout
        .split("probe: server pay:")
        .nth(1)
        .unwrap_or_default();
    let line = |name: &str| {
        tools
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no line for {name}: {stdout}"))
            .to_owned()
    };
    assert!(
        line("charge").contains("create_charge") && line("charge").contains("declared"),
        "{stdout}"
    );
    assert!(
        line("pay_find_charge").contains("read: passed through"),
        "{stdout}"
    );
    assert!(line("pay_create_refund").contains("refused:"), "{stdout}");
    // The declared tool the server does not list is an error.
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("capability typo declares a tool the server does not list"),
        "{stderr}"
    );
    assert!(effects_where(&sb, "").is_empty());
}

#[test]
fn check_config_prints_values_as_the_config_writes_them() {
    let out = oncegate(&[
        "check-config",
        "--config",
        examples().join("payments.toml").to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let email = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("send_email"))
        .unwrap();
    assert!(
        email.contains(" non_idempotent ") && email.contains("on_unknown reconcile"),
        "{email}"
    );
    for debug in [
        "NonIdempotent",
        "Keyed",
        "IdempotentWrite",
        "Reconcile",
        "Escalate",
    ] {
        assert!(
            !stdout.contains(debug),
            "Debug spelling `{debug}`: {stdout}"
        );
    }
}

#[test]
fn check_config_locates_a_non_idempotent_recipe_of_free_text_alone() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("notify.toml");
    let text = r#"
[[principals]]
name = "agent"
role = "agent"
token_env = "T"

[[capabilities]]
name = "notify"
category = "non_idempotent"
on_unknown = "escalate"
key = { significant = [{ arg = "message", type = "text" }] }
"#;
    std::fs::write(&config, text).unwrap();
    let out = oncegate(&["check-config", "--config", config.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let line = text.lines().position(|l| l.starts_with("key = ")).unwrap() + 1;
    assert!(
        stderr.contains(&format!("notify.toml:{line}:"))
            && stderr.contains("capabilities[0].key")
            && stderr.contains("free text alone"),
        "{stderr}"
    );
}

#[test]
fn serve_warns_at_startup_about_what_the_probe_finds() {
    let setup = Setup::with_registry(&[], |text| {
        text + &mcp_capability("charge_typo", "create_chrage")
    });
    let mut cmd = setup.gateway_command(&[], "1h");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first).unwrap();
    let url = first
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_owned();
    let gw = Proc { child, url };
    assert!(gw.url.starts_with("http://"), "{first}");

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let warning = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("probe:") && line.contains("charge_typo") => break line,
            Ok(line) => seen.push(line),
            Err(_) => panic!(
                "no probe warning within 60 s; the log said:\n{}",
                seen.join("\n")
            ),
        }
    };
    assert!(
        warning.contains("WARN") && warning.contains("no tool `create_chrage`"),
        "{warning}"
    );
    // The gateway serves anyway: the other capabilities work.
    let r = client().get(format!("{}/healthz", gw.url)).send().unwrap();
    assert!(r.status().is_success());
    // The example's own upstreams answered: no warning names them.
    assert!(
        !seen.iter().any(|l| l.contains("probe:")),
        "{}",
        seen.join("\n")
    );
}

fn post_raw(gw: &Proc, path: &str, body: &str) -> (u16, Value) {
    let r = client()
        .post(format!("{}{path}", gw.url))
        .bearer_auth("tok-planner")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_owned())
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(Value::Null))
}

#[test]
fn hostile_amounts_are_refused_at_the_door_and_charge_nothing() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    let cases = [
        (
            r#"{"capability":"charge_card","arguments":{"order_id":"H-1","amount":12.5000000000000001}}"#,
            "cannot be held exactly",
        ),
        (
            r#"{"capability":"charge_card","arguments":{"order_id":"H-2","amount":"12_50"}}"#,
            "`_`",
        ),
        (
            r#"{"capability":"charge_card","arguments":{"order_id":"H-3","amount":"-12.50"}}"#,
            "negative",
        ),
        (
            r#"{"capability":"charge_card","arguments":{"order_id":"H-4","amount":"-0"}}"#,
            "negative",
        ),
        (
            r#"{"capability":"charge_card","arguments":{"order_id":"H-5","amount":{"minor":1250,"amount":"9999.00"}}}"#,
            "conflicting",
        ),
        (
            r#"{"capability":"charge_card","arguments":{"order_id":"H-6","amount":"1,250.00"}}"#,
            "thousands separator",
        ),
    ];
    for (body, says) in cases {
        let (status, answer) = post_raw(&gw, "/v1/calls", body);
        assert_eq!(status, 422, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "OG-0009", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{body}: {message}");
    }
    // The same lossy number through /v1/keys/derive and through MCP.
    let (status, answer) = post_raw(
        &gw,
        "/v1/keys/derive",
        r#"{"capability":"charge_card","arguments":{"order_id":"H-1","amount":12.5000000000000001}}"#,
    );
    assert_eq!(status, 422, "{answer}");
    let (status, answer) = post_raw(
        &gw,
        "/mcp",
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{"order_id":"H-1","amount":12.5000000000000001},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
    );
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot be held exactly"),
        "{answer}"
    );
    assert!(
        effects_where(&setup.sandbox, "kind=charge").is_empty(),
        "nothing was charged"
    );
}

#[test]
fn a_reference_with_invisible_characters_is_the_same_charge() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    let call = |order: &str| {
        let r = client()
            .post(format!("{}/v1/calls", gw.url))
            .bearer_auth("tok-planner")
            .json(&json!({"capability": "charge_card", "arguments": {"order_id": order, "amount": "4.20"}}))
            .send()
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json::<Value>().unwrap())
    };
    let (s1, first) = call("U-caf\u{e9}-1");
    assert_eq!(s1, 200, "{first}");
    assert!(first["intent_key"].is_string(), "{first}");
    for drifted in [
        "U-cafe\u{301}-1",
        "U-caf\u{e9}\u{200B}-1",
        "\u{FEFF}U-caf\u{e9}-1",
    ] {
        let (status, again) = call(drifted);
        assert_eq!(status, 200, "{again}");
        assert_eq!(again["intent_key"], first["intent_key"], "{again}");
    }
    assert_eq!(
        effects_where(&setup.sandbox, "kind=charge").len(),
        1,
        "one charge for one order, however it is spelled"
    );
}

#[test]
fn keys_derive_shows_what_normalisation_changed() {
    let config = examples().join("payments.toml");
    let derive = |args: &str| {
        oncegate(&[
            "keys",
            "derive",
            "--config",
            config.to_str().unwrap(),
            "--capability",
            "charge_card",
            "--args",
            args,
        ])
    };
    let out = derive("{\"order_id\":\"cafe\u{301}\u{200B}-1\",\"amount\":\"12.50\"}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("business_ref:"))
        .unwrap();
    assert!(
        line.contains("stripped U+200B ZERO WIDTH SPACE") && line.contains("NFC changed the text"),
        "{line}"
    );
    let plain = derive(r#"{"order_id":"A-1","amount":"12.50"}"#);
    let plain = String::from_utf8_lossy(&plain.stdout);
    assert!(
        !plain.contains("stripped") && !plain.contains("NFC"),
        "{plain}"
    );

    let lossy = derive(r#"{"order_id":"A-1","amount":12.5000000000000001}"#);
    assert!(!lossy.status.success());
    assert!(
        String::from_utf8_lossy(&lossy.stderr).contains("cannot be held exactly"),
        "{}",
        String::from_utf8_lossy(&lossy.stderr)
    );
}
