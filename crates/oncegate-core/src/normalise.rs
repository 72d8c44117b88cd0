//! Typed normalisers: the only way an argument enters an intent key.
//!
//! An agent that re-plans drifts the spelling of its arguments ("12.50", 12.5,
//! "USD 12.50", `{"minor": 1250}`), so every significant argument goes through a
//! normaliser that maps all spellings of one value onto one canonical JSON value. A value
//! that cannot be read unambiguously is an error, never a silent guess: rounding an
//! amount would merge two different intents.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use iso_currency::Currency;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A dotted path into the call's arguments (`order_id`, `customer.email`, `items.0`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArgPath {
    raw: String,
    segments: Vec<String>,
}

impl ArgPath {
    /// Parses `a.b.c`; empty segments are rejected.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err("an argument path cannot be empty".into());
        }
        let segments: Vec<String> = trimmed.split('.').map(str::to_owned).collect();
        if segments.iter().any(|s| s.is_empty()) {
            return Err(format!(
                "`{raw}` has an empty segment; write paths like `order.id`"
            ));
        }
        Ok(Self {
            raw: trimmed.to_owned(),
            segments,
        })
    }

    /// The path as written in the config.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The first segment: the top-level argument this path reads.
    pub fn root(&self) -> &str {
        &self.segments[0]
    }

    /// Looks the path up; `null` counts as absent.
    pub fn lookup<'a>(&self, args: &'a Value) -> Option<&'a Value> {
        let mut current = args;
        for segment in &self.segments {
            current = match current {
                Value::Object(map) => map.get(segment)?,
                Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        (!current.is_null()).then_some(current)
    }
}

impl fmt::Display for ArgPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// How bare numbers given for a money argument are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoneyUnit {
    /// `12.5` means twelve dollars fifty (the default).
    #[default]
    Major,
    /// `1250` means 1250 cents: for tool schemas that take minor units.
    Minor,
}

/// A declared normaliser with its options, validated at config load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Normaliser {
    /// Amount + ISO 4217 currency → integer minor units.
    Money {
        /// Argument holding the currency when the amount does not name it.
        currency_arg: Option<ArgPath>,
        /// Currency used when neither the amount nor `currency_arg` names one.
        default_currency: Option<Currency>,
        /// How bare numbers are read.
        unit: MoneyUnit,
    },
    /// Trimmed, domain lowercased.
    Email,
    /// Trimmed, whitespace collapsed, optionally case-folded.
    Text {
        /// Lowercase the whole value.
        case_fold: bool,
    },
    /// An exact integer (from a number or a numeric string).
    Integer,
    /// An exact decimal, trailing zeros removed.
    Decimal,
    /// One of the declared values (matched case-insensitively, emitted as declared).
    Enum {
        /// The allowed values.
        values: Vec<String>,
    },
    /// An order-insensitive list of scalars, duplicates removed.
    Set,
    /// An exact identifier; integers are written as their decimal string.
    Id,
}

/// Why a value could not be normalised.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NormaliseError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, NormaliseError> {
    Err(NormaliseError(msg.into()))
}

impl Normaliser {
    /// The config spelling of this normaliser's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Normaliser::Money { .. } => "money",
            Normaliser::Email => "email",
            Normaliser::Text { .. } => "text",
            Normaliser::Integer => "integer",
            Normaliser::Decimal => "decimal",
            Normaliser::Enum { .. } => "enum",
            Normaliser::Set => "set",
            Normaliser::Id => "id",
        }
    }

    /// Normalises `value`; `args` is the whole argument object (money reads its currency
    /// argument from it).
    pub fn apply(&self, value: &Value, args: &Value) -> Result<Value, NormaliseError> {
        match self {
            Normaliser::Money {
                currency_arg,
                default_currency,
                unit,
            } => {
                let side_currency = match currency_arg.as_ref().and_then(|p| p.lookup(args)) {
                    Some(Value::String(code)) => Some(parse_currency(code)?),
                    Some(other) => return err(format!("currency must be a string, got {other}")),
                    None => None,
                };
                let money = Money::parse(value, side_currency.or(*default_currency), *unit)?;
                Ok(money.to_key_value())
            }
            Normaliser::Email => normalise_email(value),
            Normaliser::Text { case_fold } => {
                let Value::String(text) = value else {
                    return err(format!("expected text, got {value}"));
                };
                let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
                Ok(Value::String(if *case_fold {
                    collapsed.to_lowercase()
                } else {
                    collapsed
                }))
            }
            Normaliser::Integer => Ok(Value::String(parse_integer(value)?.to_string())),
            Normaliser::Decimal => Ok(Value::String(parse_decimal(value)?.normalize().to_string())),
            Normaliser::Enum { values } => {
                let Value::String(text) = value else {
                    return err(format!("expected one of {values:?}, got {value}"));
                };
                let wanted = text.trim();
                values
                    .iter()
                    .find(|v| v.eq_ignore_ascii_case(wanted))
                    .map(|v| Value::String(v.clone()))
                    .ok_or_else(|| NormaliseError(format!("`{wanted}` is not one of {values:?}")))
            }
            Normaliser::Set => {
                let Value::Array(items) = value else {
                    return err(format!("expected a list, got {value}"));
                };
                let mut set = BTreeSet::new();
                for item in items {
                    set.insert(scalar_string(item)?);
                }
                Ok(Value::Array(set.into_iter().map(Value::String).collect()))
            }
            Normaliser::Id => match value {
                Value::String(s) if !s.is_empty() => Ok(Value::String(s.clone())),
                Value::Number(n) if n.is_i64() || n.is_u64() => Ok(Value::String(n.to_string())),
                _ => err(format!("expected a non-empty identifier, got {value}")),
            },
        }
    }
}

