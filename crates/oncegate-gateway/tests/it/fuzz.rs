//! Property-based fuzzing of both front doors through the router, in process
//! (`server::app(state)` with tower's `oneshot`): arbitrary bodies, headers and paths on
//! the JSON API, arbitrary JSON-RPC shapes on `/mcp`. The store is up, so every answer
//! must be below 500 (a 5xx is only honest when the store is down), and nothing may
//! panic.
//!
//! The registry's upstreams point at a closed port: a call that gets through every
//! check is answered at once (`not_applied`, nothing sent) instead of waiting on a
//! network. Case counts are modest so CI stays fast; `PROPTEST_CASES=N` runs N instead.

use std::sync::OnceLock;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Method, Request};
use oncegate_gateway::server::{AppState, app, http_client};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::registry_in;

const REGISTRY: &str = r#"
[store]
url = "sqlite://fuzz.db"

[[principals]]
name = "agent"
role = "agent"
token_env = "UNUSED_FUZZ_AGENT"

[[principals]]
name = "alice"
role = "approver"
token_env = "UNUSED_FUZZ_ALICE"

[[principals]]
name = "ops"
role = "admin"
token_env = "UNUSED_FUZZ_OPS"

[[capabilities]]
name = "pay"
category = "keyed"
on_unknown = "retry"
key = { business_ref = "order_id", significant = [{ arg = "amount", type = "money", default_currency = "USD" }] }

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:9/pay/{arg.order_id}"
timeout = "2s"

[[capabilities]]
name = "note"
category = "non_idempotent"
on_unknown = "escalate"
key = { business_ref = "ticket", significant = [{ arg = "to", type = "email" }, { arg = "tags", type = "set", optional = true }] }

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:9/notes"
timeout = "2s"

[[capabilities]]
name = "lookup"
category = "read"

[capabilities.upstream]
kind = "http"
method = "GET"
url = "http://127.0.0.1:9/lookup"
timeout = "2s"
"#;

/// `PROPTEST_CASES` if set, else the modest CI default.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Harness {
    runtime: tokio::runtime::Runtime,
    router: Router,
    _dir: tempfile::TempDir,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let registry = registry_in(dir.path(), REGISTRY);
        let router = runtime.block_on(async {
            let gate = oncegate_engine::Gate::open_with(
                registry,
                oncegate_store::OpenMode::CreateIfMissing,
            )
            .await
            .unwrap();
            let state = AppState::with_tokens(
                gate,
                http_client(),
                vec![
                    ("agent".into(), "tok-agent".into()),
                    ("alice".into(), "tok-alice".into()),
                    ("ops".into(), "tok-ops".into()),
                ],
            );
            app(state)
        });
        Harness {
            runtime,
            router,
            _dir: dir,
        }
    })
}

