//! The UNet's levels: diffusers' `CrossAttnDownBlock2D` / `DownBlock2D` ([`DownBlock`]),
//! `UNetMidBlock2DCrossAttn` ([`MidBlock`]) and `UpBlock2D` / `CrossAttnUpBlock2D` ([`UpBlock`]).
//!
//! Invariants: a block with attentions has exactly one `Transformer2DModel` per ResNet (the
//! cross-attention kinds), one without has none; a down block returns its output plus one skip
//! tensor per ResNet (and one after its downsampler); an up block consumes exactly one skip
//! tensor per ResNet, last first, concatenating `[hidden, skip]` on channels. Intermediate
//! tensors are dropped as soon as the next one exists. Every block keeps its input's memory
//! format (NCHW or channels-last; the channel concatenation of channels-last tensors is
//! channels-last), so a channels-last UNet never converts between blocks.

use crate::models::unet::config::{DownBlockType, MidBlockType, UpBlockType};
use crate::nn::layers::{join, MapFn};
use crate::nn::resnet::{Downsample2D, ResnetBlock2D, ResnetDims, Upsample2D};
use crate::nn::transformer::{Transformer2DModel, TransformerDims};
use crate::nn::weights::ParamSource;
use crate::{Error, Result, Tensor};

/// Loads one transformer `{prefix}.attentions.{i}` of depth `depths[i]` per entry (none when
/// `dims` is `None`).
fn load_attentions(
    src: &mut dyn ParamSource,
    prefix: &str,
    depths: &[usize],
    dims: Option<TransformerDims>,
) -> Result<Vec<Transformer2DModel>> {
    let Some(d) = dims else { return Ok(Vec::new()) };
    depths
        .iter()
        .enumerate()
        .map(|(i, &layers)| {
            let name = join(prefix, &format!("attentions.{i}"));
            Transformer2DModel::load(src, &name, TransformerDims { layers, ..d })
        })
        .collect()
}

fn map_all<T>(v: &[T], f: &mut MapFn, g: impl Fn(&T, &mut MapFn) -> Result<T>) -> Result<Vec<T>> {
    v.iter().map(|x| g(x, f)).collect()
}

/// A down level: `CrossAttnDownBlock2D` when it has attentions, else `DownBlock2D`.
#[derive(Clone, Debug)]
pub struct DownBlock {
    resnets: Vec<ResnetBlock2D>,
    attentions: Vec<Transformer2DModel>,
    downsampler: Option<Downsample2D>,
}

/// Shapes of one down or up level.
pub(crate) struct LevelDims {
    pub resnet: ResnetDims,
    /// Some for the cross-attention kinds (its depth comes from `depths`).
    pub transformer: Option<TransformerDims>,
    pub layers: usize,
    /// The transformer depth of each layer (`layers` entries; unused without `transformer`).
    pub depths: Vec<usize>,
    /// Down: downsample (with this padding); up: upsample.
    pub resample: Option<usize>,
}

