//! Tracing end to end: `oncegate serve` exports its spans over OTLP/HTTP to a real
//! receiver in this test (axum on loopback, decoding the protobuf with the
//! `opentelemetry-proto` types), and the sandbox records the `traceparent` each effect
//! arrived with.
//!
//! One call per surface, each under a trace of the caller's: the JSON API with a
//! `traceparent` header (an HTTP upstream), MCP with `_meta.traceparent` (an MCP
//! upstream), and a repeat of an unknown outcome (its reconciliation read). The batch
//! delay is a minute, so the spans arrive only because a SIGTERM'd gateway flushes its
//! exporter on the way out. Without an endpoint nothing is forwarded; the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` alone turns export on.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};

use crate::mcp::{jsonrpc, post_mcp, tools_call};
use crate::support::{Setup, client, effects_where, fault};

/// A span as the receiver decoded it, with its resource's `service.name`.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    span: Span,
}

impl Received {
    fn attribute(&self, key: &str) -> Option<String> {
        let kv = self.span.attributes.iter().find(|kv| kv.key == key)?;
        Some(match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => s.clone(),
            any_value::Value::IntValue(i) => i.to_string(),
            other => format!("{other:?}"),
        })
    }

    fn attribute_text(&self) -> String {
        format!("{:?}", self.span.attributes)
    }
}

/// An OTLP/HTTP trace receiver on 127.0.0.1 (`POST /v1/traces`, protobuf).
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Received>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    fn start() -> Self {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let spans: Arc<Mutex<Vec<Received>>> = Arc::default();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(collect))
            .with_state(Arc::clone(&spans));
        runtime.spawn(async move { axum::serve(listener, app).await });
        Self {
            url,
            spans,
            _runtime: runtime,
        }
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }
}

