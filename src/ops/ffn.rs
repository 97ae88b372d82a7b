//! Feed-forward blocks built on fused products: diffusers' `FeedForward` with GEGLU.
//!
//! Invariant: weights use PyTorch's `nn.Linear` layout `[out_features, in_features]` and are read
//! transposed in place (no copy); the GEGLU gate runs in the first product's store and the
//! second product's store adds its bias and the optional residual, so the block makes exactly
//! two passes over memory-sized data (the `[.., inner]` hidden activation and the output).

use crate::{Error, Result, Tensor};

impl Tensor {
    /// `proj_out(h * gelu(g)) + residual` where `[h | g] = x @ w1ᵀ + b1` (diffusers'
    /// `FeedForward(activation_fn="geglu")`): `w1` is `[2·inner, dim]`, `b1` `[2·inner]`,
    /// `w2` `[dim_out, inner]`, `b2` `[dim_out]`, `x` `[..., dim]`, `residual` broadcasts to the
    /// output `[..., dim_out]`.
    pub fn ffn_geglu(
        &self,
        w1: &Tensor,
        b1: Option<&Tensor>,
        w2: &Tensor,
        b2: Option<&Tensor>,
        residual: Option<&Tensor>,
    ) -> Result<Tensor> {
        if w1.rank() != 2 || w2.rank() != 2 || w2.shape()[1] * 2 != w1.shape()[0] {
            return Err(Error::ShapeMismatch {
                op: "ffn_geglu",
                expected: "w1 [2*inner, dim] and w2 [dim_out, inner]".into(),
                got: format!("w1 {:?}, w2 {:?}", w1.shape(), w2.shape()),
            });
        }
        let dim = w1.shape()[1];
        if self.rank() == 0 || self.shape()[self.rank() - 1] != dim {
            return Err(Error::shape(
                "ffn_geglu",
                format!("an input of shape [..., {dim}]"),
                self.shape(),
            ));
        }
        let w1t = w1.t()?;
        let mut first = self.matmul_fused(&w1t).geglu();
        if let Some(b) = b1 {
            first = first.bias(b);
        }
        let hidden = first.run()?;
        let w2t = w2.t()?;
        let mut second = hidden.matmul_fused(&w2t);
        if let Some(b) = b2 {
            second = second.bias(b);
        }
        if let Some(r) = residual {
            second = second.residual(r);
        }
        second.run()
    }

    /// The same block as separate ops (the reference for tests and the `unfused` bench rows).
    pub fn ffn_geglu_unfused(
        &self,
        w1: &Tensor,
        b1: Option<&Tensor>,
        w2: &Tensor,
        b2: Option<&Tensor>,
        residual: Option<&Tensor>,
    ) -> Result<Tensor> {
        let mut p = self.matmul(&w1.t()?)?;
        if let Some(b) = b1 {
            p = p.add(b)?;
        }
        let inner = p.dim(-1)? / 2;
        let h = p
            .narrow(-1, 0, inner)?
            .mul(&p.narrow(-1, inner, inner)?.gelu()?)?;
        let mut y = h.matmul(&w2.t()?)?;
        if let Some(b) = b2 {
            y = y.add(b)?;
        }
        if let Some(r) = residual {
            y = y.add(r)?;
        }
        Ok(y)
    }
}
