//! The sandbox provider over a real socket: idempotency keys honoured and ignored, each
//! injected fault, lookups, the effect list the demo counts and a detection job pages
//! through, and API-key auth.
//! Its MCP surface is tested in `mcp`.
//!
//! Why one file: every test here drives the same provider over HTTP with the same
//! helpers; the fault cases read best side by side.

mod mcp;

use std::time::Duration;

use axum::{body::Body, http::Request};
use oncegate_sandbox::{self as sandbox, Resource, SandboxConfig};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::Running;

fn charge(order_id: &str, amount_minor: i64) -> Value {
    json!({ "order_id": order_id, "amount_minor": amount_minor, "currency": "USD" })
}

async fn error_code(response: reqwest::Response) -> String {
    let body: Value = response.json().await.expect("an error body is JSON");
    body["error"].as_str().expect("an error code").to_owned()
}

#[tokio::test]
async fn a_repeated_key_is_one_effect() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let body = charge("A-1", 1250);

    let first = sandbox
        .post("/v1/charges", Some("k-1"), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    let second = sandbox
        .post("/v1/charges", Some("k-1"), &body)
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(second.headers()["idempotent-replayed"], "true");
    let second: Value = second.json().await.unwrap();

    assert!(first["id"].as_str().unwrap().starts_with("ch_"));
    assert_eq!(first, second);
    assert_eq!(first["status"], "succeeded");
    assert_eq!(first["amount_minor"], 1250);
    assert_eq!(first["idempotency_key"], "k-1");
    let effects = sandbox.effects("").await;
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["kind"], "charge");
    assert_eq!(effects[0]["id"], first["id"]);
    assert_eq!(effects[0]["request"], body);

    let found = sandbox.get_json("/v1/charges?idempotency_key=k-1").await;
    assert_eq!(found, json!({ "found": true, "charge": first }));
    let missing = sandbox.get_json("/v1/charges?idempotency_key=k-2").await;
    assert_eq!(missing, json!({ "found": false }));
}

#[tokio::test]
async fn an_ignored_key_is_an_effect_per_post() {
    let config = SandboxConfig {
        ignore_idempotency_key: vec![Resource::Charges],
        ..SandboxConfig::default()
    };
    let sandbox = Running::start(config).await;
    let body = charge("A-1", 1250);

    let mut ids = Vec::new();
    for _ in 0..2 {
        let response = sandbox
            .post("/v1/charges", Some("k-1"), &body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let charge: Value = response.json().await.unwrap();
        ids.push(charge["id"].clone());
    }

    assert_ne!(ids[0], ids[1]);
    let effects = sandbox.effects("?idempotency_key=k-1").await;
    assert_eq!(effects.len(), 2, "the effect list records the key as sent");
    // A provider that ignores the key never recorded it, so cannot find by it.
    let lookup = sandbox.get_json("/v1/charges?idempotency_key=k-1").await;
    assert_eq!(lookup, json!({ "found": false }));
    let by_order = sandbox.get_json("/v1/charges?order_id=A-1").await;
    assert_eq!(by_order["charge"]["id"], ids[0], "the first match");
}

#[tokio::test]
async fn a_key_reused_with_another_body_is_refused() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let first = sandbox
        .post("/v1/charges", Some("k-1"), &charge("A-1", 1250))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);

    let reused = sandbox
        .post("/v1/charges", Some("k-1"), &charge("A-1", 9999))
        .send()
        .await
        .unwrap();

    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(error_code(reused).await, "idempotency_key_reused");
    assert_eq!(sandbox.effects("").await.len(), 1);
}

#[tokio::test]
async fn stall_after_commit_commits_and_outlasts_the_caller() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    sandbox
        .queue_fault(
            json!({ "path": "/v1/charges", "fault": "stall_after_commit", "delay_ms": 1000 }),
        )
        .await;

    let result = sandbox
        .post("/v1/charges", Some("k-stall"), &charge("A-1", 1250))
        .timeout(Duration::from_millis(300))
        .send()
        .await;

    let error = result.expect_err("the caller times out");
    assert!(error.is_timeout(), "{error}");
    let effects = sandbox.effects("?kind=charge&order_id=A-1").await;
    assert_eq!(effects.len(), 1, "committed before the stall");
    let found = sandbox
        .get_json("/v1/charges?idempotency_key=k-stall")
        .await;
    assert_eq!(found["found"], true);
    assert_eq!(found["charge"]["id"], effects[0]["id"]);
}

