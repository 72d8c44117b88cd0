//! Unit tests of the normalisers: every money spelling, each refusal and its reason,
//! Unicode cleaning, and property tests (idempotence, no panics, one key per value).

use proptest::prelude::*;
use serde_json::json;
use unicode_normalization::UnicodeNormalization;

use super::*;

fn usd() -> Normaliser {
    Normaliser::Money {
        currency_arg: Some(ArgPath::parse("currency").unwrap()),
        default_currency: None,
        unit: MoneyUnit::Major,
        allow_negative: false,
    }
}

fn usd_signed() -> Normaliser {
    Normaliser::Money {
        currency_arg: Some(ArgPath::parse("currency").unwrap()),
        default_currency: None,
        unit: MoneyUnit::Major,
        allow_negative: true,
    }
}

fn id() -> Normaliser {
    Normaliser::Id {
        folding: Folding::default(),
    }
}

#[test]
fn money_spellings_are_one_value() {
    let expected = json!({"currency": "USD", "minor": "1250"});
    for amount in [
        json!("12.50"),
        json!(12.5),
        json!("12.50 USD"),
        json!("USD 12.50"),
        json!("usd12.5"),
        json!({"minor": 1250}),
        json!({"amount": "12.5", "currency": "usd"}),
        json!(" 12.500 "),
    ] {
        let args = json!({"amount": amount, "currency": "USD"});
        assert_eq!(
            usd().apply(&args["amount"], &args).unwrap(),
            expected,
            "{amount}"
        );
    }
}

#[test]
fn money_refuses_to_round_and_knows_jpy() {
    let args = json!({"currency": "USD"});
    assert!(usd().apply(&json!("12.505"), &args).is_err());
    let yen = json!({"currency": "JPY"});
    assert_eq!(
        usd().apply(&json!("1250"), &yen).unwrap(),
        json!({"currency": "JPY", "minor": "1250"})
    );
    assert!(usd().apply(&json!("12.5"), &yen).is_err());
    assert!(
        usd().apply(&json!("12.50 EUR"), &args).is_err(),
        "conflicting currencies"
    );
    assert!(
        usd().apply(&json!("12.50"), &json!({})).is_err(),
        "no currency"
    );
    assert!(
        usd().apply(&json!("12.50 XYZ"), &args).is_err(),
        "not ISO 4217"
    );
}

#[test]
fn minor_unit_reads_bare_numbers_as_cents_but_not_decimals() {
    let n = Normaliser::Money {
        currency_arg: None,
        default_currency: Some(Currency::USD),
        unit: MoneyUnit::Minor,
        allow_negative: false,
    };
    let want = json!({"currency": "USD", "minor": "1250"});
    assert_eq!(n.apply(&json!(1250), &json!({})).unwrap(), want);
    assert_eq!(n.apply(&json!("1250"), &json!({})).unwrap(), want);
    assert_eq!(n.apply(&json!("12.50"), &json!({})).unwrap(), want);
}

#[test]
fn other_normalisers() {
    let none = json!({});
    assert_eq!(
        Normaliser::Email
            .apply(&json!("  Ann.Lee@Example.COM "), &none)
            .unwrap(),
        json!("Ann.Lee@example.com")
    );
    assert!(Normaliser::Email.apply(&json!("nobody"), &none).is_err());
    let text = Normaliser::Text { case_fold: true };
    assert_eq!(
        text.apply(&json!("  Hello \n  World "), &none).unwrap(),
        json!("hello world")
    );
    assert_eq!(
        Normaliser::Integer.apply(&json!("42"), &none).unwrap(),
        json!("42")
    );
    assert_eq!(
        Normaliser::Integer.apply(&json!(42.0), &none).unwrap(),
        json!("42")
    );
    assert!(Normaliser::Integer.apply(&json!(42.5), &none).is_err());
    assert_eq!(
        Normaliser::Decimal.apply(&json!("1.50"), &none).unwrap(),
        json!("1.5")
    );
    let e = Normaliser::Enum {
        values: vec!["standard".into(), "express".into()],
    };
    assert_eq!(
        e.apply(&json!(" EXPRESS"), &none).unwrap(),
        json!("express")
    );
    assert!(e.apply(&json!("overnight"), &none).is_err());
    assert_eq!(
        Normaliser::Set
            .apply(&json!(["b", "a", "b", 2]), &none)
            .unwrap(),
        json!(["2", "a", "b"])
    );
    assert_eq!(id().apply(&json!(123), &none).unwrap(), json!("123"));
    assert_eq!(id().apply(&json!(" A-1"), &none).unwrap(), json!(" A-1"));
}

