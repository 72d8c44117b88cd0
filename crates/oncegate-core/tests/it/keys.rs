//! Intent keys: pinned bytes, drift-proofing, and what must and must not change a key.

use jiff::Timestamp;
use oncegate_core::key::{CallScope, derive};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::payments;

fn now() -> Timestamp {
    "2026-11-30T10:00:00Z".parse().unwrap()
}

fn key_of(
    cap: &str,
    principal: &str,
    args: Value,
    run: Option<&str>,
    step: Option<&str>,
) -> String {
    let registry = payments();
    let cap = registry.capability(cap).unwrap();
    let scope = CallScope {
        run_id: run,
        step_id: step,
    };
    derive(
        "acme",
        principal,
        cap,
        &args,
        &scope,
        now(),
        &registry.gateway.time_zone,
    )
    .unwrap()
    .key
    .to_string()
}

/// The exact key bytes for the example config: a refactor must not silently change
/// every key in production.
#[test]
fn example_keys_are_pinned() {
    let keys = json!({
        "charge_card": key_of("charge_card", "planner", json!({"order_id": "A-1", "amount": "12.50", "currency": "USD"}), None, None),
        "refund": key_of("refund", "planner", json!({"order_id": "A-1", "amount": "150.00"}), None, None),
        "send_email": key_of("send_email", "planner", json!({"order_id": "A-1", "to": "Ann@Example.com", "template": "receipt"}), None, None),
        "append_ledger": key_of("append_ledger", "planner", json!({"entry_ref": "E-9", "account": "4000", "amount": "3.10"}), Some("run-7"), Some("step-2")),
    });
    insta::assert_json_snapshot!(keys);
}

#[test]
fn explanation_lists_inputs_and_ignored_arguments() {
    let registry = payments();
    let cap = registry.capability("charge_card").unwrap();
    let args = json!({"order_id": "A-1", "amount": "12.50 USD", "memo": "retry please", "tool_use_id": "toolu_9"});
    let d = derive(
        "acme",
        "planner",
        cap,
        &args,
        &CallScope::default(),
        now(),
        &registry.gateway.time_zone,
    )
    .unwrap();
    insta::assert_json_snapshot!(d.explanation);
}

#[test]
fn drifted_replans_are_one_intent() {
    let base = key_of(
        "charge_card",
        "planner",
        json!({"order_id": "A-1", "amount": "12.50", "currency": "USD", "memo": "x"}),
        None,
        None,
    );
    for args in [
        json!({"order_id": "A-1", "amount": 12.5, "currency": "USD", "memo": "retry please"}),
        json!({"order_id": "A-1", "amount": "USD 12.50", "memo": "the charge failed, reissue it"}),
        json!({"order_id": "A-1", "amount": {"minor": 1250}, "currency": "usd"}),
        json!({"order_id": " A-1 ", "amount": "12.5 USD", "idempotency_key": "uuid-from-the-model"}),
    ] {
        assert_eq!(
            key_of(
                "charge_card",
                "planner",
                args.clone(),
                Some("other-run"),
                None
            ),
            base,
            "{args}"
        );
    }
    // Two subagents with their own identities charging one order: one intent.
    assert_eq!(
        key_of(
            "charge_card",
            "subagent",
            json!({"order_id": "A-1", "amount": "12.50"}),
            None,
            None
        ),
        base
    );
}

#[test]
fn bad_arguments_are_errors_not_guesses() {
    let registry = payments();
    let cap = registry.capability("charge_card").unwrap();
    let tz = &registry.gateway.time_zone;
    for args in [
        json!({"amount": "12.50"}),
        json!({"order_id": "A-1"}),
        json!({"order_id": "A-1", "amount": "12.505"}),
        json!({"order_id": "A-1", "amount": "12.50 EUR", "currency": "USD"}),
        json!({"order_id": {"nested": 1}, "amount": "1"}),
        json!([1, 2]),
    ] {
        assert!(
            derive(
                "acme",
                "planner",
                cap,
                &args,
                &CallScope::default(),
                now(),
                tz
            )
            .is_err(),
            "{args}"
        );
    }
}

#[test]
fn step_scope_uses_run_and_step_and_falls_back_without_them() {
    let args = json!({"entry_ref": "E-1", "account": "4000", "amount": "1.00"});
    let a = key_of(
        "append_ledger",
        "planner",
        args.clone(),
        Some("r1"),
        Some("s1"),
    );
    assert_ne!(
        a,
        key_of(
            "append_ledger",
            "planner",
            args.clone(),
            Some("r2"),
            Some("s1")
        )
    );
    assert_ne!(
        a,
        key_of(
            "append_ledger",
            "planner",
            args.clone(),
            Some("r1"),
            Some("s2")
        )
    );
    // No run id: a stable key (never random), bounded by the replay window.
    assert_eq!(
        key_of("append_ledger", "planner", args.clone(), None, None),
        key_of("append_ledger", "planner", args, None, None)
    );
}

