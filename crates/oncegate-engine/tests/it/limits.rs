//! Limits and detection on a real SQLite file: a budget reserved atomically with the
//! claim (parallel subagents cannot each spend the last of it), released by a failed
//! effect, rolling with the window and surviving a restart; a duplicate found through
//! a broken recipe, held and cleared; an upstream effect that bypassed the gateway; two
//! effects under one intent's key, which doubt the provider's keys.

use std::sync::Arc;

use jiff::SignedDuration;
use oncegate_core::EffectResult;
use oncegate_core::codes::Code;
use oncegate_core::intent::Status;
use oncegate_engine::{Call, Claim, Claimed, Clock, Doubt, Gate, ManualClock, UpstreamEffect};
use oncegate_store::IntentsRead;
use serde_json::json;

use crate::support::{gate_in, manual_gate};

/// `charge` is keyed on a free-text memo too (the broken recipe detection must catch),
/// with a budget of 37.50 USD per agent per 24 h: room for three charges of 12.50.
const CONFIG: &str = r#"
[gateway]
tenant = "acme"

[store]
url = "sqlite://oncegate.db"

[[principals]]
name = "agent"
role = "agent"
token_env = "T_AGENT"

[[principals]]
name = "ops"
role = "admin"
token_env = "T_OPS"

[[capabilities]]
name = "charge"
category = "keyed"
attempt_ceiling = 100
key = { business_ref = "order_id", significant = [{ arg = "amount", type = "money", default_currency = "USD" }, { arg = "memo", type = "text" }] }

[capabilities.duplicates]
on = ["business_ref", "amount"]
within = "24h"
every = "1s"
escalation = "hold"

[[capabilities.limits]]
name = "charge_budget"
argument = "amount"
max = "37.50"
currency = "USD"
window = "24h"
per = "principal"

[[capabilities]]
name = "email"
category = "non_idempotent"
on_unknown = "escalate"
key = { business_ref = "order_id", significant = [{ arg = "to", type = "email" }] }

[[capabilities.limits]]
max = 2
window = "1h"
"#;

async fn world() -> (tempfile::TempDir, Gate, ManualClock) {
    manual_gate(CONFIG, None).await
}

fn charge(order: &str, memo: &str) -> Call {
    Call::new(
        "charge",
        json!({"order_id": order, "amount": "12.50", "memo": memo}),
    )
}

async fn claim(gate: &Gate, call: Call) -> Result<Claim, oncegate_core::intent::Outcome> {
    match gate.claim("agent", call).await.unwrap() {
        Claimed::Execute(c) => Ok(c),
        Claimed::Settled(o) => Err(o),
        Claimed::Read(_) => panic!("not a read"),
    }
}

fn applied(id: &str) -> EffectResult {
    EffectResult::Applied {
        effect_ref: Some(id.into()),
        result: json!({"id": id}),
    }
}

