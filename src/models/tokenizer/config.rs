//! A CLIP tokenizer's special tokens, added tokens and length ([`ClipTokenizerConfig`]), and how
//! a diffusers `tokenizer/` folder states them.
//!
//! Files read, each optional, later ones overriding earlier ones (the order transformers
//! applies them in): `tokenizer_config.json` (`model_max_length`, `bos_token`, `eos_token`,
//! `pad_token`, `unk_token`, `added_tokens_decoder`, `additional_special_tokens`), then
//! `special_tokens_map.json` (the same token keys), then `added_tokens.json` (`{"token": id}`).
//! A token is written either as a string or as an object with a `content` string (the
//! `AddedToken` form); `null` leaves the value as it was.
//!
//! Invariant: a config read from files has `model_max_length` in `2..=MAX_MODEL_LENGTH` and
//! non-empty token strings; any other value is an [`Error::InvalidFile`] naming the file and key.

use std::path::Path;

use serde_json::{Map, Value};

use crate::{Error, Result};

/// The largest `model_max_length` accepted (CLIP text models have 77 positions; transformers'
/// "no limit" value, about 1e30, is refused rather than allocated).
pub const MAX_MODEL_LENGTH: usize = 1 << 16;

/// CLIP's context length, used where no file gives one.
pub const CLIP_MODEL_MAX_LENGTH: usize = 77;

/// CLIP's start-of-text token.
pub const START_OF_TEXT: &str = "<|startoftext|>";

/// CLIP's end-of-text token (also its unknown token, and Stable Diffusion 1.x's padding).
pub const END_OF_TEXT: &str = "<|endoftext|>";

/// A token matched verbatim in the prompt before any normalization (as transformers' slow
/// tokenizer splits its added tokens out first), e.g. the special tokens or a textual-inversion
/// token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddedToken {
    /// The token's text, matched case-sensitively.
    pub content: String,
    /// Its id; `None` takes the id the vocabulary gives the same string.
    pub id: Option<u32>,
    /// Whether transformers counts it as a special token (non-special added tokens are decoded
    /// verbatim, set off by spaces).
    pub special: bool,
}

/// Special tokens, added tokens and the padded length of a CLIP tokenizer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClipTokenizerConfig {
    /// Length every [`super::Encoding`] is padded or truncated to (77 for CLIP).
    pub model_max_length: usize,
    /// Put before the text.
    pub bos_token: String,
    /// Put after the text.
    pub eos_token: String,
    /// Fills the encoding after the end token (`<|endoftext|>` in Stable Diffusion 1.x, `!` in
    /// 2.x and SDXL's second tokenizer).
    pub pad_token: String,
    /// Stands for a BPE token the vocabulary lacks.
    pub unk_token: String,
    /// Tokens split out of the text verbatim besides the four above.
    pub added_tokens: Vec<AddedToken>,
}

impl Default for ClipTokenizerConfig {
    /// Stable Diffusion 1.x's: length 77, `<|startoftext|>`, `<|endoftext|>` for end, padding
    /// and unknown.
    fn default() -> Self {
        ClipTokenizerConfig {
            model_max_length: CLIP_MODEL_MAX_LENGTH,
            bos_token: START_OF_TEXT.into(),
            eos_token: END_OF_TEXT.into(),
            pad_token: END_OF_TEXT.into(),
            unk_token: END_OF_TEXT.into(),
            added_tokens: Vec::new(),
        }
    }
}

fn invalid(file: &Path, msg: impl Into<String>) -> Error {
    Error::InvalidFile {
        file: file.display().to_string(),
        msg: msg.into(),
    }
}

/// Reads and parses a JSON file; missing or unreadable is an [`Error::Io`], bad JSON an
/// [`Error::InvalidFile`], both naming the file.
pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        context: format!("reading {}", path.display()),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|e| invalid(path, format!("not valid JSON: {e}")))
}

/// A token written as a string or as `{"content": ...}`; `Ok(None)` for `null`.
pub(crate) fn token_text(file: &Path, key: &str, value: &Value) -> Result<Option<String>> {
    let text = match value {
        Value::Null => return Ok(None),
        Value::String(s) => s,
        Value::Object(o) => match o.get("content") {
            Some(Value::String(s)) => s,
            _ => {
                return Err(invalid(
                    file,
                    format!("key `{key}`: a token object needs a string `content`, got {value}"),
                ))
            }
        },
        _ => {
            return Err(invalid(
                file,
                format!("key `{key}`: expected a string or a token object, got {value}"),
            ))
        }
    };
    if text.is_empty() {
        return Err(invalid(file, format!("key `{key}`: the token is empty")));
    }
    Ok(Some(text.clone()))
}

