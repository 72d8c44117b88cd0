//! How MCP upstream answers are classified, against a real rmcp Streamable HTTP server
//! serving both protocol eras.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_gateway::upstream::UpstreamExecutor;

use crate::upstream::{intent, pay_executor};
use oncegate_engine::Executor;
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{MaybeSendFuture, RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

/// A provider with one tool per behaviour; counts the effects that completed.
#[derive(Clone, Default)]
pub(crate) struct Provider {
    completed: Arc<AtomicUsize>,
    pub(crate) keys: Arc<std::sync::Mutex<Vec<Value>>>,
}

impl ServerHandler for Provider {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ListToolsResult, ErrorData>> + MaybeSendFuture + '_ {
        let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}, "idempotency_key": {"type": "string"}}, "required": ["order_id"]});
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        std::future::ready(Ok(ListToolsResult {
            tools: vec![Tool::new("ok", "charges", schema)],
            ..Default::default()
        }))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // rmcp moves the request's `_meta` into the context.
        let key = ctx
            .meta
            .get("dev.oncegate/idempotency_key")
            .cloned()
            .unwrap_or(Value::Null);
        self.keys.lock().unwrap().push(json!({
            "meta": key,
            "arg": request.arguments.as_ref().and_then(|a| a.get("idempotency_key").cloned()),
        }));
        let structured = json!({"id": "fx_1", "found": true, "charge": {"id": "fx_1"}});
        match request.name.as_ref() {
            "ok" | "lookup" => Ok(CallToolResult::structured(structured).into()),
            "declined" => {
                Ok(CallToolResult::error(vec![ContentBlock::text("card declined")]).into())
            }
            "invalid" => Err(ErrorData::invalid_params("amount is missing", None)),
            // What the Python SDKs answer for arguments that fail the tool's schema.
            "validation" => Ok(CallToolResult::error(vec![ContentBlock::text(
                "Input validation error: 'amount' is a required property",
            )])
            .into()),
            "internal" => Err(ErrorData::internal_error("database hiccup", None)),
            // What a server upgraded under a pooled client answers.
            "stale" => Err(ErrorData::new(
                ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
                "Unsupported protocol version",
                None,
            )),
            "slow" => {
                // Inline, not spawned: if the caller dropped its request (a cancel,
                // a closed stream), this would never complete.
                tokio::time::sleep(Duration::from_millis(1500)).await;
                self.completed.fetch_add(1, Ordering::SeqCst);
                Ok(CallToolResult::structured(structured).into())
            }
            other => Err(ErrorData::invalid_params(
                format!("unknown tool {other}"),
                None,
            )),
        }
    }
}

pub(crate) async fn provider() -> (String, Provider) {
    let p = Provider::default();
    let served = p.clone();
    let service: StreamableHttpService<Provider, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(served.clone()),
        Arc::default(),
        StreamableHttpServerConfig::default().with_json_response(true),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, p)
}

fn executor(url: &str, tool: &str, extra: &str) -> UpstreamExecutor {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
[[capabilities]]
name = "pay"
category = "keyed"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "mcp"
url = "{url}"
tool = "{tool}"
timeout = "1s"
effect_ref = "/id"
{extra}

[capabilities.reconcile]
kind = "mcp"
tool = "lookup"
found = "/found"
effect_ref = "/charge/id"
result = "/charge"
"#
    );
    pay_executor(dir.path(), &text)
}

