//! The served OpenAPI document as a third-party tool reads it: `openapi-spec-validator`
//! (PyPI, installed by `tests/clients/setup.sh openapi`) finds it valid; every
//! authenticated operation documents its refusals with the one error schema and its
//! success with a schema; real refusals (401, 403, 404, 422) answer exactly that
//! envelope, and real answers of the listings match their documented shapes.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{Setup, call, client, setup_part};

/// A tool of the `openapi` test virtualenv (`tests/clients/setup.sh openapi`).
fn tool(name: &str) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = root.join("target/openapi-tools/venv/bin").join(name);
    // Always asked: the part is cached by a stamp, and a changed pin reinstalls.
    setup_part("openapi");
    assert!(bin.is_file(), "setup.sh openapi left no {}", bin.display());
    bin
}

fn validator() -> std::path::PathBuf {
    tool("openapi-spec-validator")
}

/// The error envelope exactly: `{"error": {"code": "OG-....", "message": "..."}}`.
fn is_error_envelope(body: &Value) -> bool {
    let Some(obj) = body.as_object() else {
        return false;
    };
    let Some(error) = obj.get("error").and_then(Value::as_object) else {
        return false;
    };
    obj.len() == 1
        && error.len() == 2
        && error["code"]
            .as_str()
            .is_some_and(|c| c.len() == 7 && c.starts_with("OG-"))
        && error["message"].is_string()
}

