//! CLIP's (and GPT-2's) reversible map between bytes and printable characters: BPE runs on
//! strings of these characters so that no byte is whitespace or a control character.
//!
//! Invariant: the map is a bijection between the 256 byte values and 256 distinct characters;
//! the 188 printable Latin-1 bytes (`!`..=`~`, `¡`..=`¬`, `®`..=`ÿ`) map to themselves, the other
//! 68 to U+0100.. in byte order (the order `bytes_to_unicode` in CLIP's source gives).

use std::collections::HashMap;

/// Whether `b` is one of the bytes that stand for themselves.
fn printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// Byte -> character, and back.
pub(crate) struct ByteMap {
    to_char: [char; 256],
    to_byte: HashMap<char, u8>,
}

impl ByteMap {
    /// CLIP's table.
    pub(crate) fn new() -> ByteMap {
        let mut to_char = ['\0'; 256];
        let mut next = 256u32;
        for b in 0..=255u8 {
            to_char[b as usize] = if printable(b) {
                char::from(b)
            } else {
                let c = char::from_u32(next).unwrap_or('\u{FFFD}');
                next += 1;
                c
            };
        }
        let to_byte = to_char
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        ByteMap { to_char, to_byte }
    }

    /// `text`'s UTF-8 bytes as the BPE's characters.
    pub(crate) fn encode(&self, text: &str) -> String {
        text.bytes().map(|b| self.to_char[b as usize]).collect()
    }

    /// The bytes a BPE string stands for; characters outside the table (special tokens'
    /// own text is ASCII, which is inside it) are kept as their UTF-8.
    pub(crate) fn decode_into(&self, token: &str, out: &mut Vec<u8>) {
        for c in token.chars() {
            match self.to_byte.get(&c) {
                Some(&b) => out.push(b),
                None => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
    }

    /// All 256 characters in byte order.
    #[cfg(test)]
    pub(crate) fn chars(&self) -> &[char; 256] {
        &self.to_char
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_clip() {
        let map = ByteMap::new();
        assert_eq!(map.chars()[b'!' as usize], '!');
        assert_eq!(map.chars()[b' ' as usize], '\u{120}'); // 'Ġ'
        assert_eq!(map.chars()[0], '\u{100}');
        assert_eq!(map.chars()[0xAD], '\u{143}');
        let distinct: std::collections::HashSet<_> = map.chars().iter().collect();
        assert_eq!(distinct.len(), 256);
        let mut back = Vec::new();
        map.decode_into(&map.encode("héllo 猫\n"), &mut back);
        assert_eq!(back, "héllo 猫\n".as_bytes());
    }
}
