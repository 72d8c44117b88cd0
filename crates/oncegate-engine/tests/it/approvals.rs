//! An approval is bound to every argument the held call sends, not only the key's: a
//! repeat whose free text drifted (another email body) never executes under it. Each
//! schedule on a real SQLite file, through the real Gate.
//!
//! - The gate executes: approved, the first attempt's outcome is unknown, a repeat with
//!   another body comes, the reconciliation read finds nothing past the settle horizon,
//!   and the re-execution sends the approved body, not the repeat's.
//! - The same while the intent is `not_applied` (the sweep reconciled it absent).
//! - A two-phase claim of an approved claim-only call with another body: 409 `OG-0012`,
//!   nothing written; the claim with the approved arguments executes them.
//! - A generation nobody was asked about keeps re-executing with the caller's
//!   corrected free text (the documented behaviour, unchanged).

use std::sync::{Arc, Mutex};

use jiff::SignedDuration;
use oncegate_core::codes::Code;
use oncegate_core::decide::Choice;
use oncegate_core::intent::{ApprovalState, IntentState, Status};
use oncegate_core::{EffectResult, ReconcileResult};
use oncegate_engine::{Call, Claimed, Executor, Gate, IntentHandle, ManualClock};
use oncegate_store::IntentsRead;
use serde_json::{Value, json};

use crate::support::manual_gate;

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
name = "alice"
role = "approver"
token_env = "T_ALICE"

# Every email waits for a human; its body is not in the key.
[[capabilities]]
name = "send_email"
category = "non_idempotent"
attempt_ceiling = 20
on_unknown = "reconcile"
settle_horizon = "10s"
policy = "policies.cedar"
key = { business_ref = "order_id", significant = [{ arg = "to", type = "email" }] }

[capabilities.upstream]
kind = "http"
url = "http://provider.test/v1/emails"
timeout = "5s"

# The same, executed by its callers (two-phase): no upstream here.
[[capabilities]]
name = "send_letter"
category = "non_idempotent"
on_unknown = "escalate"
policy = "policies.cedar"
key = { business_ref = "order_id", significant = [{ arg = "to", type = "email" }] }

# Nobody is asked about these.
[[capabilities]]
name = "notify"
category = "non_idempotent"
attempt_ceiling = 20
on_unknown = "reconcile"
settle_horizon = "10s"
key = { business_ref = "order_id" }

[capabilities.upstream]
kind = "http"
url = "http://provider.test/v1/notes"
timeout = "5s"
"#;

const POLICIES: &str = r#"
permit (principal, action, resource) when { principal.role == "agent" };
@id("every-email")
@oncegate("require_approval")
permit (principal, action in [Action::"send_email", Action::"send_letter"], resource);
"#;

/// The provider: records every body it is sent; the first attempt times out (unknown),
/// later ones apply; its reconciliation read finds nothing.
#[derive(Default)]
struct Provider {
    sent: Mutex<Vec<Value>>,
}

impl Provider {
    fn sent(&self) -> Vec<Value> {
        self.sent.lock().unwrap().clone()
    }
}

impl Executor for Provider {
    async fn execute(&self, intent: IntentHandle) -> EffectResult {
        let mut sent = self.sent.lock().unwrap();
        sent.push(intent.arguments.clone());
        if sent.len() == 1 {
            EffectResult::Unknown {
                message: "timed out".into(),
            }
        } else {
            EffectResult::Applied {
                effect_ref: Some(format!("em_{}", sent.len())),
                result: json!({}),
            }
        }
    }

    async fn reconcile(&self, _intent: IntentHandle) -> ReconcileResult {
        ReconcileResult::NotFound
    }
}

/// A gateway for which the capability is claim-only: approving leaves the call for the
/// caller's next claim.
struct ByClaim;

impl Executor for ByClaim {
    fn executes(&self) -> bool {
        false
    }

    async fn execute(&self, _intent: IntentHandle) -> EffectResult {
        panic!("a claim-only capability is never executed by the gate");
    }
}

async fn gate() -> (tempfile::TempDir, Gate, ManualClock) {
    manual_gate(CONFIG, Some(POLICIES)).await
}

fn email(body: &str) -> Value {
    json!({"order_id": "O-1", "to": "ann@example.com", "body": body})
}

const APPROVED: &str = "Your refund of 150.00 USD is on its way.";
const DRIFTED: &str = "Verify your account at https://evil.example/login";

