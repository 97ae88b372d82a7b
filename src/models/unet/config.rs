//! [`UNetConfig`]: the architecture of a `UNet2DConditionModel`, read from diffusers'
//! `unet/config.json` (parsed in `config_json.rs`).
//!
//! Invariants:
//! - Every key of the JSON object is either understood (its value is parsed and used), accepted
//!   because it cannot change the result of the supported architecture (`sample_size`, `dropout`
//!   at inference, `_`-prefixed bookkeeping keys, ...), or rejected with [`Error::Config`] naming
//!   the key. A value is never silently ignored, and an unknown key is an error.
//! - After [`UNetConfig::validate`] (run by every constructor) the per-level lists all have one
//!   entry per down block, every channel count is divisible by `norm_num_groups`, and every
//!   attention level's channels divide evenly into its heads.
//! - Heads follow diffusers' naming quirk: `num_attention_heads` defaults to
//!   `attention_head_dim`, so SD 1.x's `attention_head_dim: 8` means 8 heads per transformer;
//!   the head size is `channels / heads` of the level.

use crate::nn::ActFn;
use crate::Error;

/// The down block kinds of SD 1.x/2.x UNets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DownBlockType {
    /// `CrossAttnDownBlock2D`: ResNet + Transformer2DModel pairs, then a strided conv.
    CrossAttnDownBlock2D,
    /// `DownBlock2D`: ResNets, then a strided conv.
    DownBlock2D,
}

/// The up block kinds of SD 1.x/2.x UNets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpBlockType {
    /// `CrossAttnUpBlock2D`: (skip concat, ResNet, Transformer2DModel) triples, then upsampling.
    CrossAttnUpBlock2D,
    /// `UpBlock2D`: (skip concat, ResNet) pairs, then upsampling.
    UpBlock2D,
}

/// The mid block kinds (`mid_block_type`) of a `UNet2DConditionModel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MidBlockType {
    /// `UNetMidBlock2DCrossAttn`: ResNet, transformer, ResNet.
    UNetMidBlock2DCrossAttn,
    /// `UNetMidBlock2D` as `UNet2DConditionModel` builds it (no layers, no attention): one
    /// ResNet.
    UNetMidBlock2D,
}

/// SDXL's `addition_embed_type: "text_time"`: pooled text embeddings and "time ids" (image
/// sizes and crop offsets), each id projected sinusoidally, concatenated and embedded by
/// `add_embedding` (a `TimestepEmbedding` with SiLU), added to the time embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextTimeEmbed {
    /// `addition_time_embed_dim`: the sinusoid width of each time id.
    pub time_embed_dim: usize,
    /// `projection_class_embeddings_input_dim`: `add_embedding`'s input width, the text
    /// embedding's width plus `time_embed_dim` per time id.
    pub input_dim: usize,
}

/// `time_embedding_type`: how timesteps become the time embedding's input (`time_proj`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeEmbeddingType {
    /// `"positional"`: the sinusoid of `Timesteps(block_out_channels[0], flip_sin_to_cos,
    /// freq_shift)`; the time embedding is `4 * block_out_channels[0]` wide by default.
    Positional,
    /// `"fourier"`: `GaussianFourierProjection` (a stored frequency vector `time_proj.weight`
    /// of half the time embedding's width: `sin`/`cos` of `2π t w`); the time embedding is
    /// `2 * block_out_channels[0]` wide by default and is also the projection's width.
    Fourier,
}

/// `class_embed_type`: how `class_labels` enter the time embedding when it is set (diffusers
/// then ignores `num_class_embeds`; with it null, `num_class_embeds` selects a lookup table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassEmbedType {
    /// `"timestep"`: the labels are timesteps, projected by the model's own sinusoid and
    /// embedded by a `TimestepEmbedding` with `act_fn`.
    Timestep,
    /// `"identity"`: the labels are already embeddings `[B, time_embed_dim]`.
    Identity,
    /// `"projection"`: float vectors `[B, input_dim]` embedded by a `TimestepEmbedding` with
    /// SiLU (stable unCLIP's image embedding with its noise-level embedding).
    Projection {
        /// `projection_class_embeddings_input_dim`.
        input_dim: usize,
    },
    /// `"simple_projection"`: float vectors `[B, input_dim]` through one Linear.
    SimpleProjection {
        /// `projection_class_embeddings_input_dim`.
        input_dim: usize,
    },
}

