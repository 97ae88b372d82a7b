//! diffusers' VAE `Encoder`: `conv_in`, one `DownEncoderBlock2D` per level (ResNets, then a
//! stride-2 convolution with padding 0 after one zero row and column on the bottom and right,
//! except at the last level), the mid block, `conv_norm_out`, SiLU and `conv_out` to
//! `2 × latent_channels` (mean and log-variance).
//!
//! Invariants: parameters under diffusers' names below `encoder.`; activations keep the input's
//! memory format; an image of `H × W` gives moments of `⌊H / 2^(levels-1)⌋ × ⌊W / 2^(levels-1)⌋`
//! (each downsampling maps `s` to `⌊s / 2⌋`), so every side must be at least
//! `2^(levels-1)` (checked by the model before it calls [`VaeEncoder::forward`]).

use super::mid::VaeMidBlock;
use super::resnet::{VaeResnet, VAE_EPS};
use super::VaeConfig;
use crate::nn::layers::{Conv, GroupNorm, MapFn};
use crate::nn::weights::ParamSource;
use crate::nn::{ActFn, Downsample2D};
use crate::{Result, Tensor};

/// One encoder level.
#[derive(Clone, Debug)]
struct DownLevel {
    resnets: Vec<VaeResnet>,
    downsample: Option<Downsample2D>,
}

/// The image-to-moments half of the VAE.
#[derive(Clone, Debug)]
pub(crate) struct VaeEncoder {
    conv_in: Conv,
    levels: Vec<DownLevel>,
    mid: VaeMidBlock,
    norm_out: GroupNorm,
    conv_out: Conv,
}

impl VaeEncoder {
    pub(crate) fn load(src: &mut dyn ParamSource, c: &VaeConfig) -> Result<VaeEncoder> {
        let ch = &c.block_out_channels;
        let (n, groups) = (ch.len(), c.norm_num_groups);
        let conv_in = Conv::load(src, "encoder.conv_in", c.in_channels, ch[0], 3, 1, 1)?;
        let mut levels = Vec::with_capacity(n);
        let mut out_ch = ch[0];
        for (i, &level_ch) in ch.iter().enumerate() {
            let in_ch = out_ch;
            out_ch = level_ch;
            let prefix = format!("encoder.down_blocks.{i}");
            let resnets = (0..c.layers_per_block)
                .map(|j| {
                    let from = if j == 0 { in_ch } else { out_ch };
                    let p = format!("{prefix}.resnets.{j}");
                    VaeResnet::load(src, &p, (from, out_ch), groups, c.act_fn)
                })
                .collect::<Result<_>>()?;
            let downsample = (i + 1 < n)
                .then(|| Downsample2D::load(src, &format!("{prefix}.downsamplers.0"), out_ch, 0))
                .transpose()?;
            levels.push(DownLevel {
                resnets,
                downsample,
            });
        }
        let inner = ch[n - 1];
        let mid = VaeMidBlock::load(
            src,
            "encoder.mid_block",
            inner,
            groups,
            c.act_fn,
            c.mid_block_add_attention,
        )?;
        let norm_out = GroupNorm::load(src, "encoder.conv_norm_out", inner, groups, VAE_EPS)?;
        let moments = 2 * c.latent_channels;
        let conv_out = Conv::load(src, "encoder.conv_out", inner, moments, 3, 1, 1)?;
        Ok(VaeEncoder {
            conv_in,
            levels,
            mid,
            norm_out,
            conv_out,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<VaeEncoder> {
        let levels = self
            .levels
            .iter()
            .map(|l| {
                Ok(DownLevel {
                    resnets: l.resnets.iter().map(|r| r.map(f)).collect::<Result<_>>()?,
                    downsample: l.downsample.as_ref().map(|d| d.map(f)).transpose()?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(VaeEncoder {
            conv_in: self.conv_in.map(f)?,
            levels,
            mid: self.mid.map(f)?,
            norm_out: self.norm_out.map(f)?,
            conv_out: self.conv_out.map(f)?,
        })
    }

    /// `[B, in_channels, H, W]` -> moments `[B, 2·latent_channels, h, w]`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.conv_in.forward(x)?;
        for level in &self.levels {
            for r in &level.resnets {
                h = r.forward(&h)?;
            }
            if let Some(d) = &level.downsample {
                h = d.forward(&h)?.to_memory_format(x.memory_format())?;
            }
        }
        let h = self.mid.forward(&h)?;
        let h = self.norm_out.forward_act(&h, ActFn::Silu)?;
        self.conv_out.forward(&h)
    }
}