fn arb_order() -> impl Strategy<Value = String> {
    "[A-Z]-[0-9]{1,6}"
}

proptest! {
    #[test]
    fn undeclared_arguments_never_change_the_key(
        order in arb_order(),
        minor in 1_i64..10_000_000,
        junk_key in "[a-z_]{1,12}",
        junk in any::<i64>(),
    ) {
        prop_assume!(!["order_id", "amount", "currency"].contains(&junk_key.as_str()));
        let amount = rust_decimal::Decimal::new(minor, 2).to_string();
        let plain = json!({"order_id": order, "amount": amount});
        let mut noisy = plain.clone();
        noisy[junk_key.as_str()] = json!(junk);
        noisy["memo"] = json!(format!("attempt {junk}"));
        prop_assert_eq!(key_of("charge_card", "planner", plain, None, None), key_of("charge_card", "planner", noisy, None, None));
    }

    #[test]
    fn every_money_spelling_gives_one_key(order in arb_order(), minor in 1_i64..10_000_000) {
        let major = rust_decimal::Decimal::new(minor, 2);
        let spellings = [
            json!(major.to_string()),
            json!(format!("{major} USD")),
            json!(format!("USD {major}")),
            json!({"minor": minor}),
            serde_json::from_str::<Value>(&major.normalize().to_string()).unwrap(),
            json!(format!("usd{major}")),
            json!(format!("  {major}USD ")),
            json!({"amount": major.to_string(), "currency": "usd"}),
            json!({"minor": minor.to_string(), "amount": major.to_string()}),
            // A JSON number with an exponent is read from its value, not as a float.
            serde_json::from_str::<Value>(&format!("{minor}e-2")).unwrap(),
        ];
        let keys: std::collections::BTreeSet<String> = spellings
            .into_iter()
            .map(|a| key_of("charge_card", "planner", json!({"order_id": order, "amount": a, "currency": "USD"}), None, None))
            .collect();
        prop_assert_eq!(keys.len(), 1);
    }

    #[test]
    fn business_ref_capability_and_significant_values_always_change_it(
        order in arb_order(),
        other in arb_order(),
        minor in 1_i64..10_000_000,
        delta in 1_i64..1000,
    ) {
        prop_assume!(order != other);
        let amount = |m: i64| rust_decimal::Decimal::new(m, 2).to_string();
        let base = key_of("charge_card", "planner", json!({"order_id": order, "amount": amount(minor)}), None, None);
        prop_assert_ne!(&base, &key_of("charge_card", "planner", json!({"order_id": other, "amount": amount(minor)}), None, None));
        prop_assert_ne!(&base, &key_of("charge_card", "planner", json!({"order_id": order, "amount": amount(minor + delta)}), None, None));
        prop_assert_ne!(&base, &key_of("refund", "planner", json!({"order_id": order, "amount": amount(minor)}), None, None));
        prop_assert_ne!(&base, &key_of("charge_card", "planner", json!({"order_id": order, "amount": amount(minor), "currency": "EUR"}), None, None));
    }
}

/// Where a capability keys on the principal, the principal always changes the key.
#[test]
fn principal_changes_the_key_only_when_declared() {
    let text = std::fs::read_to_string(crate::examples().join("payments.toml"))
        .unwrap()
        .replace(
            "name = \"charge_card\"\n",
            "name = \"charge_card\"\nkey_principal = \"principal\"\n",
        );
    let registry = crate::parse(&text).unwrap();
    let cap = registry.capability("charge_card").unwrap();
    let args = json!({"order_id": "A-1", "amount": "12.50"});
    let k = |p: &str| {
        derive(
            "acme",
            p,
            cap,
            &args,
            &CallScope::default(),
            now(),
            &registry.gateway.time_zone,
        )
        .unwrap()
        .key
    };
    assert_ne!(k("planner"), k("subagent"));
}

