//! Typed normalisers: the only way an argument enters an intent key.
//!
//! Why one file: every typed normaliser and its strict grammar share one vocabulary of
//! refusals, hence one file for now.
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
use unicode_general_category::{GeneralCategory, get_general_category};
use unicode_normalization::UnicodeNormalization;

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

/// Which foldings an `id` opts into (both off by default: ids are exact).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Folding {
    /// Lowercase the value (`A-1` and `a-1` are one id).
    pub case: bool,
    /// NFKC instead of NFC: full-width and other compatibility forms fold onto their
    /// plain form (`Ａ１` and `A1` are one id).
    pub width: bool,
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
            Normaliser::Id { .. } => "id",
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

/// Whether `c` is an invisible format character (Unicode general category Cf: zero-width
/// space and joiners, BOM, bidi controls, soft hyphen, tag characters...).
pub fn is_format_char(c: char) -> bool {
    get_general_category(c) == GeneralCategory::Format
}

/// The Unicode cleaning every string key input goes through: invisible format
/// characters are stripped (they never distinguish two intents), then the text is
/// NFC-normalised (NFKC with `folding.width`) and optionally lowercased. Pure ASCII
/// without case folding comes back unchanged, so keys issued before this cleaning
/// existed stay the same. Each change is described in `notes`.
pub fn clean_text(text: &str, folding: Folding, notes: &mut Vec<String>) -> String {
    if text.is_ascii() && !folding.case {
        return text.to_owned();
    }
    let mut stripped: Vec<char> = Vec::new();
    // Stripped before normalising: a format character between a letter and its
    // combining mark would otherwise block the composition.
    let visible: String = text
        .chars()
        .filter(|&c| {
            let format = is_format_char(c);
            if format && !stripped.contains(&c) {
                stripped.push(c);
            }
            !format
        })
        .collect();
    for c in stripped {
        notes.push(format!("stripped {}", describe_char(c)));
    }
    let normal: String = if folding.width {
        visible.nfkc().collect()
    } else {
        visible.nfc().collect()
    };
    if normal != visible {
        notes.push(if folding.width {
            "NFKC changed the text (width folding)".to_owned()
        } else {
            "NFC changed the text".to_owned()
        });
    }
    if !folding.case {
        return normal;
    }
    // Lowercasing can leave a string that is no longer in normal form: normalise again.
    let lower: String = if folding.width {
        normal.to_lowercase().nfkc().collect()
    } else {
        normal.to_lowercase().nfc().collect()
    };
    if lower != normal {
        notes.push("case folding changed the text".to_owned());
    }
    lower
}

/// `U+200B ZERO WIDTH SPACE`: names for the characters people meet, the code point for
/// the rest.
fn describe_char(c: char) -> String {
    let name = match c {
        '\u{00AD}' => " SOFT HYPHEN",
        '\u{061C}' => " ARABIC LETTER MARK",
        '\u{180E}' => " MONGOLIAN VOWEL SEPARATOR",
        '\u{200B}' => " ZERO WIDTH SPACE",
        '\u{200C}' => " ZERO WIDTH NON-JOINER",
        '\u{200D}' => " ZERO WIDTH JOINER",
        '\u{200E}' => " LEFT-TO-RIGHT MARK",
        '\u{200F}' => " RIGHT-TO-LEFT MARK",
        '\u{202A}'..='\u{202E}' => " (bidi embedding/override)",
        '\u{2060}' => " WORD JOINER",
        '\u{2066}'..='\u{2069}' => " (bidi isolate)",
        '\u{FEFF}' => " BYTE ORDER MARK",
        _ => "",
    };
    format!("U+{:04X}{name}", u32::from(c))
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

fn parse_integer(value: &Value) -> Result<i64, NormaliseError> {
    match value {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                return Ok(i);
            }
            integral(number_decimal(n)?)
        }
        Value::String(s) => integral(decimal_text(s.trim(), false)?),
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
    match value {
        Value::Number(n) => number_decimal(n),
        Value::String(s) => decimal_text(s.trim(), false),
        other => err(format!("expected a decimal number, got {other}")),
    }
}

/// The exact value of a JSON number, from its decimal text (never through an f64
/// computation: serde_json writes a float as the shortest text that reads back as it).
fn number_decimal(n: &serde_json::Number) -> Result<Decimal, NormaliseError> {
    decimal_text(&n.to_string(), true)
}

