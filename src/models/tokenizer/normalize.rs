//! Text clean-up before BPE, as transformers' slow `CLIPTokenizer` does it when ftfy is not
//! installed: BERT's `BasicTokenizer(strip_accents=False, do_split_on_punc=False)`.
//!
//! Steps, in this order (each as the Python does it):
//! 1. drop U+0000, U+FFFD and every character of a general category `C*` (controls, format
//!    characters such as U+200B and U+FEFF, private use, unassigned) except `\t`, `\n`, `\r`;
//!    turn `\t`, `\n`, `\r` and every `Zs` space into U+0020;
//! 2. put a space on each side of every CJK ideograph (the blocks BERT lists), so each one is a
//!    word of its own;
//! 3. NFC;
//! 4. split on whitespace (what is left of it: U+0020, U+2028, U+2029);
//! 5. lower-case each word on its own (full case mapping; a final sigma is decided inside the
//!    word).
//!
//! Invariant: the words returned are non-empty and contain no whitespace.
//!
//! Unicode tables are this build's (the `unicode-properties` and `unicode-normalization`
//! crates and the standard library); Python uses its own `unicodedata` (Unicode 14.0 in Python
//! 3.11). Characters assigned after the older version can differ: Python sees them as
//! unassigned (`Cn`) and drops them.

use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategory, GeneralCategoryGroup, UnicodeGeneralCategory};

/// BERT's `_is_control`: any `C*` category except tab, newline and carriage return.
fn is_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r') && c.general_category_group() == GeneralCategoryGroup::Other
}

/// BERT's `_is_whitespace`: space, tab, newline, carriage return and `Zs`.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r') || c.general_category() == GeneralCategory::SpaceSeparator
}

/// BERT's `_is_chinese_char`: the CJK Unified Ideographs blocks and their compatibility forms.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B820..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

/// The lower-cased words of `text` (see the module doc).
pub(crate) fn basic_words(text: &str) -> Vec<String> {
    let mut cleaned = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c == '\0' || c == '\u{FFFD}' || is_control(c) {
            continue;
        }
        if is_space(c) {
            cleaned.push(' ');
        } else if is_cjk(c) {
            cleaned.push(' ');
            cleaned.push(c);
            cleaned.push(' ');
        } else {
            cleaned.push(c);
        }
    }
    let normalized: String = cleaned.nfc().collect();
    // After step 1 the only whitespace left is U+0020, U+2028 and U+2029, which is exactly
    // where both Python's `str.split()` and Rust's `char::is_whitespace` split.
    normalized
        .split_whitespace()
        .map(str::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        assert_eq!(
            basic_words("  A\tPhoto\nOF\r\n a\u{3000}Cat "),
            ["a", "photo", "of", "a", "cat"]
        );
        assert_eq!(basic_words("zero\u{200B}width\u{0}\u{FFFD}"), ["zerowidth"]);
        assert_eq!(basic_words("猫cat"), ["猫", "cat"]);
        assert_eq!(basic_words("cafe\u{301}"), ["café"]);
        assert_eq!(basic_words("ΟΔΥΣΣΕΥΣ"), ["οδυσσευς"]);
        assert_eq!(basic_words("a\u{2028}b"), ["a", "b"]);
        assert!(basic_words(" \t\n").is_empty());
    }
}
