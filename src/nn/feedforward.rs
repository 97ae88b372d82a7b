//! diffusers' `FeedForward` with GEGLU (`net.0.proj` then `net.2`), as used by
//! `BasicTransformerBlock`.
//!
//! Invariants:
//! - The gate runs in the first product's store and the second product's store adds its bias
//!   and the block's residual: exactly [`Tensor::ffn_geglu`]'s semantics on both devices.
//! - On the Cpu both weights are prepacked once, when the layer is built (IPEX-style): `net.0`
//!   as a GEGLU pack (`[h | g]` halves), `net.2` as a plain pack, biases widened to f32; a
//!   forward only packs its activations, and the packs are the only copy of the two weights
//!   (rebuilt bit for bit on demand, see [`super::held`]). On the Xpu the weights are read
//!   transposed in place.

use std::sync::Arc;

use crate::backend::prepared::PreparedProduct;
use crate::desc::Activation;
use crate::nn::held_weight::HeldWeight;
use crate::nn::layers::{join, MapFn};
use crate::nn::linear::residual_rows;
use crate::nn::weights::{Init, ParamSource};
use crate::{DType, Device, Error, Layout, Result, Tensor};

/// Cpu-only prepacked form: `net.0` (GEGLU) and `net.2` with their f32 biases.
struct Packed {
    w1: PreparedProduct,
    b1: Vec<f32>,
    w2: PreparedProduct,
    b2: Vec<f32>,
}

/// diffusers' `FeedForward(dim, activation_fn="geglu")`: `net.0.proj` `[2·4·dim, dim]`, then
/// `net.2` `[dim, 4·dim]`.
#[derive(Clone)]
pub struct FeedForward {
    w1: HeldWeight,
    b1: Tensor,
    w2: HeldWeight,
    b2: Tensor,
    packed: Option<Arc<Packed>>,
}

impl std::fmt::Debug for FeedForward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FeedForward(dim={}, inner={}, {}, {}, prepacked={})",
            self.w1.shape()[1],
            self.w2.shape()[1],
            self.w1.dtype(),
            self.w1.device(),
            self.packed.is_some()
        )
    }
}

fn f32_vec(t: &Tensor) -> Result<Vec<f32>> {
    t.to_dtype(DType::F32)?.to_vec::<f32>()
}

