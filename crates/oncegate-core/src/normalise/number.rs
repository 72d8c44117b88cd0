//! The strict number grammar: integers and decimals read from JSON numbers or plain
//! decimal text (no separators, signs, symbols or exponents in strings, never rounded),
//! and the check that a request's JSON numbers are held exactly.

use rust_decimal::Decimal;
use serde_json::Value;

use super::error::{NormaliseError, err};
use super::text::{describe_char, is_format_char};

pub(super) fn parse_integer(value: &Value) -> Result<i64, NormaliseError> {
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

pub(super) fn integral(d: Decimal) -> Result<i64, NormaliseError> {
    if !d.fract().is_zero() {
        return err(format!("{d} is not a whole number"));
    }
    i64::try_from(d.trunc()).map_err(|_| NormaliseError(format!("{d} is out of range")))
}

pub(super) fn parse_decimal(value: &Value) -> Result<Decimal, NormaliseError> {
    match value {
        Value::Number(n) => number_decimal(n),
        Value::String(s) => decimal_text(s.trim(), false),
        other => err(format!("expected a decimal number, got {other}")),
    }
}

/// The exact value of a JSON number, from its decimal text (never through an f64
/// computation: serde_json writes a float as the shortest text that reads back as it).
pub(super) fn number_decimal(n: &serde_json::Number) -> Result<Decimal, NormaliseError> {
    decimal_text(&n.to_string(), true)
}

/// Reads a decimal written in the JSON number grammar: `-?(0|[1-9][0-9]*)(.[0-9]+)?`,
/// plus an exponent only for JSON numbers (`exponent_ok`). Every other spelling is
/// refused with a message saying what is wrong: `12_50` is not 1250, `1,250` could be
/// 1250 or 1.25, and so on.
pub(super) fn decimal_text(text: &str, exponent_ok: bool) -> Result<Decimal, NormaliseError> {
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