#[tokio::test]
async fn mcp_answers_are_classified_conservatively() {
    let (url, provider) = provider().await;
    type Check = fn(&EffectResult) -> bool;
    let cases: [(&str, &str, Check); 5] = [
        (
            "ok",
            "",
            |r| matches!(r, EffectResult::Applied { effect_ref: Some(id), result } if id == "fx_1" && result["structuredContent"]["id"] == "fx_1"),
        ),
        // A tool error may have been raised after the effect (SDKs turn any exception
        // into one): unknown, unless the registry says this tool's errors are refusals.
        (
            "declined",
            "",
            |r| matches!(r, EffectResult::Unknown { message } if message.contains("card declined")),
        ),
        (
            "declined",
            "tool_errors = \"failed\"",
            |r| matches!(r, EffectResult::Failed { message, .. } if message.contains("card declined")),
        ),
        ("invalid", "", |r| matches!(r, EffectResult::Failed { .. })),
        ("internal", "", |r| {
            matches!(r, EffectResult::Unknown { .. })
        }),
    ];
    for (tool, extra, ok) in cases {
        let result = executor(&url, tool, extra).execute(intent("A-1")).await;
        assert!(ok(&result), "{tool} {extra}: {result:?}");
    }
    // The key travelled in _meta on every call, and not as an argument.
    let keys = provider.keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 5);
    assert!(
        keys.iter().all(|k| k["meta"] == "k1" && k["arg"].is_null()),
        "{keys:?}"
    );

    // Nothing listens on port 9: the handshake fails, nothing of the call left.
    let refused = executor("http://127.0.0.1:9/mcp", "ok", "")
        .execute(intent("A-1"))
        .await;
    assert!(
        matches!(refused, EffectResult::NotSent { .. }),
        "{refused:?}"
    );
}

#[tokio::test]
async fn the_key_argument_is_filled_and_reconciliation_reads_a_tool() {
    let (url, provider) = provider().await;
    let ex = executor(&url, "ok", "idempotency_arg = \"idempotency_key\"");
    let result = ex.execute(intent("A-1")).await;
    assert!(matches!(result, EffectResult::Applied { .. }), "{result:?}");
    let keys = provider.keys.lock().unwrap().clone();
    assert_eq!(keys[0]["arg"], "k1", "{keys:?}");
    assert_eq!(keys[0]["meta"], "k1", "{keys:?}");
    let found = ex.reconcile(intent("A-1")).await;
    let ReconcileResult::Found {
        effect_ref: Some(id),
        result,
    } = found
    else {
        panic!("{found:?}")
    };
    assert_eq!(id, "fx_1");
    // Stored as a tool result, so a reconciled replay reads like the original answer.
    assert_eq!(result["structuredContent"], json!({"id": "fx_1"}));
}

#[tokio::test]
async fn a_timeout_is_unknown_and_never_cancels_the_upstream_call() {
    let (url, provider) = provider().await;
    let result = executor(&url, "slow", "").execute(intent("A-1")).await;
    assert!(
        matches!(&result, EffectResult::Unknown { message } if message.contains("timeout")),
        "{result:?}"
    );
    // The call was left running, not cancelled: the effect completes.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(provider.completed.load(Ordering::SeqCst), 1);
}

/// While a timed-out call runs it is listed as running (so "not found" proves nothing),
/// and its late answer is handed back to be recorded, after which it no longer runs.
#[tokio::test]
async fn a_timed_out_call_is_running_until_its_late_answer_which_is_handed_back() {
    let (url, provider) = provider().await;
    let running = oncegate_gateway::upstream::mcp::RunningCalls::default();
    let executor = executor(&url, "slow", "").with_running(running.clone());
    let handle = intent("A-1");
    let attempt = executor.execute_attempt(handle.clone()).await;
    assert!(
        matches!(&attempt.result, EffectResult::Unknown { .. }),
        "{:?}",
        attempt.result
    );
    assert!(
        executor.attempt_running(&handle),
        "the call is still running"
    );
    assert!(running.is_running(&handle.key));
    let late = attempt
        .late
        .expect("a call left running hands back its late end");
    let answer = tokio::time::timeout(Duration::from_secs(20), late.answer)
        .await
        .expect("the late answer arrives");
    assert!(
        matches!(&answer, EffectResult::Applied { effect_ref: Some(id), .. } if id == "fx_1"),
        "{answer:?}"
    );
    assert_eq!(provider.completed.load(Ordering::SeqCst), 1);
    assert!(!executor.attempt_running(&handle), "the call has ended");
}

