//! [`UNetConfig::validate`]: the checks every constructor of a [`UNetConfig`] runs (see the
//! invariants in `config.rs`), kept apart from the type so each file stays readable.

use crate::models::unet::config::{
    cfg_err, ClassEmbedType, DownBlockType, MidBlockType, TimeEmbeddingType, UNetConfig,
    UpBlockType,
};
use crate::Result;

/// Most levels (down blocks) a config may have.
const MAX_LEVELS: usize = 16;
/// Most ResNets or transformer blocks per level.
pub(crate) const MAX_LAYERS: usize = 64;
/// Largest `conv_in_kernel` / `conv_out_kernel`.
const MAX_KERNEL: usize = 31;
/// Largest width (channels, text and embedding widths, class count): far above any published
/// UNet's, and small enough that no parameter's size (nor the model's total) overflows.
const MAX_WIDTH: usize = 1 << 18;

impl UNetConfig {
    /// Checks the invariants in the module docs; every constructor runs it.
    pub fn validate(&self) -> Result<()> {
        let n = self.down_block_types.len();
        if n == 0 {
            return Err(cfg_err("down_block_types", "needs at least one block"));
        }
        if self.up_block_types.len() != n {
            return Err(cfg_err(
                "up_block_types",
                format!(
                    "has {} entries, down_block_types has {n}",
                    self.up_block_types.len()
                ),
            ));
        }
        let lens = [
            ("block_out_channels", self.block_out_channels.len()),
            ("only_cross_attention", self.only_cross_attention.len()),
            ("layers_per_block", self.layers_per_block.len()),
            ("cross_attention_dim", self.cross_attention_dim.len()),
            (
                "transformer_layers_per_block",
                self.transformer_layers_per_block.len(),
            ),
            ("attention_head_dim", self.attention_head_dim.len()),
            (
                "num_attention_heads",
                self.num_attention_heads.as_ref().map_or(n, Vec::len),
            ),
        ];
        for (key, len) in lens {
            if len != n {
                return Err(cfg_err(
                    key,
                    format!("has {len} entries but there are {n} down blocks"),
                ));
            }
        }
        let g = self.norm_num_groups;
        if g == 0 {
            return Err(cfg_err("norm_num_groups", "must be > 0"));
        }
        for &ch in &self.block_out_channels {
            if ch == 0 || !ch.is_multiple_of(g) {
                return Err(cfg_err(
                    "norm_num_groups",
                    format!("{g} groups do not divide the {ch} channels of a level (block_out_channels)"),
                ));
            }
        }
        for (key, v) in [
            ("in_channels", self.in_channels),
            ("out_channels", self.out_channels),
        ] {
            if v == 0 {
                return Err(cfg_err(key, "must be > 0"));
            }
        }
        for (key, k) in [
            ("conv_in_kernel", self.conv_in_kernel),
            ("conv_out_kernel", self.conv_out_kernel),
        ] {
            if k.is_multiple_of(2) {
                return Err(cfg_err(key, format!("must be odd, got {k}")));
            }
        }
        if !(self.norm_eps.is_finite() && self.norm_eps >= 0.0) {
            return Err(cfg_err("norm_eps", "must be finite and >= 0"));
        }
        if self.mid_block_scale_factor == 0.0 || !self.mid_block_scale_factor.is_finite() {
            return Err(cfg_err(
                "mid_block_scale_factor",
                "must be finite and non-zero",
            ));
        }
        if self.downsample_padding > 1 {
            return Err(cfg_err(
                "downsample_padding",
                format!("{} is not supported (0 or 1)", self.downsample_padding),
            ));
        }
        // Bounds far above any published UNet keep a corrupt config from building (or
        // recording) millions of layers.
        if n > MAX_LEVELS {
            return Err(cfg_err(
                "down_block_types",
                format!("{n} levels; at most {MAX_LEVELS} are supported"),
            ));
        }
        let layers = &self.layers_per_block;
        if layers.iter().any(|&l| l == 0 || l > MAX_LAYERS) {
            return Err(cfg_err(
                "layers_per_block",
                format!("{layers:?}: each entry must be in 1..={MAX_LAYERS}"),
            ));
        }
        for (key, k) in [
            ("conv_in_kernel", self.conv_in_kernel),
            ("conv_out_kernel", self.conv_out_kernel),
        ] {
            if k > MAX_KERNEL {
                return Err(cfg_err(key, format!("{k} is larger than {MAX_KERNEL}")));
            }
        }
        if let Some(a) = self.addition_embed {
            if a.time_embed_dim < 2 || a.input_dim == 0 {
                return Err(cfg_err(
                    "addition_time_embed_dim",
                    format!(
                        "text_time needs addition_time_embed_dim >= 2 and \
                         projection_class_embeddings_input_dim > 0, got {} and {}",
                        a.time_embed_dim, a.input_dim
                    ),
                ));
            }
        }
        self.validate_widths()?;
        self.validate_depths(MAX_LAYERS)?;
        if self.time_embedding_type == TimeEmbeddingType::Fourier
            && !self.time_embed_dim().is_multiple_of(2)
        {
            return Err(cfg_err(
                "time_embedding_dim",
                format!(
                    "{} must be even for a \"fourier\" time embedding (sin and cos halves)",
                    self.time_embed_dim()
                ),
            ));
        }
        self.validate_embeddings()?;
        if self.time_cond_proj_dim == Some(0) {
            return Err(cfg_err("time_cond_proj_dim", "must be > 0 (or null)"));
        }
        if self.num_class_embeds == Some(0) {
            return Err(cfg_err("num_class_embeds", "must be > 0 (or null)"));
        }
        if self.time_embedding_dim == Some(0) {
            return Err(cfg_err("time_embedding_dim", "must be > 0"));
        }
        if self.block_out_channels[0] < 2 {
            return Err(cfg_err(
                "block_out_channels",
                "the first level needs >= 2 channels (sinusoidal embedding size)",
            ));
        }
        let half = (self.block_out_channels[0] / 2) as f64;
        if half == self.freq_shift && self.time_embedding_type == TimeEmbeddingType::Positional {
            return Err(cfg_err(
                "freq_shift",
                "equals half the embedding size (division by zero)",
            ));
        }
        let attn_levels = (0..n).filter(|&i| {
            self.down_block_types[i] == DownBlockType::CrossAttnDownBlock2D
                || self.up_block_types[n - 1 - i] == UpBlockType::CrossAttnUpBlock2D
                || (self.mid_block_type == Some(MidBlockType::UNetMidBlock2DCrossAttn)
                    && i == n - 1)
        });
        for i in attn_levels {
            let heads = self.heads(i);
            let ch = self.block_out_channels[i];
            let key = if self.num_attention_heads.is_some() {
                "num_attention_heads"
            } else {
                "attention_head_dim"
            };
            if heads == 0 || !ch.is_multiple_of(heads) {
                return Err(cfg_err(
                    key,
                    format!("level {i}: {ch} channels do not split into {heads} heads (diffusers reads this key as the number of heads)"),
                ));
            }
            if self.cross_attention_dim[i] == 0 {
                return Err(cfg_err("cross_attention_dim", "must be > 0"));
            }
        }
        Ok(())
    }

