//! diffusers' `FeedForward` with GEGLU (`net.0.proj` then `net.2`), as used by
//! `BasicTransformerBlock`.
//!
//! Invariant: the gate runs in the first product's store and the second product's store adds
//! its bias and the block's residual ([`Tensor::ffn_geglu`]'s semantics).

use crate::nn::layers::{join, MapFn};
use crate::nn::weights::{Init, ParamSource};
use crate::{Result, Tensor};

/// diffusers' `FeedForward(dim, activation_fn="geglu")`: `net.0.proj` `[2·4·dim, dim]`, then
/// `net.2` `[dim, 4·dim]`.
#[derive(Clone, Debug)]
pub struct FeedForward {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

impl FeedForward {
    pub(crate) fn load(src: &mut dyn ParamSource, prefix: &str, dim: usize) -> Result<FeedForward> {
        let inner = 4 * dim;
        Ok(FeedForward {
            w1: src.get(
                &join(prefix, "net.0.proj.weight"),
                &[2 * inner, dim],
                Init::FanIn(dim),
            )?,
            b1: src.get(&join(prefix, "net.0.proj.bias"), &[2 * inner], Init::Zeros)?,
            w2: src.get(
                &join(prefix, "net.2.weight"),
                &[dim, inner],
                Init::FanIn(inner),
            )?,
            b2: src.get(&join(prefix, "net.2.bias"), &[dim], Init::Zeros)?,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<FeedForward> {
        Ok(FeedForward {
            w1: f(&self.w1)?,
            b1: f(&self.b1)?,
            w2: f(&self.w2)?,
            b2: f(&self.b2)?,
        })
    }

    /// `net.2(h * gelu(g)) + residual` with `[h | g] = net.0.proj(x)`.
    pub fn forward(&self, x: &Tensor, residual: Option<&Tensor>) -> Result<Tensor> {
        x.ffn_geglu(&self.w1, Some(&self.b1), &self.w2, Some(&self.b2), residual)
    }
}
