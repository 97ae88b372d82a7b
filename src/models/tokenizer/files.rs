//! Reading a CLIP vocabulary: `vocab.json` + `merges.txt` (the files the slow tokenizer loads)
//! or a fast tokenizer's `tokenizer.json`.
//!
//! Invariants:
//! - `merges.txt` is read as the slow `CLIPTokenizer` reads it: the file is trimmed, its first
//!   line skipped whatever it holds (the `#version` header in every published file), and at most
//!   [`CLIP_MERGES`] lines after it used. Blank lines are skipped; a line that is not two
//!   symbols is an error naming the file and line.
//! - `tokenizer.json` must hold a BPE model whose end-of-word suffix (when stated) is `</w>`;
//!   all its merges are used, as the fast tokenizer does.
//! - Every failure names the file: [`Error::Io`] when it cannot be read, [`Error::InvalidFile`]
//!   when it is not what CLIP needs.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::bpe::END_OF_WORD;
use super::config::{read_json, token_text, ClipTokenizerConfig};
use crate::{Error, Result};

/// Merges CLIP uses: a vocabulary of 49152 BPE tokens less the 256 byte tokens, less 2.
pub const CLIP_MERGES: usize = 49152 - 256 - 2;

/// A token -> id map and the merges, in rank order.
pub(crate) struct Vocabulary {
    pub(crate) tokens: HashMap<String, u32>,
    pub(crate) merges: Vec<(String, String)>,
}

fn invalid(file: &Path, msg: impl Into<String>) -> Error {
    Error::InvalidFile {
        file: file.display().to_string(),
        msg: msg.into(),
    }
}

/// `token -> id` entries of a JSON object.
fn vocab_entries(file: &Path, key: &str, value: &Value) -> Result<HashMap<String, u32>> {
    let map = value.as_object().ok_or_else(|| {
        invalid(
            file,
            format!(
                "{key}: expected an object of token -> id, got {}",
                kind(value)
            ),
        )
    })?;
    if map.is_empty() {
        return Err(invalid(file, format!("{key}: the vocabulary is empty")));
    }
    map.iter()
        .map(|(token, id)| {
            let id = id
                .as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| {
                    invalid(
                        file,
                        format!("{key}: token {token:?} has id {id}, expected an integer id"),
                    )
                })?;
            Ok((token.clone(), id))
        })
        .collect()
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// `vocab.json`.
pub(crate) fn read_vocab_json(path: &Path) -> Result<HashMap<String, u32>> {
    vocab_entries(path, "vocabulary", &read_json(path)?)
}

/// One merge: exactly two symbols.
fn merge_pair(file: &Path, line_no: usize, line: &str) -> Result<Option<(String, String)>> {
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next(), parts.next()) {
        (None, _, _) => Ok(None),
        (Some(a), Some(b), None) => Ok(Some((a.to_string(), b.to_string()))),
        _ => Err(invalid(
            file,
            format!("line {line_no}: expected two symbols separated by a space, got {line:?}"),
        )),
    }
}

/// `merges.txt` (see the module doc).
pub(crate) fn read_merges_txt(path: &Path) -> Result<Vec<(String, String)>> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        context: format!("reading {}", path.display()),
        source,
    })?;
    let text =
        String::from_utf8(bytes).map_err(|e| invalid(path, format!("not UTF-8 text: {e}")))?;
    let mut merges = Vec::new();
    for (i, line) in text
        .trim()
        .split('\n')
        .enumerate()
        .skip(1)
        .take(CLIP_MERGES)
    {
        if let Some(pair) = merge_pair(path, i + 1, line)? {
            merges.push(pair);
        }
    }
    Ok(merges)
}

