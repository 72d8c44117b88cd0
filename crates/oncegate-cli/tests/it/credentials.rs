//! No credential leaves the gateway in an error. A gateway whose HTTP upstream, MCP
//! upstream, fronted MCP server and identity provider's JWKS URL all point at a closed
//! loopback port, with secrets in every URL's userinfo, path and query and in every
//! header (filled in from the environment; the JWKS URL's written literally), is asked
//! everything that reports those failures: `/v1/calls`, `/mcp` `tools/call`, the stored
//! intent read back as an approver would, a fronted tool's refusal, the 503 an
//! unauthenticated JWT gets, `check-config --probe`, and the process's own log. None
//! may show a secret; each still says which host (and path) failed.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::mcp::{jsonrpc, post_mcp, tools_call};
use crate::support::{Log, Proc, client, closed_port, spawn_logged};

/// Every secret contains this, so one search finds any of them.
const MARK: &str = "5ecret";

/// What the gateway's environment fills the templates with.
const ENVIRONMENT: [(&str, &str); 6] = [
    ("OG_CRED_USER", "user-5ecret-u"),
    ("OG_CRED_PASS", "pass-5ecret-p"),
    ("OG_CRED_ACCOUNT", "acct-5ecret-a"),
    ("OG_CRED_KEY", "key-5ecret-k"),
    ("OG_CRED_TOKEN", "token-5ecret-t"),
    ("OG_CRED_HEADER", "header-5ecret-h"),
];

/// A JWT (never verified: its issuer's keys cannot be fetched) naming the issuer below.
const JWT: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIiwidHlwIjoiSldUIn0.eyJpc3MiOiJodHRwczovL2lkcC5leGFtcGxlLmNvbSIsInN1YiI6ImFsaWNlIiwiYXVkIjoiaHR0cDovLzEyNy4wLjAuMTo3ODc4L21jcCIsInJvbGVzIjpbImFnZW50Il0sImV4cCI6NDEwMjQ0NDgwMH0.c2lnbmF0dXJl";

/// The registry: every outbound URL at `port`, with secrets wherever one can be.
fn registry(port: u16) -> String {
    let url = |path: &str| {
        format!(
            "http://{{env.OG_CRED_USER}}:{{env.OG_CRED_PASS}}@127.0.0.1:{port}{path}/{{env.OG_CRED_ACCOUNT}}?api_key={{env.OG_CRED_KEY}}"
        )
    };
    let headers =
        r#"{ Authorization = "Bearer {env.OG_CRED_TOKEN}", X-Api-Key = "{env.OG_CRED_HEADER}" }"#;
    format!(
        r#"
[gateway]
listen = "127.0.0.1:7878"

[store]
url = "sqlite://oncegate.db"

[[principals]]
name = "planner"
role = "agent"
token_env = "ONCEGATE_TOKEN_PLANNER"

[[principals]]
name = "ops"
role = "admin"
token_env = "ONCEGATE_TOKEN_OPS"

[identity]
resource = "http://127.0.0.1:7878/mcp"

[[identity.issuers]]
issuer = "https://idp.example.com"
jwks_url = "http://jwks:jwks-pass-5ecret@127.0.0.1:{port}/jwks?key=jwks-query-5ecret"
principal_prefix = "idp:"
role_claim = "roles"

[[mcp_servers]]
alias = "pay"
url = "{fronted}"
headers = {headers}
timeout = "2s"
undeclared = "read"

[[capabilities]]
name = "charge_http"
category = "keyed"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "http"
url = "{http}"
headers = {headers}
timeout = "2s"

[[capabilities]]
name = "charge_mcp"
category = "keyed"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "mcp"
url = "{mcp}"
tool = "create_charge"
headers = {headers}
timeout = "2s"
"#,
        fronted = url("/fronted"),
        http = url("/v1/charges"),
        mcp = url("/mcp"),
    )
}

/// Fails naming `surface` if `text` shows any secret.
fn assert_clean(surface: &str, text: &str) {
    assert!(
        !text.contains(MARK),
        "{surface} shows a credential:\n{text}"
    );
}

fn serve(dir: &std::path::Path) -> (Proc, Log) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oncegate"));
    cmd.args(["serve", "--init", "--config"])
        .arg(dir.join("oncegate.toml"))
        .args(["--listen", "127.0.0.1:0", "--sweep-every", "1h"])
        .envs(ENVIRONMENT)
        .env("ONCEGATE_TOKEN_PLANNER", "tok-planner")
        .env("ONCEGATE_TOKEN_OPS", "tok-ops");
    spawn_logged(cmd)
}

