//! The VAE's mid block: diffusers' `UNetMidBlock2D` as the encoder and decoder build it
//! (`temb_channels=None`, one layer): ResNet, attention (unless `mid_block_add_attention` is
//! false), ResNet, all at the innermost level's channels.
//!
//! Invariant: parameters under `{prefix}.resnets.{0,1}` and `{prefix}.attentions.0`; the output
//! has the input's shape and memory format.

use super::attention::VaeAttention;
use super::resnet::{VaeResnet, VAE_EPS};
use crate::nn::layers::MapFn;
use crate::nn::weights::ParamSource;
use crate::nn::ActFn;
use crate::{Result, Tensor};

/// ResNet, optional attention, ResNet.
#[derive(Clone, Debug)]
pub(crate) struct VaeMidBlock {
    first: VaeResnet,
    attention: Option<VaeAttention>,
    second: VaeResnet,
}

impl VaeMidBlock {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        channels: usize,
        groups: usize,
        act: ActFn,
        add_attention: bool,
    ) -> Result<VaeMidBlock> {
        let resnet = |src: &mut dyn ParamSource, j: usize| {
            let p = format!("{prefix}.resnets.{j}");
            VaeResnet::load(src, &p, (channels, channels), groups, act)
        };
        let first = resnet(src, 0)?;
        let attention = add_attention
            .then(|| {
                let p = format!("{prefix}.attentions.0");
                VaeAttention::load(src, &p, channels, groups, VAE_EPS)
            })
            .transpose()?;
        let second = resnet(src, 1)?;
        Ok(VaeMidBlock {
            first,
            attention,
            second,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<VaeMidBlock> {
        Ok(VaeMidBlock {
            first: self.first.map(f)?,
            attention: self.attention.as_ref().map(|a| a.map(f)).transpose()?,
            second: self.second.map(f)?,
        })
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.first.forward(x)?;
        if let Some(a) = &self.attention {
            h = a.forward(&h)?;
        }
        self.second.forward(&h)
    }
}