/// Sends one request; returns the status, having read the whole body (bounded, since an
/// MCP answer may be a stream).
fn send(request: Request<Body>) -> u16 {
    let h = harness();
    h.runtime.block_on(async {
        let response = h.router.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            axum::body::to_bytes(response.into_body(), 8 << 20),
        )
        .await;
        status
    })
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        any::<String>().prop_map(Value::String),
        "[-+ 0-9.,_]{0,12}( ?(USD|EUR|JPY|XXX))?".prop_map(Value::String),
        "[a-z]{0,6}@[a-z.]{0,6}".prop_map(Value::String),
        Just(json!("..")),
        Just(json!("%2e%2E")),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Array),
            btree_map(
                prop_oneof![
                    Just("order_id".to_owned()),
                    Just("amount".to_owned()),
                    Just("ticket".to_owned()),
                    Just("to".to_owned()),
                    Just("tags".to_owned()),
                    Just("_meta".to_owned()),
                    "[a-z_/.]{0,8}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A header value from arbitrary bytes (the ones `http` accepts: no controls).
fn header_value() -> impl Strategy<Value = HeaderValue> {
    prop_oneof![
        "[ -~]{0,40}".prop_map(|s| HeaderValue::from_str(&s).unwrap()),
        vec(any::<u8>(), 0..40).prop_filter_map("a valid header value", |b| {
            HeaderValue::from_bytes(&b).ok()
        }),
    ]
}

fn authorization() -> impl Strategy<Value = Option<HeaderValue>> {
    prop_oneof![
        12 => Just(Some(HeaderValue::from_static("Bearer tok-agent"))),
        1 => Just(Some(HeaderValue::from_static("bearer tok-agent"))),
        3 => Just(Some(HeaderValue::from_static("Bearer tok-alice"))),
        3 => Just(Some(HeaderValue::from_static("Bearer tok-ops"))),
        1 => Just(Some(HeaderValue::from_static("Bearer wrong"))),
        1 => Just(Some(HeaderValue::from_static("Basic dG9rOnRvaw=="))),
        1 => Just(None),
        1 => header_value().prop_map(Some),
    ]
}

/// Arguments shaped like the registry's recipes, with hostile values and extras.
fn plausible_arguments() -> impl Strategy<Value = Value> {
    (
        prop_oneof!["[A-Z]-[0-9]{1,4}", any::<String>(), Just("..".to_owned())],
        prop_oneof![
            "[0-9]{1,4}\\.[0-9]{2}",
            "-?[0-9_,.]{1,8}( (USD|EUR|JPY))?",
            any::<String>()
        ],
        prop_oneof!["[a-z]{1,6}@[a-z]{1,6}\\.com", any::<String>()],
        proptest::option::of(arb_json()),
    )
        .prop_map(|(order, amount, to, extra)| {
            let mut a = json!({"order_id": order, "ticket": order, "amount": amount, "to": to});
            if let Some(extra) = extra {
                a["extra"] = extra;
            }
            a
        })
}

/// A call body: well-formed calls with hostile arguments, other JSON, or bytes.
fn call_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => (
            prop_oneof![Just("pay".to_owned()), Just("note".to_owned()), Just("lookup".to_owned()), any::<String>()],
            prop_oneof![3 => plausible_arguments(), 1 => arb_json()],
            proptest::option::of(any::<bool>()),
        )
            .prop_map(|(capability, arguments, dry)| {
                let mut body = json!({"capability": capability, "arguments": arguments});
                if let Some(d) = dry {
                    body["dry_run"] = json!(d);
                }
                serde_json::to_vec(&body).unwrap()
            }),
        2 => arb_json().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        1 => vec(any::<u8>(), 0..200),
    ]
}

#[derive(Debug, Clone)]
struct ApiRequest {
    method: Method,
    path: String,
    authorization: Option<HeaderValue>,
    content_type: Option<HeaderValue>,
    extra: Vec<(&'static str, HeaderValue)>,
    body: Vec<u8>,
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        Just("..".to_owned()),
        "[0-9a-f]{64}",
        "capability:[a-z]{0,6}",
        "agent:[a-z]{0,6}",
        "ap_[0-9a-f]{16}",
    ]
    .prop_map(|s| utf8_percent_encode(&s, NON_ALPHANUMERIC).to_string())
}

