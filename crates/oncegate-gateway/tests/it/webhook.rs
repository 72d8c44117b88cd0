//! Webhook delivery against a real receiver: a failed attempt, the retry that lands, and
//! what the receiver can check on each.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use oncegate_gateway::server::http_client;
use oncegate_gateway::webhook::{Delivery, DeliveryError, deliver, verify};

const SECRET: &[u8] = b"whsec_test";

/// What the receiver saw of one request.
struct Seen {
    headers: HeaderMap,
    body: Bytes,
}

/// A receiver on 127.0.0.1:0 that answers 500 to its first request and 200 afterwards.
async fn flaky_receiver() -> (String, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route(
            "/hook",
            post(
                |State(seen): State<Arc<Mutex<Vec<Seen>>>>, headers: HeaderMap, body: Bytes| async move {
                    let mut seen = seen.lock().unwrap();
                    seen.push(Seen { headers, body });
                    if seen.len() == 1 {
                        StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        StatusCode::OK
                    }
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

fn header<'a>(seen: &'a Seen, name: &str) -> &'a str {
    seen.headers[name].to_str().unwrap()
}

#[tokio::test]
async fn a_retry_carries_the_same_id_and_a_signature_that_verifies() {
    let (url, seen) = flaky_receiver().await;
    let client = http_client();
    let delivery = Delivery {
        id: "dlv_01".to_owned(),
        event: "finding".to_owned(),
        body: br#"{"finding":"double_charge"}"#.to_vec(),
    };
    let timeout = Duration::from_secs(5);

    let first = deliver(
        &client,
        &url,
        Some(SECRET),
        &delivery,
        1_700_000_000,
        timeout,
    )
    .await;
    assert!(
        matches!(first, Err(DeliveryError::Status { status }) if status == 500),
        "{first:?}"
    );
    let second = deliver(
        &client,
        &url,
        Some(SECRET),
        &delivery,
        1_700_000_030,
        timeout,
    )
    .await;
    assert!(second.is_ok(), "{second:?}");

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    for (attempt, now) in seen.iter().zip([1_700_000_000_i64, 1_700_000_030]) {
        assert_eq!(header(attempt, "oncegate-delivery"), "dlv_01");
        assert_eq!(header(attempt, "oncegate-event"), "finding");
        assert_eq!(header(attempt, "content-type"), "application/json");
        assert_eq!(header(attempt, "oncegate-timestamp"), now.to_string());
        assert_eq!(attempt.body.as_ref(), delivery.body.as_slice());
        // Each attempt is signed at its own time, so a late retry is not stale.
        let signature = header(attempt, "oncegate-signature");
        assert!(
            signature.starts_with(&format!("t={now},v1=")),
            "{signature}"
        );
        assert!(verify(SECRET, signature, &attempt.body, now + 10, 300));
        assert!(!verify(
            b"not the secret",
            signature,
            &attempt.body,
            now,
            300
        ));
    }
}

#[tokio::test]
async fn no_secret_no_signature_and_a_dead_receiver_is_a_request_error() {
    let (url, seen) = flaky_receiver().await;
    let client = http_client();
    let delivery = Delivery {
        id: "dlv_02".to_owned(),
        event: "finding".to_owned(),
        body: b"{}".to_vec(),
    };
    let _ = deliver(&client, &url, None, &delivery, 1, Duration::from_secs(5)).await;
    assert!(
        !seen.lock().unwrap()[0]
            .headers
            .contains_key("oncegate-signature")
    );

    // A port nobody listens on: the attempt fails without an answer, and its text does
    // not repeat the URL (which may carry a credential).
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = format!("http://{}/hook?token=hunter2", closed.local_addr().unwrap());
    drop(closed);
    let err = deliver(&client, &dead, None, &delivery, 1, Duration::from_secs(5))
        .await
        .unwrap_err();
    let DeliveryError::Request { text } = &err else {
        panic!("expected a request error, got {err:?}");
    };
    assert!(!text.is_empty());
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[tokio::test]
async fn a_slow_receiver_fails_the_attempt_at_the_given_timeout() {
    let app = Router::new().route(
        "/hook",
        post(|| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            StatusCode::OK
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let delivery = Delivery {
        id: "dlv_03".to_owned(),
        event: "finding".to_owned(),
        body: b"{}".to_vec(),
    };

    let started = std::time::Instant::now();
    let result = deliver(
        &http_client(),
        &url,
        None,
        &delivery,
        1,
        Duration::from_millis(200),
    )
    .await;
    assert!(
        matches!(result, Err(DeliveryError::Request { .. })),
        "{result:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
