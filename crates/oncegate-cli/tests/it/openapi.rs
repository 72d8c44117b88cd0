//! The served OpenAPI document as a third-party tool reads it: `openapi-spec-validator`
//! (PyPI, installed by `tests/clients/setup.sh openapi`) finds it valid; every
//! authenticated operation documents its refusals with the one error schema; and real
//! refusals (401, 403, 404, 422) answer exactly that envelope.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{Setup, client, setup_part};

fn validator() -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = root.join("target/openapi-tools/venv/bin/openapi-spec-validator");
    // Always asked: the part is cached by a stamp, and a changed pin reinstalls.
    setup_part("openapi");
    assert!(bin.is_file(), "setup.sh openapi left no {}", bin.display());
    bin
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