/// `day` scope: the calendar date in the configured time zone enters the key.
#[test]
fn day_scope_follows_the_configured_time_zone() {
    let text = r#"
[gateway]
tenant = "acme"
time_zone = "America/New_York"

[[capabilities]]
name = "daily_report"
category = "non_idempotent"
key = { business_ref = "account", scope = "day" }
"#;
    let registry = crate::parse(text).unwrap();
    let cap = registry.capability("daily_report").unwrap();
    let args = json!({"account": "acc-1"});
    let key_at = |t: &str| {
        let d = derive(
            "acme",
            "planner",
            cap,
            &args,
            &CallScope::default(),
            t.parse().unwrap(),
            &registry.gateway.time_zone,
        )
        .unwrap();
        (
            d.key.to_string(),
            d.explanation.scope["date"].as_str().unwrap().to_owned(),
        )
    };
    // 03:00 UTC on Dec 1 is still Nov 30 in New York.
    let (a, date_a) = key_at("2026-11-30T15:00:00Z");
    let (b, date_b) = key_at("2026-12-01T03:00:00Z");
    let (c, date_c) = key_at("2026-12-01T06:00:00Z");
    assert_eq!(
        (date_a.as_str(), date_b.as_str(), date_c.as_str()),
        ("2026-11-30", "2026-11-30", "2026-12-01")
    );
    assert_eq!(a, b);
    assert_ne!(a, c);
}

fn explain(cap: &str, args: Value) -> oncegate_core::key::KeyExplanation {
    let registry = payments();
    let cap = registry.capability(cap).unwrap();
    derive(
        "acme",
        "planner",
        cap,
        &args,
        &CallScope::default(),
        now(),
        &registry.gateway.time_zone,
    )
    .unwrap()
    .explanation
}

/// Business references and ids that differ only in normal form or by invisible format
/// characters are one intent (two charges before), and the explanation says what changed.
#[test]
fn unicode_spellings_of_one_reference_are_one_intent() {
    let nfc = json!({"order_id": "caf\u{e9}-1", "amount": "12.50"});
    let base = key_of("charge_card", "planner", nfc.clone(), None, None);
    for drifted in [
        "cafe\u{301}-1",               // NFD
        "caf\u{e9}\u{200B}-1",         // zero-width space
        "\u{FEFF}caf\u{e9}-1",         // BOM
        "caf\u{e9}-\u{200D}1",         // zero-width joiner
        "\u{202E}caf\u{e9}-1\u{202C}", // bidi override
        "\u{2067}caf\u{e9}-1\u{2069}", // bidi isolate
    ] {
        let args = json!({"order_id": drifted, "amount": "12.50"});
        assert_eq!(
            key_of("charge_card", "planner", args, None, None),
            base,
            "{drifted:?}"
        );
    }
    let e = explain(
        "charge_card",
        json!({"order_id": "cafe\u{301}\u{200B}-1", "amount": "12.50"}),
    );
    let b = e.business_ref.unwrap();
    assert_eq!(b.normalised, json!("caf\u{e9}-1"));
    assert_eq!(
        b.changes,
        vec![
            "stripped U+200B ZERO WIDTH SPACE".to_owned(),
            "NFC changed the text".to_owned()
        ]
    );
    assert!(
        explain("charge_card", nfc)
            .business_ref
            .unwrap()
            .changes
            .is_empty()
    );
    // Email addresses and ids among the significant arguments too.
    let email = |to: &str| {
        key_of(
            "send_email",
            "planner",
            json!({"order_id": "A-1", "to": to, "template": "receipt"}),
            None,
            None,
        )
    };
    assert_eq!(
        email("ren\u{e9}e@example.com"),
        email("rene\u{301}e\u{200B}@Example.com")
    );
    let ledger = |account: &str| {
        key_of(
            "append_ledger",
            "planner",
            json!({"entry_ref": "E-1", "account": account, "amount": "1.00"}),
            Some("r"),
            Some("s"),
        )
    };
    assert_eq!(ledger("4000"), ledger("40\u{2060}00"));
    assert_ne!(ledger("4000"), ledger("4001"));
}

/// The explanation of a Unicode-drifted call, pinned: which inputs were cleaned, how,
/// and the key bytes (the same as the clean NFC spelling's).
#[test]
fn unicode_explanation_is_pinned() {
    let e = explain(
        "send_email",
        json!({"order_id": "\u{FEFF}caf\u{e9}-1", "to": "rene\u{301}e\u{200B}@Example.com", "template": "receipt"}),
    );
    assert_eq!(
        e.key.to_string(),
        key_of(
            "send_email",
            "planner",
            json!({"order_id": "caf\u{e9}-1", "to": "ren\u{e9}e@example.com", "template": "receipt"}),
            None,
            None
        )
    );
    insta::assert_json_snapshot!(e);
}