fn scalar_string(item: &Value) -> Result<String, NormaliseError> {
    match item {
        Value::String(s) => Ok(s.trim().to_owned()),
        Value::Number(n) => Ok(Decimal::from_str(&n.to_string())
            .map(|d| d.normalize().to_string())
            .unwrap_or_else(|_| n.to_string())),
        Value::Bool(b) => Ok(b.to_string()),
        other => err(format!("set members must be scalars, got {other}")),
    }
}

fn normalise_email(value: &Value) -> Result<Value, NormaliseError> {
    let Value::String(raw) = value else {
        return err(format!("expected an email address, got {value}"));
    };
    let trimmed = raw.trim();
    let Some((local, domain)) = trimmed.rsplit_once('@') else {
        return err(format!("`{trimmed}` is not an email address (no @)"));
    };
    if local.is_empty() || domain.is_empty() || domain.contains(char::is_whitespace) {
        return err(format!("`{trimmed}` is not an email address"));
    }
    Ok(Value::String(format!("{local}@{}", domain.to_lowercase())))
}

fn parse_integer(value: &Value) -> Result<i64, NormaliseError> {
    match value {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                return Ok(i);
            }
            let d = Decimal::from_str(&n.to_string())
                .map_err(|_| NormaliseError(format!("{n} is not an integer")))?;
            integral(d)
        }
        Value::String(s) => {
            let d = Decimal::from_str(s.trim())
                .map_err(|_| NormaliseError(format!("`{s}` is not an integer")))?;
            integral(d)
        }
        other => err(format!("expected an integer, got {other}")),
    }
}

fn integral(d: Decimal) -> Result<i64, NormaliseError> {
    if !d.fract().is_zero() {
        return err(format!("{d} is not a whole number"));
    }
    i64::try_from(d.trunc()).map_err(|_| NormaliseError(format!("{d} is out of range")))
}

fn parse_decimal(value: &Value) -> Result<Decimal, NormaliseError> {
    let text = match value {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.trim().to_owned(),
        other => return err(format!("expected a decimal number, got {other}")),
    };
    Decimal::from_str(&text)
        .or_else(|_| Decimal::from_scientific(&text))
        .map_err(|_| NormaliseError(format!("`{text}` is not a decimal number")))
}

fn parse_currency(code: &str) -> Result<Currency, NormaliseError> {
    let upper = code.trim().to_ascii_uppercase();
    Currency::from_code(&upper)
        .ok_or_else(|| NormaliseError(format!("`{code}` is not an ISO 4217 currency code")))
}

/// An exact amount of one currency, in integer minor units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Money {
    /// The ISO 4217 currency.
    pub currency: Currency,
    /// The amount in the currency's minor unit (cents; yen for JPY).
    pub minor: i64,
}

