//! Late commits (issue 9, section 1): the provider commits after the gateway's timeout,
//! and after the first reconciliation read. "Not found" then is not proof of absence,
//! and a re-execution would be a second effect. Real `oncegate sandbox` and `oncegate
//! serve` processes, over an HTTP upstream and an MCP upstream, resolved by the agent's
//! repeats or by the background sweep alone, for a provider that ignores the key
//! (`non_idempotent`) and one that honours it (`keyed`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Proc, Setup, call, effects, fault, intent};

/// How long the sandbox takes before it commits: well past the gateway's 1 s timeout.
const COMMIT_AFTER_MS: u64 = 4000;

/// `send_email` again, as a tool on the sandbox's MCP server (which, like its HTTP API,
/// ignores the key for emails when told to).
const EMAIL_OVER_MCP: &str = r#"
[[capabilities]]
name = "send_email_mcp"
category = "non_idempotent"
replay_window = "10m"
attempt_ceiling = 100
on_unknown = "reconcile"

[capabilities.key]
business_ref = "order_id"
significant = [
  { arg = "to", type = "email" },
  { arg = "template", type = "enum", values = ["receipt", "refund_notice", "shipping_update"] },
]

[capabilities.upstream]
kind = "mcp"
url = "{env.SANDBOX_URL}/mcp"
tool = "send_email"
timeout = "1s"
effect_ref = "/id"
headers = { Authorization = "Bearer {env.SANDBOX_API_KEY}" }
body = { order_id = "{business_ref}", to = "{norm.to}", template = "{norm.template}", dedupe_ref = "{key}" }

[capabilities.reconcile]
kind = "mcp"
tool = "find_email"
arguments = { dedupe_ref = "{key}" }
found = "/found"
effect_ref = "/email/id"
result = "/email"
"#;

/// The example registry with 1 s upstream timeouts (the default settle horizon follows
/// them), room for many repeats, and the MCP email tool; `extra` edits it further.
fn setup(ignore: &[&str], extra: impl FnOnce(String) -> String) -> Setup {
    Setup::with_registry(ignore, |text| {
        extra(
            text.replace("timeout = \"5s\"", "timeout = \"1s\"")
                .replace("attempt_ceiling = 10\n", "attempt_ceiling = 100\n")
                .replace("attempt_ceiling = 5\n", "attempt_ceiling = 100\n")
                + EMAIL_OVER_MCP,
        )
    })
}

/// Waits (generously: the machine is shared) until the intent is `applied`.
fn until_applied(gw: &Proc, key: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let i = intent(gw, key);
        if i["state"] == "applied" || Instant::now() > deadline {
            return i;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
}

/// Sleeps until the provider's slow commit has certainly landed, so that a duplicate
/// (if any) is in the ledger before it is counted.
fn past_the_late_commit(started: Instant) {
    let landed = started + Duration::from_millis(COMMIT_AFTER_MS + 2000);
    if let Some(left) = landed.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
}

struct Case {
    capability: &'static str,
    /// The sandbox resource path the fault is queued on (either surface).
    path: &'static str,
    kind: &'static str,
    /// Resources whose key the sandbox ignores.
    ignore: &'static [&'static str],
    args: Value,
}

fn email(capability: &'static str, order: &str) -> Case {
    Case {
        capability,
        path: "/v1/emails",
        kind: "email",
        ignore: &["emails"],
        args: json!({"order_id": order, "to": "ann@example.com", "template": "receipt", "body": "Thanks!"}),
    }
}

fn refund(order: &str) -> Case {
    Case {
        capability: "refund",
        path: "/v1/refunds",
        kind: "refund",
        ignore: &[],
        args: json!({"order_id": order, "amount": "7.00"}),
    }
}

fn charge(order: &str) -> Case {
    Case {
        capability: "charge_card",
        path: "/v1/charges",
        kind: "charge",
        ignore: &[],
        args: json!({"order_id": order, "amount": "7.00"}),
    }
}

/// The agent repeats every few hundred ms from the timeout on, through the late commit,
/// until it is told the effect happened.
fn through_repeats(case: &Case) {
    let setup = setup(case.ignore, |t| t);
    let gw = setup.gateway();
    fault(&setup.sandbox, case.path, "slow", COMMIT_AFTER_MS);
    let started = Instant::now();
    let first = call(&gw, case.capability, &case.args).1;
    assert_eq!(first["status"], "unknown", "{first}");
    let key = first["intent_key"].as_str().unwrap().to_owned();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let last = loop {
        std::thread::sleep(Duration::from_millis(300));
        let again = call(&gw, case.capability, &case.args).1;
        seen.push(again["status"].as_str().unwrap_or("?").to_owned());
        if matches!(again["status"].as_str(), Some("replayed" | "applied"))
            || Instant::now() > deadline
        {
            break again;
        }
        if case.ignore.is_empty() {
            continue;
        }
        // The provider cannot dedupe: until it shows the effect, every repeat hears
        // "unknown, reconciling; do not call again", never a re-execution.
        assert_eq!(again["status"], "unknown", "{again} after {seen:?}");
        assert!(
            again["message"]
                .as_str()
                .unwrap_or_default()
                .contains("do not call again"),
            "{again}"
        );
    };
    assert!(
        matches!(last["status"].as_str(), Some("replayed" | "applied")),
        "{last} after {seen:?}"
    );
    past_the_late_commit(started);
    let ledger = effects(&setup.sandbox, case.kind);
    assert_eq!(ledger.len(), 1, "one effect for one intent: {ledger:?}");
    let settled = until_applied(&gw, &key);
    assert_eq!(settled["state"], "applied", "{settled}");
    assert_eq!(settled["effect_ref"], ledger[0]["id"], "{settled}");
}

