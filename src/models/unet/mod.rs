//! [`UNet2DConditionModel`]: diffusers' conditional UNet (SD 1.x / 2.x family, the x4
//! upscaler's class labels and every other `class_embed_type` (stable unCLIP's projection),
//! LCM's `timestep_cond`, the other time-embedding options, `encoder_hid_proj`, and SDXL's
//! layout with its `text_time` added embedding), configured by a
//! [`UNetConfig`] and loaded from `diffusion_pytorch_model.safetensors` by diffusers' own
//! parameter names, or built with seeded random weights.
//!
//! Invariants:
//! - The block structure, channel bookkeeping, skip order, head counts and upsample sizes follow
//!   `diffusers/models/unets/unet_2d_condition.py` (0.42): up level `i` serves down level
//!   `n-1-i` and uses that level's heads, cross-attention width, transformer depth and
//!   `only_cross_attention`, with one more ResNet than the down level.
//! - Loading checks the whole file against the model's parameter list before reading any data
//!   (one [`crate::Error::Weights`] lists every missing, unexpected and mis-shaped tensor).
//! - All parameters have the model's dtype and live on its device; `forward` checks its inputs
//!   against both and keeps no intermediate tensor beyond the skip connections still needed.
//! - Activations stay in one memory format from `conv_in` to `conv_out` (channels-last on the
//!   Cpu, NCHW on the Xpu; every block keeps its input's format), converted once from the
//!   sample's format at the start and once back at the end.

mod blocks;
mod class_embed;
pub(crate) mod config;
mod config_check;
mod config_depths;
pub(crate) mod config_json;
mod embeddings;
pub(crate) mod folder;
mod forward;
mod memory;

use std::path::Path;

pub use blocks::{DownBlock, MidBlock, UpBlock};
pub use config::{
    ClassEmbedType, DownBlockType, MidBlockType, TextTimeEmbed, TimeEmbeddingType, UNetConfig,
    UpBlockType,
};
pub use embeddings::{AddedCond, TimestepEmbedding};
pub use memory::ForwardMemory;

use crate::nn::layers::{load_linear, map_linear, Conv, GroupNorm, MapFn};
use crate::nn::resnet::ResnetDims;
use crate::nn::transformer::TransformerDims;
use crate::nn::weights::{Init, ParamSource, RandomSource, Recorder, StoreSource, WeightStore};
use crate::nn::ActFn;
use crate::nn::Linear;
use crate::{DType, Device, Error, Result};
use blocks::{LevelDims, UpChannels};
use class_embed::ClassEmbedding;
use embeddings::TimeDims;

/// diffusers' `UNet2DConditionModel`; see the module docs.
#[derive(Clone, Debug)]
pub struct UNet2DConditionModel {
    config: UNetConfig,
    dtype: DType,
    device: Device,
    conv_in: Conv,
    time_embedding: TimestepEmbedding,
    /// SDXL's `add_embedding` and its `addition_time_embed_dim` (`text_time` configs).
    add_embedding: Option<(TimestepEmbedding, usize)>,
    /// `class_embedding` (`class_embed_type` or `num_class_embeds` configs).
    class_embedding: Option<ClassEmbedding>,
    /// `encoder_hid_proj` (`encoder_hid_dim` configs): text states to `cross_attention_dim`.
    encoder_hid_proj: Option<Linear>,
    down_blocks: Vec<DownBlock>,
    mid_block: Option<MidBlock>,
    up_blocks: Vec<UpBlock>,
    conv_norm_out: GroupNorm,
    conv_out: Conv,
}

fn check_float(op: &'static str, dtype: DType, device: Device) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(Error::UnsupportedDType {
            op,
            dtype,
            device,
            hint: "; models run in f32, f16 or bf16".into(),
        })
    }
}

