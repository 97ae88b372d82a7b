//! CLIP's word pattern, applied to one normalized word (no whitespace, lower case):
//!
//! ```text
//! <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
//! ```
//!
//! with Python `regex`'s `IGNORECASE`, scanned left to right taking the first alternative that
//! matches at each position (leftmost-first, not longest). Written out by hand rather than with
//! a regex engine; what `IGNORECASE` changes on lower-cased text is kept:
//! - `s` in a literal also matches `ſ` (U+017F LATIN SMALL LETTER LONG S, whose case folding
//!   is `s`), so `'ſ` is a contraction and `<|ſtartoftext|>` one piece;
//! - U+0345 COMBINING GREEK YPOGEGRAMMENI (folds to `ι`) is matched by neither class, so it
//!   ends the piece it is in and is dropped.
//!
//! Invariants: the pieces are non-empty, in order, and cover the word except for dropped
//! U+0345; a letter run is maximal; a number piece is one character.

use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

const SPECIALS: [&str; 2] = ["<|startoftext|>", "<|endoftext|>"];
const CONTRACTIONS: [&str; 7] = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"];
const YPOGEGRAMMENI: char = '\u{345}';

fn is_letter(c: char) -> bool {
    c.general_category_group() == GeneralCategoryGroup::Letter
}

fn is_number(c: char) -> bool {
    c.general_category_group() == GeneralCategoryGroup::Number
}

/// `c` matches the pattern's literal character `lit` under case-insensitive matching.
fn literal_eq(c: char, lit: char) -> bool {
    c == lit || c == lit.to_ascii_uppercase() || (lit == 's' && c == '\u{17F}')
}

/// Byte length of the prefix of `text` that matches `literal`, if it does.
fn match_literal(text: &str, literal: &str) -> Option<usize> {
    let mut chars = text.char_indices();
    for lit in literal.chars() {
        match chars.next() {
            Some((_, c)) if literal_eq(c, lit) => {}
            _ => return None,
        }
    }
    Some(chars.next().map_or(text.len(), |(i, _)| i))
}

/// Byte length of the longest prefix of `text` whose characters all satisfy `keep`.
fn run(text: &str, keep: impl Fn(char) -> bool) -> usize {
    text.char_indices()
        .find(|&(_, c)| !keep(c))
        .map_or(text.len(), |(i, _)| i)
}

/// Appends the pieces of `word` to `out`.
pub(crate) fn split_word<'a>(word: &'a str, out: &mut Vec<&'a str>) {
    let mut rest = word;
    while let Some(first) = rest.chars().next() {
        let len = SPECIALS
            .iter()
            .chain(CONTRACTIONS.iter())
            .find_map(|lit| match_literal(rest, lit))
            .unwrap_or_else(|| {
                if is_letter(first) {
                    run(rest, is_letter)
                } else if is_number(first) {
                    first.len_utf8()
                } else if first == YPOGEGRAMMENI {
                    0
                } else {
                    run(rest, |c| {
                        !is_letter(c) && !is_number(c) && c != YPOGEGRAMMENI && !c.is_whitespace()
                    })
                }
            });
        if len == 0 {
            rest = &rest[first.len_utf8()..];
        } else {
            out.push(&rest[..len]);
            rest = &rest[len..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(word: &str) -> Vec<&str> {
        let mut out = Vec::new();
        split_word(word, &mut out);
        out
    }

    #[test]
    fn pattern() {
        assert_eq!(pieces("don't"), ["don", "'t"]);
        assert_eq!(pieces("rock'n'roll"), ["rock", "'", "n", "'", "roll"]);
        assert_eq!(pieces("''s"), ["''", "s"]);
        assert_eq!(pieces("3.14"), ["3", ".", "1", "4"]);
        assert_eq!(pieces("hello!!"), ["hello", "!!"]);
        assert_eq!(pieces("a<|endoftext|>b"), ["a", "<|endoftext|>", "b"]);
        assert_eq!(pieces("<|endoftext|"), ["<|", "endoftext", "|"]);
        assert_eq!(pieces("<|ſtartoftext|>"), ["<|ſtartoftext|>"]);
        assert_eq!(pieces("'ſ"), ["'ſ"]);
        assert_eq!(pieces("a\u{345}b.\u{345}."), ["a", "b", ".", "."]);
        assert_eq!(pieces("\u{345}"), Vec::<&str>::new());
        assert_eq!(pieces("e\u{301}"), ["e", "\u{301}"]);
    }
}