/// Nobody repeats: the background sweep alone must settle the intent from the
/// provider's record, and never conclude absence while the first attempt can land.
fn through_the_sweep(case: &Case) {
    let setup = setup(case.ignore, |t| t);
    let gw = setup.gateway_sweeping(&[], "200ms");
    fault(&setup.sandbox, case.path, "slow", COMMIT_AFTER_MS);
    let started = Instant::now();
    let first = call(&gw, case.capability, &case.args).1;
    assert_eq!(first["status"], "unknown", "{first}");
    let key = first["intent_key"].as_str().unwrap().to_owned();
    // Before the provider commits, the sweep has read "not found" several times.
    std::thread::sleep(Duration::from_millis(COMMIT_AFTER_MS / 2));
    let meanwhile = intent(&gw, &key);
    assert_eq!(
        meanwhile["state"], "unknown",
        "absence is not concluded while the first attempt can still land: {meanwhile}"
    );
    let settled = until_applied(&gw, &key);
    assert_eq!(
        settled["state"], "applied",
        "the provider's record settles it: {settled}"
    );
    past_the_late_commit(started);
    let ledger = effects(&setup.sandbox, case.kind);
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(settled["effect_ref"], ledger[0]["id"], "{settled}");
    // The agent comes back afterwards: the one effect is replayed, nothing re-executes.
    let again = call(&gw, case.capability, &case.args).1;
    assert_eq!(again["status"], "replayed", "{again}");
    assert_eq!(effects(&setup.sandbox, case.kind).len(), 1);
}

#[test]
fn late_commit_over_http_non_idempotent_through_repeats_is_one_email() {
    through_repeats(&email("send_email", "LH-1"));
}

#[test]
fn late_commit_over_http_non_idempotent_through_the_sweep_is_one_email() {
    through_the_sweep(&email("send_email", "LH-2"));
}

#[test]
fn late_commit_over_http_keyed_through_repeats_is_one_refund() {
    through_repeats(&refund("LH-3"));
}

#[test]
fn late_commit_over_http_keyed_through_the_sweep_is_one_refund() {
    through_the_sweep(&refund("LH-4"));
}

#[test]
fn late_commit_over_mcp_non_idempotent_through_repeats_is_one_email() {
    through_repeats(&email("send_email_mcp", "LM-1"));
}

#[test]
fn late_commit_over_mcp_non_idempotent_through_the_sweep_is_one_email() {
    through_the_sweep(&email("send_email_mcp", "LM-2"));
}

#[test]
fn late_commit_over_mcp_keyed_through_repeats_is_one_charge() {
    through_repeats(&charge("LM-3"));
}

#[test]
fn late_commit_over_mcp_keyed_through_the_sweep_is_one_charge() {
    through_the_sweep(&charge("LM-4"));
}

/// A late commit whose answer never comes, over MCP, with a settle horizon (on purpose)
/// far shorter than the provider's delay: only oncegate knowing that its own
/// `tools/call` is still running keeps a repeat and the sweep from concluding absence.
/// The provider's record then settles the intent.
#[test]
fn an_mcp_call_still_running_past_the_settle_horizon_is_not_absence() {
    let case = email("send_email_mcp", "LM-5");
    let setup = setup(case.ignore, |t| {
        t.replace(
            "name = \"send_email_mcp\"\n",
            "name = \"send_email_mcp\"\nsettle_horizon = \"100ms\"\n",
        )
    });
    let gw = setup.gateway_sweeping(&[], "200ms");
    fault(&setup.sandbox, case.path, "slow_then_drop", COMMIT_AFTER_MS);
    let started = Instant::now();
    let first = call(&gw, case.capability, &case.args).1;
    assert_eq!(first["status"], "unknown", "{first}");
    let key = first["intent_key"].as_str().unwrap().to_owned();
    std::thread::sleep(Duration::from_millis(COMMIT_AFTER_MS / 2));
    let again = call(&gw, case.capability, &case.args).1;
    assert_eq!(again["status"], "unknown", "the call still runs: {again}");
    assert_eq!(again["reason"]["code"], "OG-0023", "{again}");
    assert_eq!(intent(&gw, &key)["state"], "unknown");
    let settled = until_applied(&gw, &key);
    assert_eq!(settled["state"], "applied", "{settled}");
    past_the_late_commit(started);
    let ledger = effects(&setup.sandbox, case.kind);
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(settled["effect_ref"], ledger[0]["id"], "{settled}");
}
