//! Per-principal budgets through the real router on a socket: the console's approval
//! queue pages 50 at a time with a next-page link; the JSON listings page with
//! `next_cursor` (each row once), clamp `limit`, and refuse a malformed cursor with 422
//! `OG-0009`; an agent past `pending_approvals_per_agent` is refused with `OG-0058` on
//! `/v1/calls`. (The session flood and the memory bound run against real processes in
//! `oncegate-cli`'s tests/it/budgets.rs.)

use std::collections::HashSet;

use serde_json::Value;

use crate::console::{gateway, held, http, session};

async fn get(url: &str, token: &str) -> (u16, Value) {
    let r = http().get(url).bearer_auth(token).send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// The held cards on a console queue page (one decision form each).
fn cards(page: &str) -> usize {
    page.matches("/decide\"").count()
}

/// The next-page link on a console queue page.
fn next_link(page: &str) -> Option<String> {
    let at = page.find("rel=\"next\" href=\"")?;
    let rest = &page[at + 17..];
    Some(rest[..rest.find('"')?].replace("&amp;", "&"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_queue_and_the_listings_page_with_cursors() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _sandbox) = gateway(dir.path()).await;
    let mut ids = Vec::new();
    for i in 0..60 {
        ids.push(held(&gw, &format!("QUEUE-{i:02}")).await);
    }

    // The console: 50 held calls, then a link to the 10 others.
    let (cookie, _) = session(&gw, "tok-alice").await;
    let page = |path: String| {
        let cookie = cookie.clone();
        let gw = gw.clone();
        async move {
            let r = http()
                .get(format!("{gw}{path}"))
                .header("Cookie", cookie)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (status, first) = page("/console/approvals".into()).await;
    assert_eq!(status, 200);
    assert_eq!(cards(&first), 50, "50 per page");
    assert!(
        first.contains(&ids[0]) && !first.contains(&ids[59]),
        "oldest first"
    );
    let next = next_link(&first).expect("a next-page link");
    let (status, second) = page(next).await;
    assert_eq!(status, 200);
    assert_eq!(cards(&second), 10);
    assert!(second.contains(&ids[59]) && !second.contains(&format!("h-{}", ids[0])));
    assert!(next_link(&second).is_none(), "the last page links nowhere");
    let (status, bad) = page("/console/approvals?cursor=zzz".into()).await;
    assert_eq!(status, 422, "{bad}");

    // The JSON listing: pages of 25, each approval once, the last page without a cursor.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{gw}/v1/approvals?state=pending&limit=25");
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let (status, body) = get(&url, "tok-alice").await;
        assert_eq!(status, 200, "{body}");
        let page = body["approvals"].as_array().unwrap();
        assert!(page.len() <= 25);
        seen.extend(page.iter().map(|a| a["id"].as_str().unwrap().to_owned()));
        match body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => {
                assert!(body["next_cursor"].is_null(), "{body}");
                break;
            }
        }
    }
    assert_eq!(seen, ids, "every approval once, oldest first");

    // Intents: limit clamped to 500, a next page continues, cursors are per listing.
    let (status, body) = get(&format!("{gw}/v1/intents?limit=4000000000"), "tok-alice").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["intents"].as_array().unwrap().len(), 60);
    assert!(body["next_cursor"].is_null());
    let (_, first) = get(&format!("{gw}/v1/intents?limit=7"), "tok-alice").await;
    let intent_cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let (status, rest) = get(
        &format!("{gw}/v1/intents?limit=500&cursor={intent_cursor}"),
        "tok-alice",
    )
    .await;
    assert_eq!(status, 200);
    let keys: HashSet<String> = first["intents"]
        .as_array()
        .unwrap()
        .iter()
        .chain(rest["intents"].as_array().unwrap())
        .map(|r| format!("{}/{}", r["key"], r["generation"]))
        .collect();
    assert_eq!(keys.len(), 60, "two pages, each intent once");
    for url in [
        format!("{gw}/v1/approvals?cursor={intent_cursor}"),
        format!("{gw}/v1/findings?cursor={intent_cursor}"),
        format!("{gw}/v1/intents?cursor=bm90LWEtY3Vyc29y"),
        format!("{gw}/v1/intents?cursor=%F0%9F%92%A9"),
    ] {
        let (status, body) = get(&url, "tok-admin").await;
        assert_eq!(status, 422, "{url}: {body}");
        assert_eq!(body["error"]["code"], "OG-0009", "{body}");
    }
    let (status, body) = get(&format!("{gw}/v1/findings?limit=900"), "tok-admin").await;
    assert_eq!(status, 200, "{body}");
    assert!(body["next_cursor"].is_null());
}