impl Money {
    /// Reads every accepted spelling of an amount:
    /// `"12.50"`, `12.5`, `"12.50 USD"`, `"USD 12.50"`, `{"minor": 1250}`,
    /// `{"amount": "12.50", "currency": "USD"}`.
    pub fn parse(
        value: &Value,
        fallback: Option<Currency>,
        unit: MoneyUnit,
    ) -> Result<Self, NormaliseError> {
        match value {
            Value::Number(n) => {
                let amount = parse_decimal(&Value::Number(n.clone()))?;
                let currency = need_currency(None, fallback)?;
                match unit {
                    MoneyUnit::Major => Self::from_major(amount, currency),
                    MoneyUnit::Minor => Self::from_minor(amount, currency),
                }
            }
            Value::String(text) => {
                let (amount, embedded) = split_amount_currency(text)?;
                let currency = need_currency(embedded, fallback)?;
                // A string with a decimal point is a major amount whatever `unit` says:
                // "12.50" is never 12.50 cents.
                if unit == MoneyUnit::Minor && embedded.is_none() && !amount.contains('.') {
                    let d = parse_decimal(&Value::String(amount.to_owned()))?;
                    return Self::from_minor(d, currency);
                }
                Self::from_major(parse_decimal(&Value::String(amount.to_owned()))?, currency)
            }
            Value::Object(map) => {
                let embedded = match map.get("currency") {
                    Some(Value::String(code)) => Some(parse_currency(code)?),
                    Some(other) => return err(format!("currency must be a string, got {other}")),
                    None => None,
                };
                let currency = need_currency(embedded, fallback)?;
                if let Some(minor) = map.get("minor").or_else(|| map.get("amount_minor")) {
                    Self::from_minor(parse_decimal(minor)?, currency)
                } else if let Some(major) = map.get("amount").or_else(|| map.get("value")) {
                    Self::from_major(parse_decimal(major)?, currency)
                } else {
                    err("a money object needs `minor` or `amount`")
                }
            }
            other => err(format!("expected an amount, got {other}")),
        }
    }

    fn from_major(amount: Decimal, currency: Currency) -> Result<Self, NormaliseError> {
        let exponent = u32::from(currency.exponent().unwrap_or(0));
        let normalised = amount.normalize();
        if normalised.scale() > exponent {
            return err(format!(
                "{amount} {} has more precision than the currency allows ({exponent} decimal places); \
                 oncegate never rounds an amount",
                currency.code()
            ));
        }
        let factor = Decimal::from(10_i64.pow(exponent));
        let minor = normalised
            .checked_mul(factor)
            .ok_or_else(|| NormaliseError(format!("{amount} is out of range")))?;
        Ok(Self {
            currency,
            minor: integral(minor)?,
        })
    }

    fn from_minor(amount: Decimal, currency: Currency) -> Result<Self, NormaliseError> {
        Ok(Self {
            currency,
            minor: integral(amount)?,
        })
    }

    /// The value that enters the key: minor units as a string, since RFC 8785 writes
    /// numbers as IEEE doubles.
    pub fn to_key_value(self) -> Value {
        json!({ "currency": self.currency.code(), "minor": self.minor.to_string() })
    }
}

fn need_currency(
    embedded: Option<Currency>,
    fallback: Option<Currency>,
) -> Result<Currency, NormaliseError> {
    match (embedded, fallback) {
        (Some(a), Some(b)) if a != b => err(format!(
            "the amount says {} but the currency argument says {}",
            a.code(),
            b.code()
        )),
        (Some(c), _) | (None, Some(c)) => Ok(c),
        (None, None) => {
            err("no currency: name it in the amount (\"12.50 USD\") or in the currency argument")
        }
    }
}

/// Splits "12.50 USD", "USD 12.50", "12.50USD" or "12.50" into amount and currency.
fn split_amount_currency(text: &str) -> Result<(&str, Option<Currency>), NormaliseError> {
    let t = text.trim();
    let is_alpha = |c: char| c.is_ascii_alphabetic();
    if let Some(first) = t.find(is_alpha) {
        if first == 0 {
            let end = t
                .find(|c: char| !c.is_ascii_alphabetic())
                .unwrap_or(t.len());
            let currency = parse_currency(&t[..end])?;
            return Ok((t[end..].trim(), Some(currency)));
        }
        let (amount, code) = t.split_at(first);
        return Ok((amount.trim(), Some(parse_currency(code)?)));
    }
    Ok((t, None))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn usd() -> Normaliser {
        Normaliser::Money {
            currency_arg: Some(ArgPath::parse("currency").unwrap()),
            default_currency: None,
            unit: MoneyUnit::Major,
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
        assert_eq!(
            Normaliser::Id.apply(&json!(123), &none).unwrap(),
            json!("123")
        );
        assert_eq!(
            Normaliser::Id.apply(&json!(" A-1"), &none).unwrap(),
            json!(" A-1")
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
            Just(Normaliser::Id),
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
                prop_assert_eq!(usd().apply(&s, &args).unwrap(), want.clone());
            }
        }
    }
}
