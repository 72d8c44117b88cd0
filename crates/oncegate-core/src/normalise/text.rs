//! The Unicode cleaning every string key input goes through: invisible format characters
//! stripped, NFC (NFKC with width folding), optional case folding, each change noted.

use unicode_general_category::{GeneralCategory, get_general_category};
use unicode_normalization::UnicodeNormalization;

/// Which foldings an `id` opts into (both off by default: ids are exact).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Folding {
    /// Lowercase the value (`A-1` and `a-1` are one id).
    pub case: bool,
    /// NFKC instead of NFC: full-width and other compatibility forms fold onto their
    /// plain form (`Ａ１` and `A1` are one id).
    pub width: bool,
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
pub(super) fn describe_char(c: char) -> String {
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