async fn collect(
    State(spans): State<Arc<Mutex<Vec<Received>>>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, Vec<u8>) {
    if headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        != Some("application/x-protobuf")
    {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new());
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    let mut received = spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.push(Received {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
    (
        StatusCode::OK,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

/// The trace and parent ids of a W3C `traceparent` (`00-<trace>-<parent>-<flags>`).
fn ids(traceparent: &str) -> (String, String) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "not a traceparent: {traceparent}");
    (parts[1].to_owned(), parts[2].to_owned())
}

/// The one effect of `kind` for `order`, as the sandbox recorded it.
fn effect(setup: &Setup, kind: &str, order: &str) -> Value {
    let found = effects_where(&setup.sandbox, &format!("kind={kind}&order_id={order}"));
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

/// Stops the gateway as an orchestrator does (SIGTERM) and waits for it to exit.
fn terminate(child: &mut std::process::Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the gateway did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn telemetry_puts_each_decision_under_the_callers_trace_and_carries_it_upstream() {
    let receiver = Receiver::start();
    let setup = Setup::with_registry(&[], |text| {
        text.replacen(
            "name = \"refund\"\n",
            "name = \"refund\"\ntraced_arguments = [\"order_id\"]\n",
            1,
        ) + &format!(
            "\n[telemetry]\notlp_endpoint = \"{}\"\nservice_name = \"oncegate-test\"\n",
            receiver.url
        )
    });
    // A minute's batch delay: nothing is sent before the shutdown flush.
    let mut gw = setup.gateway_with(&[("OTEL_BSP_SCHEDULE_DELAY", "60000")]);

    // The JSON API: `traceparent` header, an HTTP upstream (refund).
    let http_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let http_parent = "00f067aa0ba902b7";
    let answer: Value = client()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .header("traceparent", format!("00-{http_trace}-{http_parent}-01"))
        .header("tracestate", "agent=ignore-previous-instructions")
        .header("Oncegate-Run-Id", "run-traced")
        .json(&json!({
            "capability": "refund",
            "arguments": {"order_id": "TR-1", "amount": "5.00", "currency": "USD"},
        }))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(answer["status"], "applied", "{answer}");

    // MCP: `_meta.traceparent`, an MCP upstream (charge_card).
    let mcp_trace = "0af7651916cd43dd8448eb211c80319c";
    let mcp_parent = "b7ad6b7169203331";
    let mut call = tools_call(
        "charge_card",
        json!({"order_id": "TM-1", "amount": "7.00", "currency": "USD", "memo": "private note"}),
    );
    call["params"]["_meta"]["traceparent"] = json!(format!("00-{mcp_trace}-{mcp_parent}-01"));
    call["params"]["_meta"]["tracestate"] = json!("agent=ignore-previous-instructions");
    let (status, _, body) = post_mcp(&gw, Some("tok-planner"), call.to_string());
    let reply = jsonrpc(&body);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        reply["result"]["_meta"]["dev.oncegate/outcome"]["status"], "applied",
        "{reply}"
    );

    // The provider saw each effect under its caller's trace, a span of the gateway's own
    // as its parent.
    let refund_tp = effect(&setup, "refund", "TR-1")["traceparent"]
        .as_str()
        .expect("the refund arrived with a traceparent header")
        .to_owned();
    let charge_tp = effect(&setup, "charge", "TM-1")["traceparent"]
        .as_str()
        .expect("the charge arrived with _meta.traceparent")
        .to_owned();
    // The caller's tracestate (its own text) stops at the gateway, on both paths.
    for (kind, order) in [("refund", "TR-1"), ("charge", "TM-1")] {
        assert_eq!(
            effect(&setup, kind, order)["tracestate"],
            Value::Null,
            "{kind}: an agent's tracestate reached the provider"
        );
    }
    let (refund_trace, refund_parent) = ids(&refund_tp);
    let (charge_trace, charge_parent) = ids(&charge_tp);
    assert_eq!(
        (refund_trace.as_str(), charge_trace.as_str()),
        (http_trace, mcp_trace)
    );
    assert_ne!(
        refund_parent, http_parent,
        "the gateway's span is the parent"
    );
    assert_ne!(
        charge_parent, mcp_parent,
        "the gateway's span is the parent"
    );

    // A refund whose outcome is unknown (the provider fails with a 500): its repeat,
    // under a trace of its own, reads the provider's record before anything else.
    fault(&setup.sandbox, "/v1/refunds", "fail_before_commit", 0);
    let unknown_trace = "5e1ac0ffee0ddba11c0ffee0ddba11aa";
    let call_refund = |trace: &str| -> Value {
        client()
            .post(format!("{}/v1/calls", gw.url))
            .bearer_auth("tok-planner")
            .header("traceparent", format!("00-{trace}-{http_parent}-01"))
            .json(&json!({
                "capability": "refund",
                "arguments": {"order_id": "TR-2", "amount": "6.00", "currency": "USD"},
            }))
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    let first = call_refund("5e1ac0ffee0ddba11c0ffee0ddba1100");
    assert_eq!(first["status"], "unknown", "{first}");
    call_refund(unknown_trace);

    terminate(&mut gw.child);
    let spans = receiver.spans();
    println!(
        "received {} spans: {:?}",
        spans.len(),
        spans
            .iter()
            .map(|s| s.span.name.as_str())
            .collect::<Vec<_>>()
    );
    assert!(
        spans.iter().all(|s| s.service == "oncegate-test"),
        "{spans:?}"
    );
    let by_id: HashMap<String, &Received> = spans
        .iter()
        .map(|s| (hex::encode(&s.span.span_id), s))
        .collect();
    for (surface, trace, caller, upstream_parent, capability) in [
        ("json", http_trace, http_parent, &refund_parent, "refund"),
        ("mcp", mcp_trace, mcp_parent, &charge_parent, "charge_card"),
    ] {
        let in_trace: Vec<&Received> = spans
            .iter()
            .filter(|s| hex::encode(&s.span.trace_id) == trace)
            .collect();
        let names: Vec<&str> = in_trace.iter().map(|s| s.span.name.as_str()).collect();
        // One decision, parented by the caller's span.
        let decisions: Vec<&&Received> = in_trace
            .iter()
            .filter(|s| s.span.name == "oncegate.decision")
            .collect();
        assert_eq!(decisions.len(), 1, "{surface}: {names:?}");
        let decision = decisions[0];
        assert_eq!(
            hex::encode(&decision.span.parent_span_id),
            caller,
            "{surface}"
        );
        assert_eq!(
            decision.attribute("oncegate.capability").as_deref(),
            Some(capability)
        );
        assert_eq!(
            decision.attribute("oncegate.outcome").as_deref(),
            Some("applied")
        );
        assert_eq!(
            decision.attribute("oncegate.principal").as_deref(),
            Some("planner")
        );
        assert_eq!(decision.attribute("oncegate.attempt").as_deref(), Some("1"));
        assert_eq!(
            decision.attribute("oncegate.intent_key").map(|k| k.len()),
            Some(64),
            "{surface}: {}",
            decision.attribute_text()
        );
        // The upstream call is the decision's child, and the span the provider was told
        // is its parent.
        let upstream = by_id.get(upstream_parent.as_str()).unwrap_or_else(|| {
            panic!("{surface}: the upstream's parent span was not exported: {names:?}")
        });
        assert_eq!(upstream.span.name, "oncegate.upstream.call", "{surface}");
        assert_eq!(
            upstream.span.parent_span_id, decision.span.span_id,
            "{surface}"
        );
        assert_eq!(
            upstream.attribute("oncegate.result").as_deref(),
            Some("applied")
        );
        // The claim and the outcome were committed under the decision.
        let commits = in_trace
            .iter()
            .filter(|s| {
                s.span.name == "oncegate.store.commit"
                    && s.span.parent_span_id == decision.span.span_id
            })
            .count();
        assert!(commits >= 2, "{surface}: {names:?}");
    }
    // The repeat's reconciliation read is a child of its decision.
    let repeat = spans
        .iter()
        .find(|s| {
            s.span.name == "oncegate.decision" && hex::encode(&s.span.trace_id) == unknown_trace
        })
        .expect("the repeat's decision span");
    let read = spans
        .iter()
        .find(|s| s.span.name == "oncegate.reconcile.read")
        .expect("a reconciliation read span");
    assert_eq!(read.span.parent_span_id, repeat.span.span_id);
    assert!(
        matches!(
            read.attribute("oncegate.result").as_deref(),
            Some("not_found" | "undecidable")
        ),
        "{}",
        read.attribute_text()
    );
    // Argument values stay out unless the capability lists them.
    let refund = spans
        .iter()
        .find(|s| s.span.name == "oncegate.decision" && hex::encode(&s.span.trace_id) == http_trace)
        .unwrap();
    assert_eq!(
        refund.attribute("oncegate.argument.order_id").as_deref(),
        Some("TR-1")
    );
    assert_eq!(
        refund.attribute("oncegate.run_id").as_deref(),
        Some("run-traced")
    );
    let everything = spans
        .iter()
        .map(Received::attribute_text)
        .collect::<String>();
    for secret in [
        "private note",
        "TM-1",
        "tok-planner",
        "5.00",
        "sk_test_gateway",
    ] {
        assert!(
            !everything.contains(secret),
            "`{secret}` in a span: {everything}"
        );
    }
}

#[test]
fn telemetry_is_off_without_an_endpoint_and_the_standard_variable_turns_it_on() {
    let receiver = Receiver::start();
    let setup = Setup::example();
    let refund = |gw: &crate::support::Proc, order: &str, trace: &str, flags: &str| {
        let answer: Value = client()
            .post(format!("{}/v1/calls", gw.url))
            .bearer_auth("tok-planner")
            .header(
                "traceparent",
                format!("00-{trace}-00f067aa0ba902b7-{flags}"),
            )
            .json(&json!({
                "capability": "refund",
                "arguments": {"order_id": order, "amount": "5.00", "currency": "USD"},
            }))
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(answer["status"], "applied", "{answer}");
    };

    // No `[telemetry]`, no variable: nothing is read, sent upstream or exported.
    let mut off = setup.gateway();
    refund(&off, "TE-1", "11111111111111111111111111111111", "01");
    assert_eq!(effect(&setup, "refund", "TE-1")["traceparent"], Value::Null);
    terminate(&mut off.child);
    drop(off);

    // `OTEL_EXPORTER_OTLP_ENDPOINT` alone (the base URL; `/v1/traces` is appended).
    let mut on = setup.gateway_with(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
    ]);
    // The caller says "not sampled": the decision is exported all the same (an agent
    // cannot hide its decisions), and the upstream hears a sampled trace.
    let trace = "22222222222222222222222222222222";
    refund(&on, "TE-2", trace, "00");
    let upstream = effect(&setup, "refund", "TE-2")["traceparent"]
        .as_str()
        .expect("a traceparent upstream")
        .to_owned();
    let (sent, _) = ids(&upstream);
    assert_eq!(sent, trace);
    assert!(upstream.ends_with("-01"), "{upstream}");
    terminate(&mut on.child);
    let spans = receiver.spans();
    let decision = spans
        .iter()
        .find(|s| s.span.name == "oncegate.decision")
        .expect("the decision was exported");
    assert_eq!(hex::encode(&decision.span.trace_id), trace);
    assert_eq!(decision.service, "oncegate", "the default service name");
}

/// POSTs `body` to `path` as `token` with a `traceparent` of trace `trace`.
fn traced_post(
    gw: &crate::support::Proc,
    path: &str,
    token: &str,
    trace: &str,
    body: Value,
) -> Value {
    client()
        .post(format!("{}{path}", gw.url))
        .bearer_auth(token)
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .json(&body)
        .send()
        .unwrap()
        .json()
        .unwrap()
}

#[test]
fn claims_completions_and_approvals_are_decisions_under_their_callers_traces() {
    let receiver = Receiver::start();
    // A capability its callers execute themselves (no upstream): the two-phase API.
    let setup = Setup::with_registry(&[], |text| {
        text + &format!(
            "\n[[capabilities]]\nname = \"ship\"\ncategory = \"keyed\"\nkey = {{ business_ref = \"order_id\" }}\n\n[telemetry]\notlp_endpoint = \"{}\"\n",
            receiver.url
        )
    });
    let mut gw = setup.gateway_with(&[("OTEL_BSP_SCHEDULE_DELAY", "60000")]);
    let (claim_trace, complete_trace, approve_trace) = (
        "c1a1c1a1c1a1c1a1c1a1c1a1c1a1c1a1",
        "c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0",
        "a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9",
    );
    let claim = traced_post(
        &gw,
        "/v1/intents/claim",
        "tok-planner",
        claim_trace,
        json!({"capability": "ship", "arguments": {"order_id": "S-1"}}),
    );
    assert_eq!(claim["status"], "execute", "{claim}");
    let key = claim["intent_key"].as_str().unwrap().to_owned();
    let done = traced_post(
        &gw,
        &format!("/v1/intents/{key}/complete"),
        "tok-planner",
        complete_trace,
        json!({"fencing_token": claim["fencing_token"], "outcome": "applied", "effect_ref": "sh_1"}),
    );
    assert_eq!(done["status"], "applied", "{done}");
    // A refund over 100.00 is held; an approver's approval executes it.
    let held: Value = client()
        .post(format!("{}/v1/calls", gw.url))
        .bearer_auth("tok-planner")
        .header("Oncegate-Run-Id", "run-held")
        .header("Oncegate-Step-Id", "step-3")
        .json(
            &json!({"capability": "refund", "arguments": {"order_id": "TA-1", "amount": "150.00"}}),
        )
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(held["status"], "pending_approval", "{held}");
    let id = held["approval_id"].as_str().unwrap();
    let approved = traced_post(
        &gw,
        &format!("/v1/approvals/{id}/approve"),
        "tok-alice",
        approve_trace,
        json!({}),
    );
    assert_eq!(approved["status"], "applied", "{approved}");
    terminate(&mut gw.child);

    let spans = receiver.spans();
    let in_trace = |trace: &str| -> Vec<Received> {
        spans
            .iter()
            .filter(|s| hex::encode(&s.span.trace_id) == trace)
            .cloned()
            .collect()
    };
    let decision = |trace: &str, what: &str| -> Received {
        in_trace(trace)
            .into_iter()
            .find(|s| {
                s.span.name == "oncegate.decision"
                    && s.attribute("oncegate.decision").as_deref() == Some(what)
            })
            .unwrap_or_else(|| panic!("no {what} decision in trace {trace}: {spans:?}"))
    };
    let children = |trace: &str, parent: &Received, name: &str| {
        in_trace(trace)
            .iter()
            .filter(|s| s.span.name == name && s.span.parent_span_id == parent.span.span_id)
            .count()
    };
    let claimed = decision(claim_trace, "claim");
    assert_eq!(
        claimed.attribute("oncegate.outcome").as_deref(),
        Some("claimed")
    );
    let completed = decision(complete_trace, "complete");
    assert_eq!(
        completed.attribute("oncegate.outcome").as_deref(),
        Some("applied")
    );
    assert_eq!(
        completed.attribute("oncegate.intent_key").as_deref(),
        Some(key.as_str())
    );
    assert!(children(complete_trace, &completed, "oncegate.store.commit") >= 1);
    let approval = decision(approve_trace, "approval");
    assert_eq!(
        approval.attribute("oncegate.principal").as_deref(),
        Some("alice")
    );
    assert_eq!(
        approval.attribute("oncegate.run_id").as_deref(),
        Some("run-held")
    );
    assert_eq!(
        approval.attribute("oncegate.step_id").as_deref(),
        Some("step-3")
    );
    assert_eq!(
        approval.attribute("oncegate.outcome").as_deref(),
        Some("applied")
    );
    assert_eq!(
        children(approve_trace, &approval, "oncegate.upstream.call"),
        1
    );
    // The provider heard the approval's trace.
    let (trace, _) = ids(effect(&setup, "refund", "TA-1")["traceparent"]
        .as_str()
        .unwrap());
    assert_eq!(trace, approve_trace);
}