/// The fast tokenizer's file: its vocabulary and merges, and the config it implies (special
/// tokens from its post-processor, BPE model and padding, its added tokens, its length), as
/// the base that the folder's config files override.
pub(crate) fn read_tokenizer_json(path: &Path) -> Result<(Vocabulary, ClipTokenizerConfig)> {
    let json = read_json(path)?;
    let model = json
        .get("model")
        .ok_or_else(|| invalid(path, "no `model` entry: not a tokenizer.json"))?;
    if let Some(t) = model.get("type").and_then(Value::as_str) {
        if t != "BPE" {
            return Err(invalid(
                path,
                format!("model.type: CLIP needs a BPE model, got {t:?}"),
            ));
        }
    }
    if let Some(suffix) = model.get("end_of_word_suffix") {
        if suffix.as_str() != Some(END_OF_WORD) {
            return Err(invalid(
                path,
                format!("model.end_of_word_suffix: CLIP's is \"{END_OF_WORD}\", got {suffix}"),
            ));
        }
    }
    let tokens = vocab_entries(
        path,
        "model.vocab",
        model.get("vocab").unwrap_or(&Value::Null),
    )?;
    let list = model
        .get("merges")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(path, "model.merges: expected a list of merges"))?;
    let mut merges = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let pair = match m {
            Value::String(line) => merge_pair(path, i + 1, line)?,
            Value::Array(parts) => match parts.as_slice() {
                [Value::String(a), Value::String(b)] => Some((a.clone(), b.clone())),
                _ => None,
            },
            _ => None,
        };
        merges.push(pair.ok_or_else(|| {
            invalid(
                path,
                format!("model.merges[{i}]: expected \"a b\" or [\"a\", \"b\"], got {m}"),
            )
        })?);
    }

    let mut config = ClipTokenizerConfig::default();
    let post = json.get("post_processor").unwrap_or(&Value::Null);
    for (key, slot) in [
        ("cls", &mut config.bos_token),
        ("sep", &mut config.eos_token),
    ] {
        if let Some(Value::String(t)) = post.get(key).and_then(|v| v.get(0)) {
            slot.clone_from(t);
        }
    }
    if let Some(unk) = model.get("unk_token") {
        if let Some(t) = token_text(path, "model.unk_token", unk)? {
            config.unk_token = t;
        }
    }
    let padding = json.get("padding").unwrap_or(&Value::Null);
    match padding.get("pad_token").and_then(Value::as_str) {
        Some(t) if !t.is_empty() => config.pad_token = t.to_string(),
        _ => config.pad_token.clone_from(&config.eos_token),
    }
    let length = json
        .get("truncation")
        .and_then(|t| t.get("max_length"))
        .or_else(|| padding.get("strategy").and_then(|s| s.get("Fixed")))
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok());
    if let Some(n) = length {
        config.model_max_length = n;
    }
    if let Some(added) = json.get("added_tokens").and_then(Value::as_array) {
        for (i, token) in added.iter().enumerate() {
            let key = format!("added_tokens[{i}]");
            let id = token
                .get("id")
                .and_then(Value::as_u64)
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| invalid(path, format!("{key}: expected an integer `id`")))?;
            if let Some(content) = token_text(path, &key, token)? {
                let special = token
                    .get("special")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                config.add_token(&content, Some(id), special);
            }
        }
    }
    Ok((Vocabulary { tokens, merges }, config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merges_of(name: &str, text: &str) -> Result<Vec<(String, String)>> {
        let path = std::env::temp_dir().join(format!("xpu-merges-{}-{name}", std::process::id()));
        std::fs::write(&path, text).map_err(|source| Error::Io {
            context: "writing a test file".into(),
            source,
        })?;
        let merges = read_merges_txt(&path);
        let _ = std::fs::remove_file(&path);
        merges
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_string(), b.to_string())
    }

    #[test]
    fn merges_as_the_slow_tokenizer_reads_them() -> Result<()> {
        let header = merges_of("header", "\n#version: 0.2\r\ni n\r\n\nt h\n\n")?;
        assert_eq!(header, [pair("i", "n"), pair("t", "h")]);
        // No header: the first merge is skipped all the same.
        assert_eq!(merges_of("bare", "i n\nt h\n")?, [pair("t", "h")]);
        // At most CLIP_MERGES lines after the first.
        let many: String = (0..CLIP_MERGES + 10).map(|i| format!("a{i} b\n")).collect();
        let merges = merges_of("many", &many)?;
        assert_eq!(merges.len(), CLIP_MERGES);
        assert_eq!(
            merges[CLIP_MERGES - 1],
            pair(&format!("a{CLIP_MERGES}"), "b")
        );
        assert!(merges_of("bad", "#v\na b c\n").is_err());
        Ok(())
    }
}
