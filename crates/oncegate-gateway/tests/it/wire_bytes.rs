//! The bytes of `GET /v1/intents/{key}` and `GET /v1/approvals`, pinned: the gateway
//! answers with wire types of its own (`wire/`), so a rename in core's `IntentRecord`
//! or `Approval` cannot change what a client reads. The volatile values (ids, the key,
//! times, the lease's owner) are replaced by their field's name before the comparison;
//! everything else, field order and spelling included, is compared byte for byte.

use serde_json::Value;

use crate::console::{gateway, held, http};

/// The fields whose values change from run to run, and what stands for them (every
/// time the same, so a time that happens to equal another reads the same either way).
const VOLATILE: [(&str, &str); 9] = [
    ("id", "[id]"),
    ("key", "[key]"),
    ("approval_id", "[approval_id]"),
    ("owner", "[owner]"),
    ("created_at", "[time]"),
    ("updated_at", "[time]"),
    ("expires_at", "[time]"),
    ("decided_at", "[time]"),
    ("settled_at", "[time]"),
];

/// `body` with every string value of a volatile field replaced by its stand-in: the raw
/// bytes otherwise untouched (no re-serialisation, so field order is what is compared).
fn scrubbed(body: &str) -> String {
    fn collect(v: &Value, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let stand_in = VOLATILE.iter().find(|(f, _)| f == k).map(|(_, s)| *s);
                    if let (Some(stand_in), Value::String(s)) = (stand_in, v) {
                        out.push((stand_in.to_owned(), s.clone()));
                    }
                    collect(v, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| collect(v, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    collect(&serde_json::from_str(body).unwrap(), &mut found);
    // Longest first, so a value that holds another is replaced whole.
    found.sort_by_key(|(_, s)| std::cmp::Reverse(s.len()));
    let mut text = body.to_owned();
    for (stand_in, value) in found {
        text = text.replace(&format!("\"{value}\""), &format!("\"{stand_in}\""));
    }
    text
}

async fn get(url: &str) -> String {
    let r = http()
        .get(url)
        .bearer_auth("tok-admin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

#[tokio::test]
async fn intents_and_approvals_keep_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _sandbox) = gateway(dir.path()).await;
    held(&gw, "o-wire-1").await;
    let approvals = get(&format!("{gw}/v1/approvals")).await;
    let listed: Value = serde_json::from_str(&approvals).unwrap();
    let key = listed["approvals"][0]["key"].as_str().unwrap().to_owned();
    let intent = get(&format!("{gw}/v1/intents/{key}")).await;
    insta::assert_snapshot!("approvals", scrubbed(&approvals));
    insta::assert_snapshot!("intent", scrubbed(&intent));
}
