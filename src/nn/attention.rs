//! diffusers' `Attention` (the `AttnProcessor2_0` path) as used by SD's transformer blocks:
//! `to_q`, `to_k`, `to_v` (no bias), `to_out.0` (with bias), `heads` heads of `dim / heads`.
//!
//! Invariants:
//! - Self-attention projects q, k and v with one product ([`FusedQkv`], weight
//!   `[3·inner, dim]`); cross-attention projects q from the hidden states and k, v with one
//!   product over `[2·inner, ctx]` from the context. Heads are strided views `[B, H, L, D]` of
//!   those products (no copies) fed to [`Tensor::scaled_dot_product_attention`] with scale
//!   `1/sqrt(D)`; the kernel keeps scores and softmax in f32, which is what diffusers'
//!   `upcast_attention` asks for.
//! - The output projection's store adds the block's residual (fused on Xpu).
//! - Parameters are loaded under diffusers' names; the concatenated weights are built once at
//!   load (and moved/converted as a whole by `map`).

use crate::nn::layers::{join, linear_residual, load_linear, map_linear, MapFn};
use crate::nn::weights::{Init, ParamSource};
use crate::nn::{FusedQkv, Linear};
use crate::{Error, Result, Tensor};

/// Multi-head attention with diffusers' parameter names.
#[derive(Clone, Debug)]
pub struct Attention {
    heads: usize,
    head_dim: usize,
    /// Self-attention: q, k, v in one `[3·inner, dim]` product.
    qkv: Option<FusedQkv>,
    /// Cross-attention: q from the hidden states...
    q: Option<Linear>,
    /// ...and k, v in one `[2·inner, ctx]` product from the context.
    kv: Option<Linear>,
    out: Linear,
}

/// Shapes of one attention layer.
pub(crate) struct AttentionDims {
    pub query_dim: usize,
    /// `Some(ctx)` for cross-attention over a `[B, Lk, ctx]` context.
    pub cross_dim: Option<usize>,
    pub heads: usize,
    pub head_dim: usize,
}

impl Attention {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        d: AttentionDims,
    ) -> Result<Attention> {
        let inner = d.heads * d.head_dim;
        let ctx = d.cross_dim.unwrap_or(d.query_dim);
        let mut w = |name: &str, cols: usize| {
            src.get(
                &join(prefix, &format!("{name}.weight")),
                &[inner, cols],
                Init::FanIn(cols),
            )
        };
        let wq = w("to_q", d.query_dim)?;
        let wk = w("to_k", ctx)?;
        let wv = w("to_v", ctx)?;
        let out = load_linear(src, &join(prefix, "to_out.0"), inner, d.query_dim, true)?;
        let (qkv, q, kv) = if d.cross_dim.is_none() {
            // Recording placeholders are [1, 1]: one head fits them.
            let heads = if src.placeholders() { 1 } else { d.heads };
            let qkv = FusedQkv::new(&wq, &wk, &wv, None, None, None, heads)?;
            (Some(qkv), None, None)
        } else {
            let kv = Tensor::cat(&[&wk, &wv], 0)?;
            (
                None,
                Some(Linear::new(wq, None)?),
                Some(Linear::new(kv, None)?),
            )
        };
        Ok(Attention {
            heads: d.heads,
            head_dim: d.head_dim,
            qkv,
            q,
            kv,
            out,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<Attention> {
        let qkv = match &self.qkv {
            Some(qkv) => {
                let w = f(&qkv.linear().weight_owned())?;
                let inner = self.heads * self.head_dim;
                let part = |i: usize| w.narrow(0, i * inner, inner);
                let (wq, wk, wv) = (part(0)?, part(1)?, part(2)?);
                Some(FusedQkv::new(&wq, &wk, &wv, None, None, None, self.heads)?)
            }
            None => None,
        };
        let mut m = |l: &Option<Linear>| l.as_ref().map(|l| map_linear(l, f)).transpose();
        Ok(Attention {
            heads: self.heads,
            head_dim: self.head_dim,
            qkv,
            q: m(&self.q)?,
            kv: m(&self.kv)?,
            out: map_linear(&self.out, f)?,
        })
    }

    /// True for cross-attention (k and v come from a context).
    pub fn is_cross(&self) -> bool {
        self.qkv.is_none()
    }

    /// Number of heads.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// `[B, L, n·H·D]` product viewed as `n` tensors `[B, H, L, D]` (strided, no copy).
    fn split_heads(&self, p: &Tensor, n: usize) -> Result<Vec<Tensor>> {
        let (b, l) = (p.shape()[0], p.shape()[1]);
        let p = p.reshape(&[b, l, n, self.heads, self.head_dim])?;
        (0..n)
            .map(|i| p.narrow(2, i, 1)?.squeeze(2)?.permute(&[0, 2, 1, 3]))
            .collect()
    }

    /// Attention of `x` `[B, L, dim]` over itself or over `context` `[B, Lk, ctx]` (required
    /// for cross-attention, rejected for self-attention), plus `residual` (broadcast to the
    /// output) if given.
    pub fn forward(
        &self,
        x: &Tensor,
        context: Option<&Tensor>,
        residual: Option<&Tensor>,
    ) -> Result<Tensor> {
        if x.rank() != 3 {
            return Err(Error::shape(
                "Attention",
                "hidden states [B, L, dim]",
                x.shape(),
            ));
        }
        let (b, l) = (x.shape()[0], x.shape()[1]);
        let (q, k, v) =
            match (&self.qkv, &self.q, &self.kv, context) {
                (Some(qkv), _, _, None) => qkv.forward(x)?,
                (None, Some(wq), Some(wkv), Some(ctx)) => {
                    if ctx.rank() != 3 || ctx.shape()[0] != b {
                        return Err(Error::ShapeMismatch {
                            op: "Attention",
                            expected: format!(
                                "a context [{b}, Lk, ctx] for hidden states [{b}, L, dim]"
                            ),
                            got: format!("{:?}", ctx.shape()),
                        });
                    }
                    let q = self.split_heads(&wq.forward(x)?, 1)?.remove(0);
                    let mut kv = self.split_heads(&wkv.forward(ctx)?, 2)?;
                    let v = kv.remove(1);
                    (q, kv.remove(0), v)
                }
                (Some(_), ..) => {
                    return Err(Error::invalid(
                        "Attention",
                        "this is a self-attention layer; it takes no context",
                    ))
                }
                _ => return Err(Error::invalid(
                    "Attention",
                    "this is a cross-attention layer; it needs a context (encoder_hidden_states)",
                )),
            };
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let o = q.scaled_dot_product_attention(&k, &v, None, Some(scale))?;
        // [B, H, L, D] -> [B, L, H·D]
        let o = o
            .permute(&[0, 2, 1, 3])?
            .reshape(&[b, l, self.heads * self.head_dim])?;
        linear_residual(&self.out, &o, residual)
    }
}
