//! Reading an [`AutoencoderKl`](super::AutoencoderKl)'s weights: the `vae/` folder (or a
//! pipeline root holding it), the weights file among the names diffusers writes, and the
//! attention parameters' legacy names.
//!
//! Invariants:
//! - Folder and file resolution are the UNet's (`diffusion_pytorch_model.safetensors`, a variant
//!   such as `.fp16.safetensors` when only that was downloaded or when asked for, or a sharded
//!   checkpoint's index); only the model folder differs (`vae/`).
//! - Checkpoints written before diffusers renamed the mid blocks' attention (`query`, `key`,
//!   `value`, `proj_attn`; `_convert_deprecated_attention_blocks` still maps them on load) are
//!   read under those names: a parameter missing under its current name is looked up under its
//!   legacy one. A file holding both names for one parameter is refused (the legacy tensor is
//!   reported as unexpected).
//! - The whole file is checked against the model's parameter list before any data is read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::nn::weights::{Init, ParamSource, StoreSource, WeightStore};
use crate::{Error, Result, Tensor};

/// diffusers' current attention parameter names and the legacy ones they replaced.
const LEGACY: [(&str, &str); 4] = [
    (".to_q.", ".query."),
    (".to_k.", ".key."),
    (".to_v.", ".value."),
    (".to_out.0.", ".proj_attn."),
];

/// The model folder under `dir`: itself or `dir/vae`, whichever holds `config.json` (`dir`
/// itself when it is not a folder, so that reading its config reports the I/O error).
pub(crate) fn model_dir(dir: &Path) -> Result<PathBuf> {
    if !dir.is_dir() {
        return Ok(dir.to_path_buf());
    }
    for candidate in [dir.to_path_buf(), dir.join("vae")] {
        if candidate.join("config.json").is_file() {
            return Ok(candidate);
        }
    }
    Err(Error::InvalidFile {
        file: dir.display().to_string(),
        msg: "no config.json here or in vae/: expected a diffusers VAE folder (config.json and \
              diffusion_pytorch_model.safetensors) or a pipeline folder holding vae/"
            .into(),
    })
}

/// The weights file (or sharded index) of the model folder `dir` (see the module docs).
pub(crate) fn weights_file(dir: &Path, variant: Option<&str>) -> Result<PathBuf> {
    crate::models::unet::folder::weights_file(dir, variant)
}

/// The legacy name of an attention parameter (`None` for every other parameter).
fn legacy_name(name: &str) -> Option<String> {
    if !name.contains(".attentions.") {
        return None;
    }
    LEGACY
        .iter()
        .find(|(new, _)| name.contains(new))
        .map(|(new, old)| name.replacen(new, old, 1))
}

/// For each expected parameter the name it is stored under: its own, or its legacy name when
/// only that is in `store`.
pub(crate) fn stored_names(
    store: &WeightStore,
    expected: &[(String, Vec<usize>)],
) -> HashMap<String, String> {
    expected
        .iter()
        .filter(|(name, _)| store.shape(name).is_none())
        .filter_map(|(name, _)| {
            let old = legacy_name(name)?;
            store.shape(&old).is_some().then(|| (name.clone(), old))
        })
        .collect()
}

/// `expected` under the names the file uses (for [`WeightStore::check`]).
pub(crate) fn as_stored(
    expected: &[(String, Vec<usize>)],
    names: &HashMap<String, String>,
) -> Vec<(String, Vec<usize>)> {
    expected
        .iter()
        .map(|(n, s)| (names.get(n).unwrap_or(n).clone(), s.clone()))
        .collect()
}

/// A [`StoreSource`] that reads renamed parameters under their stored names.
pub(crate) struct RenamedSource<'a> {
    pub(crate) inner: StoreSource<'a>,
    pub(crate) names: HashMap<String, String>,
}

impl ParamSource for RenamedSource<'_> {
    fn get(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Tensor> {
        let stored = self.names.get(name).map_or(name, String::as_str);
        self.inner.get(stored, shape, init)
    }

    fn get_f32(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Tensor> {
        let stored = self.names.get(name).map_or(name, String::as_str);
        self.inner.get_f32(stored, shape, init)
    }
}

#[cfg(test)]
mod tests {
    use super::legacy_name;

    #[test]
    fn legacy_names_are_diffusers_deprecated_attention_names() {
        let n = |s: &str| legacy_name(s);
        assert_eq!(
            n("decoder.mid_block.attentions.0.to_q.weight").as_deref(),
            Some("decoder.mid_block.attentions.0.query.weight")
        );
        assert_eq!(
            n("encoder.mid_block.attentions.0.to_out.0.bias").as_deref(),
            Some("encoder.mid_block.attentions.0.proj_attn.bias")
        );
        assert_eq!(n("encoder.mid_block.attentions.0.group_norm.weight"), None);
        assert_eq!(n("decoder.mid_block.resnets.0.conv1.weight"), None);
    }
}
