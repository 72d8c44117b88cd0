//! How provider answers are classified, against a real HTTP server.

use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, Uri};
use axum::routing::{get, post};
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_engine::{Executor, IntentHandle};
use oncegate_gateway::upstream::UpstreamExecutor;
use serde_json::json;

async fn provider() -> String {
    let app = Router::new()
        .route(
            "/conflict",
            post(|| async { (StatusCode::CONFLICT, "still processing this key") }),
        )
        .route(
            "/declined",
            post(|| async {
                (
                    StatusCode::PAYMENT_REQUIRED,
                    axum::Json(json!({"error": "card_declined"})),
                )
            }),
        )
        .route(
            "/moved",
            post(|| async { (StatusCode::FOUND, [("location", "/elsewhere")], "") }),
        )
        .route(
            "/elsewhere",
            get(|| async { axum::Json(json!({"id": "not-an-effect"})) }),
        )
        .route("/boom", post(|| async { StatusCode::BAD_GATEWAY }))
        .route("/ok", post(|| async { axum::Json(json!({"id": "fx_1"})) }))
        .route(
            "/lookup/{*rest}",
            get(|uri: Uri| async move {
                axum::Json(json!({"found": true, "path": uri.path(), "id": "fx_9"}))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn executor(base: &str, path: &str) -> UpstreamExecutor {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
[[capabilities]]
name = "pay"
category = "keyed"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "http"
url = "{base}{path}"
effect_ref = "/id"

[capabilities.reconcile]
kind = "http"
url = "{base}/lookup/{{arg.order_id}}"
found = "/found"
effect_ref = "/path"
"#
    );
    pay_executor(dir.path(), &text)
}

/// Loads the registry `text` from `dir` (its store, if any, lives there too).
pub(crate) fn registry_in(dir: &std::path::Path, text: &str) -> oncegate_core::Registry {
    std::fs::write(dir.join("c.toml"), text).unwrap();
    oncegate_engine::config::load_registry(&dir.join("c.toml")).unwrap()
}

/// The executor of capability `pay` in the registry `text`.
pub(crate) fn pay_executor(dir: &std::path::Path, text: &str) -> UpstreamExecutor {
    let registry = registry_in(dir, text);
    let cap = registry.capability("pay").unwrap().clone();
    UpstreamExecutor::new(oncegate_gateway::server::http_client(), Arc::clone(&cap))
}

/// An intent of capability `pay` for `order`, with key `k1`.
pub(crate) fn intent(order: &str) -> IntentHandle {
    IntentHandle {
        key: "k1".into(),
        intent_key: oncegate_core::IntentKey::from_hex("k1"),
        generation: 1,
        capability: "pay".into(),
        arguments: json!({"order_id": order}),
        normalised: json!({}),
        business_ref: Some(order.into()),
        run_id: None,
        step_id: None,
    }
}

#[tokio::test]
async fn provider_answers_are_classified_conservatively() {
    let base = provider().await;
    type Check = fn(&EffectResult) -> bool;
    let cases: [(&str, Check); 5] = [
        (
            "/ok",
            |r| matches!(r, EffectResult::Applied { effect_ref: Some(id), .. } if id == "fx_1"),
        ),
        ("/declined", |r| matches!(r, EffectResult::Failed { .. })),
        ("/conflict", |r| matches!(r, EffectResult::Unknown { .. })),
        ("/moved", |r| matches!(r, EffectResult::Unknown { .. })),
        ("/boom", |r| matches!(r, EffectResult::Unknown { .. })),
    ];
    for (path, ok) in cases {
        let result = executor(&base, path).execute(intent("A-1")).await;
        assert!(ok(&result), "{path}: {result:?}");
    }
    // Nothing listens on port 9: proof that no byte left.
    let refused = executor("http://127.0.0.1:9", "/x")
        .execute(intent("A-1"))
        .await;
    assert!(
        matches!(refused, EffectResult::NotSent { .. }),
        "{refused:?}"
    );
}

#[tokio::test]
async fn arguments_cannot_change_the_url() {
    let base = provider().await;
    let answer = executor(&base, "/ok").reconcile(intent("x?all=1")).await;
    let ReconcileResult::Found {
        effect_ref: Some(path),
        ..
    } = answer
    else {
        panic!("{answer:?}")
    };
    assert_eq!(path, "/lookup/x%3Fall%3D1");
    // A `/` would be sent encoded as one segment, but a server that decodes `%2F` before
    // routing reads two: refused (issue 33 changed this from sent-encoded to refused).
    let answer = executor(&base, "/ok").reconcile(intent("admin/x")).await;
    assert!(
        matches!(&answer, ReconcileResult::Undecidable { message } if message.contains("more than one segment")),
        "{answer:?}"
    );
    // `..` climbs two levels: refused (issue 9 changed this from sent-encoded to refused).
    let answer = executor(&base, "/ok")
        .reconcile(intent("../../admin?all=1"))
        .await;
    assert!(
        matches!(&answer, ReconcileResult::Undecidable { message } if message.contains("path segment")),
        "{answer:?}"
    );
}
