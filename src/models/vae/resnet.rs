//! The VAE's ResNet block: diffusers' `ResnetBlock2D` with `temb_channels=None` (no time
//! embedding, so no `time_emb_proj`), eps 1e-6, `output_scale_factor` 1.
//!
//! `nn::ResnetBlock2D` always projects a time embedding; this block is the same computation
//! without that term: `conv2(act(norm2(conv1(act(norm1(x)))))) + shortcut(x)`.
//!
//! Invariants: the output has the input's memory format; GroupNorm + SiLU run as one pass;
//! the shortcut is a 1×1 convolution exactly when the channel count changes (diffusers'
//! `use_in_shortcut` default) and is added in `conv2`'s store.

use crate::nn::layers::{join, Conv, GroupNorm, MapFn};
use crate::nn::weights::ParamSource;
use crate::nn::ActFn;
use crate::{Result, Tensor};

/// Epsilon of every group normalisation in diffusers' VAE.
pub(crate) const VAE_EPS: f64 = 1e-6;

/// One `ResnetBlock2D` of the encoder or decoder.
#[derive(Clone, Debug)]
pub(crate) struct VaeResnet {
    norm1: GroupNorm,
    conv1: Conv,
    norm2: GroupNorm,
    conv2: Conv,
    conv_shortcut: Option<Conv>,
    act: ActFn,
}

impl VaeResnet {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        (in_ch, out_ch): (usize, usize),
        groups: usize,
        act: ActFn,
    ) -> Result<VaeResnet> {
        let p = |n: &str| join(prefix, n);
        Ok(VaeResnet {
            norm1: GroupNorm::load(src, &p("norm1"), in_ch, groups, VAE_EPS)?,
            conv1: Conv::load(src, &p("conv1"), in_ch, out_ch, 3, 1, 1)?,
            norm2: GroupNorm::load(src, &p("norm2"), out_ch, groups, VAE_EPS)?,
            conv2: Conv::load(src, &p("conv2"), out_ch, out_ch, 3, 1, 1)?,
            conv_shortcut: (in_ch != out_ch)
                .then(|| Conv::load(src, &p("conv_shortcut"), in_ch, out_ch, 1, 1, 0))
                .transpose()?,
            act,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<VaeResnet> {
        Ok(VaeResnet {
            norm1: self.norm1.map(f)?,
            conv1: self.conv1.map(f)?,
            norm2: self.norm2.map(f)?,
            conv2: self.conv2.map(f)?,
            conv_shortcut: self.conv_shortcut.as_ref().map(|c| c.map(f)).transpose()?,
            act: self.act,
        })
    }

    /// `[B, C_in, H, W]` -> `[B, C_out, H, W]` in `x`'s memory format.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.norm1.forward_act(x, self.act)?;
        let h = self.conv1.forward(&h)?;
        let h = self.norm2.forward_act(&h, self.act)?;
        let shortcut = match &self.conv_shortcut {
            Some(c) => c.forward(x)?,
            None => x.clone(),
        };
        self.conv2.forward_residual(&h, &shortcut)
    }
}
