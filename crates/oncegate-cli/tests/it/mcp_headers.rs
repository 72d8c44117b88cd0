//! 2026-07-28 requests carry `Mcp-Method` and `Mcp-Name` headers that must match the
//! JSON-RPC body (a proxy routes and authorises on the headers, the server acts on the
//! body): a mismatch, or a header missing, is refused with JSON-RPC `-32020` (HTTP 400)
//! before anything is decided, so a charge hidden behind a harmless header never runs.

use serde_json::{Value, json};

use crate::mcp::{MODERN, tools_call};
use crate::support::{Proc, Setup, client, effects};

/// A raw 2026-07-28 `POST /mcp` as the planner, with exactly these `Mcp-*` headers.
fn post(gw: &Proc, body: &Value, method: Option<&str>, name: Option<&str>) -> (u16, Value) {
    let mut request = client()
        .post(format!("{}/mcp", gw.url))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", MODERN)
        .bearer_auth("tok-planner");
    if let Some(m) = method {
        request = request.header("Mcp-Method", m);
    }
    if let Some(n) = name {
        request = request.header("Mcp-Name", n);
    }
    let response = request.body(body.to_string()).send().unwrap();
    let status = response.status().as_u16();
    let text = response.text().unwrap();
    (status, crate::mcp::jsonrpc(&text))
}

#[test]
fn mcp_headers_that_do_not_match_the_body_are_refused_before_anything_runs() {
    let setup = Setup::example();
    let gw = setup.gateway();
    let charge = tools_call(
        "charge_card",
        json!({"order_id": "HDR-1", "amount": "5.00"}),
    );

    // The control: matching headers reach the tool (a read, so nothing is charged).
    let read = tools_call("get_order", json!({"order_id": "HDR-1"}));
    let (status, answer) = post(&gw, &read, Some("tools/call"), Some("get_order"));
    assert_eq!(status, 200, "{answer}");
    assert!(answer["result"].is_object(), "{answer}");

    for (method, name, why) in [
        (
            Some("tools/call"),
            Some("get_order"),
            "a harmless name over a charge",
        ),
        (Some("tools/list"), Some("charge_card"), "another method"),
        (Some("tools/call"), None, "the name missing"),
        (None, Some("charge_card"), "the method missing"),
    ] {
        let (status, answer) = post(&gw, &charge, method, name);
        assert_eq!(status, 400, "{why}: {answer}");
        assert_eq!(answer["error"]["code"], -32020, "{why}: {answer}");
    }
    assert!(
        effects(&setup.sandbox, "charge").is_empty(),
        "nothing was charged"
    );
}