/// The architecture of a diffusers `UNet2DConditionModel` (SD 1.x / 2.x family and SDXL's
/// layout). Per-level lists
/// are already expanded to one entry per down block.
#[derive(Clone, Debug, PartialEq)]
pub struct UNetConfig {
    /// Latent channels in (`in_channels`).
    pub in_channels: usize,
    /// Latent channels out (`out_channels`).
    pub out_channels: usize,
    /// `center_input_sample`: feed `2 * sample - 1`.
    pub center_input_sample: bool,
    /// `flip_sin_to_cos` of the sinusoidal timestep embedding.
    pub flip_sin_to_cos: bool,
    /// `freq_shift` (diffusers' `downscale_freq_shift`).
    pub freq_shift: f64,
    /// `down_block_types`, one per level.
    pub down_block_types: Vec<DownBlockType>,
    /// `up_block_types`, one per level (deepest first).
    pub up_block_types: Vec<UpBlockType>,
    /// `mid_block_type` (`None` for null: no mid block).
    pub mid_block_type: Option<MidBlockType>,
    /// `only_cross_attention` per down level (up levels use the reversed list).
    pub only_cross_attention: Vec<bool>,
    /// `block_out_channels`, one per level.
    pub block_out_channels: Vec<usize>,
    /// `layers_per_block` per down level (up levels have one more, reversed).
    pub layers_per_block: Vec<usize>,
    /// `downsample_padding` of the strided convs (0 pads right/bottom by one, as diffusers).
    pub downsample_padding: usize,
    /// `mid_block_scale_factor`: the mid block's ResNet outputs are divided by it.
    pub mid_block_scale_factor: f64,
    /// `act_fn` of the ResNets and the time embedding.
    pub act_fn: ActFn,
    /// `norm_num_groups` of every GroupNorm.
    pub norm_num_groups: usize,
    /// `norm_eps` of the ResNet and output GroupNorms.
    pub norm_eps: f64,
    /// `cross_attention_dim` per level (the text encoder's width).
    pub cross_attention_dim: Vec<usize>,
    /// `transformer_layers_per_block`: per down level, the transformer depth of each layer (one
    /// entry per ResNet; a config's int is repeated). The mid block takes the last level's
    /// first entry, as diffusers does.
    pub transformer_layers_per_block: Vec<Vec<usize>>,
    /// `reverse_transformer_layers_per_block` (diffusers' "asymmetrical UNet"): per up block
    /// (deepest level first), the depth of each of its `layers_per_block + 1` transformers;
    /// `None` mirrors the (then uniform) down levels.
    pub reverse_transformer_layers_per_block: Option<Vec<Vec<usize>>>,
    /// `attention_head_dim` per level as written in the config (see [`UNetConfig::heads`]).
    pub attention_head_dim: Vec<usize>,
    /// `num_attention_heads` per level, if the config sets it.
    pub num_attention_heads: Option<Vec<usize>>,
    /// `use_linear_projection`: Linear (true) or 1x1 conv (false) proj_in/proj_out.
    pub use_linear_projection: bool,
    /// `upcast_attention`: softmax in f32 (always true of our kernels, which accumulate in f32).
    pub upcast_attention: bool,
    /// `time_embedding_type`.
    pub time_embedding_type: TimeEmbeddingType,
    /// `time_embedding_dim` (default `4 * block_out_channels[0]`, `2 *` for `"fourier"`).
    pub time_embedding_dim: Option<usize>,
    /// `conv_in_kernel` (odd).
    pub conv_in_kernel: usize,
    /// `conv_out_kernel` (odd).
    pub conv_out_kernel: usize,
    /// `sample_size` (informational: the latent size the model was trained at).
    pub sample_size: Option<usize>,
    /// `addition_embed_type: "text_time"` (SDXL) with its sizes; `None` for SD 1.x/2.x.
    pub addition_embed: Option<TextTimeEmbed>,
    /// `num_class_embeds` (with `class_embed_type` null): a learned embedding of integer class
    /// labels added to the time embedding (the SD 2 x4 upscaler's noise level).
    pub num_class_embeds: Option<usize>,
    /// `time_cond_proj_dim`: the width of an extra condition (`timestep_cond`, e.g. LCM's
    /// guidance-scale embedding) projected into the time embedding's input.
    pub time_cond_proj_dim: Option<usize>,
    /// `class_embed_type` (see [`ClassEmbedType`]); `None` for the table of `num_class_embeds`.
    pub class_embed_type: Option<ClassEmbedType>,
    /// `class_embeddings_concat`: the class embedding is concatenated to the time embedding
    /// instead of added, so the blocks' ResNets take twice `time_embed_dim`.
    pub class_embeddings_concat: bool,
    /// `timestep_post_act`: an activation after the time embedding's `linear_2`.
    pub timestep_post_act: Option<ActFn>,
    /// `time_embedding_act_fn`: an activation of the whole embedding (time, class and added
    /// terms) before the blocks receive it.
    pub time_embedding_act_fn: Option<ActFn>,
    /// `resnet_time_scale_shift: "scale_shift"`: every ResNet's `time_emb_proj` gives a scale and
    /// a shift applied after `norm2` (`h * (1 + scale) + shift`), instead of a term added
    /// before it (`"default"`, false).
    pub resnet_scale_shift: bool,
    /// `encoder_hid_dim` (with `encoder_hid_dim_type` `"text_proj"`): the text states are this
    /// wide and `encoder_hid_proj` (a Linear) maps them to `cross_attention_dim` first.
    pub encoder_hid_dim: Option<usize>,
}

