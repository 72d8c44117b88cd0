//! The sample arguments `oncegate verify` calls a capability with, and the drifted
//! spellings of each significant argument that a re-plan may produce (every way its
//! normaliser accepts as the same value).

use oncegate_core::config::Capability;
use oncegate_core::normalise::{ArgPath, MoneyUnit, Normaliser};
use serde_json::{Map, Value, json};

/// An undeclared argument the simulated model rewrites on every call.
pub(super) const FREE_TEXT: &str = "oncegate_verify_free_text";

/// Sets the argument at `path` (dotted) in `args`, making the objects on the way.
pub(super) fn set_path(args: &mut Value, path: &ArgPath, value: Value) {
    let mut current = args;
    let segments: Vec<&str> = path.as_str().split('.').collect();
    for (i, seg) in segments.iter().enumerate() {
        if i + 1 == segments.len() {
            current[*seg] = value;
            return;
        }
        if !current[*seg].is_object() {
            current[*seg] = Value::Object(Map::new());
        }
        current = &mut current[*seg];
    }
}

/// Sample arguments for a capability, with `n` varying the business reference, and the
/// drifted spellings of each significant argument (path, alternative values).
pub(super) fn samples(cap: &Capability, n: usize) -> (Value, Vec<(ArgPath, Value)>) {
    let mut args = json!({});
    let mut drifts = Vec::new();
    if let Some(b) = &cap.key.business_ref {
        set_path(&mut args, b, json!(format!("VERIFY-{n}")));
    }
    for s in &cap.key.significant {
        // Without a business ref, the first significant argument carries `n`.
        let vary = cap.key.business_ref.is_none() && n > 0;
        let (value, alternatives) = spellings(&s.normaliser, n, vary, &mut args);
        set_path(&mut args, &s.path, value);
        for alt in alternatives {
            drifts.push((s.path.clone(), alt));
        }
    }
    args[FREE_TEXT] = json!("free text the model rewrites on every re-plan");
    (args, drifts)
}

/// The value of one significant argument for sample `n` (`vary`: the one carrying
/// `n`), and the drifted spellings its normaliser accepts as the same.
fn spellings(
    normaliser: &Normaliser,
    n: usize,
    vary: bool,
    args: &mut Value,
) -> (Value, Vec<Value>) {
    match normaliser {
        Normaliser::Money {
            currency_arg,
            default_currency,
            unit,
            ..
        } => money_spellings(
            currency_arg.as_ref(),
            *default_currency,
            *unit,
            n,
            vary,
            args,
        ),
        Normaliser::Email => {
            let local = if vary {
                format!("ann{n}")
            } else {
                "ann".into()
            };
            (
                json!(format!("{local}@example.com")),
                vec![
                    json!(format!(" {local}@EXAMPLE.com ")),
                    json!(format!("{local}@Example.Com")),
                ],
            )
        }
        Normaliser::Text { case_fold } => {
            let base = if vary {
                format!("verify text {n}")
            } else {
                "verify text".into()
            };
            let mut alt = vec![json!(format!(
                "  verify   text{} ",
                if vary { format!(" {n}") } else { String::new() }
            ))];
            if *case_fold {
                alt.push(json!(base.to_uppercase()));
            }
            (json!(base), alt)
        }
        Normaliser::Integer => {
            let v = 42 + n as i64;
            (json!(v), vec![json!(v.to_string()), json!(v as f64)])
        }
        Normaliser::Decimal => (
            json!(format!("{}.50", 1 + n)),
            vec![
                json!(format!("{}.5", 1 + n)),
                json!(format!("{}.500", 1 + n)),
            ],
        ),
        Normaliser::Enum { values } => {
            let v = if values.is_empty() {
                String::new()
            } else {
                values[if vary { n % values.len() } else { 0 }].clone()
            };
            (
                json!(v),
                vec![json!(v.to_ascii_uppercase()), json!(format!(" {v}"))],
            )
        }
        Normaliser::Set => (
            json!(["a", "b", format!("c{n}")]),
            vec![json!([format!("c{n}"), "b", "a", "a"])],
        ),
        Normaliser::Id { .. } => {
            let v = 1000 + n as i64;
            (json!(v.to_string()), vec![json!(v)])
        }
        // Exact: no spelling of a JSON value drifts onto another but key order.
        Normaliser::Json => (json!({"a": n, "b": "x"}), vec![json!({"b": "x", "a": n})]),
    }
}

/// The spellings of an amount: its canonical form, and the alternatives a re-plan may
/// drift to (numbers, currency codes either side, minor units). Sets the currency
/// argument when the normaliser reads one.
fn money_spellings(
    currency_arg: Option<&ArgPath>,
    default_currency: Option<iso_currency::Currency>,
    unit: MoneyUnit,
    n: usize,
    vary: bool,
    args: &mut Value,
) -> (Value, Vec<Value>) {
    let currency = default_currency.unwrap_or(iso_currency::Currency::USD);
    let code = currency.code();
    if let Some(c) = currency_arg {
        set_path(args, c, json!(code));
    }
    let exponent = u32::from(currency.exponent().unwrap_or(0));
    let minor: i64 = 1250 + if vary { 100 * n as i64 } else { 0 };
    let major = rust_decimal::Decimal::new(minor, exponent);
    let major_text = major.to_string();
    let number: Value =
        serde_json::from_str(&major.normalize().to_string()).unwrap_or(json!(major_text));
    match unit {
        MoneyUnit::Major => (
            json!(major_text),
            vec![
                number,
                json!(format!("{major_text} {code}")),
                json!(format!("{code} {major_text}")),
                json!({"minor": minor, "currency": code}),
            ],
        ),
        MoneyUnit::Minor => (
            json!(minor),
            vec![
                json!(minor.to_string()),
                json!({"minor": minor, "currency": code}),
                json!(format!("{major_text} {code}")),
            ],
        ),
    }
}