#[tokio::test]
async fn drop_after_commit_commits_and_never_answers() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    // Warm the client's pool first, so the drop also has to work on a reused connection.
    assert_eq!(sandbox.effects("").await.len(), 0);
    sandbox
        .queue_fault(json!({ "path": "/v1/charges", "fault": "drop_after_commit" }))
        .await;

    let result = sandbox
        .post("/v1/charges", Some("k-drop"), &charge("A-1", 1250))
        .timeout(Duration::from_secs(5))
        .send()
        .await;

    let error = result.expect_err("the connection closes without a response");
    assert!(!error.is_timeout(), "closed, not stalled: {error}");
    assert!(error.status().is_none(), "no status line was sent: {error}");
    let effects = sandbox.effects("").await;
    assert_eq!(effects.len(), 1, "committed before the drop");
    assert_eq!(effects[0]["idempotency_key"], "k-drop");
    // The retry the gateway would make replays the committed charge.
    let retry = sandbox
        .post("/v1/charges", Some("k-drop"), &charge("A-1", 1250))
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), StatusCode::OK);
    let retry: Value = retry.json().await.unwrap();
    assert_eq!(retry["id"], effects[0]["id"]);
    assert_eq!(sandbox.effects("").await.len(), 1);
}

#[tokio::test]
async fn refusals_before_commit_leave_no_effect() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let cases = [
        (
            "fail_before_commit",
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
        ),
        ("decline", StatusCode::PAYMENT_REQUIRED, "card_declined"),
        ("rate_limit", StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
    ];
    for (fault, status, code) in cases {
        sandbox
            .queue_fault(json!({ "path": "/v1/charges", "fault": fault }))
            .await;
        let response = sandbox
            .post("/v1/charges", Some("k-1"), &charge("A-1", 1250))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{fault}");
        if status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(response.headers()["retry-after"], "1");
        }
        assert_eq!(error_code(response).await, code, "{fault}");
        assert_eq!(sandbox.effects("").await.len(), 0, "{fault}");
    }

    // Nothing was recorded under the key either, so the retry goes through.
    let retry = sandbox
        .post("/v1/charges", Some("k-1"), &charge("A-1", 1250))
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), StatusCode::OK);
    assert_eq!(sandbox.effects("").await.len(), 1);
}

#[tokio::test]
async fn a_slow_request_commits_even_after_the_caller_left() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    sandbox
        .queue_fault(json!({ "path": "/v1/refunds", "fault": "slow", "delay_ms": 800 }))
        .await;

    let result = sandbox
        .post("/v1/refunds", Some("k-slow"), &charge("A-1", 500))
        .timeout(Duration::from_millis(100))
        .send()
        .await;

    assert!(result.expect_err("the caller gives up").is_timeout());
    assert_eq!(sandbox.effects("").await.len(), 0, "not committed yet");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let found = sandbox.get_json("/v1/refunds?idempotency_key=k-slow").await;
        if found["found"] == true {
            assert!(found["refund"]["id"].as_str().unwrap().starts_with("re_"));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the refund never committed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(sandbox.effects("?kind=refund").await.len(), 1);
}

/// The claim a `keyed` capability rests on when it re-executes while its first attempt
/// is still slow: a same-key request that arrives meanwhile commits once, and the slow
/// one, when it lands, replays it. The ledger decides "new key?" and commits under one
/// lock, so the two can never both create.
#[tokio::test]
async fn a_same_key_request_during_a_slow_one_is_still_one_effect() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    sandbox
        .queue_fault(json!({ "path": "/v1/refunds", "fault": "slow", "delay_ms": 1500 }))
        .await;
    let slow = {
        let first = sandbox.post("/v1/refunds", Some("k-late"), &charge("A-1", 500));
        tokio::spawn(async move { first.send().await })
    };
    // The first request is held before its commit; the retry arrives meanwhile.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sandbox.get_json("/_sandbox/faults").await["pending"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fault was never taken"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        sandbox.effects("").await.len(),
        0,
        "the slow one has not committed"
    );
    let retry = sandbox
        .post("/v1/refunds", Some("k-late"), &charge("A-1", 500))
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), StatusCode::OK);
    let retry: Value = retry.json().await.unwrap();
    let late = slow.await.unwrap().expect("the slow one answers");
    assert_eq!(late.status(), StatusCode::OK);
    assert_eq!(
        late.headers()
            .get("Idempotent-Replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true"),
        "the late commit found the key taken and replayed"
    );
    let late: Value = late.json().await.unwrap();
    assert_eq!(late["id"], retry["id"]);
    assert_eq!(sandbox.effects("?kind=refund").await.len(), 1);
}

