//! Finding a UNet's files in a diffusers folder the way `from_pretrained` users lay them out.
//!
//! Accepted: the `unet/` folder itself, or a pipeline's root holding `unet/`; weights in
//! `diffusion_pytorch_model.safetensors` or sharded under
//! `diffusion_pytorch_model.safetensors.index.json`, or, when only a variant was downloaded, in
//! `diffusion_pytorch_model.<variant>.safetensors` / `...safetensors.index.<variant>.json`
//! (`fp16` first, then others by name). Refused with an error that names what was found and
//! what to do: PyTorch pickles (`.bin`), and folders with neither config nor weights.
//!
//! Invariant: resolution only reads directory listings; the files themselves are opened and
//! validated by the loaders.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

const STEM: &str = "diffusion_pytorch_model";

/// The model folder under `dir`: itself or `dir/unet`, whichever holds `config.json` (`dir`
/// itself when it is not a folder at all, so that reading its config reports the I/O error).
pub(crate) fn model_dir(dir: &Path) -> Result<PathBuf> {
    if !dir.is_dir() {
        return Ok(dir.to_path_buf());
    }
    for candidate in [dir.to_path_buf(), dir.join("unet")] {
        if candidate.join("config.json").is_file() {
            return Ok(candidate);
        }
    }
    Err(Error::InvalidFile {
        file: dir.display().to_string(),
        msg: "no config.json here or in unet/: expected a diffusers UNet folder (config.json and \
              diffusion_pytorch_model.safetensors) or a pipeline folder holding unet/"
            .into(),
    })
}

/// `variant`'s weights file name (`None`: the plain file).
fn file_name(variant: Option<&str>) -> String {
    match variant {
        Some(v) => format!("{STEM}.{v}.safetensors"),
        None => format!("{STEM}.safetensors"),
    }
}

/// `variant`'s sharded-checkpoint index name, as diffusers' `_add_variant` spells it
/// (`diffusion_pytorch_model.safetensors.index.fp16.json`).
fn index_name(variant: Option<&str>) -> String {
    match variant {
        Some(v) => format!("{STEM}.safetensors.index.{v}.json"),
        None => format!("{STEM}.safetensors.index.json"),
    }
}

/// The variant a weights file or index name carries (`Some(None)`: the plain name; `None`: not
/// a weights name at all).
fn variant_of(name: &str) -> Option<Option<&str>> {
    if let Some(v) = name
        .strip_prefix(STEM)
        .and_then(|r| r.strip_suffix(".safetensors"))
    {
        return match v.strip_prefix('.') {
            Some(v) if !v.is_empty() => Some(Some(v)),
            _ if v.is_empty() => Some(None),
            _ => None,
        };
    }
    let rest = name
        .strip_prefix(STEM)?
        .strip_prefix(".safetensors.index")?
        .strip_suffix(".json")?;
    match rest.strip_prefix('.') {
        Some(v) if !v.is_empty() => Some(Some(v)),
        _ if rest.is_empty() => Some(None),
        _ => None,
    }
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
    let mut variants: Vec<&str> = names.iter().filter_map(|n| variant_of(n)?).collect();
    variants.sort_by_key(|v| (*v != "fp16", *v));
    match variants.first().and_then(|v| pick(Some(v))) {
        Some(p) => Ok(p),
        None => Err(missing(dir, &file_name(None), &names)),
    }
}

/// The error for a folder without the weights `want`, saying what it has instead.
fn missing(dir: &Path, want: &str, names: &[String]) -> Error {
    let ours: Vec<&String> = names.iter().filter(|n| n.starts_with(STEM)).collect();
    let hint = if ours.iter().any(|n| n.contains(".bin")) {
        "; the folder holds PyTorch pickle weights (.bin), which are not read (pickles can run \
         code): convert them with diffusers' save_pretrained(..., safe_serialization=True)"
    } else {
        ""
    };
    Error::InvalidFile {
        file: dir.display().to_string(),
        msg: format!("no weights file {want} (found {ours:?}){hint}"),
    }
}