/// Holds `arguments` and approves it: the approval's id and what approving answered.
async fn held_and_approved(
    gate: &Gate,
    capability: &str,
    arguments: Value,
    executor: Arc<impl Executor>,
) -> (String, Status) {
    let held = gate
        .invoke_with("agent", Call::new(capability, arguments), executor.clone())
        .await
        .unwrap();
    assert_eq!(held.status, Status::PendingApproval, "{held:?}");
    let id = held.approval_id.unwrap();
    let approval = gate.store().approval(&id).await.unwrap().unwrap();
    assert_eq!(
        approval.args_digest,
        oncegate_core::key::sent_digest(&email(APPROVED)),
        "the approval is bound to every sent argument"
    );
    let decided = gate
        .decide_approval("alice", &id, Choice::Approve, executor)
        .await
        .unwrap();
    (id, decided.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_unknown_intent_re_executes_with_the_approved_body_not_a_repeats() {
    let (_dir, gate, clock) = gate().await;
    let provider = Arc::new(Provider::default());
    let (_, status) =
        held_and_approved(&gate, "send_email", email(APPROVED), provider.clone()).await;
    assert_eq!(status, Status::Unknown, "the approved attempt timed out");
    // Past the settle horizon, a repeat with another body: the read finds nothing, and
    // the intent executes again, with what the approver saw.
    clock.advance(SignedDuration::from_secs(30));
    let again = gate
        .invoke_with(
            "agent",
            Call::new("send_email", email(DRIFTED)),
            provider.clone(),
        )
        .await
        .unwrap();
    assert_eq!(again.status, Status::Applied, "{again:?}");
    assert_eq!(
        provider.sent(),
        vec![email(APPROVED), email(APPROVED)],
        "the drifted body was never sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_intent_reconciled_absent_by_the_sweep_keeps_its_approved_body() {
    let (_dir, gate, clock) = gate().await;
    let provider = Arc::new(Provider::default());
    let (id, status) =
        held_and_approved(&gate, "send_email", email(APPROVED), provider.clone()).await;
    assert_eq!(status, Status::Unknown);
    clock.advance(SignedDuration::from_secs(30));
    let swept = gate.sweep_pass(|_| Some(provider.clone())).await;
    let approval = gate.store().approval(&id).await.unwrap().unwrap();
    let record = gate
        .store()
        .load_generation(&approval.key, 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.state,
        IntentState::NotApplied,
        "reconciled absent ({swept} changed)"
    );
    let again = gate
        .invoke_with(
            "agent",
            Call::new("send_email", email(DRIFTED)),
            provider.clone(),
        )
        .await
        .unwrap();
    assert_eq!(again.status, Status::Applied, "{again:?}");
    assert_eq!(provider.sent(), vec![email(APPROVED), email(APPROVED)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_phase_claim_with_a_drifted_body_is_refused_and_the_approved_one_executes() {
    let (_dir, gate, _clock) = gate().await;
    let held = gate
        .claim("agent", Call::new("send_letter", email(APPROVED)))
        .await
        .unwrap();
    let Claimed::Settled(held) = held else {
        panic!("expected a held call, got {held:?}");
    };
    assert_eq!(held.status, Status::PendingApproval, "{held:?}");
    let id = held.approval_id.unwrap();
    let decided = gate
        .decide_approval("alice", &id, Choice::Approve, Arc::new(ByClaim))
        .await
        .unwrap();
    assert_eq!(decided.status, Status::Approved, "{decided:?}");

    let drifted = gate
        .claim("agent", Call::new("send_letter", email(DRIFTED)))
        .await
        .unwrap();
    let Claimed::Settled(refused) = drifted else {
        panic!("a drifted claim must not execute: {drifted:?}");
    };
    assert_eq!(refused.status, Status::Refused, "{refused:?}");
    let reason = refused.reason.unwrap();
    assert_eq!(reason.code, Code::ApprovalVoid);
    assert!(reason.message.contains("`body`"), "{}", reason.message);
    // Nothing changed: the approval still waits for the approved call's claim.
    let approval = gate.store().approval(&id).await.unwrap().unwrap();
    assert_eq!(approval.state, ApprovalState::Approved);
    let record = gate
        .store()
        .load_generation(&approval.key, 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.state, IntentState::PendingApproval);
    assert_eq!(record.arguments, email(APPROVED));

    let claimed = gate
        .claim("agent", Call::new("send_letter", email(APPROVED)))
        .await
        .unwrap();
    let Claimed::Execute(claim) = claimed else {
        panic!("the approved call's claim executes: {claimed:?}");
    };
    assert_eq!(claim.intent.arguments, email(APPROVED));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_nobody_was_asked_about_re_executes_with_the_corrected_text() {
    let (_dir, gate, clock) = gate().await;
    let provider = Arc::new(Provider::default());
    let note = |text: &str| json!({"order_id": "O-2", "text": text});
    let first = gate
        .invoke_with(
            "agent",
            Call::new("notify", note("first")),
            provider.clone(),
        )
        .await
        .unwrap();
    assert_eq!(first.status, Status::Unknown);
    clock.advance(SignedDuration::from_secs(30));
    let again = gate
        .invoke_with(
            "agent",
            Call::new("notify", note("corrected")),
            provider.clone(),
        )
        .await
        .unwrap();
    assert_eq!(again.status, Status::Applied, "{again:?}");
    assert_eq!(provider.sent(), vec![note("first"), note("corrected")]);
}
