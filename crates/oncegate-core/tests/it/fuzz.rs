//! Property-based fuzzing of what reads untrusted text: the config loader on mutated and
//! arbitrary TOML, and every normaliser (and the key derivation over them) on any JSON
//! value. The property is the same everywhere: an answer (a value or an error that says
//! where and why), never a panic.
//!
//! Case counts are modest so CI stays fast; `PROPTEST_CASES=N` runs N instead.

use std::path::Path;

use iso_currency::Currency;
use jiff::Timestamp;
use oncegate_core::Registry;
use oncegate_core::key::{CallScope, derive};
use oncegate_core::normalise::{ArgPath, MoneyUnit, Normaliser};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::{TestEnv, examples};

/// `PROPTEST_CASES` if set, else the modest CI default.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn payments_text() -> String {
    std::fs::read_to_string(examples().join("payments.toml")).unwrap()
}

/// Fragments that make TOML mutations likely to stay parseable TOML but break the
/// registry's rules (or its types) in interesting places.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("\n[[capabilities]]\n".to_owned()),
        Just("\n[capabilities.upstream]\n".to_owned()),
        Just("\n[capabilities.reconcile]\nkind = \"mcp\"\n".to_owned()),
        Just("category = \"read\"\n".to_owned()),
        Just("on_unknown = \"retry\"\n".to_owned()),
        Just("lease = \"-5s\"\n".to_owned()),
        Just("replay_window = \"forever\"\n".to_owned()),
        Just("attempt_ceiling = -1\n".to_owned()),
        Just("attempt_ceiling = 99999999999999999999\n".to_owned()),
        Just("significant = [{ arg = \"\", type = \"money\" }]\n".to_owned()),
        Just("significant = [{ arg = \"a..b\", type = \"enum\" }]\n".to_owned()),
        Just("url = \"{arg.}\"\n".to_owned()),
        Just("url = \"{{{{}\"\n".to_owned()),
        Just("time_zone = \"Mars/Olympus\"\n".to_owned()),
        Just("policy = \"missing.cedar\"\n".to_owned()),
        Just("\"\u{0}\"".to_owned()),
        Just("é\u{200b}\u{202e}".to_owned()),
        "[ -~\n]{0,24}",
    ]
}

#[derive(Clone, Debug)]
enum Mutation {
    Insert(usize, String),
    Delete(usize, usize),
    DuplicateLine(usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), fragment()).prop_map(|(at, f)| Mutation::Insert(at, f)),
        (any::<usize>(), 1usize..40).prop_map(|(at, n)| Mutation::Delete(at, n)),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

/// The nearest char boundary at or below `at` (mutations must keep the text UTF-8).
fn boundary(text: &str, at: usize) -> usize {
    let mut at = at % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn mutate(mut text: String, mutations: &[Mutation]) -> String {
    for m in mutations {
        match m {
            Mutation::Insert(at, f) => {
                // At a line start, so the text mostly stays TOML and the registry's own
                // validation is what gets exercised.
                let at = boundary(&text, *at);
                let at = text[..at].rfind('\n').map_or(0, |i| i + 1);
                text.insert_str(at, f);
            }
            Mutation::Delete(at, n) => {
                let from = boundary(&text, *at);
                let to = boundary(&text, from + n);
                text.replace_range(from..to.max(from), "");
            }
            Mutation::DuplicateLine(at) => {
                let lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let i = at % lines.len();
                    let mut out: Vec<&str> = lines.clone();
                    out.insert(i, lines[i]);
                    text = out.join("\n");
                }
            }
            Mutation::Truncate(at) => {
                let at = boundary(&text, *at);
                text.truncate(at);
            }
        }
    }
    text
}

fn parse_at_examples(text: &str) -> Result<Registry, oncegate_core::config::ConfigErrors> {
    Registry::parse(&examples().join("fuzz.toml"), text, &TestEnv)
}

