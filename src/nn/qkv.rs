//! `FusedQkv`: the query, key and value projections of a self-attention block as one product
//! with concatenated weights (what IPEX does for diffusers' transformer blocks).
//!
//! Invariants: the three `[out_i, in]` weights (PyTorch layout) are concatenated once into one
//! `[out_q + out_k + out_v, in]` [`Linear`] (prepacked on Cpu); missing biases of a layer that
//! has some are zeros. `forward` runs that one product and returns q, k and v as
//! `[B, heads, L, out_i / heads]` strided views of its output (no copy), exactly what
//! [`Tensor::scaled_dot_product_attention`] reads in place. Each `out_i` is divisible by `heads`.

use crate::layout::Layout;
use crate::nn::Linear;
use crate::{DType, Device, Error, Result, Tensor};

/// Query, key and value projections computed by one matrix product.
#[derive(Clone, Debug)]
pub struct FusedQkv {
    linear: Linear,
    /// Output features of q, k and v.
    outs: [usize; 3],
    heads: usize,
}

impl FusedQkv {
    /// Concatenates `wq`, `wk`, `wv` (`[out_i, in]`, same `in`, device and dtype) and their
    /// optional biases (`[out_i]`) into one projection for `heads` heads.
    pub fn new(
        wq: &Tensor,
        wk: &Tensor,
        wv: &Tensor,
        bq: Option<&Tensor>,
        bk: Option<&Tensor>,
        bv: Option<&Tensor>,
        heads: usize,
    ) -> Result<FusedQkv> {
        let op = "FusedQkv";
        let ws = [wq, wk, wv];
        for w in ws {
            if w.rank() != 2 || w.shape()[1] != wq.shape().get(1).copied().unwrap_or(0) {
                return Err(Error::ShapeMismatch {
                    op,
                    expected: "weights [out_q, in], [out_k, in], [out_v, in] with one `in`".into(),
                    got: format!("{:?}, {:?}, {:?}", wq.shape(), wk.shape(), wv.shape()),
                });
            }
            wq.same_device(w, op)?;
            wq.same_dtype(w, op)?;
        }
        let outs = ws.map(|w| w.shape()[0]);
        if heads == 0 || outs.iter().any(|o| !o.is_multiple_of(heads)) {
            return Err(Error::invalid(
                op,
                format!("heads must be > 0 and divide every output size {outs:?}, got {heads}"),
            ));
        }
        let weight = Tensor::cat(&ws, 0)?;
        let bias = if bq.is_none() && bk.is_none() && bv.is_none() {
            None
        } else {
            let parts = [bq, bk, bv]
                .iter()
                .zip(outs)
                .map(|(b, o)| match b {
                    Some(b) if b.shape() == [o] => Ok((*b).clone()),
                    Some(b) => Err(Error::shape(
                        op,
                        format!("a bias of shape [{o}]"),
                        b.shape(),
                    )),
                    None => Tensor::zeros(&[o], wq.dtype(), wq.device()),
                })
                .collect::<Result<Vec<_>>>()?;
            Some(Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0)?)
        };
        Ok(FusedQkv {
            linear: Linear::new(weight, bias)?,
            outs,
            heads,
        })
    }

    /// The one projection (`[out_q + out_k + out_v, in]` weight).
    pub fn linear(&self) -> &Linear {
        &self.linear
    }

    /// Number of heads.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// The layer on `device` (prepacked again when moving to Cpu).
    pub fn to(&self, device: Device) -> Result<FusedQkv> {
        Ok(FusedQkv {
            linear: self.linear.to(device)?,
            ..self.clone()
        })
    }

    /// The layer with weights converted to `dtype`.
    pub fn to_dtype(&self, dtype: DType) -> Result<FusedQkv> {
        Ok(FusedQkv {
            linear: self.linear.to_dtype(dtype)?,
            ..self.clone()
        })
    }

    /// `(q, k, v)`, each `[B, heads, L, out_i / heads]`, as strided views of one product of
    /// `x` (`[B, L, in]`).
    pub fn forward(&self, x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        if x.rank() != 3 {
            return Err(Error::shape(
                "FusedQkv",
                format!("an input of shape [B, L, {}]", self.linear.in_features()),
                x.shape(),
            ));
        }
        let y = self.linear.forward(x)?.contiguous()?;
        let (b, l, total) = (y.shape()[0], y.shape()[1], y.shape()[2]);
        let h = self.heads;
        let mut start = y.layout().offset();
        let [q, k, v] = self.outs.map(|o| {
            let dh = o / h;
            let view = Layout::from_parts(vec![b, h, l, dh], vec![l * total, dh, total, 1], start);
            start += o;
            y.with_layout(view)
        });
        Ok((q, k, v))
    }
}