#[tokio::test]
async fn slow_then_drop_commits_late_and_never_answers() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    sandbox
        .queue_fault(json!({ "path": "/v1/charges", "fault": "slow_then_drop", "delay_ms": 300 }))
        .await;
    let result = sandbox
        .post("/v1/charges", Some("k-sd"), &charge("A-1", 700))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    let error = result.expect_err("the connection closes without a response");
    assert!(
        !error.is_timeout(),
        "closed after the commit, not stalled: {error}"
    );
    let effects = sandbox.effects("").await;
    assert_eq!(effects.len(), 1, "committed before the drop");
    assert_eq!(effects[0]["idempotency_key"], "k-sd");
}

#[tokio::test]
async fn queued_faults_count_down_and_can_be_cleared() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    sandbox
        .queue_fault(json!({ "path": "/v1/charges", "fault": "decline", "times": 2 }))
        .await;

    let mut statuses = Vec::new();
    for n in 0..3 {
        let key = format!("k-{n}");
        let response = sandbox
            .post("/v1/charges", Some(&key), &charge("A-1", 1250))
            .send()
            .await
            .unwrap();
        statuses.push(response.status());
    }
    assert_eq!(
        statuses,
        [
            StatusCode::PAYMENT_REQUIRED,
            StatusCode::PAYMENT_REQUIRED,
            StatusCode::OK
        ]
    );

    sandbox
        .queue_fault(json!({ "path": "/v1/charges", "fault": "rate_limit", "times": 5 }))
        .await;
    let faults_url = format!("{}/_sandbox/faults", sandbox.base);
    let pending: Value = sandbox
        .client
        .get(&faults_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pending["pending"][0]["times"], 5);
    let cleared: Value = sandbox
        .client
        .delete(&faults_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(cleared["cleared"], 1);
    let response = sandbox
        .post("/v1/charges", Some("k-after-clear"), &charge("A-1", 1250))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_fault_header_breaks_one_request() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let declined = sandbox
        .post("/v1/charges", None, &charge("A-1", 1250))
        .header("Sandbox-Fault", "decline")
        .send()
        .await
        .unwrap();
    assert_eq!(declined.status(), StatusCode::PAYMENT_REQUIRED);

    let bogus = sandbox
        .post("/v1/charges", None, &charge("A-1", 1250))
        .header("Sandbox-Fault", "meteor_strike")
        .send()
        .await
        .unwrap();
    assert_eq!(bogus.status(), StatusCode::BAD_REQUEST);
    assert_eq!(error_code(bogus).await, "invalid_header");

    let stalled = sandbox
        .post("/v1/charges", None, &charge("A-1", 1250))
        .header("Sandbox-Fault", "stall_after_commit")
        .header("Sandbox-Fault-Delay-Ms", "1000")
        .timeout(Duration::from_millis(200))
        .send()
        .await;
    assert!(stalled.expect_err("stalled past the timeout").is_timeout());
    assert_eq!(sandbox.effects("").await.len(), 1);
}

#[tokio::test]
async fn bad_fault_requests_are_refused() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let url = format!("{}/_sandbox/faults", sandbox.base);
    let cases = [
        (
            json!({ "path": "/v1/charge", "fault": "decline" }),
            "unknown_fault_path",
        ),
        (
            json!({ "path": "/v1/charges", "fault": "meteor_strike" }),
            "invalid_request",
        ),
        (
            json!({ "path": "/v1/charges", "fault": "slow", "delay": 5 }),
            "invalid_request",
        ),
        (
            json!({ "path": "/v1/charges", "fault": "slow", "times": 0 }),
            "invalid_request",
        ),
    ];
    for (body, code) in cases {
        let response = sandbox.client.post(&url).json(&body).send().await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}"
        );
        assert_eq!(error_code(response).await, code, "{body}");
    }
    let pending: Value = sandbox
        .client
        .get(&url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pending["pending"], json!([]));
}

#[tokio::test]
async fn the_api_key_is_enforced() {
    let config = SandboxConfig {
        api_key: Some("sk_test_123".to_owned()),
        ..SandboxConfig::default()
    };
    let sandbox = Running::start(config).await;
    let url = format!("{}/v1/charges", sandbox.base);
    let body = charge("A-1", 1250);

    let missing = sandbox.client.post(&url).json(&body).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(missing.headers()["www-authenticate"], "Bearer");
    assert_eq!(error_code(missing).await, "unauthorized");
    let wrong = sandbox
        .client
        .post(&url)
        .bearer_auth("sk_test_124")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let effects_without_key = sandbox
        .client
        .get(format!("{}/v1/effects", sandbox.base))
        .send()
        .await
        .unwrap();
    assert_eq!(effects_without_key.status(), StatusCode::UNAUTHORIZED);

    let right = sandbox
        .post("/v1/charges", None, &body)
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), StatusCode::OK);
    assert_eq!(sandbox.effects("").await.len(), 1);
    let health = sandbox
        .client
        .get(format!("{}/_sandbox/health", sandbox.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        health.status(),
        StatusCode::OK,
        "the admin API needs no key"
    );
}

