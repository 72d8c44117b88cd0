//! Typed normalisers: the only way an argument enters an intent key.
//!
//! An agent that re-plans drifts the spelling of its arguments ("12.50", 12.5,
//! "USD 12.50", `{"minor": 1250}`), so every significant argument goes through a
//! normaliser that maps all spellings of one value onto one canonical JSON value. A value
//! that cannot be read unambiguously is an error, never a silent guess: rounding an
//! amount would merge two different intents.
//!
//! This file holds the declared normalisers and the ones that need no grammar of their
//! own (email, text, enum, set, id). The rest is split by concern: `money` (the amount
//! grammar, currencies and minor units), `number` (the strict decimal grammar integers,
//! decimals and money share, and the exact-number check on request text) and `text` (the
//! Unicode cleaning every string input goes through).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use iso_currency::Currency;
use rust_decimal::Decimal;
use serde_json::Value;

mod error;
mod money;
mod number;
mod text;

pub use error::NormaliseError;
pub use money::{Money, MoneyUnit};
pub use number::check_exact_numbers;
pub use text::{Folding, clean_text, is_format_char};

use error::err;
use money::{MoneyRules, parse_currency};
use number::{parse_decimal, parse_integer};

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
        /// Negative amounts (refunds written as `-12.50`) are accepted; off by default,
        /// so a `context.amount > N` policy cannot be passed with a minus sign.
        allow_negative: bool,
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
    Id {
        /// Opt-in case and width folding.
        folding: Folding,
    },
    /// Any JSON value as it is, written as its canonical JSON text (object keys sorted):
    /// exact, with no drift folded. The key of a fronted server's undeclared tool, whose
    /// arguments oncegate knows only by the upstream's schema.
    Json,
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
            Normaliser::Id { .. } => "id",
            Normaliser::Json => "json",
        }
    }

    /// Normalises `value`; `args` is the whole argument object (money reads its currency
    /// argument from it).
    pub fn apply(&self, value: &Value, args: &Value) -> Result<Value, NormaliseError> {
        self.apply_noting(value, args, &mut Vec::new())
    }

    /// [`Normaliser::apply`], also saying what Unicode cleaning changed ("stripped
    /// U+200B ZERO WIDTH SPACE", "NFC changed the text"): what `keys derive` shows.
    pub fn apply_noting(
        &self,
        value: &Value,
        args: &Value,
        notes: &mut Vec<String>,
    ) -> Result<Value, NormaliseError> {
        match self {
            Normaliser::Money {
                currency_arg,
                default_currency,
                unit,
                allow_negative,
            } => {
                let side = match currency_arg.as_ref().and_then(|p| p.lookup(args)) {
                    Some(Value::String(code)) => Some((
                        currency_arg
                            .as_ref()
                            .map(ArgPath::as_str)
                            .unwrap_or_default(),
                        parse_currency(code)?,
                    )),
                    Some(other) => return err(format!("currency must be a string, got {other}")),
                    None => None,
                };
                let rules = MoneyRules {
                    currency_arg: side,
                    default_currency: *default_currency,
                    unit: *unit,
                    allow_negative: *allow_negative,
                };
                Ok(Money::parse(value, &rules)?.to_key_value())
            }
            Normaliser::Email => normalise_email(value, notes),
            Normaliser::Text { case_fold } => {
                let Value::String(text) = value else {
                    return err(format!("expected text, got {value}"));
                };
                let folding = Folding {
                    case: *case_fold,
                    width: false,
                };
                let cleaned = clean_text(text, folding, notes);
                Ok(Value::String(
                    cleaned.split_whitespace().collect::<Vec<_>>().join(" "),
                ))
            }
            Normaliser::Integer => Ok(Value::String(parse_integer(value)?.to_string())),
            Normaliser::Decimal => Ok(Value::String(parse_decimal(value)?.normalize().to_string())),
            Normaliser::Enum { values } => {
                let Value::String(text) = value else {
                    return err(format!("expected one of {values:?}, got {value}"));
                };
                let cleaned = clean_text(text, Folding::default(), notes);
                let wanted = cleaned.trim();
                values
                    .iter()
                    .find(|v| v.eq_ignore_ascii_case(wanted))
                    .map(|v| Value::String(v.clone()))
                    .ok_or_else(|| NormaliseError(format!("`{wanted}` is not one of {values:?}")))
            }
            Normaliser::Json => Ok(Value::String(crate::canonical::canonical_json(value))),
            Normaliser::Set => {
                let Value::Array(items) = value else {
                    return err(format!("expected a list, got {value}"));
                };
                let mut set = BTreeSet::new();
                for item in items {
                    set.insert(scalar_string(item, notes)?);
                }
                Ok(Value::Array(set.into_iter().map(Value::String).collect()))
            }
            Normaliser::Id { folding } => match value {
                Value::String(s) => {
                    let cleaned = clean_text(s, *folding, notes);
                    if cleaned.is_empty() {
                        return err(format!(
                            "expected a non-empty identifier, got {value} (empty once invisible characters are removed)"
                        ));
                    }
                    Ok(Value::String(cleaned))
                }
                Value::Number(n) if n.is_i64() || n.is_u64() => Ok(Value::String(n.to_string())),
                _ => err(format!("expected a non-empty identifier, got {value}")),
            },
        }
    }
}

fn scalar_string(item: &Value, notes: &mut Vec<String>) -> Result<String, NormaliseError> {
    match item {
        Value::String(s) => Ok(clean_text(s, Folding::default(), notes).trim().to_owned()),
        Value::Number(n) => Ok(Decimal::from_str(&n.to_string())
            .map(|d| d.normalize().to_string())
            .unwrap_or_else(|_| n.to_string())),
        Value::Bool(b) => Ok(b.to_string()),
        other => err(format!("set members must be scalars, got {other}")),
    }
}

fn normalise_email(value: &Value, notes: &mut Vec<String>) -> Result<Value, NormaliseError> {
    let Value::String(raw) = value else {
        return err(format!("expected an email address, got {value}"));
    };
    let cleaned = clean_text(raw, Folding::default(), notes);
    let trimmed = cleaned.trim();
    let Some((local, domain)) = trimmed.rsplit_once('@') else {
        return err(format!("`{trimmed}` is not an email address (no @)"));
    };
    if local.is_empty() || domain.is_empty() || domain.contains(char::is_whitespace) {
        return err(format!("`{trimmed}` is not an email address"));
    }
    Ok(Value::String(format!("{local}@{}", domain.to_lowercase())))
}

#[cfg(test)]
mod tests;
