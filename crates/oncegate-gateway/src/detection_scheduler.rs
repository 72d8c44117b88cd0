//! The detection scheduler: each duplicate rule runs at its frequency, on one gateway
//! at a time when several share a store (a work claim per rule and time slot, so a
//! slot runs once whichever replica takes it), with the upstream's own listing read
//! first when the capability declares one.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use oncegate_core::config::{Listing, UpstreamKind};
use oncegate_core::redact::Redactor;
use oncegate_engine::UpstreamEffect;
use oncegate_store::{LimitsRead, LimitsWrite, SharedWrite};
use serde_json::Value;

use crate::alerts::webhook_url;
use crate::state::AppState;
use crate::upstream::client::secrets;

/// Every this many ticks the scheduler refreshes `oncegate_limit_remaining`.
const LIMITS_GAUGE_TICKS: u64 = 15;

/// Sets `oncegate_limit_remaining{limit,principal}` from a limits status read.
pub fn gauge_limits(limits: &[oncegate_engine::LimitStatus]) {
    for l in limits {
        metrics::gauge!("oncegate_limit_remaining", "limit" => l.limit.clone(), "principal" => l.principal.clone().unwrap_or_default())
            .set(l.remaining as f64);
    }
}

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
    let mut ticks: u64 = 0;
    loop {
        ticker.tick().await;
        let gate = state.gate();
        // What is left of every budget, as a gauge, whether or not anyone reads
        // /v1/limits.
        if ticks.is_multiple_of(LIMITS_GAUGE_TICKS)
            && let Ok(limits) = gate.limits_status().await
        {
            gauge_limits(&limits);
        }
        ticks += 1;
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
            metrics::counter!("oncegate_detection_runs_total", "rule" => rule.name.clone())
                .increment(1);
            // Two slots back, so an effect recorded just before a slot began is seen.
            let since = rule
                .every
                .checked_mul(2)
                .and_then(|span| now.checked_sub(span).ok())
                .unwrap_or(Timestamp::MIN);
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

/// Reads every page of a listing (HTTP or MCP) since `since`.
pub async fn fetch_listing(
    http: &reqwest::Client,
    listing: &Listing,
    since: Timestamp,
) -> Result<Vec<UpstreamEffect>, String> {
    fetch_listing_with_progress(http, listing, since, &mut |_, _| {}).await
}

/// [`fetch_listing`], calling `progress(pages, effects)` after each page read (for
/// `oncegate detect`'s progress line on long scans). An error shows neither the
/// credentials the listing's URL and headers carry nor the URL's query.
pub async fn fetch_listing_with_progress(
    http: &reqwest::Client,
    listing: &Listing,
    since: Timestamp,
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> Result<Vec<UpstreamEffect>, String> {
    read_listing(http, listing, since, progress)
        .await
        .map_err(|e| listing_secrets(listing).text(&e))
}

fn listing_secrets(listing: &Listing) -> Redactor {
    secrets(std::iter::once(&listing.url).chain(listing.headers.values()))
}

async fn read_listing(
    http: &reqwest::Client,
    listing: &Listing,
    since: Timestamp,
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> Result<Vec<UpstreamEffect>, String> {
    let url = webhook_url(&listing.url);
    let what = match (&listing.kind, &listing.tool) {
        (UpstreamKind::Mcp, Some(tool)) => format!("{tool} at {url}"),
        _ => format!("GET {url}"),
    };
    let mut effects = Vec::new();
    let mut cursor: Option<Value> = None;
    for page_number in 1..=MAX_PAGES {
        let page = match listing.kind {
            UpstreamKind::Http => http_page(http, listing, &url, since, cursor.as_ref()).await,
            UpstreamKind::Mcp => mcp_page(http, listing, &url, since, cursor.as_ref()).await,
        }
        .map_err(|e| format!("{what}: {e}"))?;
        let items = page
            .pointer(&listing.items)
            .and_then(Value::as_array)
            .ok_or_else(|| format!("{what}: no array at {}", listing.items))?;
        for item in items {
            let Some(effect_ref) = text_at(item, &listing.effect_ref) else {
                return Err(format!("{what}: an effect without {}", listing.effect_ref));
            };
            let at = text_at(item, &listing.at)
                .and_then(|t| t.parse::<Timestamp>().ok())
                .ok_or_else(|| {
                    format!("{what}: effect {effect_ref} has no time at {}", listing.at)
                })?;
            effects.push(UpstreamEffect {
                effect_ref,
                key: listing.key.as_deref().and_then(|p| text_at(item, p)),
                at,
                arguments: mapped(&listing.arguments, item),
            });
        }
        progress(page_number, effects.len());
        match page.pointer(&listing.next) {
            // A cursor is a string or a number; anything else (absent, null) ends it.
            Some(next @ (Value::String(_) | Value::Number(_))) if !items.is_empty() => {
                cursor = Some(next.clone());
            }
            _ => return Ok(effects),
        }
    }
    Err(format!("{what}: more than {MAX_PAGES} pages"))
}

/// One page of an HTTP listing: `GET url?params&since=..&limit=..[&after=..]`.
async fn http_page(
    http: &reqwest::Client,
    listing: &Listing,
    url: &str,
    since: Timestamp,
    cursor: Option<&Value>,
) -> Result<Value, String> {
    let mut query: Vec<(String, String)> = listing
        .params
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    query.push((listing.since_param.clone(), since.to_string()));
    query.push((listing.limit_param.clone(), listing.page_size.to_string()));
    if let Some(c) = cursor {
        let text = match c {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        query.push((listing.cursor_param.clone(), text));
    }
    let page_url = reqwest::Url::parse_with_params(url, &query)
        .map_err(|e| format!("the listing URL is not a URL: {e}"))?;
    let mut request = http.get(page_url).timeout(listing.timeout);
    for (name, value) in &listing.headers {
        request = request.header(name, webhook_url(value));
    }
    let response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    response.json().await.map_err(|e| format!("not JSON: {e}"))
}

/// One page of an MCP listing: `tools/call` of the listing's read-only tool with the
/// static params, `since`, the page size (a number) and the previous page's cursor (as
/// the server gave it); the page is the result's structured content.
async fn mcp_page(
    http: &reqwest::Client,
    listing: &Listing,
    url: &str,
    since: Timestamp,
    cursor: Option<&Value>,
) -> Result<Value, String> {
    let tool = listing.tool.clone().ok_or("an MCP listing names no tool")?;
    let mut arguments: serde_json::Map<String, Value> = listing
        .params
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    arguments.insert(
        listing.since_param.clone(),
        Value::String(since.to_string()),
    );
    arguments.insert(listing.limit_param.clone(), Value::from(listing.page_size));
    if let Some(c) = cursor {
        arguments.insert(listing.cursor_param.clone(), c.clone());
    }
    let call = crate::upstream::mcp::ToolCall {
        url: url.to_owned(),
        headers: listing
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), webhook_url(v)))
            .collect(),
        tool,
        arguments,
        meta: Default::default(),
        timeout: listing.timeout,
        poolable: false,
        progress: None,
        secrets: listing_secrets(listing),
    };
    // A read: no running-call registry, no shutdown wait, nothing pooled.
    match crate::upstream::mcp::call_tool(http.clone(), call, None, None, None).await {
        (crate::upstream::mcp::CallEnd::Result(r), _) if r.is_error != Some(true) => {
            Ok(crate::tool_result::structured(&r))
        }
        (crate::upstream::mcp::CallEnd::Result(r), _) => Err(format!(
            "the tool answered an error: {}",
            crate::tool_result::first_text(&r)
        )),
        (crate::upstream::mcp::CallEnd::NotSent(e), _)
        | (crate::upstream::mcp::CallEnd::Rejected(e), _)
        | (crate::upstream::mcp::CallEnd::Unknown(e), _) => Err(e),
    }
}

/// The first retry's wait; each later one doubles, up to [`RETRY_CAP`].
const RETRY_BASE: Duration = Duration::from_secs(1);
/// How many due findings the re-read under a delivery's claim looks through.
const RE_READ: u32 = 100;
/// The longest wait between two deliveries of one finding.
const RETRY_CAP: Duration = Duration::from_secs(300);

/// Sends stored findings to the alert webhook: the findings table is the outbox, so a
/// finding is delivered at least once across restarts; the finding id is the delivery
/// id the receiver dedupes on; each delivery is one replica's at a time (a work
/// claim); a failed one is retried with backoff. With `alert_webhook_secret_env` every
/// delivery is signed (`Oncegate-Signature`, docs/webhooks.md); a named secret that is
/// unset sends nothing rather than unsigned events.
pub async fn deliver_loop(state: AppState, tick: Duration) {
    let gate = state.gate();
    let Some(template) = gate.registry().gateway.alert_webhook.clone() else {
        return;
    };
    let secret_env = gate.registry().gateway.alert_webhook_secret_env.clone();
    let owner = format!(
        "deliver-{}-{}",
        std::process::id(),
        Timestamp::now().as_nanosecond()
    );
    let mut ticker = tokio::time::interval(tick);
    loop {
        ticker.tick().await;
        let secret = match &secret_env {
            None => None,
            Some(name) => match std::env::var(name) {
                Ok(s) if !s.is_empty() => Some(s),
                _ => {
                    tracing::error!(variable = %name, "alert_webhook_secret_env names an unset variable: findings are not sent until it is set");
                    continue;
                }
            },
        };
        let now = gate.clock().now();
        let due = match gate.store().findings_due(now, 20).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "finding deliveries: the store is unavailable");
                continue;
            }
        };
        for f in due {
            if let Some(problem) = &f.problem {
                // Never sent as evidence: its row is not what the chain recorded.
                tracing::error!(alert = "store_integrity", finding = %f.id, %problem, "a finding's row does not match its audit seal; not delivering it");
                continue;
            }
            let work = format!("deliver:{}", f.id);
            if !matches!(
                gate.store()
                    .claim_work(&work, &owner, now, jiff::SignedDuration::from_secs(60))
                    .await,
                Ok(true)
            ) {
                continue;
            }
            // Read again under the claim: another replica may have delivered it (and
            // released its claim) since this tick's read, which would make this a
            // second delivery, or a retry before its backoff.
            // Its attempts are taken from this read too, so a failure another replica
            // recorded meanwhile lengthens the backoff. (Missing from the oldest due
            // rows only defers it to a later tick.)
            let fresh = gate
                .store()
                .findings_due(gate.clock().now(), RE_READ)
                .await
                .ok()
                .and_then(|d| d.into_iter().find(|x| x.id == f.id));
            let Some(f) = fresh else {
                let _ = gate.store().release_work(&work, &owner).await;
                continue;
            };
            let delivery = crate::webhook::Delivery {
                id: f.id.clone(),
                event: "finding".into(),
                body: f.body.clone().into_bytes(),
            };
            let url = webhook_url(&template);
            let attempts = f.attempts.saturating_add(1);
            let sent = crate::webhook::deliver(
                &state.http(),
                &url,
                secret.as_deref().map(str::as_bytes),
                &delivery,
                now.as_second(),
                Duration::from_secs(10),
            )
            .await;
            let recorded = match sent {
                Ok(()) => {
                    metrics::counter!("oncegate_finding_deliveries_total", "result" => "delivered")
                        .increment(1);
                    gate.store()
                        .finding_delivery(&f.id, attempts, Some(gate.clock().now()), None)
                        .await
                }
                Err(e) => {
                    metrics::counter!("oncegate_finding_deliveries_total", "result" => "failed")
                        .increment(1);
                    let wait = crate::webhook::backoff(attempts, RETRY_BASE, RETRY_CAP);
                    tracing::warn!(finding = %f.id, attempts, error = %e, retry_in = ?wait, "finding delivery failed");
                    let next = gate.clock().now()
                        + jiff::SignedDuration::try_from(wait).unwrap_or_default();
                    gate.store()
                        .finding_delivery(&f.id, attempts, None, Some(next))
                        .await
                }
            };
            if let Err(e) = recorded {
                tracing::warn!(finding = %f.id, error = %e, "finding delivery not recorded: it may be sent again");
            }
            let _ = gate.store().release_work(&work, &owner).await;
        }
    }
}