#[tokio::test]
async fn sixteen_parallel_charges_with_room_for_three_execute_exactly_three() {
    let (_dir, gate, _clock) = world().await;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let gate = gate.clone();
            tokio::spawn(async move { claim(&gate, charge(&format!("o-{i}"), "x")).await })
        })
        .collect();
    let mut claims = Vec::new();
    let mut refused = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(c) => claims.push(c),
            Err(o) => {
                assert_eq!(o.status, Status::Refused, "{o:?}");
                assert_eq!(
                    o.reason.as_ref().map(|r| r.code),
                    Some(Code::LimitReached),
                    "{o:?}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!((claims.len(), refused), (3, 13));
    let status = gate.limits_status().await.unwrap();
    let mine = status
        .iter()
        .find(|s| s.limit == "charge_budget" && s.principal.as_deref() == Some("agent"))
        .unwrap();
    assert_eq!((mine.used, mine.remaining), (3750, 0));

    // A repeat of a claimed intent reserves nothing more (it is in flight).
    let again = claim(&gate, charge("o-0", "x")).await;
    assert!(again.is_err());
    // A failed effect releases its reservation: one more charge fits.
    let first = claims.remove(0);
    let failed = EffectResult::Failed {
        result: json!({"error": "card_declined"}),
        message: "card declined".into(),
    };
    gate.complete(&first, failed).await.unwrap();
    for c in &claims {
        gate.complete(c, applied(&format!("ch_{}", c.generation)))
            .await
            .unwrap();
    }
    let next = claim(&gate, charge("o-new", "x"))
        .await
        .expect("the released budget fits one more");
    gate.complete(&next, applied("ch_new")).await.unwrap();
    assert!(claim(&gate, charge("o-newer", "x")).await.is_err());
}

#[tokio::test]
async fn budgets_roll_with_the_window_and_survive_a_restart() {
    let (dir, gate, clock) = world().await;
    for i in 0..2 {
        let c = claim(
            &gate,
            Call::new(
                "email",
                json!({"order_id": format!("e-{i}"), "to": "a@x.com"}),
            ),
        )
        .await
        .unwrap();
        gate.complete(&c, applied(&format!("em_{i}")))
            .await
            .unwrap();
    }
    let third = Call::new("email", json!({"order_id": "e-2", "to": "a@x.com"}));
    assert!(claim(&gate, third.clone()).await.is_err());

    // A new process on the same store: the budget is in the store, not in memory.
    drop(gate);
    let gate = gate_in(dir.path(), Arc::new(clock.clone())).await;
    let refused = claim(&gate, third.clone()).await.unwrap_err();
    assert_eq!(refused.reason.map(|r| r.code), Some(Code::LimitReached));

    // Past the window, the old emails no longer count.
    clock.advance(SignedDuration::from_mins(61));
    claim(&gate, third).await.expect("the window rolled");
}

#[tokio::test]
async fn a_broken_recipe_duplicate_is_found_once_held_and_cleared() {
    let (_dir, gate, clock) = world().await;
    let since = clock.now();
    // The same order and amount, re-planned with a new memo: the recipe (memo in the
    // key) makes it a second intent, and the provider charges twice.
    for (memo, id) in [("first try", "ch_a"), ("Retrying the charge", "ch_b")] {
        let c = claim(&gate, charge("A-1", memo)).await.unwrap();
        gate.complete(&c, applied(id)).await.unwrap();
    }
    // A legitimate distinct charge raises nothing.
    let c = claim(&gate, charge("B-1", "x")).await.unwrap();
    gate.complete(&c, applied("ch_c")).await.unwrap();

    let run = gate.detect("charge", since, Vec::new()).await.unwrap();
    assert_eq!(run.raised.len(), 1, "{:?}", run.raised);
    let finding = &run.raised[0];
    assert_eq!(finding["kind"], "duplicate");
    assert_eq!(finding["effects"].as_array().unwrap().len(), 2);
    // Run again: the same finding is not raised twice.
    let again = gate.detect("charge", since, Vec::new()).await.unwrap();
    assert_eq!((again.raised.len(), again.known.len()), (0, 1));
    assert_eq!(gate.findings(10).await.unwrap().len(), 1);

    // The hold stops the next call on that order (another memo, another amount).
    let holds = gate.holds().await.unwrap();
    assert_eq!(holds.len(), 1);
    assert_eq!(
        (holds[0].on.as_str(), holds[0].value.as_str()),
        ("business_ref", "A-1")
    );
    let stopped = claim(&gate, charge("A-1", "third")).await.unwrap_err();
    assert_eq!(
        stopped.reason.as_ref().map(|r| r.code),
        Some(Code::Held),
        "{stopped:?}"
    );
    // Other orders go on.
    let other = claim(
        &gate,
        Call::new("email", json!({"order_id": "A-1", "to": "b@x.com"})),
    )
    .await;
    assert!(other.is_ok());

    let cleared = gate
        .clear_hold("ops", &holds[0].id, "refunded the duplicate")
        .await
        .unwrap();
    assert!(cleared.is_some());
    assert!(gate.holds().await.unwrap().is_empty());
    assert!(
        gate.clear_hold("ops", &holds[0].id, "again")
            .await
            .unwrap()
            .is_none()
    );
    // (The three charges used the day's budget: let it roll first.)
    clock.advance(SignedDuration::from_hours(25));
    claim(&gate, charge("A-1", "third"))
        .await
        .expect("the hold is cleared");
}

#[tokio::test]
async fn an_effect_that_bypassed_the_gateway_is_a_bypass_finding() {
    let (_dir, gate, clock) = world().await;
    let since = clock.now();
    let c = claim(&gate, charge("C-1", "x")).await.unwrap();
    let key = c.intent.key.clone();
    gate.complete(&c, applied("ch_1")).await.unwrap();
    let upstream = |id: &str, order: &str, key: Option<&str>| UpstreamEffect {
        effect_ref: id.into(),
        key: key.map(str::to_owned),
        at: clock.now(),
        arguments: json!({"order_id": order, "amount": {"minor": 1250, "currency": "USD"}, "memo": ""}),
    };
    let listed = vec![
        // The gateway's own charge, as the provider lists it: not a bypass.
        upstream("ch_1", "C-1", Some(&key)),
        // Someone charged C-1 again with a direct credential.
        upstream("ch_direct", "C-1", None),
    ];
    let run = gate.detect("charge", since, listed).await.unwrap();
    assert_eq!(run.raised.len(), 1, "{:?}", run.raised);
    assert_eq!(run.raised[0]["kind"], "bypass");
    assert_eq!(run.raised[0]["effects"].as_array().unwrap().len(), 2);
    let stopped = claim(&gate, charge("C-1", "y")).await.unwrap_err();
    assert_eq!(stopped.reason.map(|r| r.code), Some(Code::Held));
}

#[tokio::test]
async fn two_effects_under_one_key_doubt_the_providers_keys_until_an_admin_clears_it() {
    let (_dir, gate, clock) = world().await;
    let since = clock.now();
    let c = claim(&gate, charge("K-1", "x")).await.unwrap();
    let key = c.intent.key.clone();
    gate.complete(&c, applied("ch_1")).await.unwrap();
    let listed = |id: &str| UpstreamEffect {
        effect_ref: id.into(),
        key: Some(key.clone()),
        at: clock.now(),
        arguments: json!({"order_id": "K-1", "amount": {"minor": 1250, "currency": "USD"}, "memo": "x"}),
    };
    // The provider lists a second charge under the intent's one key.
    gate.detect("charge", since, vec![listed("ch_1"), listed("ch_2")])
        .await
        .unwrap();
    let doubts = gate.doubts().await.unwrap();
    assert_eq!(
        doubts
            .iter()
            .map(|d| (d.capability.as_str(), d.doubt))
            .collect::<Vec<_>>(),
        [("charge", Doubt::KeysIgnored)]
    );
    let findings = gate.findings(10).await.unwrap();
    assert!(
        findings
            .iter()
            .any(|f| f["rule"] == "keys_ignored" && f["effects"] == json!(["ch_1", "ch_2"])),
        "{findings:?}"
    );

    // `keyed` retries an unknown outcome at once with its key; treated as
    // `non_idempotent` (no read to ask), the repeat goes to a human instead.
    let unknown = EffectResult::Unknown {
        message: "timed out".into(),
    };
    let c = claim(&gate, charge("K-2", "x")).await.unwrap();
    gate.complete(&c, unknown.clone()).await.unwrap();
    let held = claim(&gate, charge("K-2", "x")).await.unwrap_err();
    assert_eq!(held.status, Status::PendingApproval, "{held:?}");

    // Only an admin clears it, and then keys are trusted again.
    assert!(
        gate.clear_doubt("agent", "charge", Doubt::KeysIgnored, "no")
            .await
            .is_err()
    );
    let cleared = gate
        .clear_doubt("ops", "charge", Doubt::KeysIgnored, "provider fixed")
        .await
        .unwrap();
    assert!(cleared.is_some());
    assert!(gate.doubts().await.unwrap().is_empty());
    let c = claim(&gate, charge("K-3", "x")).await.unwrap();
    gate.complete(&c, unknown).await.unwrap();
    assert!(
        claim(&gate, charge("K-3", "x")).await.is_ok(),
        "retried at once with its key"
    );
}

#[tokio::test]
async fn a_wider_run_over_reported_effects_raises_nothing_and_keeps_a_cleared_hold_cleared() {
    let (_dir, gate, clock) = world().await;
    let t0 = clock.now();
    let c = claim(&gate, charge("C-2", "x")).await.unwrap();
    let key = c.intent.key.clone();
    gate.complete(&c, applied("ch_own")).await.unwrap();
    let listed = |id: &str, key: Option<&str>, at| UpstreamEffect {
        effect_ref: id.into(),
        key: key.map(str::to_owned),
        at,
        arguments: json!({"order_id": "C-2", "amount": {"minor": 1250, "currency": "USD"}, "memo": ""}),
    };
    let own = listed("ch_own", Some(&key), t0);
    let u0 = listed("ch_direct_0", None, t0);
    let first = gate
        .detect("charge", t0, vec![own.clone(), u0.clone()])
        .await
        .unwrap();
    assert_eq!(first.raised.len(), 1, "{:?}", first.raised);
    let clear = |gate: Gate| async move {
        let hold = gate.holds().await.unwrap().remove(0);
        gate.clear_hold("ops", &hold.id, "refunded")
            .await
            .unwrap()
            .unwrap();
    };
    clear(gate.clone()).await;

    // An hour later a second direct charge: the scheduler's span lists only it. A new
    // bypass: raised, and held again.
    clock.advance(SignedDuration::from_hours(1));
    let t1 = clock.now();
    let u1 = listed("ch_direct_1", None, t1);
    let second = gate.detect("charge", t1, vec![u1.clone()]).await.unwrap();
    assert_eq!(second.raised.len(), 1, "{:?}", second.raised);
    assert_eq!(gate.holds().await.unwrap().len(), 1);
    clear(gate.clone()).await;

    // `oncegate detect --since` over both spans groups all three effects: every one was
    // reported, so nothing is raised and the cleared hold stays cleared.
    let wide = gate.detect("charge", t0, vec![own, u0, u1]).await.unwrap();
    assert!(wide.raised.is_empty(), "{:?}", wide.raised);
    assert_eq!(wide.known.len(), 1);
    assert!(
        gate.holds().await.unwrap().is_empty(),
        "a cleared hold is not put back"
    );
    assert_eq!(gate.findings(10).await.unwrap().len(), 2);
}

/// A payout whose daily budget sends an over-limit call to an approver instead of
/// refusing it, and an email rule that holds the recipient (not the order).
const REVIEWED: &str = r#"
[gateway]
tenant = "acme"

[store]
url = "sqlite://oncegate.db"

[[principals]]
name = "agent"
role = "agent"
token_env = "T_AGENT"

[[principals]]
name = "alice"
role = "approver"
token_env = "T_ALICE"

[[principals]]
name = "ops"
role = "admin"
token_env = "T_OPS"

[[capabilities]]
name = "payout"
category = "keyed"
attempt_ceiling = 100
key = { business_ref = "payout_id", significant = [{ arg = "amount", type = "money", default_currency = "USD" }] }

[[capabilities.limits]]
name = "payout_budget"
argument = "amount"
max = "100.00"
currency = "USD"
window = "24h"
over = "require_approval"

[[capabilities]]
name = "email"
category = "non_idempotent"
on_unknown = "escalate"
key = { business_ref = "order_id", significant = [{ arg = "to", type = "email" }, { arg = "template", type = "enum", values = ["receipt", "notice"] }] }

[capabilities.duplicates]
on = ["to", "template"]
within = "1h"
escalation = "hold"
hold = "to"
"#;

/// Counts executions; every one is applied.
struct Counting(std::sync::atomic::AtomicUsize);

impl oncegate_engine::Executor for Counting {
    async fn execute(&self, _intent: oncegate_engine::IntentHandle) -> EffectResult {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        applied(&format!("fx_{n}"))
    }
}

async fn reviewed() -> (tempfile::TempDir, Gate, ManualClock, Arc<Counting>) {
    let (dir, gate, clock) = manual_gate(REVIEWED, None).await;
    (dir, gate, clock, Arc::new(Counting(Default::default())))
}

#[tokio::test]
async fn an_over_limit_call_waits_for_an_approver_who_lets_it_through_once() {
    let (_dir, gate, _clock, exec) = reviewed().await;
    let payout =
        |id: &str, amount: &str| Call::new("payout", json!({"payout_id": id, "amount": amount}));
    let first = gate
        .invoke_with("agent", payout("p-1", "80.00"), exec.clone())
        .await
        .unwrap();
    assert_eq!(first.status, Status::Applied, "{first:?}");
    // 80 + 30 > 100: not refused, held for a human, naming the limit.
    let over = gate
        .invoke_with("agent", payout("p-2", "30.00"), exec.clone())
        .await
        .unwrap();
    assert_eq!(over.status, Status::PendingApproval, "{over:?}");
    let id = over.approval_id.clone().unwrap();
    let approval = gate.store().approval(&id).await.unwrap().unwrap();
    assert!(
        approval.detail.contains("limit:payout_budget"),
        "the approval says which limit: {approval:?}"
    );
    // A repeat while it waits is the same approval; nothing runs.
    let repeat = gate
        .invoke_with("agent", payout("p-2", "30"), exec.clone())
        .await
        .unwrap();
    assert_eq!(repeat.approval_id.as_deref(), Some(id.as_str()));
    assert_eq!(exec.0.load(std::sync::atomic::Ordering::SeqCst), 1);

    let approved = gate
        .decide_approval(
            "alice",
            &id,
            oncegate_core::decide::Choice::Approve,
            exec.clone(),
        )
        .await
        .unwrap();
    assert_eq!(approved.status, Status::Applied, "{approved:?}");
    let again = gate
        .decide_approval(
            "alice",
            &id,
            oncegate_core::decide::Choice::Approve,
            exec.clone(),
        )
        .await
        .unwrap();
    assert_eq!(again.status, Status::Replayed);
    assert_eq!(
        exec.0.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "approved once, executed once"
    );
    // The approved payout counts: the budget shows it spent past its max.
    let status = gate.limits_status().await.unwrap();
    let budget = status.iter().find(|s| s.limit == "payout_budget").unwrap();
    assert_eq!((budget.used, budget.remaining), (11_000, 0), "{budget:?}");
    // And the next over-limit call waits too.
    let next = gate
        .invoke_with("agent", payout("p-3", "1.00"), exec.clone())
        .await
        .unwrap();
    assert_eq!(next.status, Status::PendingApproval, "{next:?}");
}

#[tokio::test]
async fn a_hold_on_the_recipient_stops_mail_to_that_address_only() {
    let (_dir, gate, clock, exec) = reviewed().await;
    let since = clock.now();
    let email = |order: &str, to: &str| {
        Call::new(
            "email",
            json!({"order_id": order, "to": to, "template": "receipt"}),
        )
    };
    // Two receipts to one address for two orders: the key (per order) let both through.
    for order in ["o-1", "o-2"] {
        let o = gate
            .invoke_with("agent", email(order, "Ann@Example.com"), exec.clone())
            .await
            .unwrap();
        assert_eq!(o.status, Status::Applied, "{o:?}");
    }
    let o = gate
        .invoke_with("agent", email("o-3", "bob@example.com"), exec.clone())
        .await
        .unwrap();
    assert_eq!(o.status, Status::Applied);
    let run = gate.detect("email", since, Vec::new()).await.unwrap();
    assert_eq!(run.raised.len(), 1, "{:?}", run.raised);
    let holds = gate.holds().await.unwrap();
    assert_eq!(holds.len(), 1, "{holds:?}");
    assert_eq!(
        (holds[0].on.as_str(), holds[0].value.as_str()),
        ("to", "Ann@example.com"),
        "held on the normalised recipient (the domain's case folded)"
    );
    // Any order, any spelling of that address: held. Another address: goes on.
    let held = gate
        .invoke_with("agent", email("o-9", " Ann@EXAMPLE.com"), exec.clone())
        .await
        .unwrap();
    assert_eq!(
        (held.status, held.reason.as_ref().map(|r| r.code)),
        (Status::Refused, Some(Code::Held)),
        "{held:?}"
    );
    let other = gate
        .invoke_with("agent", email("o-9", "carol@example.com"), exec.clone())
        .await
        .unwrap();
    assert_eq!(other.status, Status::Applied);
    assert_eq!(exec.0.load(std::sync::atomic::Ordering::SeqCst), 4);
    gate.clear_hold("ops", &holds[0].id, "ann asked for both")
        .await
        .unwrap()
        .unwrap();
    let after = gate
        .invoke_with("agent", email("o-9", "Ann@example.com"), exec.clone())
        .await
        .unwrap();
    assert_eq!(after.status, Status::Applied, "{after:?}");
}
