//! CLIP's byte-pair encoding of one piece: the piece's byte characters, the last one carrying
//! `</w>`, merged pair by pair in merge-rank order, with a per-piece cache as CLIP keeps one.
//!
//! Invariants:
//! - At each step the adjacent pair of lowest rank is merged at every non-overlapping
//!   occurrence, left to right, until no adjacent pair has a rank (the slow Python
//!   `CLIPTokenizer.bpe`, step for step).
//! - Symbols are compared by their text: every string that appears in a merge is interned, and a
//!   merge maps a pair of interned ids to its rank and the id of the joined string. A piece's
//!   character that no merge names can never merge, whatever id it gets.
//! - The cache only ever holds what [`Bpe::encode_uncached`] returns for its key, so results do
//!   not depend on it; it is emptied when it reaches [`CACHE_LIMIT`] entries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Most pieces the cache keeps before it is emptied (a bound on memory for long-running use).
pub(crate) const CACHE_LIMIT: usize = 1 << 16;

/// The suffix CLIP puts on the last symbol of each word.
pub(crate) const END_OF_WORD: &str = "</w>";

/// A symbol id that no merge names.
const UNMERGEABLE: u32 = u32::MAX;

/// Merge ranks and the piece cache.
pub(crate) struct Bpe {
    /// Interned strings that appear in merges (parts and results).
    symbols: HashMap<String, u32>,
    /// `(left, right) -> (rank, joined)`.
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// Pieces kept verbatim (the special tokens, as CLIP seeds its cache).
    verbatim: Vec<String>,
    cache: Mutex<HashMap<String, Arc<[String]>>>,
}

impl Bpe {
    /// Builds the merge table; a pair listed twice keeps its later rank (as a Python dict built
    /// from the list does). `verbatim` pieces come back unchanged, without `</w>`.
    pub(crate) fn new(merges: &[(String, String)], verbatim: Vec<String>) -> Bpe {
        let mut symbols: HashMap<String, u32> = HashMap::new();
        let intern = |s: &str, symbols: &mut HashMap<String, u32>| -> u32 {
            let next = symbols.len() as u32;
            *symbols.entry(s.to_string()).or_insert(next)
        };
        let mut table = HashMap::with_capacity(merges.len());
        for (rank, (a, b)) in merges.iter().enumerate() {
            let left = intern(a, &mut symbols);
            let right = intern(b, &mut symbols);
            let joined = intern(&format!("{a}{b}"), &mut symbols);
            table.insert((left, right), (rank as u32, joined));
        }
        Bpe {
            symbols,
            merges: table,
            verbatim,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The BPE tokens of `piece` (already mapped to byte characters).
    pub(crate) fn encode(&self, piece: &str) -> Arc<[String]> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hit) = cache.get(piece) {
            return hit.clone();
        }
        drop(cache);
        let tokens: Arc<[String]> = self.encode_uncached(piece).into();
        cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(piece.to_string(), tokens.clone());
        tokens
    }

    /// [`Bpe::encode`] without the cache.
    pub(crate) fn encode_uncached(&self, piece: &str) -> Vec<String> {
        if piece.is_empty() {
            return Vec::new();
        }
        if self.verbatim.iter().any(|v| v == piece) {
            return vec![piece.to_string()];
        }
        // Each symbol: its id and its byte range in `piece`; the last symbol's text has `</w>`.
        let chars: Vec<(usize, char)> = piece.char_indices().collect();
        let last = chars.len() - 1;
        let mut key = String::new();
        let mut word: Vec<(u32, usize, usize)> = chars
            .iter()
            .enumerate()
            .map(|(i, &(start, c))| {
                key.clear();
                key.push(c);
                if i == last {
                    key.push_str(END_OF_WORD);
                }
                let id = self.symbols.get(&key).copied().unwrap_or(UNMERGEABLE);
                (id, start, start + c.len_utf8())
            })
            .collect();
        while word.len() > 1 {
            let best = word
                .windows(2)
                .filter_map(|w| self.merges.get(&(w[0].0, w[1].0)).map(|&(rank, _)| rank))
                .min();
            let Some(rank) = best else { break };
            let mut merged = Vec::with_capacity(word.len());
            let mut i = 0;
            while i < word.len() {
                if i + 1 < word.len() {
                    if let Some(&(r, joined)) = self.merges.get(&(word[i].0, word[i + 1].0)) {
                        if r == rank {
                            merged.push((joined, word[i].1, word[i + 1].2));
                            i += 2;
                            continue;
                        }
                    }
                }
                merged.push(word[i]);
                i += 1;
            }
            word = merged;
        }
        word.iter()
            .map(|&(_, start, end)| {
                let mut token = piece[start..end].to_string();
                if end == piece.len() {
                    token.push_str(END_OF_WORD);
                }
                token
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bpe(merges: &[(&str, &str)]) -> Bpe {
        let merges: Vec<_> = merges
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        Bpe::new(&merges, vec!["<|endoftext|>".into()])
    }

    fn strings(tokens: &[&str]) -> Vec<String> {
        tokens.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn merges_in_rank_order() {
        let b = bpe(&[("a", "a"), ("aa", "a</w>"), ("b", "a")]);
        assert_eq!(b.encode_uncached("aaa"), strings(&["aaa</w>"]));
        assert_eq!(b.encode_uncached("aaaa"), strings(&["aa", "a", "a</w>"]));
        assert_eq!(b.encode_uncached("ba"), strings(&["b", "a</w>"]));
        assert_eq!(b.encode_uncached("bab"), strings(&["ba", "b</w>"]));
        assert_eq!(b.encode_uncached("x"), strings(&["x</w>"]));
        assert_eq!(
            b.encode_uncached("<|endoftext|>"),
            strings(&["<|endoftext|>"])
        );
        assert_eq!(&*b.encode("aaa"), &strings(&["aaa</w>"])[..]);
        assert_eq!(&*b.encode("aaa"), &strings(&["aaa</w>"])[..]);
    }

    #[test]
    fn later_duplicate_rank_wins() {
        // ("b", "c") is listed first and last: its rank is the later one, after ("a", "b").
        let b = bpe(&[("b", "c"), ("a", "b"), ("b", "c")]);
        assert_eq!(b.encode_uncached("abcd"), strings(&["ab", "c", "d</w>"]));
    }
}