/// An id that opts into case and width folding folds; one that does not stays exact.
#[test]
fn ids_fold_only_when_the_argument_says_so() {
    let text = std::fs::read_to_string(crate::examples().join("payments.toml"))
        .unwrap()
        .replace(
            "{ arg = \"account\", type = \"id\" }",
            "{ arg = \"account\", type = \"id\", case_fold = true, width_fold = true }",
        );
    let registry = crate::parse(&text).unwrap();
    let cap = registry.capability("append_ledger").unwrap();
    let k = |account: &str| {
        derive(
            "acme",
            "planner",
            cap,
            &json!({"entry_ref": "E-1", "account": account, "amount": "1.00"}),
            &CallScope {
                run_id: Some("r"),
                step_id: Some("s"),
            },
            now(),
            &registry.gateway.time_zone,
        )
        .unwrap()
    };
    assert_eq!(k("acc-7").key, k("ACC-7").key);
    assert_eq!(
        k("acc-7").key,
        k("\u{FF21}\u{FF23}\u{FF23}-\u{FF17}").key,
        "full-width"
    );
    assert_eq!(
        k("ACC-7").explanation.inputs[0].changes,
        vec!["case folding changed the text".to_owned()]
    );
    // The shipped example keeps ids exact.
    assert_ne!(
        key_of(
            "append_ledger",
            "planner",
            json!({"entry_ref": "E-1", "account": "acc-7", "amount": "1.00"}),
            Some("r"),
            Some("s")
        ),
        key_of(
            "append_ledger",
            "planner",
            json!({"entry_ref": "E-1", "account": "ACC-7", "amount": "1.00"}),
            Some("r"),
            Some("s")
        ),
    );
}

/// The money grammar through the real recipe: what was charged as 1,250.00 is refused.
#[test]
fn hostile_amounts_are_refused_by_the_recipe() {
    let registry = payments();
    let cap = registry.capability("charge_card").unwrap();
    let tz = &registry.gateway.time_zone;
    for (amount, says) in [
        (json!("12_50"), "`_`"),
        (json!("1,250.00"), "thousands separator"),
        (json!("-12.50"), "negative"),
        (json!("-0"), "negative"),
        (json!({"minor": 1250, "amount": "9999.00"}), "conflicting"),
        (json!("1.25e1"), "exponent"),
    ] {
        let e = derive(
            "acme",
            "planner",
            cap,
            &json!({"order_id": "A-1", "amount": amount}),
            &CallScope::default(),
            now(),
            tz,
        )
        .expect_err("refused")
        .to_string();
        assert!(
            e.contains(says) && e.contains("argument `amount`"),
            "{amount}: {e}"
        );
    }
    // "12.50 EUR" with no currency argument given is EUR, not the default USD.
    let eur = explain(
        "charge_card",
        json!({"order_id": "A-1", "amount": "12.50 EUR"}),
    );
    assert_eq!(
        eur.inputs[0].normalised,
        json!({"currency": "EUR", "minor": "1250"})
    );
    // The JSON number with an exponent is the plain number.
    let exp: Value = serde_json::from_str(r#"{"order_id": "A-1", "amount": 1.25e1}"#).unwrap();
    assert_eq!(
        key_of("charge_card", "planner", exp, None, None),
        key_of(
            "charge_card",
            "planner",
            json!({"order_id": "A-1", "amount": "12.50"}),
            None,
            None
        )
    );
}

proptest! {
    /// Unicode drift in the business reference never makes a new key.
    #[test]
    fn invisible_characters_in_the_reference_never_change_the_key(
        order in "[A-Za-z0-9\u{e9}\u{f1}-]{1,10}",
        at in 0_usize..10,
        zw in prop::sample::select(vec!['\u{200B}', '\u{200C}', '\u{200D}', '\u{2060}', '\u{FEFF}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{2066}', '\u{00AD}']),
    ) {
        use unicode_normalization::UnicodeNormalization;
        let mut chars: Vec<char> = order.nfd().collect();
        chars.insert(at.min(chars.len()), zw);
        let drifted: String = chars.into_iter().collect();
        prop_assert_eq!(
            key_of("charge_card", "planner", json!({"order_id": order, "amount": "1.00"}), None, None),
            key_of("charge_card", "planner", json!({"order_id": drifted, "amount": "1.00"}), None, None)
        );
    }

    /// Arbitrary arguments never make derivation panic.
    #[test]
    fn derivation_never_panics(order in "\\PC{0,16}", amount in "\\PC{0,16}", n in any::<f64>()) {
        let registry = payments();
        for cap in registry.capabilities() {
            for args in [
                json!({"order_id": order, "amount": amount, "to": amount, "template": order, "entry_ref": order, "account": amount}),
                json!({"order_id": order, "amount": n, "currency": amount}),
                json!({"order_id": n, "amount": {"minor": amount, "amount": n}}),
            ] {
                let _ = derive("acme", "planner", cap, &args, &CallScope::default(), now(), &registry.gateway.time_zone);
            }
        }
    }
}