#[tokio::test]
async fn tool_errors_matching_the_rejected_pattern_are_failed_and_others_stay_unknown() {
    let (url, _) = provider().await;
    let rejected = "rejected = \"^Input validation error:\"";
    type Check = fn(&EffectResult) -> bool;
    let cases: [(&str, &str, Check); 4] = [
        (
            "validation",
            rejected,
            |r| matches!(r, EffectResult::Failed { message, .. } if message.contains("'amount' is a required property")),
        ),
        // Without the pattern the same error may have come after the effect.
        ("validation", "", |r| {
            matches!(r, EffectResult::Unknown { .. })
        }),
        // An error the pattern does not name is still unknown.
        (
            "declined",
            rejected,
            |r| matches!(r, EffectResult::Unknown { message } if message.contains("card declined")),
        ),
        // A JSON-RPC invalid-params error proves nothing ran, whatever the pattern.
        (
            "invalid",
            rejected,
            |r| matches!(r, EffectResult::Failed { message, .. } if message.contains("-32602") && message.contains("amount is missing")),
        ),
    ];
    for (tool, extra, ok) in cases {
        let result = executor(&url, tool, extra).execute(intent("A-1")).await;
        assert!(ok(&result), "{tool} {extra}: {result:?}");
    }
}

#[test]
fn a_rejected_pattern_is_validated_at_load_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let load = |extra: &str, kind: &str| {
        let text = format!(
            "[[capabilities]]\nname = \"pay\"\ncategory = \"keyed\"\nkey = {{ business_ref = \"order_id\" }}\n\n[capabilities.upstream]\nkind = \"{kind}\"\nurl = \"http://127.0.0.1:9/mcp\"\ntool = \"pay\"\n{extra}\n"
        );
        let text = if kind == "http" {
            text.replace("tool = \"pay\"\n", "")
        } else {
            text
        };
        std::fs::write(dir.path().join("c.toml"), text).unwrap();
        oncegate_engine::config::load_registry(&dir.path().join("c.toml"))
            .err()
            .map(|e| e.to_string())
    };
    assert_eq!(load("rejected = \"^declined\"", "mcp"), None);
    let bad = load("rejected = \"^(declined\"", "mcp").expect("an unclosed group is refused");
    assert!(bad.contains("c.toml:10"), "{bad}");
    assert!(bad.contains("rejected"), "{bad}");
    assert!(bad.contains("not a regular expression"), "{bad}");
    let http = load("rejected = \"x\"", "http").expect("HTTP upstreams have no tool errors");
    assert!(http.contains("MCP upstreams only"), "{http}");
    let both = load("tool_errors = \"failed\"\nrejected = \"x\"", "mcp")
        .expect("redundant with tool_errors = failed");
    assert!(both.contains("already a failure"), "{both}");
}

/// The provider behind a counter of every JSON-RPC request that is not a `tools/call`
/// (discovery, `initialize` and its notification, listings): the cost of connecting.
async fn counted_provider() -> (String, Arc<AtomicUsize>) {
    let handshakes = Arc::new(AtomicUsize::new(0));
    let served = Provider::default();
    let service: StreamableHttpService<Provider, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(served.clone()),
        Arc::default(),
        StreamableHttpServerConfig::default().with_json_response(true),
    );
    let counter = handshakes.clone();
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let counter = counter.clone();
                async move {
                    let (parts, body) = request.into_parts();
                    let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
                    let method = serde_json::from_slice::<Value>(&bytes)
                        .ok()
                        .and_then(|v| v["method"].as_str().map(str::to_owned));
                    if method.as_deref().is_some_and(|m| m != "tools/call") {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                    next.run(axum::extract::Request::from_parts(parts, bytes.into()))
                        .await
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, handshakes)
}

