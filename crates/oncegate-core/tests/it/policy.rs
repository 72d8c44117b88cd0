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

/// A registry with one capability over money, a set, an integer and a string, and
/// `policy` as its Cedar file, parsed in a directory of its own.
fn with_policy(policy: &str) -> oncegate_core::Registry {
    let dir = tempdir();
    let config = r#"
[gateway]
tenant = "acme"
time_zone = "UTC"

[store]
url = "sqlite://oncegate.db"

[[principals]]
name = "planner"
role = "agent"
token_env = "ONCEGATE_TOKEN_PLANNER"

[[capabilities]]
name = "ship"
category = "keyed"
policy = "policies.cedar"

[capabilities.key]
business_ref = "order_id"
significant = [
  { arg = "amount", type = "money", currency_arg = "currency", default_currency = "USD" },
  { arg = "tags", type = "set" },
  { arg = "boxes", type = "integer" },
  { arg = "carrier", type = "text" },
]

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:9/ship"
effect_ref = "/id"
"#;
    std::fs::write(dir.join("oncegate.toml"), config).unwrap();
    std::fs::write(dir.join("policies.cedar"), policy).unwrap();
    oncegate_core::Registry::parse(&dir.join("oncegate.toml"), config, &crate::TestEnv)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Evaluates `ship` on already normalised values (what a store or a caller could hand
/// over that the normalisers would never produce).
fn ship_verdict(registry: &oncegate_core::Registry, normalised: Value) -> PolicyVerdict {
    let cap = registry.capability("ship").unwrap();
    let Value::Object(normalised) = normalised else {
        unreachable!()
    };
    cap.policy.as_ref().unwrap().evaluate(
        "planner",
        Role::Agent,
        "acme",
        cap,
        Some("A-1"),
        &normalised,
    )
}

const SHIP_POLICY: &str = r#"
permit (principal, action == Action::"ship", resource)
when {
  context.amount <= 10000 && context.amount_currency == "USD" &&
  !(context.tags.contains("hazmat")) && context.boxes <= 3 && context.carrier == "post"
};
"#;

fn shipment() -> Value {
    json!({
        "amount": {"minor": "2500", "currency": "USD"},
        "tags": ["fragile", "gift"],
        "boxes": "2",
        "carrier": "post",
    })
}

/// Sets, currencies and integers reach Cedar typed: each attribute decides.
#[test]
fn sets_currency_and_integers_reach_the_policy_typed() {
    let registry = with_policy(SHIP_POLICY);
    assert_eq!(ship_verdict(&registry, shipment()), PolicyVerdict::Allow);
    let changed = |path: &str, value: Value| {
        let mut v = shipment();
        v[path] = value;
        ship_verdict(&registry, v)
    };
    let denied = |v: PolicyVerdict| matches!(v, PolicyVerdict::Deny { .. });
    assert!(
        denied(changed("tags", json!(["gift", "hazmat"]))),
        "a set member"
    );
    assert!(
        denied(changed(
            "amount",
            json!({"minor": "2500", "currency": "EUR"})
        )),
        "a currency"
    );
    assert!(
        denied(changed(
            "amount",
            json!({"minor": "10001", "currency": "USD"})
        )),
        "an amount"
    );
    assert!(denied(changed("boxes", json!("4"))), "an integer");
}

/// A value that is not what its attribute's type says fails the evaluation closed,
/// with the reason: an unreadable amount or count is not 0, and a number or an object
/// where a string or a set of strings belongs is not coerced.
#[test]
fn untyped_context_values_are_refused_not_coerced() {
    let registry = with_policy(SHIP_POLICY);
    let refused = |path: &str, value: Value, why: &str| {
        let mut v = shipment();
        v[path] = value.clone();
        match ship_verdict(&registry, v) {
            PolicyVerdict::Deny { reason } => assert!(
                reason.contains("policy evaluation failed") && reason.contains(why),
                "{path} = {value}: {reason}"
            ),
            other => panic!("{path} = {value}: {other:?}"),
        }
    };
    refused(
        "amount",
        json!({"minor": "12.50", "currency": "USD"}),
        "not a whole number",
    );
    refused(
        "amount",
        json!({"minor": "lots", "currency": "USD"}),
        "not a whole number",
    );
    refused("boxes", json!("two"), "not a whole number");
    refused("boxes", json!(2), "not a whole number");
    refused("carrier", json!(7), "not a string");
    refused("tags", json!(["gift", 3]), "not a string");
    refused(
        "amount",
        json!({"minor": "2500", "currency": 840}),
        "not a string",
    );
}

/// Cedar is given only the policies whose action scope can match the capability: one
/// that no policy names is denied without evaluating (as Cedar itself would: nothing
/// permits it), and the others keep their verdicts.
#[test]
fn policies_are_sliced_by_action() {
    let dir = tempdir();
    let capability = |name: &str| {
        format!(
            r#"
[[capabilities]]
name = "{name}"
category = "keyed"
policy = "policies.cedar"

[capabilities.key]
business_ref = "order_id"
significant = [{{ arg = "boxes", type = "integer" }}]

[capabilities.upstream]
kind = "http"
url = "http://127.0.0.1:9/{name}"
effect_ref = "/id"
"#
        )
    };
    let config = format!(
        r#"
[gateway]
tenant = "acme"
time_zone = "UTC"

[store]
url = "sqlite://oncegate.db"

[[principals]]
name = "planner"
role = "agent"
token_env = "ONCEGATE_TOKEN_PLANNER"
{}{}"#,
        capability("ship"),
        capability("recall")
    );
    let policy = r#"
permit (principal, action == Action::"ship", resource);
@id("too-many-boxes")
forbid (principal, action in [Action::"ship"], resource) when { context.boxes > 3 };
"#;
    std::fs::write(dir.join("oncegate.toml"), &config).unwrap();
    std::fs::write(dir.join("policies.cedar"), policy).unwrap();
    let registry =
        oncegate_core::Registry::parse(&dir.join("oncegate.toml"), &config, &crate::TestEnv)
            .unwrap_or_else(|e| panic!("{e}"));
    let engine = registry.capability("ship").unwrap().policy.clone().unwrap();
    assert_eq!(engine.applicable("ship"), 2);
    assert_eq!(engine.applicable("recall"), 0);
    let verdict = |cap: &str, boxes: &str| {
        let cap = registry.capability(cap).unwrap();
        let Value::Object(normalised) = json!({"boxes": boxes}) else {
            unreachable!()
        };
        engine.evaluate(
            "planner",
            Role::Agent,
            "acme",
            cap,
            Some("A-1"),
            &normalised,
        )
    };
    assert_eq!(verdict("ship", "2"), PolicyVerdict::Allow);
    assert_eq!(
        verdict("ship", "4"),
        PolicyVerdict::Deny {
            reason: "forbidden by policy too-many-boxes".into()
        }
    );
    assert_eq!(
        verdict("recall", "2"),
        PolicyVerdict::Deny {
            reason: "no policy permits this call".into()
        }
    );
}
