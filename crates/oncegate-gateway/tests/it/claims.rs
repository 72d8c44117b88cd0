//! The two-phase API on a real socket, with the sandbox as the provider the caller's own
//! code calls: claim, execute at the provider with the claim's key, complete. A claim-only
//! capability (no upstream) throughout, reconciled by its read against the sandbox.
//!
//! Each case counts the provider's ledger: a second execution of one intent would show
//! there as a second charge (the worker below sends the claim's key, which the sandbox
//! dedupes, so the fencing cases use a fresh key per execution where the property
//! needs a second execution to be visible).

use std::time::Duration;

use oncegate_sandbox::{self as sandbox, SandboxConfig};
use serde_json::{Value, json};

use crate::support::{start_gateway, start_sandbox_with};

/// A gateway over a claim-only `charge` (keyed, reconciled by the sandbox's lookup) and
/// a claim-only `email` without a reconciliation read (escalates), on a socket.
struct Gw {
    url: String,
    sandbox: String,
    dir: tempfile::TempDir,
}

async fn gateway(lease: &str) -> Gw {
    gateway_over(lease, SandboxConfig::default()).await
}

async fn gateway_over(lease: &str, provider: SandboxConfig) -> Gw {
    let sandbox = start_sandbox_with(provider).await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
[store]
url = "sqlite://gw.db"

[[principals]]
name = "agent"
role = "agent"
token_env = "UNUSED_TOKEN_AGENT"

[[principals]]
name = "agent2"
role = "agent"
token_env = "UNUSED_TOKEN_AGENT2"

[[principals]]
name = "alice"
role = "approver"
token_env = "UNUSED_TOKEN_ALICE"

[[capabilities]]
name = "charge"
category = "keyed"
lease = "{lease}"
settle_horizon = "1s"
on_unknown = "reconcile"
key = {{ business_ref = "order_id", significant = [{{ arg = "amount", type = "money", default_currency = "USD" }}] }}

[capabilities.reconcile]
kind = "http"
url = "{sandbox}/v1/charges?idempotency_key={{key}}"
found = "/found"
effect_ref = "/charge/id"
result = "/charge"

[[capabilities]]
name = "payout"
category = "non_idempotent"
lease = "{lease}"
settle_horizon = "1h"
on_unknown = "reconcile"
key = {{ business_ref = "order_id", significant = [{{ arg = "amount", type = "money", default_currency = "USD" }}] }}

[capabilities.reconcile]
kind = "http"
url = "{sandbox}/v1/charges?order_id={{arg.order_id}}"
found = "/found"
effect_ref = "/charge/id"
result = "/charge"

[[capabilities]]
name = "email"
category = "non_idempotent"
lease = "{lease}"
on_unknown = "escalate"
key = {{ business_ref = "order_id", significant = [{{ arg = "to", type = "email" }}] }}
"#
    );
    let tokens = [("agent", "tok"), ("agent2", "tok2"), ("alice", "ali")];
    let url = start_gateway(dir.path(), &text, &tokens).await;
    Gw { url, sandbox, dir }
}