impl UNet2DConditionModel {
    /// The architecture of `config` with seeded random weights (uniform in ±
    /// `1/sqrt(fan_in)`; norm scales 1, biases 0): the same values on every device.
    pub fn random(config: &UNetConfig, dtype: DType, device: Device, seed: u64) -> Result<Self> {
        config.validate()?;
        check_float("UNet2DConditionModel::random", dtype, device)?;
        let mut src = RandomSource {
            dtype,
            device,
            seed,
        };
        Self::build(config, &mut src, dtype, device)
    }

    /// Loads the weights of `config` from a diffusers `diffusion_pytorch_model.safetensors`, or
    /// from a sharded checkpoint given by its `*.safetensors.index.json` (f32, f16 or bf16 on
    /// disk), converted to `dtype` on `device`.
    pub fn from_safetensors(
        config: &UNetConfig,
        path: impl AsRef<Path>,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        config.validate()?;
        check_float("UNet2DConditionModel::from_safetensors", dtype, device)?;
        let store = WeightStore::open(path)?;
        store.check(&Self::parameter_shapes(config)?)?;
        let mut src = StoreSource {
            store: &store,
            dtype,
            device,
        };
        Self::build(config, &mut src, dtype, device)
    }

    /// Loads a diffusers model folder: a pipeline's `unet/` (`config.json` and
    /// `diffusion_pytorch_model.safetensors`) or the pipeline's root holding it. Where only a
    /// variant was downloaded (`diffusion_pytorch_model.fp16.safetensors`, ...) that file is
    /// read; a sharded checkpoint (`diffusion_pytorch_model.safetensors.index.json` and its
    /// shards, as `save_pretrained` writes models past `max_shard_size`) is read as one file;
    /// PyTorch pickles (`.bin`) are refused with an error that says how to convert them.
    pub fn from_pretrained(dir: impl AsRef<Path>, dtype: DType, device: Device) -> Result<Self> {
        Self::from_pretrained_variant(dir, None, dtype, device)
    }

    /// [`Self::from_pretrained`] reading the weights of `variant` (diffusers' `variant=`:
    /// `Some("fp16")` reads `diffusion_pytorch_model.fp16.safetensors`, an error if missing).
    pub fn from_pretrained_variant(
        dir: impl AsRef<Path>,
        variant: Option<&str>,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        let dir = folder::model_dir(dir.as_ref())?;
        let config = UNetConfig::from_file(dir.join("config.json"))?;
        let weights = folder::weights_file(&dir, variant)?;
        Self::from_safetensors(&config, weights, dtype, device)
    }

    /// Every parameter of the architecture as `(diffusers name, shape)`, in construction order.
    pub fn parameter_shapes(config: &UNetConfig) -> Result<Vec<(String, Vec<usize>)>> {
        config.validate()?;
        let mut rec = Recorder {
            entries: Vec::new(),
        };
        Self::build(config, &mut rec, DType::F32, Device::Cpu)?;
        Ok(rec.entries)
    }

