//! Finding a CLIP text encoder's files in a transformers model folder, as diffusers pipelines
//! lay them out in `text_encoder/` and `text_encoder_2/`.
//!
//! Accepted: the folder holding `config.json` and the weights, in `model.safetensors`, sharded
//! under `model.safetensors.index.json`, or, when only a variant was downloaded, in
//! `model.<variant>.safetensors` / `model.safetensors.index.<variant>.json` (`fp16` first, then
//! others by name). Refused with an error that says what was found and what to do: a
//! pipeline's root (which of its encoders is meant is not ours to guess), PyTorch pickles
//! (`.bin`), and folders with no weights.
//!
//! Invariant: resolution only reads directory listings; the files themselves are opened and
//! validated by the loaders.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

const STEM: &str = "model";

/// `dir` itself when it holds `config.json` (or is not a folder at all, so that reading the
/// config reports the I/O error); otherwise an error naming the encoder folders it holds.
pub(crate) fn model_dir(dir: &Path) -> Result<PathBuf> {
    if !dir.is_dir() || dir.join("config.json").is_file() {
        return Ok(dir.to_path_buf());
    }
    let encoders: Vec<&str> = ["text_encoder", "text_encoder_2"]
        .into_iter()
        .filter(|sub| dir.join(sub).join("config.json").is_file())
        .collect();
    let hint = if encoders.is_empty() {
        String::new()
    } else {
        format!("; this looks like a pipeline folder: give one of its encoders {encoders:?}")
    };
    Err(Error::InvalidFile {
        file: dir.display().to_string(),
        msg: format!(
            "no config.json here: expected a CLIP text encoder folder (config.json and \
             model.safetensors){hint}"
        ),
    })
}

/// `variant`'s weights file name (`None`: the plain file).
fn file_name(variant: Option<&str>) -> String {
    match variant {
        Some(v) => format!("{STEM}.{v}.safetensors"),
        None => format!("{STEM}.safetensors"),
    }
}

/// `variant`'s sharded-checkpoint index name, as transformers spells it
/// (`model.safetensors.index.fp16.json`).
fn index_name(variant: Option<&str>) -> String {
    match variant {
        Some(v) => format!("{STEM}.safetensors.index.{v}.json"),
        None => format!("{STEM}.safetensors.index.json"),
    }
}

/// The variant a weights file or index name carries: `model.<v>.safetensors` or
/// `model.safetensors.index.<v>.json` (a shard, `model.<v>-00001-of-00002.safetensors`, is no
/// variant of its own).
fn variant_of(name: &str) -> Option<&str> {
    let v = match name.strip_prefix("model.")?.strip_suffix(".safetensors") {
        Some(v) => v,
        None => name
            .strip_prefix("model.safetensors.index.")?
            .strip_suffix(".json")?,
    };
    (!v.is_empty() && !v.contains("-of-") && !v.contains('/')).then_some(v)
}

/// The weights of the model folder `dir`, a file or a sharded checkpoint's index: `variant`'s
/// when given, else the plain ones, else the `fp16` variant's, else another variant's (first by
/// name); a single file before an index of the same variant.
pub(crate) fn weights_file(dir: &Path, variant: Option<&str>) -> Result<PathBuf> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|source| Error::Io {
            context: format!("listing {}", dir.display()),
            source,
        })?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let has = |n: &str| names.iter().any(|x| x == n);
    let pick = |v: Option<&str>| {
        [file_name(v), index_name(v)]
            .into_iter()
            .find(|n| has(n))
            .map(|n| dir.join(n))
    };
    if let Some(v) = variant {
        return pick(Some(v)).ok_or_else(|| {
            missing(
                dir,
                &format!(
                    "{} or {} (variant {v:?})",
                    file_name(Some(v)),
                    index_name(Some(v))
                ),
                &names,
            )
        });
    }
    if let Some(p) = pick(None) {
        return Ok(p);
    }
    let mut variants: Vec<&str> = names.iter().filter_map(|n| variant_of(n)).collect();
    variants.sort_by_key(|v| (*v != "fp16", *v));
    match variants.first().and_then(|v| pick(Some(v))) {
        Some(p) => Ok(p),
        None => Err(missing(dir, &file_name(None), &names)),
    }
}

/// The error for a folder without the weights `want`, saying what it has instead.
fn missing(dir: &Path, want: &str, names: &[String]) -> Error {
    let mut found: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(".safetensors") || n.ends_with(".json") || n.ends_with(".bin"))
        .collect();
    found.sort();
    let hint = if found.iter().any(|n| n.ends_with(".bin")) {
        "; the folder holds PyTorch pickle weights (.bin), which are not read (pickles can run \
         code): convert them with transformers' save_pretrained(..., safe_serialization=True)"
    } else {
        ""
    };
    Error::InvalidFile {
        file: dir.display().to_string(),
        msg: format!("no weights file {want} (found {found:?}){hint}"),
    }
}

#[cfg(test)]
mod tests {
    use super::variant_of;

    #[test]
    fn variants_are_read_from_file_and_index_names() {
        assert_eq!(variant_of("model.fp16.safetensors"), Some("fp16"));
        assert_eq!(
            variant_of("model.safetensors.index.bf16.json"),
            Some("bf16")
        );
        for none in [
            "model.safetensors",
            "model.safetensors.index.json",
            "model-00001-of-00002.safetensors",
            "model.fp16-00001-of-00002.safetensors",
            "config.json",
            "pytorch_model.bin",
        ] {
            assert_eq!(variant_of(none), None, "{none}");
        }
    }
}
