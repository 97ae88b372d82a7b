//! [`VaeConfig`]: diffusers' `AutoencoderKL` configuration (`vae/config.json`), with the SD
//! 1.x/2.x and SDXL presets.
//!
//! Invariants: every key of the JSON object is understood, accepted because it cannot change
//! what the model computes (`_`-prefixed bookkeeping keys, `latents_mean`/`latents_std`, which
//! only pipelines read), or rejected with [`Error::Config`] naming it; missing keys take
//! diffusers' constructor defaults. A returned config has passed [`VaeConfig::validate`].

use serde_json::{Map, Value};

use crate::json_values::{as_bool, as_f64, as_str, as_usize};
use crate::nn::ActFn;
use crate::{Error, Result};

/// The configuration of diffusers' `AutoencoderKL` (the Stable Diffusion VAE).
#[derive(Clone, Debug, PartialEq)]
pub struct VaeConfig {
    /// Image channels the encoder reads (`in_channels`, 3).
    pub in_channels: usize,
    /// Image channels the decoder writes (`out_channels`, 3).
    pub out_channels: usize,
    /// One per level; diffusers' VAE has only `DownEncoderBlock2D`, so the list carries just
    /// the number of levels (it must match `block_out_channels`).
    pub down_block_types: Vec<VaeDownBlockType>,
    /// One per level: only `UpDecoderBlock2D`.
    pub up_block_types: Vec<VaeUpBlockType>,
    /// Channels of each level, outermost first.
    pub block_out_channels: Vec<usize>,
    /// ResNets per encoder level (each decoder level has one more).
    pub layers_per_block: usize,
    /// The ResNets' activation (`act_fn`; the heads' activation is always SiLU, as in diffusers).
    pub act_fn: ActFn,
    /// Channels of the latent space (`latent_channels`).
    pub latent_channels: usize,
    /// Groups of every group normalisation (`norm_num_groups`).
    pub norm_num_groups: usize,
    /// The image size the model was trained on; the tile size of tiled decoding/encoding.
    pub sample_size: usize,
    /// Latents are `z * scaling_factor` for the diffusion model (`scaling_factor`).
    pub scaling_factor: f64,
    /// Subtracted before scaling when present (`shift_factor`; SD3, Flux).
    pub shift_factor: Option<f64>,
    /// Per-channel latent statistics some VAEs carry for their pipelines (`latents_mean`);
    /// the model itself does not use them.
    pub latents_mean: Option<Vec<f64>>,
    /// Per-channel latent standard deviations (`latents_std`), as `latents_mean`.
    pub latents_std: Option<Vec<f64>>,
    /// The pipeline should run the VAE in f32 (`force_upcast`: SD 1.x/2.x and SDXL's VAEs
    /// overflow in f16 at high resolutions).
    pub force_upcast: bool,
    /// A 1×1 `quant_conv` follows the encoder (`use_quant_conv`).
    pub use_quant_conv: bool,
    /// A 1×1 `post_quant_conv` precedes the decoder (`use_post_quant_conv`).
    pub use_post_quant_conv: bool,
    /// The mid blocks hold an attention layer between their two ResNets
    /// (`mid_block_add_attention`).
    pub mid_block_add_attention: bool,
}

/// An encoder level's block type (`down_block_types`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VaeDownBlockType {
    /// `DownEncoderBlock2D`: ResNets, then a stride-2 convolution (all but the last level).
    DownEncoderBlock2D,
}

/// A decoder level's block type (`up_block_types`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VaeUpBlockType {
    /// `UpDecoderBlock2D`: ResNets, then nearest ×2 and a convolution (all but the last level).
    UpDecoderBlock2D,
}

fn cfg_err(key: &str, msg: impl Into<String>) -> Error {
    Error::Config {
        key: key.to_string(),
        msg: msg.into(),
    }
}

impl VaeConfig {
    /// Stable Diffusion 1.x/2.x's VAE (`runwayml/stable-diffusion-v1-5/vae`): 4 levels of
    /// 128, 256, 512, 512 channels, 2 ResNets per level, 4 latent channels, scaling 0.18215.
    pub fn sd() -> VaeConfig {
        VaeConfig {
            in_channels: 3,
            out_channels: 3,
            down_block_types: vec![VaeDownBlockType::DownEncoderBlock2D; 4],
            up_block_types: vec![VaeUpBlockType::UpDecoderBlock2D; 4],
            block_out_channels: vec![128, 256, 512, 512],
            layers_per_block: 2,
            act_fn: ActFn::Silu,
            latent_channels: 4,
            norm_num_groups: 32,
            sample_size: 512,
            scaling_factor: 0.18215,
            shift_factor: None,
            latents_mean: None,
            latents_std: None,
            force_upcast: true,
            use_quant_conv: true,
            use_post_quant_conv: true,
            mid_block_add_attention: true,
        }
    }