fn refusal(n: &Normaliser, value: Value, args: &Value) -> String {
    match n.apply(&value, args) {
        Ok(v) => panic!("{value} was accepted as {v}"),
        Err(e) => e.0,
    }
}

#[test]
fn ambiguous_amount_spellings_are_refused_with_a_reason() {
    let args = json!({"currency": "USD"});
    for (amount, says) in [
        (json!("12_50"), "`_`"),
        (json!("1,250"), "thousands separator"),
        (json!("1,250.00 USD"), "thousands separator"),
        (json!("1 250"), "spaces"),
        (json!("1'250"), "`'`"),
        (json!("+12.50"), "`+`"),
        (json!("$12.50"), "currency symbol"),
        (json!("12."), "digits on both sides"),
        (json!(".5"), "digits on both sides"),
        (json!("012.50"), "leading zero"),
        (json!("1.25e1"), "exponent"),
        (json!("125E-1 USD"), "exponent"),
        (json!("12\u{200B}50"), "invisible"),
        (json!("12.50 dollars"), "ISO 4217"),
        (json!("USD 12.50 EUR"), "twice"),
        (json!("USD"), "no amount"),
        (json!(""), "no amount"),
    ] {
        let msg = refusal(&usd(), amount.clone(), &args);
        assert!(msg.contains(says), "{amount}: {msg}");
    }
}

#[test]
fn negative_amounts_need_allow_negative() {
    let args = json!({"currency": "USD"});
    for amount in [
        json!("-12.50"),
        json!("-0"),
        json!("-0.00 USD"),
        json!(-12.5),
        json!({"minor": -1250}),
        json!({"amount": "-1"}),
    ] {
        let msg = refusal(&usd(), amount.clone(), &args);
        assert!(msg.contains("negative"), "{amount}: {msg}");
    }
    assert_eq!(
        usd_signed().apply(&json!("-12.50"), &args).unwrap(),
        json!({"currency": "USD", "minor": "-1250"})
    );
    assert_eq!(
        usd_signed().apply(&json!("-0"), &args).unwrap(),
        json!({"currency": "USD", "minor": "0"})
    );
}

#[test]
fn conflicting_money_fields_are_refused() {
    let args = json!({"currency": "USD"});
    let msg = refusal(&usd(), json!({"minor": 1250, "amount": "9999.00"}), &args);
    assert!(
        msg.contains("conflicting") && msg.contains("`minor`") && msg.contains("`amount`"),
        "{msg}"
    );
    // Agreeing fields are one value, not a conflict.
    assert_eq!(
        usd()
            .apply(&json!({"minor": 1250, "amount": "12.50"}), &args)
            .unwrap(),
        json!({"currency": "USD", "minor": "1250"})
    );
    let msg = refusal(&usd(), json!({"amount": "12.50", "note": "x"}), &args);
    assert!(msg.contains("no field `note`"), "{msg}");
    let msg = refusal(&usd(), json!({"minor": "12.5"}), &args);
    assert!(msg.contains("whole number"), "{msg}");
    let msg = refusal(&usd(), json!({"amount": "12.50", "currency": "EUR"}), &args);
    assert!(
        msg.contains("currency argument `currency` says USD"),
        "{msg}"
    );
}

#[test]
fn the_written_currency_wins_over_the_default() {
    let n = Normaliser::Money {
        currency_arg: None,
        default_currency: Some(Currency::USD),
        unit: MoneyUnit::Major,
        allow_negative: false,
    };
    assert_eq!(
        n.apply(&json!("12.50 EUR"), &json!({})).unwrap(),
        json!({"currency": "EUR", "minor": "1250"})
    );
    assert_eq!(
        n.apply(&json!({"amount": "12.50", "currency": "eur"}), &json!({}))
            .unwrap(),
        json!({"currency": "EUR", "minor": "1250"})
    );
    assert_eq!(
        n.apply(&json!("12.50"), &json!({})).unwrap(),
        json!({"currency": "USD", "minor": "1250"})
    );
}