#[tokio::test]
async fn emails_are_found_by_dedupe_ref_even_when_keys_are_ignored() {
    let config = SandboxConfig {
        ignore_idempotency_key: vec![Resource::Emails],
        ..SandboxConfig::default()
    };
    let sandbox = Running::start(config).await;
    let email = json!({
        "order_id": "A-1", "to": "ann@example.com", "template": "receipt", "dedupe_ref": "ik_1",
    });

    for _ in 0..2 {
        let response = sandbox
            .post("/v1/emails", Some("ik_1"), &email)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }

    let effects = sandbox.effects("?kind=email").await;
    assert_eq!(effects.len(), 2, "the provider sent it twice");
    let found = sandbox.get_json("/v1/emails?dedupe_ref=ik_1").await;
    assert_eq!(found["found"], true);
    assert_eq!(found["email"]["id"], effects[0]["id"]);
    assert!(found["email"]["id"].as_str().unwrap().starts_with("em_"));
    let by_key = sandbox.get_json("/v1/emails?idempotency_key=ik_1").await;
    assert_eq!(by_key, json!({ "found": false }));
}

#[tokio::test]
async fn orders_ledger_and_effect_filters() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let posts = [
        ("/v1/charges", charge("A-1", 1250)),
        ("/v1/charges", charge("B-2", 700)),
        ("/v1/refunds", charge("A-1", 250)),
        (
            "/v1/ledger",
            json!({ "order_id": "A-1", "account": "rev", "amount_minor": 1250 }),
        ),
    ];
    for (path, body) in &posts {
        let response = sandbox.post(path, None, body).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }

    let order = sandbox.get_json("/v1/orders/A-1").await;
    assert_eq!(order["order_id"], "A-1");
    assert_eq!(order["charges"].as_array().unwrap().len(), 1);
    assert_eq!(order["refunds"][0]["amount_minor"], 250);
    let kinds: Vec<Value> = sandbox
        .effects("?order_id=A-1")
        .await
        .into_iter()
        .map(|effect| effect["kind"].clone())
        .collect();
    assert_eq!(kinds, [json!("charge"), json!("refund"), json!("ledger")]);
    let ledger = sandbox.effects("?kind=ledger").await;
    assert!(ledger[0]["id"].as_str().unwrap().starts_with("le_"));
    assert_eq!(ledger[0]["amount_minor"], 1250);
    let seqs: Vec<Value> = sandbox
        .effects("")
        .await
        .iter()
        .map(|e| e["seq"].clone())
        .collect();
    assert_eq!(seqs, [json!(1), json!(2), json!(3), json!(4)]);
}

/// What a detection job reads: effects since a time, a page at a time, each page's
/// `next` the `after` of the one after it.
#[tokio::test]
async fn effects_page_by_seq_and_since_excludes_older_ones() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let post_charges = async |orders: &[&str]| {
        for order in orders {
            let response = sandbox
                .post("/v1/charges", None, &charge(order, 100))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{order}");
        }
    };
    let page = async |query: &str| {
        let body = sandbox.get_json(&format!("/v1/effects?{query}")).await;
        let seqs: Vec<u64> = body["effects"]
            .as_array()
            .expect("an effects array")
            .iter()
            .filter_map(|e| e["seq"].as_u64())
            .collect();
        (seqs, body["next"].clone())
    };

    post_charges(&["A-1", "A-2"]).await;
    // The sandbox stamps effects with this process's clock; keep clear of its resolution.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let noted = jiff::Timestamp::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    post_charges(&["A-3", "A-4", "A-5", "A-6", "A-7"]).await;

    let all = sandbox.get_json("/v1/effects").await;
    assert_eq!(all["effects"].as_array().unwrap().len(), 7);
    assert_eq!(
        all["next"],
        Value::Null,
        "unpaged: everything, nothing more"
    );
    let since = format!("since={noted}");
    assert_eq!(
        page(&format!("{since}&limit=2")).await,
        (vec![3, 4], json!(4))
    );
    assert_eq!(
        page(&format!("{since}&limit=2&after=4")).await,
        (vec![5, 6], json!(6))
    );
    assert_eq!(
        page(&format!("{since}&limit=2&after=6")).await,
        (vec![7], Value::Null)
    );
    assert_eq!(page(&since).await, (vec![3, 4, 5, 6, 7], Value::Null));
    // `since` is inclusive: an effect's own `at` lists it.
    let third_at = all["effects"][2]["at"].as_str().unwrap().to_owned();
    assert_eq!(
        page(&format!("since={third_at}&limit=1")).await,
        (vec![3], json!(3))
    );
    // The cursor alone pages too, a page of at most 1000; filters still apply.
    assert_eq!(page("after=5").await, (vec![6, 7], Value::Null));
    assert_eq!(
        page("kind=charge&order_id=A-4&after=0&limit=1").await,
        (vec![4], json!(4))
    );
    assert_eq!(
        page("order_id=A-4&after=4&limit=1").await,
        (vec![], Value::Null)
    );
    assert_eq!(page("after=99&limit=1000").await, (vec![], Value::Null));
}