fn object<'a>(file: &Path, value: &'a Value) -> Result<&'a Map<String, Value>> {
    value
        .as_object()
        .ok_or_else(|| invalid(file, "expected a JSON object at the top level"))
}

impl ClipTokenizerConfig {
    /// Stable Diffusion 2.x's (and SDXL's second tokenizer's): as [`Default`] but padded with `!`.
    pub fn stable_diffusion_2() -> Self {
        ClipTokenizerConfig {
            pad_token: "!".into(),
            ..Self::default()
        }
    }

    /// The config of a tokenizer folder: [`Default`] overridden by whichever of
    /// `tokenizer_config.json`, `special_tokens_map.json` and `added_tokens.json` it holds.
    pub fn from_folder(dir: impl AsRef<Path>) -> Result<Self> {
        let mut config = Self::default();
        config.apply_folder(dir.as_ref())?;
        Ok(config)
    }

    /// Applies the folder's config files (see the module doc) on top of `self`.
    pub(crate) fn apply_folder(&mut self, dir: &Path) -> Result<()> {
        let path = dir.join("tokenizer_config.json");
        if path.is_file() {
            self.apply_tokenizer_config(&path, &read_json(&path)?)?;
        }
        let path = dir.join("special_tokens_map.json");
        if path.is_file() {
            let json = read_json(&path)?;
            self.apply_special_tokens(&path, object(&path, &json)?)?;
        }
        let path = dir.join("added_tokens.json");
        if path.is_file() {
            let json = read_json(&path)?;
            for (content, id) in object(&path, &json)? {
                let id = id
                    .as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .ok_or_else(|| {
                        invalid(
                            &path,
                            format!("token {content:?}: expected an id, got {id}"),
                        )
                    })?;
                self.add_token(content, Some(id), false);
            }
        }
        Ok(())
    }

    fn apply_tokenizer_config(&mut self, path: &Path, json: &Value) -> Result<()> {
        let map = object(path, json)?;
        if let Some(v) = map.get("model_max_length") {
            self.model_max_length = v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| (2..=MAX_MODEL_LENGTH).contains(n))
                .ok_or_else(|| {
                    invalid(
                        path,
                        format!(
                            "key `model_max_length`: expected an integer from 2 to \
                             {MAX_MODEL_LENGTH} (CLIP's is 77), got {v}"
                        ),
                    )
                })?;
        }
        if let Some(v) = map.get("added_tokens_decoder") {
            let entries = v.as_object().ok_or_else(|| {
                invalid(
                    path,
                    format!("key `added_tokens_decoder`: expected an object, got {v}"),
                )
            })?;
            for (id, token) in entries {
                let key = format!("added_tokens_decoder.{id}");
                let id: u32 = id.parse().map_err(|_| {
                    invalid(path, format!("key `{key}`: the key is not a token id"))
                })?;
                let Some(content) = token_text(path, &key, token)? else {
                    continue;
                };
                let special = token
                    .get("special")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                self.add_token(&content, Some(id), special);
            }
        }
        self.apply_special_tokens(path, map)
    }

    /// The four special-token keys and `additional_special_tokens`.
    fn apply_special_tokens(&mut self, path: &Path, map: &Map<String, Value>) -> Result<()> {
        for (key, slot) in [
            ("bos_token", &mut self.bos_token),
            ("eos_token", &mut self.eos_token),
            ("pad_token", &mut self.pad_token),
            ("unk_token", &mut self.unk_token),
        ] {
            if let Some(v) = map.get(key) {
                if let Some(text) = token_text(path, key, v)? {
                    *slot = text;
                }
            }
        }
        match map.get("additional_special_tokens") {
            None | Some(Value::Null) => {}
            Some(Value::Array(tokens)) => {
                for v in tokens {
                    if let Some(text) = token_text(path, "additional_special_tokens", v)? {
                        self.add_token(&text, None, true);
                    }
                }
            }
            Some(v) => {
                return Err(invalid(
                    path,
                    format!("key `additional_special_tokens`: expected a list, got {v}"),
                ))
            }
        }
        Ok(())
    }

    /// Adds an added token, or updates the one with the same content (an explicit id wins).
    pub(crate) fn add_token(&mut self, content: &str, id: Option<u32>, special: bool) {
        match self.added_tokens.iter_mut().find(|t| t.content == content) {
            Some(t) => {
                t.id = id.or(t.id);
                t.special |= special;
            }
            None => self.added_tokens.push(AddedToken {
                content: content.to_string(),
                id,
                special,
            }),
        }
    }
}