fn api_request() -> impl Strategy<Value = ApiRequest> {
    let route = prop_oneof![
        6 => Just((Method::POST, "/v1/calls".to_owned())),
        1 => Just((Method::POST, "/v1/keys/derive".to_owned())),
        1 => "[a-z_=&%0-9]{0,30}".prop_map(|q| (Method::GET, format!("/v1/intents?{q}"))),
        1 => segment().prop_map(|s| (Method::GET, format!("/v1/intents/{s}"))),
        1 => segment().prop_map(|s| (Method::POST, format!("/v1/approvals/{s}/approve"))),
        1 => segment().prop_map(|s| (Method::POST, format!("/v1/approvals/{s}/deny"))),
        1 => "[a-z_=&%0-9]{0,30}".prop_map(|q| (Method::GET, format!("/v1/audit?{q}"))),
        1 => Just((Method::GET, "/v1/audit/verify".to_owned())),
        1 => segment().prop_map(|s| (Method::POST, format!("/v1/admin/breakers/{s}/reset"))),
        1 => segment().prop_map(|s| (Method::PUT, format!("/v1/admin/kill-switches/{s}"))),
        1 => Just((Method::GET, "/readyz".to_owned())),
        1 => Just((Method::GET, "/v1/approvals".to_owned())),
        1 => Just((Method::DELETE, "/v1/calls".to_owned())),
    ];
    let extra = vec(
        (
            prop_oneof![
                3 => Just("oncegate-run-id"),
                3 => Just("oncegate-step-id"),
                3 => Just("idempotency-key"),
                1 => Just("authorization"),
                1 => Just("content-length"),
            ],
            header_value(),
        ),
        0..3,
    );
    (
        route,
        authorization(),
        prop_oneof![
            6 => Just(Some(HeaderValue::from_static("application/json"))),
            1 => Just(Some(HeaderValue::from_static("text/plain"))),
            1 => Just(None),
            1 => header_value().prop_map(Some),
        ],
        extra,
        call_body(),
    )
        .prop_map(
            |((method, path), authorization, content_type, extra, body)| ApiRequest {
                method,
                path,
                authorization,
                content_type,
                extra,
                body,
            },
        )
}

