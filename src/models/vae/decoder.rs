//! diffusers' VAE `Decoder`: `conv_in` from the latent channels to the innermost level's, the
//! mid block, one `UpDecoderBlock2D` per level from the innermost out (`layers_per_block + 1`
//! ResNets, then nearest ×2 and a 3×3 convolution except at the last level),
//! `conv_norm_out`, SiLU and `conv_out` to the image channels.
//!
//! Invariants: parameters under diffusers' names below `decoder.`; activations keep the input's
//! memory format; latents of `h × w` give an image of `h·2^(levels-1) × w·2^(levels-1)`.

use super::mid::VaeMidBlock;
use super::resnet::{VaeResnet, VAE_EPS};
use super::VaeConfig;
use crate::nn::layers::{Conv, GroupNorm, MapFn};
use crate::nn::weights::ParamSource;
use crate::nn::{ActFn, Upsample2D};
use crate::{Result, Tensor};

/// One decoder level.
#[derive(Clone, Debug)]
struct UpLevel {
    resnets: Vec<VaeResnet>,
    upsample: Option<Upsample2D>,
}

/// The latents-to-image half of the VAE.
#[derive(Clone, Debug)]
pub(crate) struct VaeDecoder {
    conv_in: Conv,
    mid: VaeMidBlock,
    levels: Vec<UpLevel>,
    norm_out: GroupNorm,
    conv_out: Conv,
}

impl VaeDecoder {
    pub(crate) fn load(src: &mut dyn ParamSource, c: &VaeConfig) -> Result<VaeDecoder> {
        let ch = &c.block_out_channels;
        let (n, groups) = (ch.len(), c.norm_num_groups);
        let inner = ch[n - 1];
        let conv_in = Conv::load(src, "decoder.conv_in", c.latent_channels, inner, 3, 1, 1)?;
        let mid = VaeMidBlock::load(
            src,
            "decoder.mid_block",
            inner,
            groups,
            c.act_fn,
            c.mid_block_add_attention,
        )?;
        let mut levels = Vec::with_capacity(n);
        let mut out_ch = inner;
        for i in 0..n {
            let prev = out_ch;
            out_ch = ch[n - 1 - i];
            let prefix = format!("decoder.up_blocks.{i}");
            let resnets = (0..=c.layers_per_block)
                .map(|j| {
                    let from = if j == 0 { prev } else { out_ch };
                    let p = format!("{prefix}.resnets.{j}");
                    VaeResnet::load(src, &p, (from, out_ch), groups, c.act_fn)
                })
                .collect::<Result<_>>()?;
            let upsample = (i + 1 < n)
                .then(|| Upsample2D::load(src, &format!("{prefix}.upsamplers.0"), out_ch))
                .transpose()?;
            levels.push(UpLevel { resnets, upsample });
        }
        let norm_out = GroupNorm::load(src, "decoder.conv_norm_out", ch[0], groups, VAE_EPS)?;
        let conv_out = Conv::load(src, "decoder.conv_out", ch[0], c.out_channels, 3, 1, 1)?;
        Ok(VaeDecoder {
            conv_in,
            mid,
            levels,
            norm_out,
            conv_out,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<VaeDecoder> {
        let levels = self
            .levels
            .iter()
            .map(|l| {
                Ok(UpLevel {
                    resnets: l.resnets.iter().map(|r| r.map(f)).collect::<Result<_>>()?,
                    upsample: l.upsample.as_ref().map(|u| u.map(f)).transpose()?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(VaeDecoder {
            conv_in: self.conv_in.map(f)?,
            mid: self.mid.map(f)?,
            levels,
            norm_out: self.norm_out.map(f)?,
            conv_out: self.conv_out.map(f)?,
        })
    }

    /// `[B, latent_channels, h, w]` -> `[B, out_channels, h·2^(levels-1), w·2^(levels-1)]`.
    pub(crate) fn forward(&self, z: &Tensor) -> Result<Tensor> {
        let h = self.conv_in.forward(z)?;
        let mut h = self.mid.forward(&h)?;
        for level in &self.levels {
            for r in &level.resnets {
                h = r.forward(&h)?;
            }
            if let Some(u) = &level.upsample {
                h = u.forward(&h, None)?.to_memory_format(z.memory_format())?;
            }
        }
        let h = self.norm_out.forward_act(&h, ActFn::Silu)?;
        self.conv_out.forward(&h)
    }
}
