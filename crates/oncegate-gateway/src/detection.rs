//! The detection scheduler: each duplicate rule runs at its frequency, on one gateway
//! at a time when several share a store (a work claim per rule and time slot, so a
//! slot runs once whichever replica takes it), with the upstream's own listing read
//! first when the capability declares one.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use oncegate_core::config::{Listing, UpstreamKind};
use oncegate_engine::UpstreamEffect;
use oncegate_store::StoreWrite;
use serde_json::Value;

use crate::alerts::webhook_url;
use crate::state::AppState;

/// The most pages one listing read follows.
const MAX_PAGES: usize = 1000;

/// Runs every rule when its slot comes (a slot is `every` long); runs until the
/// process ends.
pub async fn detect_loop(state: AppState, tick: Duration) {
    let owner = format!(
        "detect-{}-{}",
        std::process::id(),
        Timestamp::now().as_nanosecond()
    );
    let mut last: HashMap<String, i64> = HashMap::new();
    let mut ticker = tokio::time::interval(tick);
    loop {
        ticker.tick().await;
        let gate = state.gate();
        for cap in gate.registry().capabilities() {
            let Some(rule) = &cap.duplicates else {
                continue;
            };
            let now = gate.clock().now();
            let every = rule.every.as_secs().max(1);
            let slot = now.as_second() / every;
            if last.get(&cap.name) == Some(&slot) {
                continue;
            }
            let work = format!("detect:{}:{slot}", cap.name);
            match gate
                .store()
                .claim_work(&work, &owner, now, rule.every)
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    last.insert(cap.name.clone(), slot);
                    continue; // another replica runs this slot
                }
                Err(e) => {
                    tracing::warn!(rule = %rule.name, error = %e, "detection skipped: the store is unavailable");
                    continue;
                }
            }
            last.insert(cap.name.clone(), slot);
            // Two slots back, so an effect recorded just before a slot began is seen.
            let since = now - rule.every * 2;
            let upstream = match &cap.listing {
                None => Vec::new(),
                Some(listing) => match fetch_listing(&state.http(), listing, since).await {
                    Ok(effects) => effects,
                    Err(e) => {
                        tracing::warn!(rule = %rule.name, error = %e, "detection: the upstream listing could not be read; comparing the ledger only this time");
                        Vec::new()
                    }
                },
            };
            match gate.detect(&cap.name, since, upstream).await {
                Ok(run) if !run.raised.is_empty() => {
                    tracing::info!(rule = %rule.name, raised = run.raised.len(), compared = run.compared, "detection run");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(rule = %rule.name, error = %e, "detection run failed"),
            }
        }
    }
}

fn text_at(item: &Value, pointer: &str) -> Option<String> {
    match item.pointer(pointer)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The call arguments an upstream effect corresponds to: the mapping's leaves are
/// JSON pointers into the effect.
fn mapped(mapping: &Value, item: &Value) -> Value {
    match mapping {
        Value::String(p) => item.pointer(p).cloned().unwrap_or(Value::Null),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), mapped(v, item)))
                .filter(|(_, v)| !v.is_null())
                .collect(),
        ),
        _ => Value::Null,
    }
}

/// Reads every page of an HTTP listing since `since`.
pub async fn fetch_listing(
    http: &reqwest::Client,
    listing: &Listing,
    since: Timestamp,
) -> Result<Vec<UpstreamEffect>, String> {
    if listing.kind != UpstreamKind::Http {
        return Err("only HTTP listings are read".into());
    }
    let url = webhook_url(&listing.url);
    let mut effects = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut query: Vec<(String, String)> = listing
            .params
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        query.push((listing.since_param.clone(), since.to_string()));
        query.push((listing.limit_param.clone(), listing.page_size.to_string()));
        if let Some(c) = &cursor {
            query.push((listing.cursor_param.clone(), c.clone()));
        }
        let page_url = reqwest::Url::parse_with_params(&url, &query)
            .map_err(|e| format!("the listing URL `{url}` is not a URL: {e}"))?;
        let mut request = http.get(page_url).timeout(listing.timeout);
        for (name, value) in &listing.headers {
            request = request.header(name, webhook_url(value));
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("GET {url}: HTTP {status}"));
        }
        let page: Value = response
            .json()
            .await
            .map_err(|e| format!("GET {url}: not JSON: {e}"))?;
        let items = page
            .pointer(&listing.items)
            .and_then(Value::as_array)
            .ok_or_else(|| format!("GET {url}: no array at {}", listing.items))?;
        for item in items {
            let Some(effect_ref) = text_at(item, &listing.effect_ref) else {
                return Err(format!(
                    "GET {url}: an effect without {}",
                    listing.effect_ref
                ));
            };
            let at = text_at(item, &listing.at)
                .and_then(|t| t.parse::<Timestamp>().ok())
                .ok_or_else(|| {
                    format!(
                        "GET {url}: effect {effect_ref} has no time at {}",
                        listing.at
                    )
                })?;
            effects.push(UpstreamEffect {
                effect_ref,
                key: listing.key.as_deref().and_then(|p| text_at(item, p)),
                at,
                arguments: mapped(&listing.arguments, item),
            });
        }
        match text_at(&page, &listing.next) {
            Some(next) if !items.is_empty() => cursor = Some(next),
            _ => return Ok(effects),
        }
    }
    Err(format!("GET {url}: more than {MAX_PAGES} pages"))
}
