//! The money normaliser's grammar: every accepted spelling of an amount (numbers, "12.50
//! USD", "USD 12.50", money objects) read into exact integer minor units of one ISO 4217
//! currency, refusing what would need a guess or a rounding.

use iso_currency::Currency;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::error::{NormaliseError, err};
use super::number::{decimal_text, integral, number_decimal};

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

pub(super) fn parse_currency(code: &str) -> Result<Currency, NormaliseError> {
    let upper = code.trim().to_ascii_uppercase();
    Currency::from_code(&upper)
        .ok_or_else(|| NormaliseError(format!("`{code}` is not an ISO 4217 currency code")))
}

/// What the money normaliser reads around the amount.
pub(super) struct MoneyRules<'a> {
    /// The currency argument's path and value, when given.
    pub(super) currency_arg: Option<(&'a str, Currency)>,
    pub(super) default_currency: Option<Currency>,
    pub(super) unit: MoneyUnit,
    pub(super) allow_negative: bool,
}

/// An exact amount of one currency, in integer minor units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Money {
    /// The ISO 4217 currency.
    pub currency: Currency,
    /// The amount in the currency's minor unit (cents; yen for JPY).
    pub minor: i64,
}

/// The amount fields a money object may carry, with the unit each is in.
const MINOR_FIELDS: [&str; 2] = ["minor", "amount_minor"];
const MAJOR_FIELDS: [&str; 2] = ["amount", "value"];

impl Money {
    /// Reads every accepted spelling of an amount (the grammar is in
    /// docs/configuration.md): `"12.50"`, `12.5`, `"12.50 USD"`, `"USD 12.50"`,
    /// `{"minor": 1250}`, `{"amount": "12.50", "currency": "USD"}`.
    pub(super) fn parse(value: &Value, rules: &MoneyRules<'_>) -> Result<Self, NormaliseError> {
        let money = match value {
            Value::Number(n) => {
                let currency = resolve_currency(None, rules)?;
                let amount = number_decimal(n)?;
                check_sign(&n.to_string(), amount, rules)?;
                match rules.unit {
                    MoneyUnit::Major => Self::from_major(amount, currency)?,
                    MoneyUnit::Minor => Self::from_minor(amount, currency)?,
                }
            }
            Value::String(text) => {
                let (amount, written) = split_amount_currency(text)?;
                let currency = resolve_currency(written, rules)?;
                let d = decimal_text(amount, false)?;
                check_sign(amount, d, rules)?;
                // A string with a decimal point is a major amount whatever `unit` says:
                // "12.50" is never 12.50 cents; so is one that names its currency.
                if rules.unit == MoneyUnit::Minor && written.is_none() && !amount.contains('.') {
                    Self::from_minor(d, currency)?
                } else {
                    Self::from_major(d, currency)?
                }
            }
            Value::Object(map) => Self::parse_object(map, rules)?,
            other => return err(format!("expected an amount, got {other}")),
        };
        Ok(money)
    }

    fn parse_object(
        map: &serde_json::Map<String, Value>,
        rules: &MoneyRules<'_>,
    ) -> Result<Self, NormaliseError> {
        if let Some(unknown) = map.keys().find(|k| {
            !(k.as_str() == "currency"
                || MINOR_FIELDS.contains(&k.as_str())
                || MAJOR_FIELDS.contains(&k.as_str()))
        }) {
            return err(format!(
                "a money object has no field `{unknown}`: use `minor` (or `amount_minor`) or `amount` (or `value`), and `currency`"
            ));
        }
        let written = match map.get("currency") {
            Some(Value::String(code)) => Some(parse_currency(code)?),
            Some(other) => return err(format!("currency must be a string, got {other}")),
            None => None,
        };
        let currency = resolve_currency(written, rules)?;
        let mut found: Option<(&str, Money)> = None;
        for (field, is_minor) in MINOR_FIELDS
            .iter()
            .map(|f| (*f, true))
            .chain(MAJOR_FIELDS.iter().map(|f| (*f, false)))
        {
            let Some(raw) = map.get(field).filter(|v| !v.is_null()) else {
                continue;
            };
            let (text, amount) = match raw {
                Value::Number(n) => (n.to_string(), number_decimal(n)?),
                Value::String(s) => (s.trim().to_owned(), decimal_text(s.trim(), false)?),
                other => {
                    return err(format!(
                        "`{field}` must be a number or a string, got {other}"
                    ));
                }
            };
            check_sign(&text, amount, rules)?;
            let money = if is_minor {
                Self::from_minor(amount, currency)?
            } else {
                Self::from_major(amount, currency)?
            };
            match found {
                Some((first, prior)) if prior != money => {
                    return err(format!(
                        "conflicting amounts: `{first}` says {} but `{field}` says {}: give one of them",
                        prior.display(),
                        money.display()
                    ));
                }
                Some(_) => {}
                None => found = Some((field, money)),
            }
        }
        found
            .map(|(_, m)| m)
            .ok_or_else(|| NormaliseError("a money object needs `minor` or `amount`".into()))
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
        if !amount.fract().is_zero() {
            return err(format!(
                "{amount} is not a whole number of minor units ({} has no fraction of its minor unit)",
                currency.code()
            ));
        }
        Ok(Self {
            currency,
            minor: integral(amount)?,
        })
    }