pub(crate) fn cfg_err(key: &str, msg: impl Into<String>) -> Error {
    Error::Config {
        key: key.to_string(),
        msg: msg.into(),
    }
}

impl UNetConfig {
    /// diffusers' Stable Diffusion 1.5 UNet (`runwayml/stable-diffusion-v1-5/unet/config.json`).
    pub fn sd15() -> UNetConfig {
        use DownBlockType::*;
        use UpBlockType::*;
        UNetConfig {
            in_channels: 4,
            out_channels: 4,
            center_input_sample: false,
            flip_sin_to_cos: true,
            freq_shift: 0.0,
            down_block_types: vec![
                CrossAttnDownBlock2D,
                CrossAttnDownBlock2D,
                CrossAttnDownBlock2D,
                DownBlock2D,
            ],
            up_block_types: vec![
                UpBlock2D,
                CrossAttnUpBlock2D,
                CrossAttnUpBlock2D,
                CrossAttnUpBlock2D,
            ],
            mid_block_type: Some(MidBlockType::UNetMidBlock2DCrossAttn),
            only_cross_attention: vec![false; 4],
            block_out_channels: vec![320, 640, 1280, 1280],
            layers_per_block: vec![2; 4],
            downsample_padding: 1,
            mid_block_scale_factor: 1.0,
            act_fn: ActFn::Silu,
            norm_num_groups: 32,
            norm_eps: 1e-5,
            cross_attention_dim: vec![768; 4],
            transformer_layers_per_block: vec![vec![1; 2]; 4],
            reverse_transformer_layers_per_block: None,
            attention_head_dim: vec![8; 4],
            num_attention_heads: None,
            use_linear_projection: false,
            upcast_attention: false,
            time_embedding_type: TimeEmbeddingType::Positional,
            time_embedding_dim: None,
            conv_in_kernel: 3,
            conv_out_kernel: 3,
            sample_size: Some(64),
            addition_embed: None,
            num_class_embeds: None,
            time_cond_proj_dim: None,
            class_embed_type: None,
            class_embeddings_concat: false,
            timestep_post_act: None,
            time_embedding_act_fn: None,
            resnet_scale_shift: false,
            encoder_hid_dim: None,
        }
    }

    /// diffusers' Stable Diffusion 2.1 UNet (`stabilityai/stable-diffusion-2-1/unet`): linear
    /// projections, heads `[5, 10, 20, 20]`, a 1024-wide text encoder, upcast attention.
    pub fn sd21() -> UNetConfig {
        UNetConfig {
            cross_attention_dim: vec![1024; 4],
            attention_head_dim: vec![5, 10, 20, 20],
            use_linear_projection: true,
            upcast_attention: true,
            sample_size: Some(96),
            ..UNetConfig::sd15()
        }
    }