fn post_call(gw: &Proc, token: &str, capability: &str, order: &str) -> (u16, String) {
    let r = client()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth(token)
        .json(&json!({"capability": capability, "arguments": {"order_id": order}}))
        .send()
        .unwrap();
    (r.status().as_u16(), r.text().unwrap())
}

/// The intent as an approver reads it (`GET /v1/intents/{key}`).
fn stored(gw: &Proc, answer: &str) -> String {
    let answer: Value = serde_json::from_str(answer).unwrap();
    let key = answer["intent_key"].as_str().expect("an intent key");
    client()
        .get(format!("{}/v1/intents/{key}", gw.url))
        .bearer_auth("tok-ops")
        .send()
        .unwrap()
        .text()
        .unwrap()
}

#[test]
fn no_credential_reaches_an_answer_a_stored_error_a_refusal_or_the_log() {
    let port = closed_port();
    let at = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("oncegate.toml");
    std::fs::write(&config, registry(port)).unwrap();

    // The operator's terminal: the probe names each target, and why it failed.
    let probe = Command::new(env!("CARGO_BIN_EXE_oncegate"))
        .args(["check-config", "--probe", "--config"])
        .arg(&config)
        .envs(ENVIRONMENT)
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&probe.stdout),
        String::from_utf8_lossy(&probe.stderr)
    );
    assert_clean("check-config --probe", &printed);
    assert!(printed.contains(&format!("{at}/mcp/***")), "{printed}");

    let (gw, log) = serve(dir.path());

    // The agent's answers, over the JSON API and over MCP, and what approvers read.
    for (capability, path) in [("charge_http", None), ("charge_mcp", Some("/mcp/"))] {
        let (status, answer) = post_call(&gw, "tok-planner", capability, "CRED-1");
        assert_eq!(status, 200, "{answer}");
        assert!(answer.contains("\"not_applied\""), "{answer}");
        assert_clean(&format!("/v1/calls {capability}"), &answer);
        let intent = stored(&gw, &answer);
        assert!(
            intent.contains("nothing was sent") || intent.contains("could not connect"),
            "{intent}"
        );
        assert_clean(&format!("GET /v1/intents of {capability}"), &intent);
        if let Some(path) = path {
            // The message still says where: host and path, the secrets masked.
            assert!(
                answer.contains(&format!("{at}{path}***?api_key=***")),
                "{answer}"
            );
            assert!(
                intent.contains(&format!("{at}{path}***?api_key=***")),
                "{intent}"
            );
        }
        let (status, _, body) = post_mcp(
            &gw,
            Some("tok-planner"),
            tools_call(capability, json!({"order_id": "CRED-2"})).to_string(),
        );
        assert_eq!(status, 200, "{body}");
        let result = jsonrpc(&body);
        assert_eq!(result["result"]["isError"], true, "{result}");
        assert_clean(&format!("/mcp tools/call {capability}"), &body);
    }

    // A fronted server's tool is refused while its list cannot be read, saying why.
    let (status, refusal) = post_call(&gw, "tok-planner", "pay_create_refund", "CRED-3");
    assert_eq!(status, 404, "{refusal}");
    assert!(refusal.contains(&format!("{at}/fronted/***")), "{refusal}");
    assert_clean("/v1/calls of a fronted tool", &refusal);
    let (_, _, body) = post_mcp(
        &gw,
        Some("tok-planner"),
        tools_call("pay_create_refund", json!({"charge_id": "ch_1"})).to_string(),
    );
    assert!(body.contains("has not been read yet"), "{body}");
    assert_clean("/mcp tools/call of a fronted tool", &body);

    // Anyone may send a JWT: the 503 says which issuer's keys failed, not with what.
    let (status, unavailable) = post_call(&gw, JWT, "charge_http", "CRED-4");
    assert_eq!(status, 503, "{unavailable}");
    assert!(
        unavailable.contains("OG-0056") && unavailable.contains(&format!("{at}/jwks?key=***")),
        "{unavailable}"
    );
    assert_clean("the unauthenticated 503", &unavailable);

    // The log said each failure (the probe, the fronted server, the identity provider)
    // and shows none of the secrets.
    for wanted in [
        "probe: charge_mcp upstream",
        "cannot read the tool list",
        "the identity provider's keys cannot be loaded",
    ] {
        let logged = log.wait_for(Duration::from_secs(15), |l| l.contains(wanted));
        assert!(logged.is_ok(), "no `{wanted}` in the log: {logged:?}");
    }
    let lines = log.lines();
    assert_clean("the log", &lines.join("\n"));
    assert!(lines.iter().any(|l| l.contains(&at)), "{lines:#?}");
}