/// Errors name a place in the file that exists, and say something.
fn errors_are_located(text: &str, errors: &oncegate_core::config::ConfigErrors) {
    let lines = text.lines().count() + 1;
    assert!(!errors.0.is_empty(), "an Err carries at least one error");
    for e in &errors.0 {
        assert!(!e.message.is_empty(), "every error says why: {e:?}");
        assert!(
            e.line <= lines,
            "error line {} beyond the file ({lines} lines): {e:?}",
            e.line
        );
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<u64>().prop_map(|u| json!(u)),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        any::<String>().prop_map(Value::String),
        // Money-, email- and id-shaped text, where the normalisers branch most.
        "[-+ 0-9.,_eE]{0,16}( ?[A-Za-z]{0,4})?".prop_map(Value::String),
        "[A-Za-z]{0,4} ?[-+0-9.,_]{0,16}".prop_map(Value::String),
        "[ a-zA-Z0-9._%+-]{0,12}@?[ a-zA-Z0-9.-]{0,12}".prop_map(Value::String),
        "[\u{0}-\u{7f}\u{200b}\u{200d}\u{feff}\u{202e}\u{301}é]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map(
                prop_oneof![
                    Just("minor".to_owned()),
                    Just("amount".to_owned()),
                    Just("currency".to_owned()),
                    "[a-z_]{0,8}"
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn every_normaliser() -> Vec<Normaliser> {
    let currency = Some(ArgPath::parse("currency").unwrap());
    let mut all = Vec::new();
    for currency_arg in [None, currency] {
        for default_currency in [None, Some(Currency::USD), Some(Currency::JPY)] {
            for unit in [MoneyUnit::Major, MoneyUnit::Minor] {
                for allow_negative in [false, true] {
                    all.push(Normaliser::Money {
                        currency_arg: currency_arg.clone(),
                        default_currency,
                        unit,
                        allow_negative,
                    });
                }
            }
        }
    }
    all.extend([
        Normaliser::Email,
        Normaliser::Text { case_fold: false },
        Normaliser::Text { case_fold: true },
        Normaliser::Integer,
        Normaliser::Decimal,
        Normaliser::Enum {
            values: vec!["receipt".into(), "Refund_Notice".into()],
        },
        Normaliser::Set,
    ]);
    for (case, width) in [(false, false), (true, false), (false, true), (true, true)] {
        all.push(Normaliser::Id {
            folding: oncegate_core::normalise::Folding { case, width },
        });
    }
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    /// The shipped registry, mutated: parsed or refused with located errors.
    #[test]
    fn config_loader_never_panics_on_mutated_registries(mutations in vec(mutation(), 1..6)) {
        let text = mutate(payments_text(), &mutations);
        match parse_at_examples(&text) {
            Ok(registry) => prop_assert!(!registry.capabilities().is_empty() || !text.contains("[[capabilities]]")),
            Err(errors) => errors_are_located(&text, &errors),
        }
    }

    /// Any text at all.
    #[test]
    fn config_loader_never_panics_on_arbitrary_text(text in prop_oneof![
        any::<String>(),
        "([a-z_\\[\\]=\"{}., 0-9\n])*",
    ]) {
        if let Err(errors) = Registry::parse(Path::new("fuzz.toml"), &text, &TestEnv) {
            errors_are_located(&text, &errors);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    /// Every normaliser, any value, any sibling arguments: a value or an error.
    #[test]
    fn normalisers_never_panic_on_any_json(value in arb_json(), args in arb_json()) {
        for n in every_normaliser() {
            let _ = n.apply(&value, &args);
        }
    }

    /// Key derivation over the shipped capabilities, any argument object: a key or an
    /// error, never a panic; and a key derived twice is the same key.
    #[test]
    fn keys_derive_or_refuse_any_arguments(
        args in arb_json(),
        run in proptest::option::of(any::<String>()),
        step in proptest::option::of(any::<String>()),
    ) {
        let registry = payments_registry();
        let scope = CallScope { run_id: run.as_deref(), step_id: step.as_deref() };
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        for cap in registry.capabilities() {
            let once = derive("acme", "planner", cap, &args, &scope, now, &registry.gateway.time_zone);
            if let Ok(k) = once {
                let again = derive("acme", "planner", cap, &args, &scope, now, &registry.gateway.time_zone).unwrap();
                prop_assert_eq!(k.key, again.key);
            }
        }
    }
}

fn payments_registry() -> &'static Registry {
    static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(crate::payments)
}
