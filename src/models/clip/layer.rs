//! One CLIP encoder layer (transformers' `CLIPEncoderLayer`), pre-norm:
//! `x + out_proj(causal_attention(layer_norm1(x)))`, then `x + fc2(act(fc1(layer_norm2(x))))`.
//!
//! Invariants: q, k and v are one product ([`FusedQkv`], with their biases) whose heads are
//! strided views fed to the fused causal attention (scale `head_dim^-0.5`, scores and softmax
//! in f32 inside the kernel); both residual additions happen in the store of the product before
//! them (`out_proj`, `fc2`); GELU (exact or tanh) is fused into `fc1`'s store, quick GELU is
//! `x * sigmoid(1.702 x)` computed after it, as transformers does. Every parameter has the
//! layer's dtype and device.

use super::config::{ClipTextConfig, HiddenAct};
use super::params::{Init, Params};
use crate::nn::{FusedQkv, Linear};
use crate::{Activation, DType, Device, Error, Result, Tensor};

/// `nn.LayerNorm(C, eps)` over the last dim.
#[derive(Clone, Debug)]
pub(crate) struct Norm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl Norm {
    pub(crate) fn load(p: &mut Params, prefix: &str, channels: usize, eps: f64) -> Result<Norm> {
        Ok(Norm {
            weight: p.get(&format!("{prefix}.weight"), &[channels], Init::Ones)?,
            bias: p.get(&format!("{prefix}.bias"), &[channels], Init::Zeros)?,
            eps,
        })
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.layer_norm(Some(&self.weight), Some(&self.bias), self.eps)
    }

    pub(crate) fn map(&self, f: &dyn Fn(&Tensor) -> Result<Tensor>) -> Result<Norm> {
        Ok(Norm {
            weight: f(&self.weight)?,
            bias: f(&self.bias)?,
            eps: self.eps,
        })
    }
}

/// `nn.Linear(in, out)` stored as `{prefix}.weight` `[out, in]` and `{prefix}.bias` `[out]`.
pub(crate) fn load_linear(
    p: &mut Params,
    prefix: &str,
    in_features: usize,
    out_features: usize,
    bias: bool,
) -> Result<Linear> {
    let w = p.get(
        &format!("{prefix}.weight"),
        &[out_features, in_features],
        Init::FanIn(in_features),
    )?;
    let b = if bias {
        Some(p.get(&format!("{prefix}.bias"), &[out_features], Init::Zeros)?)
    } else {
        None
    };
    Linear::new(w, b)
}

/// One pre-norm encoder layer; see the module docs.
#[derive(Clone, Debug)]
pub(crate) struct EncoderLayer {
    layer_norm1: Norm,
    qkv: FusedQkv,
    out_proj: Linear,
    layer_norm2: Norm,
    fc1: Linear,
    fc2: Linear,
    act: HiddenAct,
    heads: usize,
    hidden: usize,
}

impl EncoderLayer {
    /// Loads layer `prefix` (`text_model.encoder.layers.N`).
    pub(crate) fn load(p: &mut Params, prefix: &str, c: &ClipTextConfig) -> Result<EncoderLayer> {
        let (h, eps) = (c.hidden_size, c.layer_norm_eps);
        let layer_norm1 = Norm::load(p, &format!("{prefix}.layer_norm1"), h, eps)?;
        let attn = format!("{prefix}.self_attn");
        let mut w = |name: &str| -> Result<(Tensor, Tensor)> {
            let w = p.get(&format!("{attn}.{name}.weight"), &[h, h], Init::FanIn(h))?;
            let b = p.get(&format!("{attn}.{name}.bias"), &[h], Init::Zeros)?;
            Ok((w, b))
        };
        let (wq, bq) = w("q_proj")?;
        let (wk, bk) = w("k_proj")?;
        let (wv, bv) = w("v_proj")?;
        // Recording placeholders are [1, 1] and [1]: one head fits them.
        let heads = if p.placeholders() {
            1
        } else {
            c.num_attention_heads
        };
        let qkv = FusedQkv::new(&wq, &wk, &wv, Some(&bq), Some(&bk), Some(&bv), heads)?;
        let out_proj = load_linear(p, &format!("{attn}.out_proj"), h, h, true)?;
        let layer_norm2 = Norm::load(p, &format!("{prefix}.layer_norm2"), h, eps)?;
        let mlp = format!("{prefix}.mlp");
        let fc1 = load_linear(p, &format!("{mlp}.fc1"), h, c.intermediate_size, true)?;
        let fc2 = load_linear(p, &format!("{mlp}.fc2"), c.intermediate_size, h, true)?;
        Ok(EncoderLayer {
            layer_norm1,
            qkv,
            out_proj,
            layer_norm2,
            fc1,
            fc2,
            act: c.hidden_act,
            heads: c.num_attention_heads,
            hidden: h,
        })
    }

    /// The layer on `device` (Linear weights prepacked again when moving to Cpu).
    pub(crate) fn to(&self, device: Device) -> Result<EncoderLayer> {
        let f = |t: &Tensor| t.to(device);
        Ok(EncoderLayer {
            layer_norm1: self.layer_norm1.map(&f)?,
            qkv: self.qkv.to(device)?,
            out_proj: self.out_proj.to(device)?,
            layer_norm2: self.layer_norm2.map(&f)?,
            fc1: self.fc1.to(device)?,
            fc2: self.fc2.to(device)?,
            ..self.clone()
        })
    }

    /// The layer with every parameter converted to `dtype`.
    pub(crate) fn to_dtype(&self, dtype: DType) -> Result<EncoderLayer> {
        let f = |t: &Tensor| t.to_dtype(dtype);
        Ok(EncoderLayer {
            layer_norm1: self.layer_norm1.map(&f)?,
            qkv: self.qkv.to_dtype(dtype)?,
            out_proj: self.out_proj.to_dtype(dtype)?,
            layer_norm2: self.layer_norm2.map(&f)?,
            fc1: self.fc1.to_dtype(dtype)?,
            fc2: self.fc2.to_dtype(dtype)?,
            ..self.clone()
        })
    }

    /// The layer applied to hidden states `x` `[B, L, hidden]`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, l) = match x.shape() {
            [b, l, h] if *h == self.hidden => (*b, *l),
            s => {
                return Err(Error::shape(
                    "CLIPEncoderLayer",
                    format!("hidden states [B, L, {}]", self.hidden),
                    s,
                ))
            }
        };
        let head_dim = self.hidden / self.heads;
        let (q, k, v) = self.qkv.forward(&self.layer_norm1.forward(x)?)?;
        let scale = 1.0 / (head_dim as f64).sqrt();
        let o = q.scaled_dot_product_attention_causal(&k, &v, Some(scale))?;
        // [B, H, L, D] -> [B, L, H·D]
        let o = o.permute(&[0, 2, 1, 3])?.reshape(&[b, l, self.hidden])?;
        let x = self.out_proj.forward_residual(&o, x)?;
        let h = self.layer_norm2.forward(&x)?;
        let h = match self.act {
            HiddenAct::Gelu => self.fc1.forward_act(&h, Activation::Gelu)?,
            HiddenAct::GeluTanh => self.fc1.forward_act(&h, Activation::GeluTanh)?,
            HiddenAct::QuickGelu => {
                let h = self.fc1.forward(&h)?;
                h.mul(&h.mul_scalar(1.702)?.sigmoid()?)?
            }
        };
        self.fc2.forward_residual(&h, &x)
    }
}