async fn post(url: String, token: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

impl Gw {
    async fn claim(&self, capability: &str, arguments: Value) -> (u16, Value) {
        post(
            format!("{}/v1/intents/claim", self.url),
            "tok",
            json!({"capability": capability, "arguments": arguments}),
        )
        .await
    }

    async fn complete(&self, claim: &Value, body: Value) -> (u16, Value) {
        let mut body = body;
        body["fencing_token"] = claim["fencing_token"].clone();
        post(
            format!(
                "{}/v1/intents/{}/complete",
                self.url,
                claim["intent_key"].as_str().unwrap()
            ),
            "tok",
            body,
        )
        .await
    }

    /// A completion by `token`'s principal with `fencing_token`.
    async fn complete_as(&self, token: &str, key: &str, fencing_token: &str) -> (u16, Value) {
        post(
            format!("{}/v1/intents/{key}/complete", self.url),
            token,
            json!({"fencing_token": fencing_token, "outcome": "not_sent", "error": "forged"}),
        )
        .await
    }

    async fn get(&self, token: &str, path: &str) -> String {
        reqwest::Client::new()
            .get(format!("{}{path}", self.url))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    async fn heartbeat(&self, claim: &Value) -> (u16, Value) {
        post(
            format!(
                "{}/v1/intents/{}/heartbeat",
                self.url,
                claim["intent_key"].as_str().unwrap()
            ),
            "tok",
            json!({"fencing_token": claim["fencing_token"]}),
        )
        .await
    }

    /// The claimer's whole execution: the charge at the sandbox with the claim's key,
    /// then its `applied` completion.
    async fn charge_and_complete(&self, claim: &Value, order: &str) -> (u16, Value) {
        let charge = self
            .charge(order, claim["idempotency_key"].as_str().unwrap())
            .await;
        self.complete(
            claim,
            json!({"outcome": "applied", "effect_ref": charge["id"], "result": charge}),
        )
        .await
    }

    /// The caller's own provider call: a charge at the sandbox with `key`.
    async fn charge(&self, order: &str, key: &str) -> Value {
        let r = reqwest::Client::new()
            .post(format!("{}/v1/charges", self.sandbox))
            .header("idempotency-key", key)
            .json(&json!({"order_id": order, "amount_minor": 1250, "currency": "USD"}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        r.json().await.unwrap()
    }

    async fn charges(&self, order: &str) -> usize {
        let r: Value = reqwest::get(format!(
            "{}/v1/effects?kind=charge&order_id={order}",
            self.sandbox
        ))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        r["effects"].as_array().unwrap().len()
    }
}

#[tokio::test]
async fn a_claimed_charge_executes_once_and_every_later_claim_replays_what_was_recorded() {
    let gw = gateway("30s").await;
    let (status, claim) = gw
        .claim("charge", json!({"order_id": "o-1", "amount": "12.50"}))
        .await;
    assert_eq!(
        (status, claim["status"].as_str()),
        (200, Some("execute")),
        "{claim}"
    );
    assert_eq!(claim["idempotency_key"], claim["intent_key"], "{claim}");
    assert!(
        claim["fencing_token"]
            .as_str()
            .unwrap()
            .starts_with("g1.e1.")
    );

    // A re-plan while the claim is live: nothing to execute.
    let (status, busy) = gw
        .claim("charge", json!({"order_id": "o-1", "amount": 12.5}))
        .await;
    assert_eq!(
        (status, busy["status"].as_str()),
        (202, Some("in_flight")),
        "{busy}"
    );

    let charge = gw
        .charge("o-1", claim["idempotency_key"].as_str().unwrap())
        .await;
    let done = json!({"outcome": "applied", "effect_ref": charge["id"], "result": charge});
    let (status, recorded) = gw.complete(&claim, done.clone()).await;
    assert_eq!(
        (status, recorded["status"].as_str()),
        (200, Some("applied")),
        "{recorded}"
    );
    assert_eq!(recorded["effect_ref"], charge["id"]);
    // The caller retrying its own completion hears what was recorded.
    let (status, again) = gw.complete(&claim, done).await;
    assert_eq!(
        (status, again["status"].as_str()),
        (200, Some("applied")),
        "{again}"
    );

    // A drifted re-plan after the result: the stored answer, nothing executed.
    let (status, replay) = gw
        .claim(
            "charge",
            json!({"order_id": "o-1", "amount": "12.50 USD", "memo": "again"}),
        )
        .await;
    assert_eq!(
        (status, replay["status"].as_str()),
        (200, Some("replayed")),
        "{replay}"
    );
    assert_eq!(replay["result"], charge, "{replay}");
    assert_eq!(gw.charges("o-1").await, 1);

    // A claim-only capability is not for the gateway to execute.
    let (status, refused) = post(
        format!("{}/v1/calls", gw.url),
        "tok",
        json!({"capability": "charge", "arguments": {"order_id": "o-2", "amount": "1.00"}}),
    )
    .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (409, Some("OG-0025")),
        "{refused}"
    );
}

#[tokio::test]
async fn a_worker_that_stalled_past_its_lease_records_nothing_over_the_claim_that_replaced_it() {
    let gw = gateway("1s").await;
    let args = json!({"order_id": "o-stall", "amount": "5.00"});
    let (_, first) = gw.claim("charge", args.clone()).await;
    assert_eq!(first["status"], "execute", "{first}");
    // The first worker stalls before it executes anything; its lease runs out.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (status, hb) = gw.heartbeat(&first).await;
    assert_eq!(
        (status, hb["error"]["code"].as_str()),
        (409, Some("OG-0024")),
        "{hb}"
    );

    // The next claim reconciles (the provider has nothing, but the settle horizon has not
    // passed, so it stays unknown: a keyed repeat may re-execute with the same key).
    let mut second = Value::Null;
    for _ in 0..50 {
        let (_, c) = gw.claim("charge", args.clone()).await;
        if c["status"] == "execute" {
            second = c;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        second["status"], "execute",
        "the intent never became claimable again"
    );
    assert_eq!(second["idempotency_key"], first["idempotency_key"]);
    assert_ne!(second["fencing_token"], first["fencing_token"]);
    let charge = gw
        .charge("o-stall", second["idempotency_key"].as_str().unwrap())
        .await;
    let (status, _body) = gw
        .complete(
            &second,
            json!({"outcome": "applied", "effect_ref": charge["id"], "result": charge}),
        )
        .await;
    assert_eq!(status, 200, "{_body}");

    // The stalled worker wakes up and reports: refused, and nothing it says is recorded.
    for body in [
        json!({"outcome": "failed", "error": "declined", "result": {"error": "card_declined"}}),
        json!({"outcome": "not_sent"}),
        json!({"outcome": "applied", "effect_ref": "ch_forged", "result": {"id": "ch_forged"}}),
    ] {
        let (status, stale) = gw.complete(&first, body).await;
        assert_eq!(
            (status, stale["error"]["code"].as_str()),
            (409, Some("OG-0024")),
            "{stale}"
        );
    }
    let (_, replay) = gw.claim("charge", args).await;
    assert_eq!(replay["status"], "replayed", "{replay}");
    assert_eq!(replay["effect_ref"], charge["id"], "{replay}");
    assert_eq!(gw.charges("o-stall").await, 1);
}

#[tokio::test]
async fn a_heartbeat_keeps_a_long_execution_s_claim_and_a_dead_claim_is_reconciled_from_the_provider()
 {
    let gw = gateway("1s").await;
    let (_, claim) = gw
        .claim("charge", json!({"order_id": "o-long", "amount": "7.00"}))
        .await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (status, hb) = gw.heartbeat(&claim).await;
        assert_eq!(
            (status, hb["status"].as_str()),
            (200, Some("in_flight")),
            "{hb}"
        );
        assert_eq!(hb["fencing_token"], claim["fencing_token"]);
        // Nobody else may take it meanwhile.
        let (_, busy) = gw
            .claim("charge", json!({"order_id": "o-long", "amount": "7.00"}))
            .await;
        assert_eq!(busy["status"], "in_flight", "{busy}");
    }
    let (status, done) = gw.charge_and_complete(&claim, "o-long").await;
    assert_eq!(
        (status, done["status"].as_str()),
        (200, Some("applied")),
        "{done}"
    );

    // A worker that executes and dies before completing: after its lease, the next claim
    // asks the provider and replays what it finds, without a second execution.
    let args = json!({"order_id": "o-dead", "amount": "3.00"});
    let (_, dead) = gw.claim("charge", args.clone()).await;
    let charge = gw
        .charge("o-dead", dead["idempotency_key"].as_str().unwrap())
        .await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (status, found) = gw.claim("charge", args).await;
    assert_eq!(
        (status, found["status"].as_str()),
        (200, Some("replayed")),
        "{found}"
    );
    assert_eq!(found["effect_ref"], charge["id"], "{found}");
    assert_eq!(gw.charges("o-dead").await, 1);
}

#[tokio::test]
async fn not_sent_lets_the_next_claim_execute_and_unknown_without_a_read_waits_for_a_human_whose_approval_the_next_claim_executes()
 {
    let gw = gateway("30s").await;
    let args = json!({"order_id": "o-ns", "amount": "2.00"});
    let (_, first) = gw.claim("charge", args.clone()).await;
    let (status, ns) = gw
        .complete(
            &first,
            json!({"outcome": "not_sent", "error": "connection refused"}),
        )
        .await;
    // The charge has a reconciliation read: the worker's word is checked before the
    // next claim executes (the sandbox has nothing, so it executes at once).
    assert_eq!(
        (status, ns["state"].as_str()),
        (202, Some("unknown")),
        "{ns}"
    );
    let (_, again) = gw.claim("charge", args).await;
    assert_eq!(again["status"], "execute", "{again}");
    assert_eq!(again["idempotency_key"], first["idempotency_key"]);

    // An email whose outcome is unknown, and no read to ask: a human decides.
    let email = json!({"order_id": "o-mail", "to": "Ann@Example.com"});
    let (_, claim) = gw.claim("email", email.clone()).await;
    let (status, unknown) = gw
        .complete(&claim, json!({"outcome": "unknown", "error": "timed out"}))
        .await;
    // Nothing will ever read it: it goes to a human at once (issue 37), not when the
    // agent happens to repeat.
    assert_eq!(
        (status, unknown["status"].as_str()),
        (202, Some("pending_approval")),
        "{unknown}"
    );
    let (status, held) = gw.claim("email", email.clone()).await;
    assert_eq!(
        (status, held["status"].as_str()),
        (202, Some("pending_approval")),
        "{held}"
    );
    assert_eq!(held["approval_id"], unknown["approval_id"], "{held}");
    let approval = held["approval_id"].as_str().unwrap().to_owned();
    let approve = format!("{}/v1/approvals/{approval}/approve", gw.url);
    let (status, approved) = post(approve.clone(), "ali", json!({})).await;
    assert_eq!(
        (status, approved["status"].as_str()),
        (200, Some("approved")),
        "{approved}"
    );
    // A second click answers the first decision; nothing was executed by the gateway.
    let (_, twice) = post(approve, "ali", json!({})).await;
    assert_eq!(twice["status"], "approved", "{twice}");
    // The agent's next claim executes it, once.
    let (status, go) = gw.claim("email", email.clone()).await;
    assert_eq!(
        (status, go["status"].as_str()),
        (200, Some("execute")),
        "{go}"
    );
    let (_, busy) = gw.claim("email", email.clone()).await;
    assert_eq!(busy["status"], "in_flight", "{busy}");
    let (_, sent) = gw
        .complete(
            &go,
            json!({"outcome": "applied", "effect_ref": "em_1", "result": {"id": "em_1"}}),
        )
        .await;
    assert_eq!(sent["status"], "applied", "{sent}");
    let (_, replay) = gw.claim("email", email).await;
    assert_eq!(replay["status"], "replayed", "{replay}");
}

#[tokio::test]
async fn malformed_completions_are_clear_errors_that_change_nothing() {
    let gw = gateway("30s").await;
    let (_, claim) = gw
        .claim("charge", json!({"order_id": "o-bad", "amount": "1.00"}))
        .await;
    let key = claim["intent_key"].as_str().unwrap();
    let complete = |k: &str| format!("{}/v1/intents/{k}/complete", gw.url);
    for (url, token, body, status, code) in [
        (
            complete(key),
            "tok",
            json!({"fencing_token": "nope", "outcome": "applied"}),
            400,
            "OG-0009",
        ),
        (
            complete(key),
            "tok",
            json!({"fencing_token": claim["fencing_token"], "outcome": "maybe"}),
            400,
            "OG-0009",
        ),
        (
            complete(key),
            "tok",
            json!({"fencing_token": claim["fencing_token"], "outcome": "applied", "extra": 1}),
            400,
            "OG-0009",
        ),
        (
            complete("zz"),
            "tok",
            json!({"fencing_token": claim["fencing_token"], "outcome": "applied"}),
            404,
            "OG-0021",
        ),
        (
            complete(&"a".repeat(64)),
            "tok",
            json!({"fencing_token": claim["fencing_token"], "outcome": "applied"}),
            404,
            "OG-0021",
        ),
        (
            complete(key),
            "ali",
            json!({"fencing_token": claim["fencing_token"], "outcome": "applied"}),
            403,
            "OG-0013",
        ),
        (
            complete(key),
            "wrong",
            json!({"fencing_token": claim["fencing_token"], "outcome": "applied"}),
            401,
            "OG-0054",
        ),
        // Another claim's nonce with this claim's numbers.
        (
            complete(key),
            "tok",
            json!({"fencing_token": "g1.e1.00000000000000000000000000000000", "outcome": "applied"}),
            409,
            "OG-0024",
        ),
    ] {
        let (s, answer) = post(url, token, body).await;
        assert_eq!(
            (s, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{answer}"
        );
    }
    // The claim still holds, untouched.
    let (status, done) = gw
        .complete(&claim, json!({"outcome": "applied", "effect_ref": "ch_x"}))
        .await;
    assert_eq!(
        (status, done["status"].as_str()),
        (200, Some("applied")),
        "{done}"
    );
}

/// The fencing token's nonce stays with the claimer (issue 32): no read shows it (the
/// lease keeps only its seal, so neither the API nor the store file holds it), a token
/// rebuilt from what the intent shows is stale, and the claim's own token works only
/// for the principal that claimed (403 for another, even with the right token). The
/// real worker then completes: one charge.
#[tokio::test]
async fn a_claim_s_token_is_its_claimer_s_alone() {
    let gw = gateway("30s").await;
    let (status, claim) = gw
        .claim("charge", json!({"order_id": "N-1", "amount": "12.50"}))
        .await;
    assert_eq!(status, 200, "{claim}");
    let key = claim["intent_key"].as_str().unwrap();
    let token = claim["fencing_token"].as_str().unwrap();
    let nonce = token.rsplit('.').next().unwrap();
    assert_eq!(nonce.len(), 32, "{token}");
    // Every read surface, by another principal: the nonce is nowhere.
    let one = gw.get("ali", &format!("/v1/intents/{key}")).await;
    let listed = gw.get("ali", "/v1/intents?state=in_flight").await;
    for (surface, text) in [("one", &one), ("listed", &listed)] {
        assert!(text.contains(key), "{surface}: {text}");
        assert!(!text.contains(nonce), "{surface} shows the nonce: {text}");
    }
    let store = std::fs::read(gw.dir.path().join("gw.db")).unwrap();
    let wal = std::fs::read(gw.dir.path().join("gw.db-wal")).unwrap_or_default();
    for bytes in [&store, &wal] {
        assert!(
            !bytes.windows(nonce.len()).any(|w| w == nonce.as_bytes()),
            "the store file holds the nonce"
        );
    }
    // A token rebuilt from what the intent shows (its lease owner) is stale, for the
    // claimer and for anyone else.
    let shown: Value = serde_json::from_str(&one).unwrap();
    let owner = shown["lease"]["owner"].as_str().unwrap();
    let rebuilt = format!("g1.e1.{}", owner.rsplit('/').next().unwrap());
    let (status, body) = gw.complete_as("tok", key, &rebuilt).await;
    assert!(
        matches!(status, 400 | 409),
        "rebuilt token: {status} {body}"
    );
    // The right token in another principal's hands: 403, nothing recorded.
    let (status, body) = gw.complete_as("tok2", key, token).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = post(
        format!("{}/v1/intents/{key}/heartbeat", gw.url),
        "tok2",
        json!({"fencing_token": token}),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    // The claimer completes: one charge, applied.
    let (status, done) = gw.charge_and_complete(&claim, "N-1").await;
    assert_eq!(
        (status, done["status"].as_str()),
        (200, Some("applied")),
        "{done}"
    );
    assert_eq!(gw.charges("N-1").await, 1);
}

/// Issue 32: a worker that pays out and then reports `not_sent` (its own bug, or an
/// SDK that wraps a read timeout in a connect error), at a provider without keys: the
/// next claim reads the provider first, finds the payout and replays it. Before, the
/// next claim executed at once: two payouts. A worker whose `not_sent` is true is then
/// re-executed at once, with no settle horizon (an hour here) to wait for.
#[tokio::test]
async fn a_worker_s_not_sent_is_checked_by_the_read_before_anything_executes_again() {
    let gw = gateway_over(
        "30s",
        SandboxConfig {
            ignore_idempotency_key: vec![sandbox::Resource::Charges],
            ..SandboxConfig::default()
        },
    )
    .await;
    for n in 0..3 {
        let order = format!("o-lie-{n}");
        let args = json!({"order_id": order, "amount": "12.50"});
        let (_, claim) = gw.claim("payout", args.clone()).await;
        assert_eq!(claim["status"], "execute", "{claim}");
        let paid = gw
            .charge(&order, claim["idempotency_key"].as_str().unwrap())
            .await;
        let (status, said) = gw
            .complete(
                &claim,
                json!({"outcome": "not_sent", "error": "connect error: timed out"}),
            )
            .await;
        assert_eq!(
            (status, said["state"].as_str()),
            (202, Some("unknown")),
            "{said}"
        );
        let (_, next) = gw.claim("payout", args.clone()).await;
        assert_eq!(next["status"], "replayed", "{next}");
        assert_eq!(next["effect_ref"], paid["id"], "{next}");
        let (_, again) = gw.claim("payout", args).await;
        assert_eq!(again["status"], "replayed", "{again}");
        assert_eq!(gw.charges(&order).await, 1, "one payout for {order}");
    }

    // The truth: nothing was sent. The read finds nothing and the next claim executes.
    let args = json!({"order_id": "o-true", "amount": "3.00"});
    let (_, claim) = gw.claim("payout", args.clone()).await;
    let (status, said) = gw
        .complete(
            &claim,
            json!({"outcome": "not_sent", "error": "connection refused"}),
        )
        .await;
    assert_eq!(
        (status, said["state"].as_str()),
        (202, Some("unknown")),
        "{said}"
    );
    let (_, next) = gw.claim("payout", args).await;
    assert_eq!(next["status"], "execute", "{next}");
    assert_eq!(gw.charges("o-true").await, 0);
}
