//! The VAE mid block's attention: diffusers' `Attention` built with
//! `_from_deprecated_attn_block=True` (one head over the H·W pixels as tokens, group
//! normalisation first, q/k/v/out projections with biases, the input added back).
//!
//! `nn::Attention` has no q/k/v biases and no group normalisation, so this layer builds on
//! [`FusedQkv`] and [`Tensor::scaled_dot_product_attention`] directly.
//!
//! Invariants:
//! - `out = to_out(attention(to_q(n), to_k(n), to_v(n))) + x` with `n = group_norm(x)` viewed as
//!   `[B, H·W, C]` tokens and scale `1/sqrt(C)`; the fused kernel keeps the scores and the
//!   softmax in f32 (diffusers' `upcast_softmax`). The residual is added in `to_out`'s store.
//! - A channels-last input gives its tokens as a view (no copy); the output has the input's
//!   memory format.
//! - On the Xpu, whose fused kernel holds value rows of at most 160 channels in registers,
//!   wider values (SD's 512) are attended in chunks of [`XPU_VALUE_CHUNK`] channels: each
//!   chunk's output is exactly those columns of the full output (the softmax weights do not
//!   depend on the values), so the score matrix is never materialised.

use crate::nn::layers::{join, load_linear, map_linear, GroupNorm, MapFn};
use crate::nn::weights::{Init, ParamSource};
use crate::nn::{FusedQkv, Linear};
use crate::{Device, Error, Result, Tensor};

/// Value channels per fused-attention call on the Xpu.
pub(crate) const XPU_VALUE_CHUNK: usize = 128;

/// Single-head self-attention over the pixels of a feature map.
#[derive(Clone, Debug)]
pub(crate) struct VaeAttention {
    group_norm: GroupNorm,
    qkv: FusedQkv,
    out: Linear,
    channels: usize,
}

impl VaeAttention {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        channels: usize,
        groups: usize,
        eps: f64,
    ) -> Result<VaeAttention> {
        let p = |n: &str| join(prefix, n);
        let group_norm = GroupNorm::load(src, &p("group_norm"), channels, groups, eps)?;
        let mut proj = |name: &str| -> Result<(Tensor, Tensor)> {
            let w = src.get(
                &p(&format!("{name}.weight")),
                &[channels, channels],
                Init::FanIn(channels),
            )?;
            let b = src.get(&p(&format!("{name}.bias")), &[channels], Init::Zeros)?;
            Ok((w, b))
        };
        let (wq, bq) = proj("to_q")?;
        let (wk, bk) = proj("to_k")?;
        let (wv, bv) = proj("to_v")?;
        let qkv = FusedQkv::new(&wq, &wk, &wv, Some(&bq), Some(&bk), Some(&bv), 1)?;
        let out = load_linear(src, &p("to_out.0"), channels, channels, true)?;
        Ok(VaeAttention {
            group_norm,
            qkv,
            out,
            channels,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<VaeAttention> {
        let l = self.qkv.linear();
        let w = f(&l.weight_owned())?;
        let c = self.channels;
        let b = match l.bias() {
            Some(b) => f(b)?,
            None => return Err(Error::invalid("VaeAttention", "internal: no q/k/v bias")),
        };
        let part = |t: &Tensor, i: usize| t.narrow(0, i * c, c);
        let (wq, wk, wv) = (part(&w, 0)?, part(&w, 1)?, part(&w, 2)?);
        let (bq, bk, bv) = (part(&b, 0)?, part(&b, 1)?, part(&b, 2)?);
        Ok(VaeAttention {
            group_norm: self.group_norm.map(f)?,
            qkv: FusedQkv::new(&wq, &wk, &wv, Some(&bq), Some(&bk), Some(&bv), 1)?,
            out: map_linear(&self.out, f)?,
            channels: c,
        })
    }

    /// `[B, C, H, W]` -> `[B, C, H, W]` in `x`'s memory format.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let &[b, c, h, w] = x.shape() else {
            return Err(Error::shape("VaeAttention", "[B, C, H, W]", x.shape()));
        };
        let tokens = |t: &Tensor| t.permute(&[0, 2, 3, 1])?.reshape(&[b, h * w, c]);
        let normed = tokens(&self.group_norm.forward(x)?)?;
        let (q, k, v) = self.qkv.forward(&normed)?;
        drop(normed);
        let o = attend(&q, &k, &v, 1.0 / (c as f64).sqrt())?;
        drop((q, k, v));
        // [B, 1, L, C] -> [B, L, C]
        let o = o.reshape(&[b, h * w, c])?;
        let y = self.out.forward_residual(&o, &tokens(x)?)?;
        y.reshape(&[b, h, w, c])?
            .permute(&[0, 3, 1, 2])?
            .to_memory_format(x.memory_format())
    }
}

/// `softmax(q·kᵀ·scale)·v` for `[B, 1, L, D]` operands on the fused kernel (module docs: Xpu
/// values wider than [`XPU_VALUE_CHUNK`] go in chunks).
fn attend(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    let dv = v.shape()[3];
    if q.device() == Device::Cpu || dv <= XPU_VALUE_CHUNK {
        return q.scaled_dot_product_attention(k, v, None, Some(scale));
    }
    let chunks = (0..dv)
        .step_by(XPU_VALUE_CHUNK)
        .map(|s| {
            let vs = v.narrow(3, s, XPU_VALUE_CHUNK.min(dv - s))?;
            q.scaled_dot_product_attention(k, &vs, None, Some(scale))
        })
        .collect::<Result<Vec<_>>>()?;
    Tensor::cat(&chunks.iter().collect::<Vec<_>>(), 3)
}
