//! diffusers' `FeedForward` (GEGLU), `BasicTransformerBlock` and `Transformer2DModel`
//! (continuous input, conv or linear projections), as in SD 1.x/2.x.
//!
//! Invariants:
//! - Every sub-layer adds its residual in the store of its last product (attention `to_out.0`,
//!   the FFN's second product, `proj_out`); the FFN is [`Tensor::ffn_geglu`] (GEGLU gate fused
//!   into the first product's store).
//! - `Transformer2DModel` normalises with `GroupNorm(eps = 1e-6)` (diffusers hard-codes it) and
//!   runs on tokens `[B, H·W, C]`: for a channels-last input a free reshape of its NHWC memory
//!   (and its output a free view back, channels-last), for an NCHW input a transposed view of
//!   it (and its output one copy back to NCHW); the output has the input's format; a 1x1 conv
//!   projection is the same product as a Linear over channels, so both projection kinds run as
//!   products over tokens (diffusers' parameter shapes are kept: `[O, C, 1, 1]` for convs).

use crate::nn::attention::{Attention, AttentionDims};
use crate::nn::layers::{
    join, linear_residual, load_linear, map_linear, GroupNorm, LayerNorm, MapFn,
};
use crate::nn::weights::{Init, ParamSource};
use crate::nn::FeedForward;
use crate::nn::Linear;
use crate::{Error, MemoryFormat, Result, Tensor};

/// diffusers' `BasicTransformerBlock` with `norm_type="layer_norm"`: self-attention (or
/// cross-attention when `only_cross_attention`), cross-attention, GEGLU feed-forward, each
/// pre-normalised and residual.
#[derive(Clone, Debug)]
pub struct BasicTransformerBlock {
    norm1: LayerNorm,
    attn1: Attention,
    norm2: LayerNorm,
    attn2: Attention,
    norm3: LayerNorm,
    ff: FeedForward,
}

/// Shapes of one transformer (block or model).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TransformerDims {
    pub channels: usize,
    pub heads: usize,
    pub cross_dim: usize,
    pub groups: usize,
    pub layers: usize,
    pub linear_projection: bool,
    pub only_cross_attention: bool,
}