#[test]
fn the_openapi_document_validates_and_documents_every_refusal() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    let doc: Value = client()
        .get(format!("{}/v1/openapi.json", gw.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let file = setup.dir.path().join("openapi.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    let out = Command::new(validator()).arg(&file).output().unwrap();
    assert!(
        out.status.success(),
        "openapi-spec-validator:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let error_ref = json!({"$ref": "#/components/schemas/ErrorBody"});
    let mut secured = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if op["security"].as_array().is_none_or(Vec::is_empty) {
                continue;
            }
            secured += 1;
            let mut wanted = vec!["400", "401", "403", "429", "503"];
            if path.contains('{') {
                wanted.push("404");
            }
            for status in wanted {
                // The error schema, or (where an outcome shares the status: a denial
                // is a 403 envelope) one of two.
                let schema = &op["responses"][status]["content"]["application/json"]["schema"];
                let either = schema["oneOf"]
                    .as_array()
                    .is_some_and(|s| s.contains(&error_ref));
                assert!(
                    *schema == error_ref || either,
                    "{method} {path} documents {status} with the error schema: {schema}"
                );
            }
        }
    }
    assert!(secured >= 20, "only {secured} authenticated operations");
    assert_eq!(
        doc["components"]["schemas"]["ErrorBody"]["required"],
        json!(["error"])
    );

    // Real refusals answer that envelope.
    let get = |path: &str, token: Option<&str>| {
        let mut r = client().get(format!("{}{path}", gw.url));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let r = r.send().unwrap();
        (
            r.status().as_u16(),
            r.json::<Value>().unwrap_or(Value::Null),
        )
    };
    for (path, token, status) in [
        ("/v1/intents", None, 401),
        ("/v1/intents", Some("tok-planner"), 403),
        ("/v1/intents/nope", Some("tok-ops"), 404),
        ("/v1/intents?limit=many", Some("tok-ops"), 400),
        ("/v1/findings?cursor=%%%", Some("tok-ops"), 422),
    ] {
        let (got, body) = get(path, token);
        assert_eq!(got, status, "{path}: {body}");
        assert!(is_error_envelope(&body), "{path} answered {body}");
        let code = format!("{status}");
        let documented = doc["paths"][path.split('?').next().unwrap()]["get"]["responses"]
            .get(&code)
            .is_some()
            || path.starts_with("/v1/intents/");
        assert!(documented, "{path}: {status} is not documented");
    }
}

/// Where `value` does not match `schema` (types, required and documented fields,
/// `$ref`s into `doc`, `oneOf`): one line per mismatch.
fn mismatches(doc: &Value, schema: &Value, value: &Value, at: &str) -> Vec<String> {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        return mismatches(doc, &doc["components"]["schemas"][name], value, at);
    }
    if let Some(options) = schema["oneOf"].as_array() {
        return if options
            .iter()
            .any(|o| mismatches(doc, o, value, at).is_empty())
        {
            Vec::new()
        } else {
            vec![format!("{at}: matches none of oneOf")]
        };
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return Vec::new(),
    };
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let fits = types.contains(&kind) || kind == "integer" && types.contains(&"number");
    if !fits {
        return vec![format!("{at}: a {kind}, documented {types:?}")];
    }
    let mut out = Vec::new();
    match value {
        Value::Object(fields) => {
            if let Some(props) = schema["properties"].as_object() {
                for (k, v) in fields {
                    match props.get(k) {
                        Some(p) => out.extend(mismatches(doc, p, v, &format!("{at}.{k}"))),
                        None => out.push(format!("{at}.{k}: not documented")),
                    }
                }
            }
            for k in schema["required"].as_array().into_iter().flatten() {
                let k = k.as_str().unwrap_or_default();
                if !fields.contains_key(k) {
                    out.push(format!("{at}.{k}: required, missing"));
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                out.extend(mismatches(doc, &schema["items"], v, &format!("{at}[{i}]")));
            }
        }
        _ => {}
    }
    out
}

#[test]
fn every_route_documents_its_answer_and_the_listings_answer_as_documented() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    let doc: Value = client()
        .get(format!("{}/v1/openapi.json", gw.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/v1/") {
            continue;
        }
        for (method, op) in item.as_object().unwrap() {
            // A success body, or the outcome envelope (a deny's answer is a 403 outcome).
            let documented = op["responses"]
                .as_object()
                .unwrap()
                .iter()
                .any(|(status, r)| {
                    (status.starts_with('2') && r["content"].is_object())
                        || r.to_string().contains("#/components/schemas/Envelope")
                });
            assert!(documented, "{method} {path} documents no success body");
        }
    }

    // Something in every listing: an intent and a held refund.
    let (code, charged) = call(
        &gw,
        "charge_card",
        &json!({"order_id": "OA-1", "amount": 1250}),
    );
    assert_eq!(code, 200, "{charged}");
    let (code, held) = call(
        &gw,
        "refund",
        &json!({"order_id": "OA-1", "amount": "150.00"}),
    );
    assert_eq!(code, 202, "{held}");
    for path in [
        "/v1/intents",
        "/v1/approvals",
        "/v1/findings",
        "/v1/admin/holds",
        "/v1/admin/doubts",
        "/v1/limits",
        "/v1/admin/tools",
        "/v1/audit/verify",
    ] {
        let body: Value = client()
            .get(format!("{}{path}", gw.url))
            .bearer_auth("tok-ops")
            .send()
            .unwrap()
            .json()
            .unwrap();
        let schema =
            &doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
        assert!(schema.is_object(), "{path}: no 200 schema");
        let wrong = mismatches(&doc, schema, &body, path);
        assert!(wrong.is_empty(), "{path}: {wrong:#?}\n{body}");
    }
}

/// schemathesis (pinned; fixed seed; about ten seconds a token) generates requests from
/// the served document, examples, coverage, fuzzing and stateful sequences, as an agent
/// and as an admin, and finds no server error and no answer the document does not
/// describe (status, content type, headers, body schema). A request the document calls
/// valid may still be refused (422 for arguments a capability's recipe cannot
/// normalise): those checks (positive and negative data acceptance) are left out.
#[test]
fn schemathesis_finds_no_answer_the_document_does_not_describe() {
    let setup = Setup::new(&[]);
    let gw = setup.gateway();
    for token in ["tok-planner", "tok-ops"] {
        let out = Command::new(tool("schemathesis"))
            .current_dir(setup.dir.path())
            .args(["run", &format!("{}/v1/openapi.json", gw.url), "--url", &gw.url])
            .args(["-H", &format!("Authorization: Bearer {token}")])
            .args(["--seed", "1", "--max-examples", "30", "--no-color"])
            .args([
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance",
            ])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "schemathesis as {token}:\n{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Every operation was reached (not skipped for want of a schema).
        let tested = said
            .split("Tested: ")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
            .and_then(|n| n.parse::<usize>().ok());
        assert!(tested.is_some_and(|n| n >= 25), "{said}");
    }
}