    fn build(
        c: &UNetConfig,
        src: &mut dyn ParamSource,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        let n = c.levels();
        let ch = &c.block_out_channels;
        let temb = c.time_embed_dim();
        let resnet = |in_ch, out_ch| ResnetDims {
            in_ch,
            out_ch,
            temb: c.blocks_time_embed_dim(),
            scale_shift: c.resnet_scale_shift,
            groups: c.norm_num_groups,
            eps: c.norm_eps,
            act: c.act_fn,
            output_scale_factor: 1.0,
        };
        let transformer = |level: usize, only_cross: bool| TransformerDims {
            channels: ch[level],
            heads: c.heads(level),
            cross_dim: c.cross_attention_dim[level],
            groups: c.norm_num_groups,
            layers: 1, // set per transformer from the config's depths
            linear_projection: c.use_linear_projection,
            only_cross_attention: only_cross,
        };
        let conv_in = Conv::load(
            src,
            "conv_in",
            c.in_channels,
            ch[0],
            c.conv_in_kernel,
            1,
            c.conv_in_kernel / 2,
        )?;
        // diffusers' `time_proj`: positional (no parameters) or Gaussian Fourier (its
        // frequencies, kept in f32 in every model dtype: 2π·t·w of t up to 1000 needs them
        // exact; PyTorch draws them N(0, 1), random models uniform in ±1).
        let fourier = match c.time_embedding_type {
            TimeEmbeddingType::Positional => None,
            TimeEmbeddingType::Fourier => {
                Some(src.get_f32("time_proj.weight", &[temb / 2], Init::FanIn(1))?)
            }
        };
        let time_embedding = TimestepEmbedding::load(
            src,
            "time_embedding",
            TimeDims {
                cond_dim: c.time_cond_proj_dim,
                channels: c.timestep_input_dim(),
                embed_dim: temb,
                act: c.act_fn,
                post_act: c.timestep_post_act,
                fourier: fourier.clone(),
                flip_sin_to_cos: c.flip_sin_to_cos,
                freq_shift: c.freq_shift,
            },
        )?;
        // diffusers' order: time_embedding, encoder_hid_proj, class_embedding, add_embedding.
        let encoder_hid_proj = match c.encoder_hid_dim {
            Some(d) => Some(load_linear(
                src,
                "encoder_hid_proj",
                d,
                c.cross_attention_dim[0],
                true,
            )?),
            None => None,
        };
        let class_embedding = ClassEmbedding::load(src, c, fourier.as_ref())?;
        // diffusers: `TimestepEmbedding(projection_class_embeddings_input_dim, time_embed_dim)`
        // (default SiLU, whatever act_fn says) after `Timesteps(addition_time_embed_dim, ...)`.
        let add_embedding = match c.addition_embed {
            Some(a) => Some((
                TimestepEmbedding::load(
                    src,
                    "add_embedding",
                    TimeDims {
                        cond_dim: None,
                        channels: a.input_dim,
                        embed_dim: temb,
                        act: ActFn::Silu,
                        post_act: None,
                        fourier: None,
                        flip_sin_to_cos: c.flip_sin_to_cos,
                        freq_shift: c.freq_shift,
                    },
                )?,
                a.time_embed_dim,
            )),
            None => None,
        };
        let mut down_blocks = Vec::with_capacity(n);
        let mut out_ch = ch[0];
        for (i, kind) in c.down_block_types.iter().enumerate() {
            let in_ch = out_ch;
            out_ch = ch[i];
            let attn = *kind == DownBlockType::CrossAttnDownBlock2D;
            let d = LevelDims {
                resnet: resnet(in_ch, out_ch),
                transformer: attn.then(|| transformer(i, c.only_cross_attention[i])),
                layers: c.layers_per_block[i],
                depths: c.down_transformer_depths(i),
                resample: (i + 1 < n).then_some(c.downsample_padding),
            };
            down_blocks.push(DownBlock::load(src, &format!("down_blocks.{i}"), d)?);
        }
        let mid_block = match c.mid_block_type {
            Some(kind) => {
                let r = ResnetDims {
                    output_scale_factor: c.mid_block_scale_factor,
                    ..resnet(ch[n - 1], ch[n - 1])
                };
                let attn =
                    (kind == MidBlockType::UNetMidBlock2DCrossAttn).then(|| TransformerDims {
                        layers: c.mid_transformer_depth(),
                        ..transformer(n - 1, false)
                    });
                Some(MidBlock::load(src, "mid_block", r, attn)?)
            }
            None => None,
        };
        let mut up_blocks = Vec::with_capacity(n);
        let mut out_ch = ch[n - 1];
        for (i, kind) in c.up_block_types.iter().enumerate() {
            let level = n - 1 - i;
            let prev_out = out_ch;
            out_ch = ch[level];
            let skip_last = ch[level.saturating_sub(1)];
            let attn = *kind == UpBlockType::CrossAttnUpBlock2D;
            let d = LevelDims {
                resnet: resnet(0, out_ch),
                transformer: attn.then(|| transformer(level, c.only_cross_attention[level])),
                layers: c.layers_per_block[level] + 1,
                depths: c.up_transformer_depths(i),
                resample: (i + 1 < n).then_some(0),
            };
            let chans = UpChannels {
                prev_out,
                skip_last,
            };
            up_blocks.push(UpBlock::load(src, &format!("up_blocks.{i}"), d, chans)?);
        }
        let conv_norm_out =
            GroupNorm::load(src, "conv_norm_out", ch[0], c.norm_num_groups, c.norm_eps)?;
        let conv_out = Conv::load(
            src,
            "conv_out",
            ch[0],
            c.out_channels,
            c.conv_out_kernel,
            1,
            c.conv_out_kernel / 2,
        )?;
        // The prepacking's scratch buffers (recycled from layer to layer) are not needed once
        // every layer is built: hand them back instead of keeping up to a GB in the pool.
        crate::tensor::release_host_cache();
        Ok(UNet2DConditionModel {
            config: c.clone(),
            dtype,
            device,
            conv_in,
            time_embedding,
            add_embedding,
            class_embedding,
            encoder_hid_proj,
            down_blocks,
            mid_block,
            up_blocks,
            conv_norm_out,
            conv_out,
        })
    }