impl BasicTransformerBlock {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        d: TransformerDims,
    ) -> Result<BasicTransformerBlock> {
        let dim = d.channels;
        let dims = |cross: Option<usize>| AttentionDims {
            query_dim: dim,
            cross_dim: cross,
            heads: d.heads,
            head_dim: dim / d.heads,
        };
        let attn1_cross = d.only_cross_attention.then_some(d.cross_dim);
        Ok(BasicTransformerBlock {
            norm1: LayerNorm::load(src, &join(prefix, "norm1"), dim, 1e-5)?,
            attn1: Attention::load(src, &join(prefix, "attn1"), dims(attn1_cross))?,
            norm2: LayerNorm::load(src, &join(prefix, "norm2"), dim, 1e-5)?,
            attn2: Attention::load(src, &join(prefix, "attn2"), dims(Some(d.cross_dim)))?,
            norm3: LayerNorm::load(src, &join(prefix, "norm3"), dim, 1e-5)?,
            ff: FeedForward::load(src, &join(prefix, "ff"), dim)?,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<BasicTransformerBlock> {
        Ok(BasicTransformerBlock {
            norm1: self.norm1.map(f)?,
            attn1: self.attn1.map(f)?,
            norm2: self.norm2.map(f)?,
            attn2: self.attn2.map(f)?,
            norm3: self.norm3.map(f)?,
            ff: self.ff.map(f)?,
        })
    }

    /// `x` `[B, L, dim]`, `context` `[B, Lk, cross_dim]` -> `[B, L, dim]`.
    pub fn forward(&self, x: &Tensor, context: &Tensor) -> Result<Tensor> {
        let ctx1 = self.attn1.is_cross().then_some(context);
        let h = self.attn1.forward(&self.norm1.forward(x)?, ctx1, Some(x))?;
        let h = self
            .attn2
            .forward(&self.norm2.forward(&h)?, Some(context), Some(&h))?;
        self.ff.forward(&self.norm3.forward(&h)?, Some(&h))
    }
}

/// diffusers' `Transformer2DModel` over an NCHW feature map (SD's spatial transformer).
#[derive(Clone, Debug)]
pub struct Transformer2DModel {
    norm: GroupNorm,
    proj_in: Linear,
    blocks: Vec<BasicTransformerBlock>,
    proj_out: Linear,
}

/// Loads a projection stored as a Linear `[o, i]` or a 1x1 conv `[o, i, 1, 1]`, as a Linear.
fn load_proj(
    src: &mut dyn ParamSource,
    prefix: &str,
    i: usize,
    o: usize,
    linear: bool,
) -> Result<Linear> {
    if linear {
        return load_linear(src, prefix, i, o, true);
    }
    let w = src.get(&join(prefix, "weight"), &[o, i, 1, 1], Init::FanIn(i))?;
    let b = src.get(&join(prefix, "bias"), &[o], Init::Zeros)?;
    let s = w.shape().to_vec();
    Linear::new(w.reshape(&[s[0], s[1]])?, Some(b))
}

impl Transformer2DModel {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        d: TransformerDims,
    ) -> Result<Transformer2DModel> {
        let c = d.channels;
        let norm = GroupNorm::load(src, &join(prefix, "norm"), c, d.groups, 1e-6)?;
        let proj_in = load_proj(src, &join(prefix, "proj_in"), c, c, d.linear_projection)?;
        let blocks = (0..d.layers)
            .map(|i| {
                BasicTransformerBlock::load(
                    src,
                    &join(prefix, &format!("transformer_blocks.{i}")),
                    d,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let proj_out = load_proj(src, &join(prefix, "proj_out"), c, c, d.linear_projection)?;
        Ok(Transformer2DModel {
            norm,
            proj_in,
            blocks,
            proj_out,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<Transformer2DModel> {
        Ok(Transformer2DModel {
            norm: self.norm.map(f)?,
            proj_in: map_linear(&self.proj_in, f)?,
            blocks: self
                .blocks
                .iter()
                .map(|b| b.map(f))
                .collect::<Result<_>>()?,
            proj_out: map_linear(&self.proj_out, f)?,
        })
    }

    /// The transformer blocks.
    pub fn blocks(&self) -> &[BasicTransformerBlock] {
        &self.blocks
    }

    /// `x` `[B, C, H, W]`, `context` `[B, Lk, cross_dim]` -> `[B, C, H, W]` (with the input
    /// added), in `x`'s memory format (channels-last or NCHW).
    pub fn forward(&self, x: &Tensor, context: &Tensor) -> Result<Tensor> {
        if x.rank() != 4 || x.shape()[1] != self.proj_in.in_features() {
            return Err(Error::shape(
                "Transformer2DModel",
                format!("[B, {}, H, W]", self.proj_in.in_features()),
                x.shape(),
            ));
        }
        let (b, c, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
        // Channels-last maps are their tokens already ([B, H, W, C] memory); NCHW ones are
        // read as tokens through a transposed view.
        let channels_last = x.memory_format() == MemoryFormat::ChannelsLast;
        let tokens = |t: &Tensor| {
            if channels_last {
                t.permute(&[0, 2, 3, 1])?.reshape(&[b, h * w, c])
            } else {
                t.reshape(&[b, c, h * w])?.permute(&[0, 2, 1])
            }
        };
        // GroupNorm keeps the input's format, so its tokens are a view of the same kind.
        let mut t = self.proj_in.forward(&tokens(&self.norm.forward(x)?)?)?;
        for block in &self.blocks {
            t = block.forward(&t, context)?;
        }
        // proj_out over tokens plus the input, read as tokens; back to the input's format
        // (a view for channels-last, one copy for NCHW).
        let y = linear_residual(&self.proj_out, &t, Some(&tokens(x)?))?;
        if channels_last {
            y.reshape(&[b, h, w, c])?.permute(&[0, 3, 1, 2])
        } else {
            y.permute(&[0, 2, 1])?.reshape(&[b, c, h, w])
        }
    }
}