    /// SDXL's VAE: SD's architecture with `sample_size` 1024, scaling 0.13025 and
    /// `force_upcast` (it overflows in f16).
    pub fn sdxl() -> VaeConfig {
        VaeConfig {
            sample_size: 1024,
            scaling_factor: 0.13025,
            ..VaeConfig::sd()
        }
    }

    /// Number of levels (`len(block_out_channels)`).
    pub fn levels(&self) -> usize {
        self.block_out_channels.len()
    }

    /// Pixels per latent along each side: `2^(levels - 1)` (8 for SD's VAE).
    pub fn downscale(&self) -> usize {
        1usize
            << self
                .levels()
                .saturating_sub(1)
                .min(usize::BITS as usize - 1)
    }

    /// diffusers' `tile_sample_min_size`: the image tile of tiled decoding/encoding
    /// (`sample_size`).
    pub fn tile_sample_min_size(&self) -> usize {
        self.sample_size
    }

    /// diffusers' `tile_latent_min_size`: `int(sample_size / 2^(levels - 1))`.
    pub fn tile_latent_min_size(&self) -> usize {
        self.sample_size / self.downscale()
    }

    /// Checks the configuration; the error names the offending key.
    pub fn validate(&self) -> Result<()> {
        let n = self.levels();
        if n == 0 || n > 16 {
            return Err(cfg_err(
                "block_out_channels",
                format!("expected 1 to 16 levels, got {n}"),
            ));
        }
        if self.down_block_types.len() != n {
            return Err(cfg_err(
                "down_block_types",
                format!(
                    "has {} entries but block_out_channels has {n}",
                    self.down_block_types.len()
                ),
            ));
        }
        if self.up_block_types.len() != n {
            return Err(cfg_err(
                "up_block_types",
                format!(
                    "has {} entries but block_out_channels has {n}",
                    self.up_block_types.len()
                ),
            ));
        }
        for (key, v) in [
            ("in_channels", self.in_channels),
            ("out_channels", self.out_channels),
            ("latent_channels", self.latent_channels),
            ("layers_per_block", self.layers_per_block),
            ("norm_num_groups", self.norm_num_groups),
            ("sample_size", self.sample_size),
        ] {
            if v == 0 {
                return Err(cfg_err(key, "must be at least 1, got 0"));
            }
        }
        if let Some(&c) = self
            .block_out_channels
            .iter()
            .find(|&&c| c == 0 || !c.is_multiple_of(self.norm_num_groups))
        {
            return Err(cfg_err(
                "block_out_channels",
                format!(
                    "every level's channels must be a positive multiple of norm_num_groups ({}), \
                     got {c} in {:?}",
                    self.norm_num_groups, self.block_out_channels
                ),
            ));
        }
        if !self.scaling_factor.is_finite() || self.scaling_factor == 0.0 {
            return Err(cfg_err(
                "scaling_factor",
                format!(
                    "expected a finite nonzero number, got {}",
                    self.scaling_factor
                ),
            ));
        }
        if let Some(s) = self.shift_factor.filter(|s| !s.is_finite()) {
            return Err(cfg_err(
                "shift_factor",
                format!("expected a finite number or null, got {s}"),
            ));
        }
        for (key, stats) in [
            ("latents_mean", &self.latents_mean),
            ("latents_std", &self.latents_std),
        ] {
            if let Some(s) = stats.as_ref().filter(|s| s.len() != self.latent_channels) {
                return Err(cfg_err(
                    key,
                    format!(
                        "has {} entries but latent_channels is {}",
                        s.len(),
                        self.latent_channels
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Reads and validates a diffusers `vae/config.json`.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<VaeConfig> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            context: format!("reading VAE config {}", path.display()),
            source,
        })?;
        VaeConfig::from_json_str(&text).map_err(|e| match e {
            Error::InvalidFile { msg, .. } => Error::InvalidFile {
                file: path.display().to_string(),
                msg,
            },
            other => other,
        })
    }

    /// Parses and validates the text of a diffusers `vae/config.json`.
    pub fn from_json_str(text: &str) -> Result<VaeConfig> {
        let value: Value = serde_json::from_str(text).map_err(|e| Error::InvalidFile {
            file: "config.json".into(),
            msg: format!("not valid JSON: {e}"),
        })?;
        let Value::Object(map) = value else {
            return Err(Error::InvalidFile {
                file: "config.json".into(),
                msg: "expected a JSON object at the top level".into(),
            });
        };
        VaeConfig::from_map(&map)
    }

    fn from_map(map: &Map<String, Value>) -> Result<VaeConfig> {
        // diffusers' constructor defaults.
        let mut c = VaeConfig {
            down_block_types: vec![VaeDownBlockType::DownEncoderBlock2D],
            up_block_types: vec![VaeUpBlockType::UpDecoderBlock2D],
            block_out_channels: vec![64],
            layers_per_block: 1,
            sample_size: 32,
            ..VaeConfig::sd()
        };
        for (key, v) in map {
            let k = key.as_str();
            match k {
                _ if k.starts_with('_') => {}
                "in_channels" => c.in_channels = as_usize(k, v)?,
                "out_channels" => c.out_channels = as_usize(k, v)?,
                "down_block_types" => {
                    c.down_block_types = names(k, v)?
                        .into_iter()
                        .map(|name| match name {
                            "DownEncoderBlock2D" => Ok(VaeDownBlockType::DownEncoderBlock2D),
                            other => Err(unknown_block(k, other, "DownEncoderBlock2D")),
                        })
                        .collect::<Result<_>>()?
                }
                "up_block_types" => {
                    c.up_block_types = names(k, v)?
                        .into_iter()
                        .map(|name| match name {
                            "UpDecoderBlock2D" => Ok(VaeUpBlockType::UpDecoderBlock2D),
                            other => Err(unknown_block(k, other, "UpDecoderBlock2D")),
                        })
                        .collect::<Result<_>>()?
                }
                "block_out_channels" => c.block_out_channels = usize_list(k, v)?,
                "layers_per_block" => c.layers_per_block = as_usize(k, v)?,
                "act_fn" => c.act_fn = parse_act(k, v)?,
                "latent_channels" => c.latent_channels = as_usize(k, v)?,
                "norm_num_groups" => c.norm_num_groups = as_usize(k, v)?,
                // diffusers reads the first entry of a list (`tile_latent_min_size`).
                "sample_size" => {
                    c.sample_size = match v {
                        Value::Array(a) => match a.first() {
                            Some(x) => as_usize(k, x)?,
                            None => return Err(cfg_err(k, "expected a size, got []")),
                        },
                        _ => as_usize(k, v)?,
                    }
                }
                "scaling_factor" => c.scaling_factor = as_f64(k, v)?,
                "shift_factor" => {
                    c.shift_factor = (!v.is_null()).then(|| as_f64(k, v)).transpose()?
                }
                "latents_mean" => c.latents_mean = f64_list(k, v)?,
                "latents_std" => c.latents_std = f64_list(k, v)?,
                "force_upcast" => c.force_upcast = as_bool(k, v)?,
                "use_quant_conv" => c.use_quant_conv = as_bool(k, v)?,
                "use_post_quant_conv" => c.use_post_quant_conv = as_bool(k, v)?,
                "mid_block_add_attention" => c.mid_block_add_attention = as_bool(k, v)?,
                _ => {
                    return Err(cfg_err(
                        k,
                        "unknown AutoencoderKL config key (not a parameter of diffusers' \
                         AutoencoderKL)",
                    ))
                }
            }
        }
        c.validate()?;
        Ok(c)
    }
}

fn unknown_block(key: &str, name: &str, supported: &str) -> Error {
    cfg_err(
        key,
        format!("block type {name:?} is not supported; supported: {supported:?}"),
    )
}

fn names<'a>(key: &str, v: &'a Value) -> Result<Vec<&'a str>> {
    match v {
        Value::Array(a) => a.iter().map(|x| as_str(key, x)).collect(),
        _ => Err(cfg_err(
            key,
            format!("expected a list of block names, got {v}"),
        )),
    }
}

fn usize_list(key: &str, v: &Value) -> Result<Vec<usize>> {
    match v {
        Value::Array(a) => a.iter().map(|x| as_usize(key, x)).collect(),
        _ => Err(cfg_err(
            key,
            format!("expected a list of integers, got {v}"),
        )),
    }
}

fn f64_list(key: &str, v: &Value) -> Result<Option<Vec<f64>>> {
    match v {
        Value::Null => Ok(None),
        Value::Array(a) => a
            .iter()
            .map(|x| as_f64(key, x))
            .collect::<Result<_>>()
            .map(Some),
        _ => Err(cfg_err(
            key,
            format!("expected a list of numbers or null, got {v}"),
        )),
    }
}

/// An activation name as diffusers' `get_activation` reads it.
fn parse_act(key: &str, v: &Value) -> Result<ActFn> {
    match as_str(key, v)? {
        "silu" | "swish" => Ok(ActFn::Silu),
        "gelu" => Ok(ActFn::Gelu),
        "relu" => Ok(ActFn::Relu),
        "mish" => Ok(ActFn::Mish),
        _ => Err(cfg_err(
            key,
            format!(
                "value {v} is not supported; supported: \"silu\", \"swish\", \"gelu\", \
                 \"relu\", \"mish\""
            ),
        )),
    }
}