/// A gateway's executors share connected clients: five calls, one handshake. Without
/// the pool every call connects (and discovers) again.
#[tokio::test]
async fn pooled_mcp_clients_connect_once_for_many_calls() {
    let (url, handshakes) = counted_provider().await;
    let sessions = oncegate_gateway::upstream::mcp::Sessions::default();
    for n in 0..5 {
        // A new executor each time, as the gateway makes per call: the pool is shared.
        let ex = executor(&url, "ok", "").with_sessions(sessions.clone());
        let result = ex.execute(intent(&format!("A-{n}"))).await;
        assert!(matches!(result, EffectResult::Applied { .. }), "{result:?}");
    }
    let pooled = handshakes.swap(0, Ordering::SeqCst);
    assert!(
        (1..=2).contains(&pooled),
        "{pooled} handshake requests for 5 pooled calls"
    );
    for n in 0..5 {
        let result = executor(&url, "ok", "")
            .execute(intent(&format!("B-{n}")))
            .await;
        assert!(matches!(result, EffectResult::Applied { .. }), "{result:?}");
    }
    let unpooled = handshakes.load(Ordering::SeqCst);
    assert!(
        unpooled >= 5,
        "{unpooled} handshake requests for 5 unpooled calls"
    );
}

/// The pool is per upstream: a refused upstream pools nothing (its call says nothing was
/// sent) and leaves another upstream's pooled client working.
#[tokio::test]
async fn a_refused_upstream_pools_nothing_and_leaves_other_clients_alone() {
    let sessions = oncegate_gateway::upstream::mcp::Sessions::default();
    let (url, _) = provider().await;
    let ex = executor(&url, "ok", "").with_sessions(sessions.clone());
    assert!(matches!(
        ex.execute(intent("A-1")).await,
        EffectResult::Applied { .. }
    ));
    // Port 9 refuses: nothing to pool for it, and the first upstream's client is kept.
    let refused = executor("http://127.0.0.1:9/mcp", "ok", "")
        .with_sessions(sessions.clone())
        .execute(intent("A-2"))
        .await;
    assert!(
        matches!(refused, EffectResult::NotSent { .. }),
        "{refused:?}"
    );
    assert!(matches!(
        ex.execute(intent("A-3")).await,
        EffectResult::Applied { .. }
    ));
}

/// The provider behind a recorder of every request's URI; with `legacy`, it answers
/// `server/discover` the way a 2025-11-25 server does (method not found), so clients
/// fall back to `initialize` and a session.
async fn recorded_provider(legacy: bool) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let uris = Arc::new(std::sync::Mutex::new(Vec::new()));
    let served = Provider::default();
    let service: StreamableHttpService<Provider, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(served.clone()),
        Arc::default(),
        StreamableHttpServerConfig::default().with_json_response(true),
    );
    let recorder = uris.clone();
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let recorder = recorder.clone();
                async move {
                    recorder.lock().unwrap().push(request.uri().to_string());
                    let (parts, body) = request.into_parts();
                    let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
                    let message = serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null);
                    if legacy && message["method"] == "server/discover" {
                        let refusal = json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "Method not found"}});
                        return axum::response::IntoResponse::into_response(axum::Json(refusal));
                    }
                    next.run(axum::extract::Request::from_parts(parts, bytes.into()))
                        .await
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, uris)
}

/// An upstream whose URL or headers are rendered per intent gets no pooled client: one
/// per intent would never be used again and never be closed. Literal and `{env.*}`
/// templates are the same for every call, so they pool.
#[tokio::test]
async fn per_intent_templates_pool_no_client() {
    let (url, _) = provider().await;
    let templated = [
        (
            "header",
            url.clone(),
            "headers = { \"X-Order\" = \"{arg.order_id}\" }",
        ),
        ("url", format!("{url}?key={{key}}"), ""),
        (
            "run id",
            url.clone(),
            "headers = { \"X-Run\" = \"{run_id}\" }",
        ),
    ];
    for (what, url, extra) in templated {
        let sessions = oncegate_gateway::upstream::mcp::Sessions::default();
        for n in 0..4 {
            let result = executor(&url, "ok", extra)
                .with_sessions(sessions.clone())
                .execute(intent(&format!("T-{n}")))
                .await;
            assert!(
                matches!(result, EffectResult::Applied { .. }),
                "{what}: {result:?}"
            );
        }
        assert_eq!(
            sessions.len(),
            0,
            "a {what} templated per intent was pooled"
        );
    }
    let sessions = oncegate_gateway::upstream::mcp::Sessions::default();
    for n in 0..4 {
        let result = executor(
            &url,
            "ok",
            "headers = { \"X-Pkg\" = \"{env.CARGO_PKG_NAME}\" }",
        )
        .with_sessions(sessions.clone())
        .execute(intent(&format!("E-{n}")))
        .await;
        assert!(matches!(result, EffectResult::Applied { .. }), "{result:?}");
    }
    assert_eq!(
        sessions.len(),
        1,
        "an {{env.*}} header is the same for every call"
    );
}