fn build(r: &ApiRequest, mut extra_headers: Vec<(&'static str, HeaderValue)>) -> Request<Body> {
    let mut b = Request::builder().method(r.method.clone()).uri(&r.path);
    if let Some(a) = &r.authorization {
        b = b.header("authorization", a.clone());
    }
    if let Some(c) = &r.content_type {
        b = b.header("content-type", c.clone());
    }
    extra_headers.extend(r.extra.iter().cloned());
    for (name, value) in extra_headers {
        b = b.header(name, value);
    }
    b.body(Body::from(r.body.clone())).unwrap()
}

/// A JSON-RPC message: mostly the right shape with wrong parts, sometimes anything.
fn jsonrpc_body() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        Just("initialize".to_owned()),
        Just("tools/list".to_owned()),
        Just("tools/call".to_owned()),
        Just("ping".to_owned()),
        Just("server/discover".to_owned()),
        Just("notifications/initialized".to_owned()),
        Just("resources/list".to_owned()),
        any::<String>(),
    ];
    let id = prop_oneof![
        4 => any::<i64>().prop_map(|i| json!(i)),
        2 => "[a-z0-9]{0,8}".prop_map(Value::String),
        1 => Just(Value::Null),
        1 => arb_json(),
    ];
    let call_params = (
        prop_oneof![
            Just("pay".to_owned()),
            Just("note".to_owned()),
            Just("lookup".to_owned()),
            any::<String>()
        ],
        prop_oneof![3 => plausible_arguments(), 1 => arb_json()],
        proptest::option::of(prop_oneof![
            // What a 2026-07-28 client sends: the protocol version rides in `_meta`.
            3 => Just(json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            })),
            1 => arb_json(),
        ]),
    )
        .prop_map(|(name, arguments, meta)| {
            let mut p = json!({"name": name, "arguments": arguments});
            if let Some(m) = meta {
                p["_meta"] = m;
            }
            p
        });
    let params = prop_oneof![
        call_params,
        Just(
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "0"}})
        ),
        arb_json(),
    ];
    let message = (
        prop_oneof![6 => Just(json!("2.0")), 1 => arb_json()],
        prop_oneof![6 => id.prop_map(Some), 1 => Just(None)],
        method,
        proptest::option::of(params),
    )
        .prop_map(|(jsonrpc, id, method, params)| {
            let mut m = json!({"jsonrpc": jsonrpc, "method": method});
            if let Some(id) = id {
                m["id"] = id;
            }
            if let Some(p) = params {
                m["params"] = p;
            }
            m
        });
    prop_oneof![
        6 => message.clone().prop_map(|m| serde_json::to_vec(&m).unwrap()),
        1 => vec(message, 0..3).prop_map(|b| serde_json::to_vec(&b).unwrap()),
        1 => arb_json().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        1 => vec(any::<u8>(), 0..200),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(96)))]

    /// The JSON API: any route we serve, any body, any headers: never a 5xx.
    #[test]
    fn json_api_never_answers_5xx(r in api_request()) {
        let status = send(build(&r, Vec::new()));
        prop_assert!(status < 500, "{} {} answered {status}: {r:?}", r.method, r.path);
    }

    /// The MCP front door: any JSON-RPC shape, any protocol header, any session id.
    #[test]
    fn mcp_front_door_never_answers_5xx(
        body in jsonrpc_body(),
        authorization in authorization(),
        accept in prop_oneof![
            6 => Just(Some(HeaderValue::from_static("application/json, text/event-stream"))),
            1 => Just(Some(HeaderValue::from_static("application/json"))),
            1 => Just(None),
            1 => header_value().prop_map(Some),
        ],
        version in proptest::option::of(prop_oneof![
            1 => Just(HeaderValue::from_static("2025-11-25")),
            4 => Just(HeaderValue::from_static("2026-07-28")),
            1 => header_value(),
        ]),
        session in prop_oneof![4 => Just(None), 1 => header_value().prop_map(Some)],
        mirror in any::<bool>(),
        method in prop_oneof![6 => Just(Method::POST), 1 => Just(Method::GET), 1 => Just(Method::DELETE)],
    ) {
        let mut headers = vec![("host", HeaderValue::from_static("127.0.0.1"))];
        if let Some(a) = accept {
            headers.push(("accept", a));
        }
        if let Some(v) = version {
            headers.push(("mcp-protocol-version", v));
        }
        if let Some(s) = session {
            headers.push(("mcp-session-id", s));
        }
        // 2026-07-28 clients repeat the method and tool name in headers.
        if mirror && let Ok(message) = serde_json::from_slice::<Value>(&body) {
            for (name, value) in [("mcp-method", &message["method"]), ("mcp-name", &message["params"]["name"])] {
                if let Some(v) = value.as_str().and_then(|v| HeaderValue::from_str(v).ok()) {
                    headers.push((name, v));
                }
            }
        }
        let r = ApiRequest {
            method,
            path: "/mcp".into(),
            authorization,
            content_type: Some(HeaderValue::from_static("application/json")),
            extra: Vec::new(),
            body,
        };
        let status = send(build(&r, headers));
        prop_assert!(status < 500, "/mcp answered {status}: {r:?}");
    }
}

/// The harness reaches the engine: a well-formed call and an MCP `initialize` are
/// answered 200, so the properties above are not satisfied by a door that is shut.
#[test]
fn fuzz_harness_reaches_the_engine() {
    let call = ApiRequest {
        method: Method::POST,
        path: "/v1/calls".into(),
        authorization: Some(HeaderValue::from_static("Bearer tok-agent")),
        content_type: Some(HeaderValue::from_static("application/json")),
        extra: Vec::new(),
        body: serde_json::to_vec(
            &json!({"capability": "pay", "arguments": {"order_id": "A-1", "amount": "12.50"}}),
        )
        .unwrap(),
    };
    assert_eq!(send(build(&call, Vec::new())), 200);
    let initialize = ApiRequest {
        path: "/mcp".into(),
        body: serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "0"}}
        }))
        .unwrap(),
        ..call
    };
    let headers = vec![
        ("host", HeaderValue::from_static("127.0.0.1")),
        (
            "accept",
            HeaderValue::from_static("application/json, text/event-stream"),
        ),
    ];
    assert_eq!(send(build(&initialize, headers)), 200);
}