    fn map(&self, dtype: DType, device: Device, f: &mut MapFn) -> Result<Self> {
        Ok(UNet2DConditionModel {
            config: self.config.clone(),
            dtype,
            device,
            conv_in: self.conv_in.map(f)?,
            time_embedding: self.time_embedding.map(f)?,
            add_embedding: match &self.add_embedding {
                Some((e, d)) => Some((e.map(f)?, *d)),
                None => None,
            },
            class_embedding: match &self.class_embedding {
                Some(e) => Some(e.map(f)?),
                None => None,
            },
            encoder_hid_proj: match &self.encoder_hid_proj {
                Some(l) => Some(map_linear(l, f)?),
                None => None,
            },
            down_blocks: self
                .down_blocks
                .iter()
                .map(|b| b.map(f))
                .collect::<Result<_>>()?,
            mid_block: self.mid_block.as_ref().map(|m| m.map(f)).transpose()?,
            up_blocks: self
                .up_blocks
                .iter()
                .map(|b| b.map(f))
                .collect::<Result<_>>()?,
            conv_norm_out: self.conv_norm_out.map(f)?,
            conv_out: self.conv_out.map(f)?,
        })
    }

    /// The model with every parameter on `device` (prepacked again for Cpu).
    pub fn to(&self, device: Device) -> Result<Self> {
        if device == self.device {
            return Ok(self.clone()); // layers share their tensors and packed weights
        }
        self.map(self.dtype, device, &mut |t| t.to(device))
    }

    /// The model with every parameter converted to `dtype` (f32, f16 or bf16).
    pub fn to_dtype(&self, dtype: DType) -> Result<Self> {
        check_float("UNet2DConditionModel::to_dtype", dtype, self.device)?;
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        self.map(dtype, self.device, &mut |t| t.to_dtype(dtype))
    }

    /// The configuration.
    pub fn config(&self) -> &UNetConfig {
        &self.config
    }

    /// The parameters' dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The parameters' device.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The time embedding (`time_proj` + `time_embedding`).
    pub fn time_embedding(&self) -> &TimestepEmbedding {
        &self.time_embedding
    }

    /// The down levels.
    pub fn down_blocks(&self) -> &[DownBlock] {
        &self.down_blocks
    }

    /// The mid block (absent when `mid_block_type` is null).
    pub fn mid_block(&self) -> Option<&MidBlock> {
        self.mid_block.as_ref()
    }

    /// The up levels.
    pub fn up_blocks(&self) -> &[UpBlock] {
        &self.up_blocks
    }
}