#[test]
fn json_numbers_are_read_from_their_text() {
    let args = json!({"currency": "USD"});
    let exp: Value = serde_json::from_str("1.25e1").unwrap();
    assert_eq!(
        usd().apply(&exp, &args).unwrap(),
        json!({"currency": "USD", "minor": "1250"})
    );
    let msg = refusal(&usd(), serde_json::from_str("12.505").unwrap(), &args);
    assert!(msg.contains("never rounds"), "{msg}");
    let huge: Value = serde_json::from_str("1e300").unwrap();
    assert!(usd().apply(&huge, &args).is_err());
    // What serde_json rounds before any normaliser sees it is refused on the text.
    for lossy in [
        r#"{"amount": 12.5000000000000001}"#,
        r#"{"n": [1, 123456789012345678901234567890]}"#,
        r#"{"n": 18446744073709551616}"#,
    ] {
        let e = check_exact_numbers(lossy.as_bytes()).unwrap_err();
        assert!(e.0.contains("cannot be held exactly"), "{lossy}: {e}");
    }
    for exact in [
        r#"{"amount": 12.50, "s": "12.5000000000000001", "e": 1.25e1, "z": -0}"#,
        r#"{"esc": "\" 12.5000000000000001", "big": 18446744073709551615, "neg": -9223372036854775808}"#,
        r#"[0.1, 1e300, 1E2, 3.0]"#,
    ] {
        check_exact_numbers(exact.as_bytes()).unwrap_or_else(|e| panic!("{exact}: {e}"));
    }
}

#[test]
fn invisible_characters_and_normal_forms_never_distinguish_two_values() {
    let none = json!({});
    let mut notes = Vec::new();
    // "é" precomposed (NFC) and as e + combining acute (NFD).
    let nfc = id()
        .apply_noting(&json!("caf\u{e9}-1"), &none, &mut notes)
        .unwrap();
    assert!(notes.is_empty(), "{notes:?}");
    let nfd = id()
        .apply_noting(&json!("cafe\u{301}-1"), &none, &mut notes)
        .unwrap();
    assert_eq!(nfc, nfd);
    assert_eq!(notes, vec!["NFC changed the text".to_owned()]);
    for dirty in [
        "A\u{200B}-1",
        "\u{FEFF}A-1",
        "A-\u{200D}1",
        "\u{202E}A-1\u{202C}",
        "\u{2066}A-1\u{2069}",
        "A\u{00AD}-1",
    ] {
        let mut notes = Vec::new();
        assert_eq!(
            id().apply_noting(&json!(dirty), &none, &mut notes).unwrap(),
            json!("A-1"),
            "{dirty:?}"
        );
        assert!(
            notes.iter().all(|n| n.starts_with("stripped U+")),
            "{notes:?}"
        );
        assert!(!notes.is_empty());
    }
    let mut notes = Vec::new();
    id().apply_noting(&json!("A\u{200B}-1"), &none, &mut notes)
        .unwrap();
    assert_eq!(notes, vec!["stripped U+200B ZERO WIDTH SPACE".to_owned()]);
    assert!(
        id().apply(&json!("\u{200B}"), &none).is_err(),
        "nothing visible is no id"
    );
    // A format character between a letter and its combining mark is stripped before
    // composing, so the NFD spelling with a ZWJ in it is still the NFC value.
    assert_eq!(
        id().apply(&json!("cafe\u{200D}\u{301}-1"), &none).unwrap(),
        nfc
    );
    let text = Normaliser::Text { case_fold: false };
    assert_eq!(
        text.apply(&json!("hello\u{200B} wo\u{FEFF}rld"), &none)
            .unwrap(),
        json!("hello world")
    );
    assert_eq!(
        Normaliser::Email
            .apply(&json!("\u{FEFF}ann\u{200B}@Example.com"), &none)
            .unwrap(),
        json!("ann@example.com")
    );
}

