//! Finding a UNet's files in a diffusers folder the way `from_pretrained` users lay them out.
//!
//! Accepted: the `unet/` folder itself, or a pipeline's root holding `unet/`; weights in
//! `diffusion_pytorch_model.safetensors`, or, when only a variant was downloaded, in
//! `diffusion_pytorch_model.<variant>.safetensors` (`fp16` first, then others by name). Refused
//! with an error that names what was found and what to do: PyTorch pickles (`.bin`), sharded
//! checkpoints (`*.safetensors.index.json`), and folders with neither config nor weights.
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

/// `variant` of the weights file name (`None`: the plain file).
fn file_name(variant: Option<&str>) -> String {
    match variant {
        Some(v) => format!("{STEM}.{v}.safetensors"),
        None => format!("{STEM}.safetensors"),
    }
}

/// The weights file of the model folder `dir`: `variant`'s when given, else the plain file,
/// else the `fp16` variant, else another variant (first by name).
pub(crate) fn weights_file(dir: &Path, variant: Option<&str>) -> Result<PathBuf> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|source| Error::Io {
            context: format!("listing {}", dir.display()),
            source,
        })?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let has = |n: &str| names.iter().any(|x| x == n);
    if let Some(v) = variant {
        let want = file_name(Some(v));
        if has(&want) {
            return Ok(dir.join(want));
        }
        return Err(missing(dir, &format!("{want} (variant {v:?})"), &names));
    }
    let mut variants: Vec<&String> = names
        .iter()
        .filter(|n| {
            n.strip_prefix(STEM)
                .and_then(|r| r.strip_suffix(".safetensors"))
                .is_some_and(|v| v.starts_with('.') && v.len() > 1)
        })
        .collect();
    variants.sort_by_key(|n| (n.as_str() != file_name(Some("fp16")), n.as_str()));
    let plain = file_name(None);
    if has(&plain) {
        return Ok(dir.join(plain));
    }
    match variants.first() {
        Some(v) => Ok(dir.join(v.as_str())),
        None => Err(missing(dir, &plain, &names)),
    }
}

/// The error for a folder without the weights file `want`, saying what it has instead.
fn missing(dir: &Path, want: &str, names: &[String]) -> Error {
    let ours: Vec<&String> = names.iter().filter(|n| n.starts_with(STEM)).collect();
    let hint = if ours.iter().any(|n| n.ends_with(".index.json")) {
        "; the folder holds a sharded checkpoint (*.index.json), which is not supported: save \
         the model unsharded (diffusers' save_pretrained(..., max_shard_size=\"20GB\"))"
    } else if ours.iter().any(|n| n.ends_with(".bin")) {
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