/// Reads a decimal written in the JSON number grammar: `-?(0|[1-9][0-9]*)(.[0-9]+)?`,
/// plus an exponent only for JSON numbers (`exponent_ok`). Every other spelling is
/// refused with a message saying what is wrong: `12_50` is not 1250, `1,250` could be
/// 1250 or 1.25, and so on.
fn decimal_text(text: &str, exponent_ok: bool) -> Result<Decimal, NormaliseError> {
    if text.is_empty() {
        return err("an empty string is not a number");
    }
    if let Some(c) = text.chars().find(|&c| is_format_char(c)) {
        return err(format!(
            "`{text}` contains the invisible character {}: write the number with digits only",
            describe_char(c)
        ));
    }
    if text.contains('_') {
        return err(format!(
            "`{text}` uses `_` as a digit separator, which is ambiguous (is `12_50` 1250 or 12.50?): write plain digits with at most one `.`, e.g. 1250 or 12.50"
        ));
    }
    if text.contains(',') {
        return err(format!(
            "`{text}` contains `,`, which is a thousands separator in some places and a decimal comma in others: write plain digits with at most one `.`, e.g. 1250.00 or 1.25"
        ));
    }
    if text.contains(['\'', ' ', '\u{a0}', '\u{202f}']) {
        return err(format!(
            "`{text}` groups digits with spaces or `'`: write plain digits with at most one `.`"
        ));
    }
    if text.starts_with('+') {
        return err(format!(
            "`{text}` starts with `+`: write the number without it"
        ));
    }
    if let Some(c) = text.chars().find(|c| "$€£¥₹₩₽¢".contains(*c)) {
        return err(format!(
            "`{text}` uses the currency symbol `{c}`, which several currencies share: name the currency by its ISO 4217 code (\"12.50 USD\")"
        ));
    }
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    };
    if exponent.is_some() && !exponent_ok {
        return err(format!(
            "`{text}` is written with an exponent: in a string, write the amount in plain decimal (e.g. 12.50); exponents are read only in JSON numbers"
        ));
    }
    let digits = mantissa.strip_prefix('-').unwrap_or(mantissa);
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (digits, None),
    };
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(int) || frac.is_some_and(|f| !all_digits(f)) {
        return err(format!(
            "`{text}` is not a number: write digits with at most one `.` and digits on both sides of it, e.g. 12.50, 0.5 or -3"
        ));
    }
    if int.len() > 1 && int.starts_with('0') {
        return err(format!(
            "`{text}` has a leading zero: write it without (leading zeros are not part of the number grammar)"
        ));
    }
    if let Some(e) = exponent {
        let e_digits = e.strip_prefix(['-', '+']).unwrap_or(e);
        if !all_digits(e_digits) {
            return err(format!("`{text}` has a malformed exponent"));
        }
    }
    let parsed = match exponent {
        Some(_) => Decimal::from_scientific(text),
        None => Decimal::from_str_exact(text),
    };
    parsed.map_err(|_| {
        NormaliseError(format!(
            "`{text}` has more digits than oncegate holds exactly (28 significant digits) or is out of range"
        ))
    })
}

fn parse_currency(code: &str) -> Result<Currency, NormaliseError> {
    let upper = code.trim().to_ascii_uppercase();
    Currency::from_code(&upper)
        .ok_or_else(|| NormaliseError(format!("`{code}` is not an ISO 4217 currency code")))
}

/// Refuses JSON text holding a number that serde_json cannot hold exactly.
///
/// Arguments arrive as `serde_json::Value`, whose numbers are i64, u64 or f64:
/// `12.5000000000000001` becomes 12.5 and a 25-digit integer becomes a rounded float
/// before any normaliser sees it. The gateway runs this on the request text first, so a
/// number whose written value differs from the value oncegate would key and forward is
/// refused, never silently rounded. `text` must already be valid JSON.
pub fn check_exact_numbers(text: &[u8]) -> Result<(), NormaliseError> {
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < text.len()
                    && matches!(text[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                let token = std::str::from_utf8(&text[start..i]).unwrap_or_default();
                check_exact_number(token)?;
            }
            _ => i += 1,
        }
    }
    Ok(())
}

fn check_exact_number(token: &str) -> Result<(), NormaliseError> {
    let held = match serde_json::from_str::<Value>(token) {
        Ok(Value::Number(n)) => n.to_string(),
        // Not a number on its own (cannot happen in valid JSON): nothing to compare.
        _ => return Ok(()),
    };
    match (canonical_number(token), canonical_number(&held)) {
        (Some(a), Some(b)) if a == b => Ok(()),
        _ => err(format!(
            "the JSON number {token} cannot be held exactly (it would be read as {held}): oncegate never rounds a number; send it as a string, e.g. \"{token}\""
        )),
    }
}

/// A JSON number's value as (negative, significant digits, power of ten), so `12.50`,
/// `1.25e1` and `1250e-2` compare equal at any magnitude (serde_json writes `1e300` as
/// `1e+300`). Zero is one value whatever its sign.
fn canonical_number(text: &str) -> Option<(bool, String, i64)> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{int}{frac}");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return Some((false, String::new(), 0));
    }
    let trimmed = significant.trim_end_matches('0');
    let power = exponent
        .checked_sub(i64::try_from(frac.len()).ok()?)?
        .checked_add(i64::try_from(significant.len() - trimmed.len()).ok()?)?;
    Some((negative, trimmed.to_owned(), power))
}

/// What the money normaliser reads around the amount.
struct MoneyRules<'a> {
    /// The currency argument's path and value, when given.
    currency_arg: Option<(&'a str, Currency)>,
    default_currency: Option<Currency>,
    unit: MoneyUnit,
    allow_negative: bool,
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
    fn parse(value: &Value, rules: &MoneyRules<'_>) -> Result<Self, NormaliseError> {
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

    /// `12.50 USD`, for messages.
    fn display(self) -> String {
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

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
}