#[test]
fn ids_fold_case_and_width_only_when_asked() {
    let none = json!({});
    let folded = Normaliser::Id {
        folding: Folding {
            case: true,
            width: true,
        },
    };
    assert_eq!(
        folded.apply(&json!("\u{FF21}\u{FF11}-x"), &none).unwrap(),
        json!("a1-x")
    );
    assert_eq!(folded.apply(&json!("A1-X"), &none).unwrap(), json!("a1-x"));
    assert_eq!(
        id().apply(&json!("\u{FF21}\u{FF11}-x"), &none).unwrap(),
        json!("\u{FF21}\u{FF11}-x")
    );
    assert_eq!(id().apply(&json!("A1-X"), &none).unwrap(), json!("A1-X"));
    let mut notes = Vec::new();
    folded
        .apply_noting(&json!("\u{FF21}1"), &none, &mut notes)
        .unwrap();
    assert_eq!(
        notes,
        vec![
            "NFKC changed the text (width folding)".to_owned(),
            "case folding changed the text".to_owned()
        ]
    );
}

fn any_normaliser() -> impl Strategy<Value = Normaliser> {
    prop_oneof![
        Just(usd()),
        Just(Normaliser::Email),
        any::<bool>().prop_map(|case_fold| Normaliser::Text { case_fold }),
        Just(Normaliser::Integer),
        Just(Normaliser::Decimal),
        Just(Normaliser::Set),
        Just(id()),
    ]
}

fn any_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(|i| json!(i)),
        (-1_000_000_i64..1_000_000, 0_u32..4)
            .prop_map(|(m, s)| json!(Decimal::new(m, s).to_string())),
        "[ a-zA-Z0-9@._-]{0,24}".prop_map(Value::String),
        proptest::collection::vec("[a-z]{0,4}", 0..5).prop_map(|v| json!(v)),
    ]
}

proptest! {
    /// Normalising a normalised value changes nothing.
    #[test]
    fn normalisation_is_idempotent(n in any_normaliser(), v in any_value()) {
        let args = json!({"currency": "USD"});
        if let Ok(once) = n.apply(&v, &args) {
            prop_assert_eq!(n.apply(&once, &args).unwrap(), once);
        }
    }

    /// No string, however odd, makes a normaliser panic.
    #[test]
    fn normalisers_never_panic(n in any_normaliser(), text in "\\PC{0,24}", minor in any::<i64>(), f in any::<f64>()) {
        let args = json!({"currency": "USD"});
        let _ = n.apply(&json!(text), &args);
        let _ = n.apply(&json!(minor), &args);
        let _ = n.apply(&json!(f), &args);
        let _ = n.apply(&json!({"minor": text, "amount": minor}), &args);
        let _ = check_exact_numbers(text.as_bytes());
    }

    /// Spellings that differ only by invisible characters and normal form are one id.
    #[test]
    fn invisible_characters_never_make_a_new_id(
        base in "[a-zA-Z0-9\u{e9}\u{fc}-]{1,12}",
        at in 0_usize..12,
        zw in prop::sample::select(vec!['\u{200B}', '\u{200C}', '\u{200D}', '\u{2060}', '\u{FEFF}', '\u{200E}', '\u{202A}', '\u{00AD}']),
    ) {
        let none = json!({});
        let want = id().apply(&json!(base), &none).unwrap();
        let mut chars: Vec<char> = base.nfd().collect();
        chars.insert(at.min(chars.len()), zw);
        let drifted: String = chars.into_iter().collect();
        prop_assert_eq!(id().apply(&json!(drifted), &none).unwrap(), want);
    }

    /// Every spelling of one amount is one value.
    #[test]
    fn money_spellings_agree(minor in -10_000_000_i64..10_000_000) {
        let major = Decimal::new(minor, 2);
        let args = json!({"currency": "USD"});
        let want = json!({"currency": "USD", "minor": minor.to_string()});
        let spellings = [
            json!(major.to_string()),
            json!(format!("{major} USD")),
            json!(format!("USD {major}")),
            json!({"minor": minor}),
            serde_json::from_str::<Value>(&major.normalize().to_string()).unwrap(),
        ];
        for s in spellings {
            prop_assert_eq!(usd_signed().apply(&s, &args).unwrap(), want.clone());
        }
    }
}
