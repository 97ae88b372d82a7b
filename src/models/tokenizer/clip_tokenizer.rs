//! [`ClipTokenizer`]: loading, encoding and decoding (the steps live in the sibling modules).
//!
//! Invariants: the start, end, padding and unknown tokens and every added token resolve to ids
//! when the tokenizer is built (from the added token's own id, else the vocabulary), or building
//! fails; a BPE token is looked up among the added tokens, then in the vocabulary, and falls back
//! to the unknown token, as transformers' `convert_tokens_to_ids` does.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::added::{AddedSplitter, Piece};
use super::bpe::{Bpe, END_OF_WORD};
use super::bytes::ByteMap;
use super::config::{ClipTokenizerConfig, MAX_MODEL_LENGTH};
use super::encoding::Encoding;
use super::files::{read_merges_txt, read_tokenizer_json, read_vocab_json, Vocabulary};
use super::normalize::basic_words;
use super::pretokenize::split_word;
use crate::{Error, Result};

/// One resolved added token.
struct Added {
    content: String,
    id: u32,
}

/// Transformers' slow `CLIPTokenizer` (without ftfy) in Rust: see the module doc of
/// [`crate::models::tokenizer`].
pub struct ClipTokenizer {
    config: ClipTokenizerConfig,
    vocab: HashMap<String, u32>,
    id_to_token: HashMap<u32, String>,
    added: Vec<Added>,
    added_ids: HashMap<String, u32>,
    /// Ids decoded verbatim and set off by spaces (non-special added tokens, as transformers'
    /// slow `decode` treats them).
    verbatim_ids: HashSet<u32>,
    splitter: AddedSplitter,
    bytes: ByteMap,
    bpe: Bpe,
    bos_id: u32,
    eos_id: u32,
    pad_id: u32,
    unk_id: u32,
}

