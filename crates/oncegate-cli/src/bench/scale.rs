//! The store at scale: what a gateway costs when its store already holds many intents.
//!
//! A second gateway's store is filled with settled intents straight through the store
//! API (one commit each, with its audit record, as many in flight as the writer can
//! batch), then that gateway and a third on an empty store are measured side by side:
//! write throughput, the unknown-intents listing the sweep and `/metrics` run, the CPU
//! an idle gateway burns, and `audit verify`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use jiff::{SignedDuration, Timestamp};
use oncegate_core::audit::{AuditEvent, AuditKind};
use oncegate_core::intent::{IntentRecord, IntentState};
use oncegate_core::key::IntentKey;
use oncegate_store::{Commit, IntentsWrite, OpenMode, Store};
use serde_json::json;

use super::http::HttpTarget;
use super::world::{ADMIN_TOKEN, Service, cpu_time};

/// Committers filling the store at once (the SQLite writer batches what is waiting).
const FILLERS: u64 = 256;

/// A settled `charge_card` intent, as the gateway would have recorded it, and the audit
/// event that wrote it. Times spread over the day before `now`.
fn settled(n: u64, now: Timestamp) -> Commit {
    let key = IntentKey::from_hex(format!("{n:064x}"));
    let at = now - SignedDuration::from_secs((n % 86_400) as i64 + 1);
    let order = format!("F-{n}");
    let charge = format!("ch_fill_{n}");
    let record = IntentRecord {
        key: key.clone(),
        generation: 1,
        capability: "charge_card".into(),
        tenant: "bench".into(),
        principal: "agent".into(),
        run_id: None,
        step_id: None,
        business_ref: Some(order.clone()),
        cross_key: Some(IntentKey::from_hex(format!("{:064x}", n | 1 << 63))),
        args_digest: format!("{n:064x}"),
        normalised: json!({"amount": {"currency": "USD", "minor": "1250"}}),
        arguments: json!({"order_id": order, "amount": "12.50"}),
        state: IntentState::Applied,
        attempts: 1,
        executions: 1,
        lease: None,
        effect_ref: Some(charge.clone()),
        result: Some(json!({"id": charge, "amount_minor": 1250, "currency": "USD"})),
        error: None,
        approval_id: None,
        breaker_tripped: false,
        settled_at: Some(at),
        attempt_ended_at: Some(at),
        not_sent_reported: false,
        created_at: at,
        updated_at: at,
        version: 0,
    };
    let event = AuditEvent {
        at,
        kind: AuditKind::Effect,
        key: Some(key),
        generation: 1,
        capability: Some("charge_card".into()),
        actor: "agent".into(),
        run_id: None,
        from: None,
        to: Some(IntentState::Applied),
        status: None,
        code: None,
        detail: json!({"effect_ref": format!("ch_fill_{n}")}),
    };
    Commit::new(Some(record), None, event)
}

/// Writes `count` settled intents into the store `config` names; answers the rate.
pub async fn fill(config: &Path, from: u64, count: u64, bar: &ProgressBar) -> anyhow::Result<f64> {
    let registry = crate::registry::load(config)?;
    let store = crate::registry::open_store_with(&registry, OpenMode::Existing).await?;
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(from));
    let now = Timestamp::now();
    let fillers: Vec<_> = (0..FILLERS.min(count.max(1)))
        .map(|_| {
            let store: Store = store.clone();
            let next = next.clone();
            let bar = bar.clone();
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= from + count {
                        return Ok::<(), anyhow::Error>(());
                    }
                    store.commit(settled(n, now)).await?;
                    if n % 1000 == 999 {
                        bar.set_message(format!(
                            "filling a store: {} of {count} intents",
                            n + 1 - from
                        ));
                    }
                }
            })
        })
        .collect();
    for f in fillers {
        f.await??;
    }
    let rate = count as f64 / started.elapsed().as_secs_f64();
    store.close().await;
    Ok(rate)
}

/// `GET /v1/intents?state=unknown` on a gateway: what the sweep and `/metrics` run.
pub fn unknown_listing(gateway: &Service) -> anyhow::Result<HttpTarget> {
    Ok(
        HttpTarget::get(&format!("{}/v1/intents?state=unknown", gateway.url))?
            .header("authorization", &format!("Bearer {ADMIN_TOKEN}"))?
            .expect(r#""intents""#),
    )
}

/// The share of one core each gateway burns while nobody calls it, over `window`
/// (long enough to include its background sweep, which ticks every 5 s).
pub async fn idle_cpu(gateways: &[&Service], window: Duration) -> Vec<Option<f64>> {
    let before: Vec<_> = gateways
        .iter()
        .map(|g| g.pid().and_then(cpu_time))
        .collect();
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let elapsed = started.elapsed().as_secs_f64();
    gateways
        .iter()
        .zip(before)
        .map(|(g, b)| {
            let after = g.pid().and_then(cpu_time)?;
            Some((after - b?).as_secs_f64() / elapsed)
        })
        .collect()
}