    /// The class-embedding, concatenation and text-projection options agree (diffusers would
    /// fail to build, or fail in `forward`, where they do not).
    fn validate_embeddings(&self) -> Result<()> {
        match self.class_embed_type {
            Some(ClassEmbedType::Projection { input_dim })
            | Some(ClassEmbedType::SimpleProjection { input_dim })
                if input_dim == 0 =>
            {
                return Err(cfg_err(
                    "projection_class_embeddings_input_dim",
                    "must be > 0 for a projection class_embed_type",
                ))
            }
            _ => {}
        }
        if self.class_embeddings_concat {
            if !self.takes_class_labels() {
                return Err(cfg_err(
                    "class_embeddings_concat",
                    "true needs a class embedding (class_embed_type or num_class_embeds); \
                     without one the blocks would expect twice the embedding they receive",
                ));
            }
            if self.addition_embed.is_some() {
                return Err(cfg_err(
                    "class_embeddings_concat",
                    "true cannot be combined with addition_embed_type \"text_time\" (the added \
                     embedding is half the concatenated width)",
                ));
            }
        }
        if let Some(d) = self.encoder_hid_dim {
            if d == 0 {
                return Err(cfg_err("encoder_hid_dim", "must be > 0 (or null)"));
            }
            if self
                .cross_attention_dim
                .iter()
                .any(|&c| c != self.cross_attention_dim[0])
            {
                return Err(cfg_err(
                    "cross_attention_dim",
                    "must be one width for every level when encoder_hid_dim projects the text \
                     states (encoder_hid_proj has one output width)",
                ));
            }
        }
        Ok(())
    }

    /// Every width is at most [`MAX_WIDTH`] (a corrupt config must not overflow a size).
    fn validate_widths(&self) -> Result<()> {
        let class_dim = match self.class_embed_type {
            Some(ClassEmbedType::Projection { input_dim })
            | Some(ClassEmbedType::SimpleProjection { input_dim }) => input_dim,
            _ => 0,
        };
        let text_time = self
            .addition_embed
            .map_or((0, 0), |a| (a.time_embed_dim, a.input_dim));
        let singles = [
            ("in_channels", self.in_channels),
            ("out_channels", self.out_channels),
            ("time_embedding_dim", self.time_embedding_dim.unwrap_or(0)),
            ("encoder_hid_dim", self.encoder_hid_dim.unwrap_or(0)),
            ("num_class_embeds", self.num_class_embeds.unwrap_or(0)),
            ("time_cond_proj_dim", self.time_cond_proj_dim.unwrap_or(0)),
            (
                "projection_class_embeddings_input_dim",
                class_dim.max(text_time.1),
            ),
            ("addition_time_embed_dim", text_time.0),
            ("norm_num_groups", self.norm_num_groups),
        ];
        let lists = [
            ("block_out_channels", &self.block_out_channels),
            ("cross_attention_dim", &self.cross_attention_dim),
            ("attention_head_dim", &self.attention_head_dim),
        ];
        let heads = self
            .num_attention_heads
            .iter()
            .map(|h| ("num_attention_heads", h));
        let all = singles.into_iter().chain(
            lists
                .into_iter()
                .chain(heads)
                .flat_map(|(k, l)| l.iter().map(move |&v| (k, v))),
        );
        for (key, v) in all {
            if v > MAX_WIDTH {
                return Err(cfg_err(key, format!("{v} is larger than {MAX_WIDTH}")));
            }
        }
        Ok(())
    }
}