    /// diffusers' Stable Diffusion XL base UNet (`stabilityai/stable-diffusion-xl-base-1.0/unet`):
    /// three levels (the first without attention), transformer depths `[1, 2, 10]`, heads
    /// `[5, 10, 20]`, a 2048-wide text encoder, and the `text_time` added embedding (a 1280-wide
    /// pooled text embedding and six time ids of 256 each).
    pub fn sdxl() -> UNetConfig {
        use DownBlockType::*;
        use UpBlockType::*;
        UNetConfig {
            down_block_types: vec![DownBlock2D, CrossAttnDownBlock2D, CrossAttnDownBlock2D],
            up_block_types: vec![CrossAttnUpBlock2D, CrossAttnUpBlock2D, UpBlock2D],
            only_cross_attention: vec![false; 3],
            block_out_channels: vec![320, 640, 1280],
            layers_per_block: vec![2; 3],
            cross_attention_dim: vec![2048; 3],
            transformer_layers_per_block: vec![vec![1; 2], vec![2; 2], vec![10; 2]],
            attention_head_dim: vec![5, 10, 20],
            use_linear_projection: true,
            sample_size: Some(128),
            addition_embed: Some(TextTimeEmbed {
                time_embed_dim: 256,
                input_dim: 2816,
            }),
            ..UNetConfig::sd15()
        }
    }

    /// A tiny SD 1.x-shaped config for tests and examples: channels `[32, 64]`, one layer per
    /// block, 8 groups, 4 heads, cross-attention width 32.
    pub fn tiny() -> UNetConfig {
        use DownBlockType::*;
        use UpBlockType::*;
        UNetConfig {
            down_block_types: vec![CrossAttnDownBlock2D, DownBlock2D],
            up_block_types: vec![UpBlock2D, CrossAttnUpBlock2D],
            only_cross_attention: vec![false; 2],
            block_out_channels: vec![32, 64],
            layers_per_block: vec![1; 2],
            norm_num_groups: 8,
            cross_attention_dim: vec![32; 2],
            transformer_layers_per_block: vec![vec![1]; 2],
            attention_head_dim: vec![4; 2],
            sample_size: Some(16),
            ..UNetConfig::sd15()
        }
    }

    /// Number of levels (down blocks).
    pub fn levels(&self) -> usize {
        self.down_block_types.len()
    }

    /// Attention heads of level `level` (counted from the top, as down blocks): diffusers'
    /// `num_attention_heads or attention_head_dim`; 0 for a level that does not exist.
    pub fn heads(&self, level: usize) -> usize {
        let list = self
            .num_attention_heads
            .as_ref()
            .unwrap_or(&self.attention_head_dim);
        list.get(level).copied().unwrap_or(0)
    }

    /// Width of the time embedding: `time_embedding_dim`, else `4 * block_out_channels[0]`
    /// (`2 *` for a `"fourier"` time embedding).
    pub fn time_embed_dim(&self) -> usize {
        let ch0 = self.block_out_channels.first().copied().unwrap_or(0);
        let factor = match self.time_embedding_type {
            TimeEmbeddingType::Positional => 4,
            TimeEmbeddingType::Fourier => 2,
        };
        self.time_embedding_dim.unwrap_or(factor * ch0)
    }

    /// Width of the time projection (`time_proj`'s output, the time embedding's input):
    /// `block_out_channels[0]` (positional) or the time embedding's width (fourier).
    pub fn timestep_input_dim(&self) -> usize {
        match self.time_embedding_type {
            TimeEmbeddingType::Positional => self.block_out_channels.first().copied().unwrap_or(0),
            TimeEmbeddingType::Fourier => self.time_embed_dim(),
        }
    }

    /// Width of the embedding the blocks receive: [`Self::time_embed_dim`], twice that with
    /// `class_embeddings_concat` (diffusers' `blocks_time_embed_dim`).
    pub fn blocks_time_embed_dim(&self) -> usize {
        if self.class_embeddings_concat {
            2 * self.time_embed_dim()
        } else {
            self.time_embed_dim()
        }
    }

    /// Whether the model takes `class_labels` (a `class_embed_type` or `num_class_embeds`).
    pub fn takes_class_labels(&self) -> bool {
        self.class_embed_type.is_some() || self.num_class_embeds.is_some()
    }

    /// The width of the text states the model takes: `encoder_hid_dim` where it projects
    /// them, else `cross_attention_dim` of the first level.
    pub fn encoder_states_dim(&self) -> usize {
        self.encoder_hid_dim
            .unwrap_or(self.cross_attention_dim.first().copied().unwrap_or(0))
    }
}
