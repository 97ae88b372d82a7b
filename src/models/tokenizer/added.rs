//! Splitting added tokens (the special tokens, textual-inversion tokens) out of the raw text
//! before normalization, as transformers' slow tokenizer does with its trie.
//!
//! Invariants: matching is case-sensitive on the text as given; at each position the longest
//! added token that starts there wins, and the scan resumes after it (leftmost, then longest:
//! transformers' trie gives the same pieces whenever no added token contains another, as holds
//! for CLIP's `<|startoftext|>`, `<|endoftext|>` and `!`). Concatenating the pieces gives the text
//! back.

/// A piece of the text: plain text, or an added token (its index in the table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    /// Text to normalize and encode.
    Text(&'a str),
    /// The added token with this index.
    Added(usize),
}

/// Added tokens, longest first.
pub(crate) struct AddedSplitter {
    /// `(content, index)` sorted by content length, longest first.
    by_length: Vec<(String, usize)>,
}

impl AddedSplitter {
    /// A splitter for `tokens` (index = position in `tokens`); empty strings are ignored.
    pub(crate) fn new<'a>(tokens: impl IntoIterator<Item = &'a str>) -> AddedSplitter {
        let mut by_length: Vec<(String, usize)> = tokens
            .into_iter()
            .enumerate()
            .filter(|(_, t)| !t.is_empty())
            .map(|(i, t)| (t.to_string(), i))
            .collect();
        by_length.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        AddedSplitter { by_length }
    }

    /// The pieces of `text`, in order (empty text pieces are left out).
    pub(crate) fn split<'a>(&self, text: &'a str) -> Vec<Piece<'a>> {
        let mut pieces = Vec::new();
        let mut start = 0; // start of the pending text piece
        let mut pos = 0;
        while pos < text.len() {
            let rest = &text[pos..];
            match self
                .by_length
                .iter()
                .find(|(t, _)| rest.starts_with(t.as_str()))
            {
                Some((token, index)) => {
                    if start < pos {
                        pieces.push(Piece::Text(&text[start..pos]));
                    }
                    pieces.push(Piece::Added(*index));
                    pos += token.len();
                    start = pos;
                }
                None => pos += rest.chars().next().map_or(1, char::len_utf8),
            }
        }
        if start < text.len() {
            pieces.push(Piece::Text(&text[start..]));
        }
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_longest_first() {
        let s = AddedSplitter::new(["<|endoftext|>", "!", "<x>", "<x>y"]);
        assert_eq!(
            s.split("a!!<|endoftext|>b<x>yz<x>"),
            [
                Piece::Text("a"),
                Piece::Added(1),
                Piece::Added(1),
                Piece::Added(0),
                Piece::Text("b"),
                Piece::Added(3),
                Piece::Text("z"),
                Piece::Added(2),
            ]
        );
        assert_eq!(s.split("<|ENDOFTEXT|>"), [Piece::Text("<|ENDOFTEXT|>")]);
        assert!(s.split("").is_empty());
    }
}