impl DownBlock {
    pub(crate) fn load(src: &mut dyn ParamSource, prefix: &str, d: LevelDims) -> Result<DownBlock> {
        let mut resnets = Vec::with_capacity(d.layers);
        for i in 0..d.layers {
            let in_ch = if i == 0 {
                d.resnet.in_ch
            } else {
                d.resnet.out_ch
            };
            let rd = ResnetDims { in_ch, ..d.resnet };
            resnets.push(ResnetBlock2D::load(
                src,
                &join(prefix, &format!("resnets.{i}")),
                rd,
            )?);
        }
        let attentions = load_attentions(src, prefix, &d.depths, d.transformer)?;
        let downsampler = d
            .resample
            .map(|pad| {
                Downsample2D::load(src, &join(prefix, "downsamplers.0"), d.resnet.out_ch, pad)
            })
            .transpose()?;
        Ok(DownBlock {
            resnets,
            attentions,
            downsampler,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<DownBlock> {
        Ok(DownBlock {
            resnets: map_all(&self.resnets, f, |r, f| r.map(f))?,
            attentions: map_all(&self.attentions, f, |a, f| a.map(f))?,
            downsampler: self.downsampler.as_ref().map(|d| d.map(f)).transpose()?,
        })
    }

    /// Which diffusers block this is.
    pub fn kind(&self) -> DownBlockType {
        if self.attentions.is_empty() {
            DownBlockType::DownBlock2D
        } else {
            DownBlockType::CrossAttnDownBlock2D
        }
    }

    /// The ResNets.
    pub fn resnets(&self) -> &[ResnetBlock2D] {
        &self.resnets
    }

    /// The transformers (empty for `DownBlock2D`).
    pub fn attentions(&self) -> &[Transformer2DModel] {
        &self.attentions
    }

    /// Returns the output and the skip tensors (one per ResNet, one after the downsampler).
    /// `context` is required by the cross-attention kind and ignored otherwise.
    pub fn forward(
        &self,
        x: &Tensor,
        temb: &Tensor,
        context: Option<&Tensor>,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let mut skips = Vec::with_capacity(self.resnets.len() + 1);
        let mut h = x.clone();
        for (i, resnet) in self.resnets.iter().enumerate() {
            h = resnet.forward(&h, temb)?;
            if let Some(attn) = self.attentions.get(i) {
                h = attn.forward(&h, need_context(context)?)?;
            }
            skips.push(h.clone());
        }
        if let Some(d) = &self.downsampler {
            h = d.forward(&h)?;
            skips.push(h.clone());
        }
        Ok((h, skips))
    }
}

fn need_context(context: Option<&Tensor>) -> Result<&Tensor> {
    context.ok_or_else(|| {
        Error::invalid(
            "UNet cross-attention block",
            "needs encoder_hidden_states (the text context)",
        )
    })
}

/// diffusers' `UNetMidBlock2DCrossAttn` (ResNet, then (transformer, ResNet) pairs), or its
/// `UNetMidBlock2D` as `UNet2DConditionModel` builds it (one ResNet, no attention).
#[derive(Clone, Debug)]
pub struct MidBlock {
    resnets: Vec<ResnetBlock2D>,
    attentions: Vec<Transformer2DModel>,
}

impl MidBlock {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        resnet: ResnetDims,
        transformer: Option<TransformerDims>,
    ) -> Result<MidBlock> {
        let n = if transformer.is_some() { 2 } else { 1 };
        let resnets = (0..n)
            .map(|i| ResnetBlock2D::load(src, &join(prefix, &format!("resnets.{i}")), resnet))
            .collect::<Result<Vec<_>>>()?;
        let depth = transformer.map_or(0, |t| t.layers);
        let attentions = load_attentions(src, prefix, &[depth], transformer)?;
        Ok(MidBlock {
            resnets,
            attentions,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<MidBlock> {
        Ok(MidBlock {
            resnets: map_all(&self.resnets, f, |r, f| r.map(f))?,
            attentions: map_all(&self.attentions, f, |a, f| a.map(f))?,
        })
    }

    /// The ResNets.
    pub fn resnets(&self) -> &[ResnetBlock2D] {
        &self.resnets
    }

    /// Which diffusers block this is.
    pub fn kind(&self) -> MidBlockType {
        if self.attentions.is_empty() {
            MidBlockType::UNetMidBlock2D
        } else {
            MidBlockType::UNetMidBlock2DCrossAttn
        }
    }

    /// The transformers (none for a `UNetMidBlock2D`).
    pub fn attentions(&self) -> &[Transformer2DModel] {
        &self.attentions
    }

    /// `[B, C, H, W]` -> `[B, C, H, W]` (`context` is unused by a `UNetMidBlock2D`).
    pub fn forward(&self, x: &Tensor, temb: &Tensor, context: &Tensor) -> Result<Tensor> {
        let mut h = self.resnets[0].forward(x, temb)?;
        for (attn, resnet) in self.attentions.iter().zip(&self.resnets[1..]) {
            h = attn.forward(&h, context)?;
            h = resnet.forward(&h, temb)?;
        }
        Ok(h)
    }
}

/// An up level: `CrossAttnUpBlock2D` when it has attentions, else `UpBlock2D`.
#[derive(Clone, Debug)]
pub struct UpBlock {
    resnets: Vec<ResnetBlock2D>,
    attentions: Vec<Transformer2DModel>,
    upsampler: Option<Upsample2D>,
}

/// Channels of one up level: its output, the previous level's output and the skip widths.
pub(crate) struct UpChannels {
    pub prev_out: usize,
    /// Channels of the skip tensor consumed by the last ResNet (the level below's input).
    pub skip_last: usize,
}

impl UpBlock {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        d: LevelDims,
        ch: UpChannels,
    ) -> Result<UpBlock> {
        let out = d.resnet.out_ch;
        let mut resnets = Vec::with_capacity(d.layers);
        for i in 0..d.layers {
            let skip = if i == d.layers - 1 { ch.skip_last } else { out };
            let input = if i == 0 { ch.prev_out } else { out };
            let rd = ResnetDims {
                in_ch: input + skip,
                ..d.resnet
            };
            resnets.push(ResnetBlock2D::load(
                src,
                &join(prefix, &format!("resnets.{i}")),
                rd,
            )?);
        }
        let attentions = load_attentions(src, prefix, &d.depths, d.transformer)?;
        let upsampler = d
            .resample
            .map(|_| Upsample2D::load(src, &join(prefix, "upsamplers.0"), out))
            .transpose()?;
        Ok(UpBlock {
            resnets,
            attentions,
            upsampler,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<UpBlock> {
        Ok(UpBlock {
            resnets: map_all(&self.resnets, f, |r, f| r.map(f))?,
            attentions: map_all(&self.attentions, f, |a, f| a.map(f))?,
            upsampler: self.upsampler.as_ref().map(|u| u.map(f)).transpose()?,
        })
    }

    /// Which diffusers block this is.
    pub fn kind(&self) -> UpBlockType {
        if self.attentions.is_empty() {
            UpBlockType::UpBlock2D
        } else {
            UpBlockType::CrossAttnUpBlock2D
        }
    }

    /// The ResNets.
    pub fn resnets(&self) -> &[ResnetBlock2D] {
        &self.resnets
    }

    /// The transformers (empty for `UpBlock2D`).
    pub fn attentions(&self) -> &[Transformer2DModel] {
        &self.attentions
    }

    /// Consumes `skips` (one per ResNet, in the order the down blocks produced them: the last
    /// one is used first) and upsamples to `upsample_size` if given (else x2).
    pub fn forward(
        &self,
        x: &Tensor,
        skips: &[Tensor],
        temb: &Tensor,
        context: Option<&Tensor>,
        upsample_size: Option<(usize, usize)>,
    ) -> Result<Tensor> {
        if skips.len() != self.resnets.len() {
            return Err(Error::invalid(
                "UpBlock",
                format!(
                    "needs {} skip tensors, got {}",
                    self.resnets.len(),
                    skips.len()
                ),
            ));
        }
        let mut h = x.clone();
        for (i, resnet) in self.resnets.iter().enumerate() {
            let skip = &skips[skips.len() - 1 - i];
            h = resnet.forward(&Tensor::cat(&[&h, skip], 1)?, temb)?;
            if let Some(attn) = self.attentions.get(i) {
                h = attn.forward(&h, need_context(context)?)?;
            }
        }
        match &self.upsampler {
            Some(u) => u.forward(&h, upsample_size),
            None => Ok(h),
        }
    }
}
