//! Cedar policies: allow, deny, require-approval annotations, schema validation.

use oncegate_core::config::Role;
use oncegate_core::key::{CallScope, derive};
use oncegate_core::policy::PolicyVerdict;
use serde_json::{Value, json};

use crate::payments;

fn verdict(cap: &str, principal: &str, role: Role, args: Value) -> PolicyVerdict {
    let registry = payments();
    let cap = registry.capability(cap).unwrap();
    let d = derive(
        "acme",
        principal,
        cap,
        &args,
        &CallScope::default(),
        jiff::Timestamp::UNIX_EPOCH,
        &registry.gateway.time_zone,
    )
    .unwrap();
    cap.policy.as_ref().unwrap().evaluate(
        principal,
        role,
        "acme",
        cap,
        d.business_ref.as_deref(),
        &d.normalised,
    )
}

#[test]
fn refunds_above_the_limit_require_approval() {
    assert_eq!(
        verdict(
            "refund",
            "planner",
            Role::Agent,
            json!({"order_id": "A-1", "amount": "100.00"})
        ),
        PolicyVerdict::Allow
    );
    assert!(matches!(
        verdict("refund", "planner", Role::Agent, json!({"order_id": "A-1", "amount": "100.01"})),
        PolicyVerdict::RequireApproval { policies } if policies == vec!["refund-over-limit".to_owned()]
    ));
}

#[test]
fn forbid_wins_and_non_agents_are_denied() {
    assert!(matches!(
        verdict(
            "charge_card",
            "planner",
            Role::Agent,
            json!({"order_id": "A-1", "amount": "5000.01"})
        ),
        PolicyVerdict::Deny { .. }
    ));
    assert_eq!(
        verdict(
            "charge_card",
            "planner",
            Role::Agent,
            json!({"order_id": "A-1", "amount": "5000.00"})
        ),
        PolicyVerdict::Allow
    );
    assert!(matches!(
        verdict(
            "charge_card",
            "alice",
            Role::Approver,
            json!({"order_id": "A-1", "amount": "1"})
        ),
        PolicyVerdict::Deny { .. }
    ));
}

#[test]
fn policies_are_validated_against_the_generated_schema() {
    let dir = tempdir();
    let config = std::fs::read_to_string(crate::examples().join("payments.toml")).unwrap();
    std::fs::write(dir.join("oncegate.toml"), &config).unwrap();
    // `context.amout` does not exist on refund: strict validation must refuse it.
    std::fs::write(
        dir.join("policies.cedar"),
        "permit (principal, action == Action::\"refund\", resource) when { context.amout > 1 };",
    )
    .unwrap();
    let text = std::fs::read_to_string(dir.join("oncegate.toml")).unwrap();
    let err = oncegate_core::Registry::parse(&dir.join("oncegate.toml"), &text, &crate::TestEnv)
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("policies.cedar") && msg.contains("amout"),
        "{msg}"
    );
    assert!(
        err.0[0].line > 0,
        "the error points at the capability's policy line: {msg}"
    );
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "oncegate-policy-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