impl FeedForward {
    /// The block from `net.0.proj` (`w1` `[2·inner, dim]`, `b1` `[2·inner]`) and `net.2` (`w2`
    /// `[dim_out, inner]`, `b2` `[dim_out]`), all on one device in one dtype.
    pub fn new(w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Result<FeedForward> {
        let op = "FeedForward";
        let (ok1, ok2) = (
            w1.rank() == 2 && w1.shape()[0].is_multiple_of(2) && b1.shape() == [w1.shape()[0]],
            w2.rank() == 2 && w2.shape()[1] * 2 == w1.shape()[0] && b2.shape() == [w2.shape()[0]],
        );
        if !ok1 || !ok2 {
            return Err(Error::ShapeMismatch {
                op,
                expected: "w1 [2*inner, dim], b1 [2*inner], w2 [dim_out, inner], b2 [dim_out]"
                    .into(),
                got: format!(
                    "w1 {:?}, b1 {:?}, w2 {:?}, b2 {:?}",
                    w1.shape(),
                    b1.shape(),
                    w2.shape(),
                    b2.shape()
                ),
            });
        }
        for t in [&b1, &w2, &b2] {
            w1.same_device(t, op)?;
            w1.same_dtype(t, op)?;
        }
        if !w1.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: w1.dtype(),
                device: w1.device(),
                hint: "; weights must be f32, f16 or bf16".into(),
            });
        }
        let packed = match (
            PreparedProduct::new_geglu(w1.storage(), w1.t()?.layout())?,
            PreparedProduct::new(w2.storage(), w2.t()?.layout())?,
        ) {
            (Some(p1), Some(p2)) => Some(Arc::new(Packed {
                w1: p1,
                b1: f32_vec(&b1)?,
                w2: p2,
                b2: f32_vec(&b2)?,
            })),
            _ => None,
        };
        let (w1, w2) = match &packed {
            Some(_) => (HeldWeight::packed_only(&w1), HeldWeight::packed_only(&w2)),
            None => (HeldWeight::tensor(w1), HeldWeight::tensor(w2)),
        };
        Ok(FeedForward {
            w1,
            b1,
            w2,
            b2,
            packed,
        })
    }

    /// `net.0.proj.weight` `[2·inner, dim]` (on the Cpu rebuilt from the packs on first use).
    pub fn w1(&self) -> &Tensor {
        self.w1.get(|| self.packed.as_ref()?.w1.unpack_transposed())
    }

    /// `net.2.weight` `[dim_out, inner]` (on the Cpu rebuilt from the packs on first use).
    pub fn w2(&self) -> &Tensor {
        self.w2.get(|| self.packed.as_ref()?.w2.unpack_transposed())
    }

    /// True when the layer holds its weight tensors besides any prepacked panels.
    pub fn holds_weight_tensors(&self) -> bool {
        self.w1.is_held() && self.w2.is_held()
    }

    pub(crate) fn load(src: &mut dyn ParamSource, prefix: &str, dim: usize) -> Result<FeedForward> {
        let inner = 4 * dim;
        let w1 = src.get(
            &join(prefix, "net.0.proj.weight"),
            &[2 * inner, dim],
            Init::FanIn(dim),
        )?;
        let b1 = src.get(&join(prefix, "net.0.proj.bias"), &[2 * inner], Init::Zeros)?;
        let w2 = src.get(
            &join(prefix, "net.2.weight"),
            &[dim, inner],
            Init::FanIn(inner),
        )?;
        let b2 = src.get(&join(prefix, "net.2.bias"), &[dim], Init::Zeros)?;
        if src.placeholders() {
            // The recording pass: all-ones-shaped stand-ins, never run.
            return Ok(FeedForward {
                w1: HeldWeight::tensor(w1),
                b1,
                w2: HeldWeight::tensor(w2),
                b2,
                packed: None,
            });
        }
        FeedForward::new(w1, b1, w2, b2)
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<FeedForward> {
        let unpack1 = || self.packed.as_ref()?.w1.unpack_transposed();
        let unpack2 = || self.packed.as_ref()?.w2.unpack_transposed();
        FeedForward::new(
            f(&self.w1.owned(unpack1))?,
            f(&self.b1)?,
            f(&self.w2.owned(unpack2))?,
            f(&self.b2)?,
        )
    }

    /// True when the Cpu prepacked path is in use.
    pub fn is_prepacked(&self) -> bool {
        self.packed.is_some()
    }

    /// `net.2(h * gelu(g)) + residual` with `[h | g] = net.0.proj(x)`; `x` `[..., dim]`,
    /// `residual` broadcasts to the output `[..., dim_out]`.
    pub fn forward(&self, x: &Tensor, residual: Option<&Tensor>) -> Result<Tensor> {
        match (&self.packed, x.device()) {
            (Some(p), Device::Cpu) => self.forward_packed(p, x, residual),
            _ => x.ffn_geglu(
                self.w1(),
                Some(&self.b1),
                self.w2(),
                Some(&self.b2),
                residual,
            ),
        }
    }

    fn forward_packed(&self, p: &Packed, x: &Tensor, residual: Option<&Tensor>) -> Result<Tensor> {
        let op = "FeedForward";
        if x.dtype() != self.w1.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                expected: x.dtype(),
                got: self.w1.dtype(),
            });
        }
        let (dim, inner, dim_out) = (self.w1.shape()[1], self.w2.shape()[1], self.w2.shape()[0]);
        if x.rank() == 0 || x.shape()[x.rank() - 1] != dim {
            return Err(Error::shape(
                op,
                format!("an input of shape [..., {dim}]"),
                x.shape(),
            ));
        }
        let rows = x.numel() / dim.max(1);
        let mut out_shape = x.shape().to_vec();
        let last = out_shape.len() - 1;
        out_shape[last] = dim_out;
        let r = residual
            .map(|r| {
                x.same_device(r, op)?;
                x.same_dtype(r, op)?;
                r.broadcast_to(&out_shape)
                    .map_err(|_| Error::ShapeMismatch {
                        op,
                        expected: format!("a residual that broadcasts to {out_shape:?}"),
                        got: format!("{:?}", r.shape()),
                    })
            })
            .transpose()?;
        let rows_of = |r: &Tensor| residual_rows(r, dim_out);
        let r = r.as_ref().map(rows_of).transpose()?;
        let x2 = x.reshape(&[rows, dim])?;
        if x.device() != Device::Cpu {
            return Err(Error::DeviceMismatch {
                op,
                lhs: Device::Cpu,
                rhs: x.device(),
            });
        }
        let hidden = p.w1.apply(
            (x2.storage(), x2.layout()),
            Some(&p.b1),
            Activation::Gelu,
            None,
        )?;
        let residual = r.as_ref().map(|(t, strides)| (t.storage(), *strides));
        let out = p.w2.apply(
            (&hidden, &Layout::contiguous(&[rows, inner])),
            Some(&p.b2),
            Activation::None,
            residual,
        )?;
        Tensor::from_storage(out, Layout::contiguous(&[rows, dim_out])).reshape(&out_shape)
    }
}