    /// The amount a money normaliser put in a key ([`Money::to_key_value`]:
    /// `{"currency": "USD", "minor": "15000"}`), read back; `None` for anything else.
    pub fn from_key_value(value: &Value) -> Option<Self> {
        let currency = Currency::from_code(value.get("currency")?.as_str()?)?;
        let minor = value.get("minor")?.as_str()?.parse::<i64>().ok()?;
        Some(Self { currency, minor })
    }

    /// `150.00 USD`: the amount in its currency's major unit, with as many decimal
    /// places as the currency has (none for JPY), and its ISO 4217 code.
    pub fn display(self) -> String {
        let exponent = u32::from(self.currency.exponent().unwrap_or(0));
        format!(
            "{} {}",
            Decimal::new(self.minor, exponent),
            self.currency.code()
        )
    }

    /// The value that enters the key: minor units as a string, since RFC 8785 writes
    /// numbers as IEEE doubles.
    pub fn to_key_value(self) -> Value {
        json!({ "currency": self.currency.code(), "minor": self.minor.to_string() })
    }
}

/// Refuses a negative amount (and `-0`, whose minus sign says the writer meant one)
/// unless the argument declares `allow_negative`.
fn check_sign(text: &str, amount: Decimal, rules: &MoneyRules<'_>) -> Result<(), NormaliseError> {
    let negative = text.trim_start().starts_with('-') || amount.is_sign_negative();
    if negative && !rules.allow_negative {
        return err(format!(
            "`{}` is negative: this argument takes no negative amounts (declare allow_negative = true if it should)",
            text.trim()
        ));
    }
    Ok(())
}

/// The written currency (in the amount) wins over the default; it must agree with the
/// currency argument, which itself wins over the default.
fn resolve_currency(
    written: Option<Currency>,
    rules: &MoneyRules<'_>,
) -> Result<Currency, NormaliseError> {
    match (written, rules.currency_arg) {
        (Some(w), Some((path, a))) if w != a => err(format!(
            "the amount says {} but the currency argument `{path}` says {}",
            w.code(),
            a.code()
        )),
        (Some(c), _) | (None, Some((_, c))) => Ok(c),
        (None, None) => rules.default_currency.ok_or_else(|| {
            NormaliseError(
                "no currency: name it in the amount (\"12.50 USD\") or in the currency argument"
                    .into(),
            )
        }),
    }
}

/// Splits "12.50 USD", "USD 12.50", "12.50USD" or "12.50" into amount and currency: a
/// currency is a run of ASCII letters at the start or at the end.
fn split_amount_currency(text: &str) -> Result<(&str, Option<Currency>), NormaliseError> {
    let t = text.trim();
    let lead = t
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(t.len());
    let trail = t
        .rfind(|c: char| !c.is_ascii_alphabetic())
        .map_or(0, |i| i + t[i..].chars().next().map_or(1, char::len_utf8));
    if lead == t.len() {
        return err(format!("`{t}` has no amount"));
    }
    match (lead > 0, trail < t.len()) {
        (true, true) => err(format!("`{t}` names a currency twice")),
        (true, false) => Ok((t[lead..].trim(), Some(currency_code(&t[..lead], t)?))),
        (false, true) => Ok((t[..trail].trim(), Some(currency_code(&t[trail..], t)?))),
        (false, false) => Ok((t, None)),
    }
}

fn currency_code(code: &str, whole: &str) -> Result<Currency, NormaliseError> {
    if code.len() != 3 {
        if code.eq_ignore_ascii_case("e") {
            return err(format!(
                "`{whole}` is written with an exponent: in a string, write the amount in plain decimal (e.g. 12.50)"
            ));
        }
        return err(format!(
            "`{code}` in `{whole}` is not an ISO 4217 currency code (three letters, e.g. USD)"
        ));
    }
    parse_currency(code)
}