/// The pool is bounded: connecting to one upstream more than it holds drops the least
/// recently used, and a client unused for the idle time is dropped.
#[tokio::test]
async fn the_pool_drops_its_least_recently_used_and_idle_clients() {
    let (url, _) = provider().await;
    let sessions = oncegate_gateway::upstream::mcp::Sessions::bounded(2, Duration::from_secs(300));
    let call = |n: u32| {
        let ex = executor(&format!("{url}?upstream={n}"), "ok", "").with_sessions(sessions.clone());
        async move {
            let result = ex.execute(intent("C-1")).await;
            assert!(matches!(result, EffectResult::Applied { .. }), "{result:?}");
        }
    };
    call(1).await;
    call(2).await;
    assert_eq!(sessions.len(), 2);
    call(1).await; // 1 is now the most recently used
    call(3).await; // drops 2
    assert_eq!(sessions.len(), 2);
    call(1).await;
    call(3).await;
    assert_eq!(sessions.len(), 2, "1 and 3 stayed");
    call(2).await;
    assert_eq!(sessions.len(), 2, "the cap holds");

    let idle = oncegate_gateway::upstream::mcp::Sessions::bounded(8, Duration::from_millis(50));
    let ex = |n: u32| executor(&format!("{url}?idle={n}"), "ok", "").with_sessions(idle.clone());
    assert!(matches!(
        ex(1).execute(intent("I-1")).await,
        EffectResult::Applied { .. }
    ));
    assert_eq!(idle.len(), 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(matches!(
        ex(2).execute(intent("I-2")).await,
        EffectResult::Applied { .. }
    ));
    assert_eq!(
        idle.len(),
        1,
        "the idle client was dropped when another connected"
    );
}

/// Argument values in an MCP upstream's URL are percent-encoded, as in an HTTP
/// upstream's: an order id cannot add a query parameter.
#[tokio::test]
async fn mcp_upstream_urls_percent_encode_argument_values() {
    let (url, uris) = recorded_provider(false).await;
    let result = executor(&format!("{url}?order={{arg.order_id}}"), "ok", "")
        .execute(intent("a b&admin=1"))
        .await;
    assert!(matches!(result, EffectResult::Applied { .. }), "{result:?}");
    let uris = uris.lock().unwrap().clone();
    assert!(!uris.is_empty());
    assert!(
        uris.iter()
            .all(|u| u.ends_with("/mcp?order=a%20b%26admin%3D1")),
        "{uris:?}"
    );
}

/// A client that fell back to a 2025-11-25 session is never pooled (rmcp re-initialises
/// an expired session by cutting its other calls' streams): each call connects anew.
#[tokio::test]
async fn legacy_sessions_are_not_pooled() {
    let (url, uris) = recorded_provider(true).await;
    let sessions = oncegate_gateway::upstream::mcp::Sessions::default();
    for n in 0..3 {
        let result = executor(&url, "ok", "")
            .with_sessions(sessions.clone())
            .execute(intent(&format!("L-{n}")))
            .await;
        assert!(matches!(result, EffectResult::Applied { .. }), "{result:?}");
    }
    assert_eq!(sessions.len(), 0);
    // The fallback really happened: a session was opened for each call.
    let initializes = uris.lock().unwrap().len();
    assert!(
        initializes >= 6,
        "{initializes} requests for 3 legacy calls"
    );
}

/// An error saying the negotiation no longer fits the server (-32022 here) drops the
/// pooled client, so the next call negotiates again; an ordinary tool error keeps it.
#[tokio::test]
async fn a_stale_negotiation_error_evicts_the_pooled_client() {
    let (url, _) = provider().await;
    let sessions = oncegate_gateway::upstream::mcp::Sessions::default();
    let run = |tool: &str| executor(&url, tool, "").with_sessions(sessions.clone());
    assert!(matches!(
        run("ok").execute(intent("S-1")).await,
        EffectResult::Applied { .. }
    ));
    let _ = run("declined").execute(intent("S-2")).await;
    assert_eq!(
        sessions.len(),
        1,
        "a tool error says nothing about the client"
    );
    let stale = run("stale").execute(intent("S-3")).await;
    assert!(matches!(stale, EffectResult::Unknown { .. }), "{stale:?}");
    assert_eq!(sessions.len(), 0, "-32022 drops the client");
    assert!(matches!(
        run("ok").execute(intent("S-4")).await,
        EffectResult::Applied { .. }
    ));
    assert_eq!(sessions.len(), 1);
}

/// An intent with its own key (the sandbox dedupes on it).
fn keyed(order: &str) -> oncegate_engine::IntentHandle {
    let mut handle = intent(order);
    handle.key = format!("key-{order}");
    handle
}

/// The sandbox's charges committed so far, by idempotency key.
async fn charges(base: &str) -> Vec<String> {
    let body: Value = reqwest::get(format!("{base}/v1/effects?kind=charge"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["effects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["idempotency_key"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The sandbox goes away under a pooled client and comes back on the same port (the
/// same ledger): the call made while it is down sends nothing and drops the client, the
/// next connects anew and succeeds, and each intent is one charge.
#[tokio::test]
async fn a_pooled_client_is_replaced_after_the_upstream_restarts() {
    oncegate_gateway::server::install_crypto();
    let app = oncegate_sandbox::router(oncegate_sandbox::SandboxConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let base = format!("http://{addr}");
    let serve = |listener: tokio::net::TcpListener| {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = app.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        (stop, task)
    };
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
[[capabilities]]
name = "pay"
category = "keyed"
key = {{ business_ref = "order_id" }}

[capabilities.upstream]
kind = "mcp"
url = "{base}/mcp"
tool = "create_charge"
timeout = "2s"
effect_ref = "/id"
body = {{ order_id = "{{arg.order_id}}", amount_minor = 1250, currency = "USD" }}
"#
    );
    let sessions = oncegate_gateway::upstream::mcp::Sessions::default();
    let ex = || pay_executor(dir.path(), &text).with_sessions(sessions.clone());

    let (stop, task) = serve(listener);
    let first = ex().execute(keyed("R-1")).await;
    assert!(matches!(first, EffectResult::Applied { .. }), "{first:?}");
    assert_eq!(sessions.len(), 1);

    stop.send(()).unwrap();
    task.await.unwrap();
    let down = ex().execute(keyed("R-2")).await;
    assert!(matches!(down, EffectResult::NotSent { .. }), "{down:?}");
    assert_eq!(sessions.len(), 0, "the failed client left the pool");

    let (stop, task) = serve(tokio::net::TcpListener::bind(addr).await.unwrap());
    let retried = ex().execute(keyed("R-2")).await;
    assert!(
        matches!(retried, EffectResult::Applied { .. }),
        "{retried:?}"
    );
    assert_eq!(sessions.len(), 1, "the new client is pooled");
    // A repeat of the first intent reaches the provider again and is deduplicated.
    let repeat = ex().execute(keyed("R-1")).await;
    assert!(matches!(repeat, EffectResult::Applied { .. }), "{repeat:?}");

    let mut keys = charges(&base).await;
    keys.sort();
    assert_eq!(keys, ["key-R-1", "key-R-2"], "one charge per intent");
    stop.send(()).unwrap();
    task.await.unwrap();
}