#[tokio::test]
async fn bad_listing_parameters_are_invalid_query() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let cases = [
        ("since=yesterday", "since must be an RFC 3339 timestamp"),
        // An unencoded `+` arrives as a space.
        ("since=2026-01-31T09:30:00+01:00", "%2B"),
        ("since=", "since must be an RFC 3339 timestamp"),
        ("limit=0", "limit must be from 1 to 1000, not 0"),
        ("limit=1001", "limit must be from 1 to 1000, not 1001"),
        ("limit=ten", "limit"),
        ("after=-1", "after"),
        ("cursor=4", "cursor"),
    ];
    for (query, detail) in cases {
        let response = sandbox
            .request(reqwest::Method::GET, &format!("/v1/effects?{query}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{query}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], "invalid_query", "{query}");
        let text = body["detail"].as_str().expect("a detail");
        assert!(text.contains(detail), "{query}: {text}");
    }
    let encoded = sandbox
        .get_json("/v1/effects?since=2026-01-31T09:30:00%2B01:00&limit=1000")
        .await;
    assert_eq!(encoded, json!({ "effects": [], "next": null }));
}

#[tokio::test]
async fn bad_requests_get_stable_error_codes() {
    let sandbox = Running::start(SandboxConfig::default()).await;
    let malformed = sandbox
        .request(reqwest::Method::POST, "/v1/charges")
        .header("content-type", "application/json")
        .body("{\"order_id\":")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
    assert_eq!(error_code(malformed).await, "malformed_json");

    let negative = sandbox
        .post("/v1/charges", None, &charge("A-1", -5))
        .send()
        .await
        .unwrap();
    assert_eq!(negative.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(error_code(negative).await, "invalid_request");
    let not_an_object = sandbox
        .post("/v1/ledger", None, &json!([1]))
        .send()
        .await
        .unwrap();
    assert_eq!(not_an_object.status(), StatusCode::UNPROCESSABLE_ENTITY);

    let get = |path: &'static str| sandbox.request(reqwest::Method::GET, path).send();
    let cases = [
        (
            "/v1/charges",
            StatusCode::BAD_REQUEST,
            "missing_lookup_parameter",
        ),
        (
            "/v1/charges?idem_key=k",
            StatusCode::BAD_REQUEST,
            "invalid_query",
        ),
        (
            "/v1/effects?kind=charges",
            StatusCode::BAD_REQUEST,
            "invalid_query",
        ),
        ("/v1/nope", StatusCode::NOT_FOUND, "not_found"),
    ];
    for (path, status, code) in cases {
        let response = get(path).await.unwrap();
        assert_eq!(response.status(), status, "{path}");
        assert_eq!(error_code(response).await, code, "{path}");
    }
    let delete = sandbox
        .request(reqwest::Method::DELETE, "/v1/charges")
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(sandbox.effects("").await.len(), 0);
}

#[tokio::test]
async fn without_serve_a_drop_still_commits_and_fails_loudly() {
    let app = sandbox::router(SandboxConfig::default());
    let request = Request::post("/v1/charges")
        .header("content-type", "application/json")
        .header("Sandbox-Fault", "drop_after_commit")
        .body(Body::from(charge("A-1", 1250).to_string()))
        .unwrap();

    let response = app.clone().oneshot(request).await.unwrap();

    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let effects = Request::get("/v1/effects").body(Body::empty()).unwrap();
    let effects = app.oneshot(effects).await.unwrap();
    let bytes = axum::body::to_bytes(effects.into_body(), usize::MAX)
        .await
        .unwrap();
    let effects: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(effects["effects"].as_array().unwrap().len(), 1);
}

#[test]
fn resources_parse_from_their_cli_names() {
    for resource in Resource::ALL {
        assert_eq!(resource.as_str().parse::<Resource>(), Ok(resource));
    }
    assert!("charge".parse::<Resource>().is_err());
}