impl std::fmt::Debug for ClipTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClipTokenizer")
            .field("vocab_size", &self.vocab.len())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ClipTokenizer {
    /// Loads a diffusers pipeline's `tokenizer/` folder (or `tokenizer_2/`): `vocab.json` and
    /// `merges.txt` when both are there, else `tokenizer.json`; then `tokenizer_config.json`,
    /// `special_tokens_map.json` and `added_tokens.json` where present (see
    /// [`ClipTokenizerConfig`]). Errors name the folder or the file at fault.
    pub fn from_folder(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(Error::Io {
                context: format!("reading the tokenizer folder {}", dir.display()),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a folder"),
            });
        }
        let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
        let fast = dir.join("tokenizer.json");
        let (vocabulary, mut config, source) = if vocab.is_file() && merges.is_file() {
            let vocabulary = Vocabulary {
                tokens: read_vocab_json(&vocab)?,
                merges: read_merges_txt(&merges)?,
            };
            (vocabulary, ClipTokenizerConfig::default(), vocab)
        } else if fast.is_file() {
            let (vocabulary, config) = read_tokenizer_json(&fast)?;
            (vocabulary, config, fast)
        } else {
            let missing = if vocab.is_file() {
                "merges.txt"
            } else {
                "vocab.json"
            };
            return Err(Error::InvalidFile {
                file: dir.display().to_string(),
                msg: format!(
                    "not a CLIP tokenizer folder: {missing} is missing and there is no \
                     tokenizer.json"
                ),
            });
        };
        config.apply_folder(dir)?;
        Self::build(vocabulary, config, &source)
    }

    /// Loads `vocab.json` and `merges.txt` with Stable Diffusion 1.x's config
    /// ([`ClipTokenizerConfig::default`]).
    pub fn from_files(vocab_json: impl AsRef<Path>, merges_txt: impl AsRef<Path>) -> Result<Self> {
        Self::from_files_with_config(vocab_json, merges_txt, ClipTokenizerConfig::default())
    }

    /// Loads `vocab.json` and `merges.txt` with the given config.
    pub fn from_files_with_config(
        vocab_json: impl AsRef<Path>,
        merges_txt: impl AsRef<Path>,
        config: ClipTokenizerConfig,
    ) -> Result<Self> {
        let vocab = vocab_json.as_ref();
        let vocabulary = Vocabulary {
            tokens: read_vocab_json(vocab)?,
            merges: read_merges_txt(merges_txt.as_ref())?,
        };
        Self::build(vocabulary, config, vocab)
    }

    /// Loads a fast tokenizer's `tokenizer.json` alone: special tokens, added tokens and length
    /// come from the file (its post-processor, model, padding and truncation), with CLIP's
    /// defaults for what it does not state. Encoding still follows the slow tokenizer.
    pub fn from_tokenizer_json(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let (vocabulary, config) = read_tokenizer_json(path)?;
        Self::build(vocabulary, config, path)
    }

    fn build(vocabulary: Vocabulary, config: ClipTokenizerConfig, source: &Path) -> Result<Self> {
        let invalid = |msg: String| Error::InvalidFile {
            file: source.display().to_string(),
            msg,
        };
        if !(2..=MAX_MODEL_LENGTH).contains(&config.model_max_length) {
            return Err(invalid(format!(
                "model_max_length must be from 2 to {MAX_MODEL_LENGTH} (CLIP's is 77), got {}",
                config.model_max_length
            )));
        }
        let Vocabulary {
            tokens: vocab,
            merges,
        } = vocabulary;
        let specials = [
            &config.bos_token,
            &config.eos_token,
            &config.pad_token,
            &config.unk_token,
        ];
        // The added tokens, then the four special tokens (transformers adds those too).
        let mut wanted: Vec<(String, Option<u32>, bool)> = config
            .added_tokens
            .iter()
            .map(|t| (t.content.clone(), t.id, t.special))
            .collect();
        for s in specials {
            if !wanted.iter().any(|(c, _, _)| c == s) {
                wanted.push((s.clone(), None, true));
            }
        }
        let mut added = Vec::with_capacity(wanted.len());
        let mut verbatim_ids = HashSet::new();
        for (content, id, special) in wanted {
            if content.is_empty() {
                return Err(invalid("an added or special token is empty".into()));
            }
            let id = id.or_else(|| vocab.get(&content).copied()).ok_or_else(|| {
                invalid(format!(
                    "token {content:?} is not in the vocabulary and has no id of its own"
                ))
            })?;
            let core = specials.contains(&&content);
            if !core && (!special || id as usize >= vocab.len()) {
                verbatim_ids.insert(id);
            }
            added.push(Added { content, id });
        }
        let added_ids: HashMap<String, u32> =
            added.iter().map(|a| (a.content.clone(), a.id)).collect();
        let id_of = |t: &str| {
            added_ids
                .get(t)
                .copied()
                .ok_or_else(|| invalid(format!("special token {t:?} has no id")))
        };
        let (bos_id, eos_id) = (id_of(&config.bos_token)?, id_of(&config.eos_token)?);
        let (pad_id, unk_id) = (id_of(&config.pad_token)?, id_of(&config.unk_token)?);
        let unk_in_vocab = vocab.get(&config.unk_token).copied();
        let mut id_to_token: HashMap<u32, String> =
            vocab.iter().map(|(t, &id)| (id, t.clone())).collect();
        for a in &added {
            id_to_token.insert(a.id, a.content.clone());
        }
        let splitter = AddedSplitter::new(added.iter().map(|a| a.content.as_str()));
        let bpe = Bpe::new(
            &merges,
            vec![
                super::config::START_OF_TEXT.into(),
                super::config::END_OF_TEXT.into(),
            ],
        );
        Ok(ClipTokenizer {
            config,
            vocab,
            id_to_token,
            added,
            added_ids,
            verbatim_ids,
            splitter,
            bytes: ByteMap::new(),
            bpe,
            bos_id,
            eos_id,
            pad_id,
            // transformers looks the unknown token up in the vocabulary first.
            unk_id: unk_in_vocab.unwrap_or(unk_id),
        })
    }

    /// The id of one BPE token.
    fn token_id(&self, token: &str) -> u32 {
        self.added_ids
            .get(token)
            .or_else(|| self.vocab.get(token))
            .copied()
            .unwrap_or(self.unk_id)
    }

    /// Calls `emit` with each token of `text` (no start or end token, no truncation): an added
    /// token as `(content, Some(id))`, a BPE token as `(text, None)`.
    fn for_each_token(&self, text: &str, mut emit: impl FnMut(&str, Option<u32>)) {
        for part in self.splitter.split(text) {
            match part {
                Piece::Added(i) => emit(&self.added[i].content, Some(self.added[i].id)),
                Piece::Text(t) => {
                    for word in basic_words(t) {
                        let mut pieces = Vec::new();
                        split_word(&word, &mut pieces);
                        for piece in &pieces {
                            for token in self.bpe.encode(&self.bytes.encode(piece)).iter() {
                                emit(token, None);
                            }
                        }
                    }
                }
            }
        }
    }

    /// The BPE tokens of `text` as strings (transformers' `tokenize`): byte characters, `</w>`
    /// ending each word's last token; no start or end token, no truncation.
    pub fn tokenize(&self, text: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        self.for_each_token(text, |t, _| out.push(t.to_string()));
        Ok(out)
    }

    /// The content ids of `text`: no start or end token, no padding, no truncation.
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        self.for_each_token(text, |t, id| {
            out.push(id.unwrap_or_else(|| self.token_id(t)))
        });
        Ok(out)
    }

    /// Start token, every content id, end token: no padding and no truncation (transformers'
    /// `tokenizer(text).input_ids`, which diffusers compares with the truncated ids).
    pub fn encode_unpadded(&self, text: &str) -> Result<Vec<u32>> {
        let content = self.token_ids(text)?;
        let mut ids = Vec::with_capacity(content.len() + 2);
        ids.push(self.bos_id);
        ids.extend(content);
        ids.push(self.eos_id);
        Ok(ids)
    }

    /// `text` as a CLIP text model takes it: start token, at most `model_max_length - 2`
    /// content ids, end token, padding up to `model_max_length`; what did not fit is reported
    /// in the [`Encoding`].
    pub fn encode(&self, text: &str) -> Result<Encoding> {
        let mut content = self.token_ids(text)?;
        let max = self.config.model_max_length;
        let kept = content.len().min(max - 2);
        let truncated_ids = content.split_off(kept);
        let truncated_text = if truncated_ids.is_empty() {
            String::new()
        } else {
            self.decode(&truncated_ids)?
        };
        let mut ids = Vec::with_capacity(max);
        ids.push(self.bos_id);
        ids.extend(content);
        ids.push(self.eos_id);
        let length = ids.len();
        ids.resize(max, self.pad_id);
        Ok(Encoding {
            ids,
            length,
            truncated_ids,
            truncated_text,
        })
    }

    /// [`ClipTokenizer::encode`] for each text.
    pub fn encode_batch<S: AsRef<str>>(&self, texts: &[S]) -> Result<Vec<Encoding>> {
        texts.iter().map(|t| self.encode(t.as_ref())).collect()
    }

    /// Text of `ids` for messages, as transformers' slow `decode` gives it (special tokens kept,
    /// no clean-up of spaces): the tokens' bytes as UTF-8 (invalid sequences become U+FFFD),
    /// each `</w>` a space, trimmed; non-special added tokens verbatim, set off by spaces. An id
    /// the tokenizer does not know is an error.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let mut parts: Vec<String> = Vec::new();
        let mut bytes = Vec::new();
        let mut pending = false;
        let flush = |bytes: &mut Vec<u8>| -> String {
            let text = String::from_utf8_lossy(bytes)
                .replace(END_OF_WORD, " ")
                .trim()
                .to_string();
            bytes.clear();
            text
        };
        for &id in ids {
            let token = self.id_to_token.get(&id).ok_or_else(|| {
                Error::invalid(
                    "ClipTokenizer::decode",
                    format!("id {id} is not in the vocabulary or the added tokens"),
                )
            })?;
            if self.verbatim_ids.contains(&id) {
                if pending {
                    let text = flush(&mut bytes);
                    if !text.is_empty() {
                        parts.push(text);
                    }
                    pending = false;
                }
                parts.push(token.clone());
            } else {
                self.bytes.decode_into(token, &mut bytes);
                pending = true;
            }
        }
        if pending {
            parts.push(flush(&mut bytes));
        }
        Ok(parts.join(" "))
    }

    /// The length every encoding is padded or truncated to (77 for CLIP).
    pub fn model_max_length(&self) -> usize {
        self.config.model_max_length
    }

    /// The id of the start-of-text token.
    pub fn bos_id(&self) -> u32 {
        self.bos_id
    }

    /// The id of the end-of-text token.
    pub fn eos_id(&self) -> u32 {
        self.eos_id
    }

    /// The id padding uses (`<|endoftext|>`'s in Stable Diffusion 1.x, `!`'s, 0, in 2.x).
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// The id a BPE token missing from the vocabulary gets.
    pub fn unk_id(&self) -> u32 {
        self.unk_id
    }

    /// Entries in the vocabulary file (49408 for CLIP), as transformers' `vocab_size`: added
    /// tokens with ids of their own beyond it are not counted.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The id of a token string (an added token or a vocabulary entry, e.g. `"cat</w>"`).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.added_ids
            .get(token)
            .or_else(|| self.vocab.get(token))
            .copied()
    }

    /// The token string of an id.
    pub fn id_to_token(&self, id: u32) -> Option<&str> {
        self.id_to_token.get(&id).map(String::as_str)
    }

    /// The config in force (special tokens, added tokens, length).
    pub fn config(&self) -> &ClipTokenizerConfig {
        &self.config
    }
}
