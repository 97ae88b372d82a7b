//! `Linear`: `y = x @ Wᵀ + b` with PyTorch's weight layout `[out_features, in_features]`.
//!
//! Invariants: on Cpu the weight is prepacked once, at construction or `to(Device::Cpu)`, into
//! the GEMM engine's panels (IPEX-style), and every forward only packs the activations; the
//! panels are then the only copy of the weight (see [`super::held`]): [`Linear::weight`]
//! rebuilds it from them, bit for bit, on first use. On Xpu the
//! transposed weight is a view (never copied per call) and the bias is fused into the product's
//! store. Both paths compute the same thing as `x.matmul(&w.t()?)?.add(&b)?`.

use crate::desc::Activation;
use std::sync::Arc;

use crate::backend::prepared::{PreparedProduct, ResidualRowsOf};
use crate::backend::Storage;
use crate::nn::held_weight::HeldWeight;
use crate::{DType, Device, Error, Layout, Result, Tensor};

/// A fully connected layer.
#[derive(Clone)]
pub struct Linear {
    weight: HeldWeight,
    bias: Option<Tensor>,
    /// Cpu only: the prepacked weight and the bias widened to f32, both made once.
    packed: Option<Arc<(PreparedProduct, Option<Vec<f32>>)>>,
}

impl std::fmt::Debug for Linear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Linear(in={}, out={}, bias={}, {}, prepacked={})",
            self.in_features(),
            self.out_features(),
            self.bias.is_some(),
            self.weight.device(),
            self.packed.is_some()
        )
    }
}

impl Linear {
    /// A layer from a `[out, in]` weight and an optional `[out]` bias (same device and dtype).
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Result<Linear> {
        if weight.rank() != 2 {
            return Err(Error::shape(
                "Linear",
                "a weight of shape [out_features, in_features]",
                weight.shape(),
            ));
        }
        if let Some(b) = &bias {
            weight.same_device(b, "Linear")?;
            weight.same_dtype(b, "Linear")?;
            if b.shape() != [weight.shape()[0]] {
                return Err(Error::shape(
                    "Linear",
                    format!("a bias of shape [{}]", weight.shape()[0]),
                    b.shape(),
                ));
            }
        }
        if !weight.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: "Linear",
                dtype: weight.dtype(),
                device: weight.device(),
                hint: "; weights must be f32, f16 or bf16".into(),
            });
        }
        let packed = match PreparedProduct::new(weight.storage(), weight.t()?.layout())? {
            Some(p) => {
                let bias32 = bias
                    .as_ref()
                    .map(|b| b.to_dtype(DType::F32)?.to_vec::<f32>())
                    .transpose()?;
                Some(Arc::new((p, bias32)))
            }
            None => None,
        };
        let weight = match &packed {
            Some(_) => HeldWeight::packed_only(&weight),
            None => HeldWeight::tensor(weight),
        };
        Ok(Linear {
            weight,
            bias,
            packed,
        })
    }

    /// Input features.
    pub fn in_features(&self) -> usize {
        self.weight.shape()[1]
    }

    /// Output features.
    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }

    /// The `[out, in]` weight (on the Cpu rebuilt from the prepacked panels on first use).
    pub fn weight(&self) -> &Tensor {
        self.weight.get(|| self.unpack())
    }

    /// The weight without keeping a rebuilt copy in this layer (for conversions).
    pub(crate) fn weight_owned(&self) -> Tensor {
        self.weight.owned(|| self.unpack())
    }

    /// True when the layer holds its weight tensor besides any prepacked panels (false for a
    /// Cpu layer until [`Linear::weight`] is first called).
    pub fn holds_weight_tensor(&self) -> bool {
        self.weight.is_held()
    }

    fn unpack(&self) -> Option<Storage> {
        self.packed.as_ref()?.0.unpack_transposed()
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// True when the Cpu prepacked path is in use.
    pub fn is_prepacked(&self) -> bool {
        self.packed.is_some()
    }

    /// The layer on `device` (weights are prepacked again when moving to Cpu).
    pub fn to(&self, device: Device) -> Result<Linear> {
        Linear::new(
            self.weight_owned().to(device)?,
            self.bias.as_ref().map(|b| b.to(device)).transpose()?,
        )
    }

    /// The layer with weights converted to `dtype`.
    pub fn to_dtype(&self, dtype: DType) -> Result<Linear> {
        Linear::new(
            self.weight_owned().to_dtype(dtype)?,
            self.bias.as_ref().map(|b| b.to_dtype(dtype)).transpose()?,
        )
    }

    /// `x @ Wᵀ + b` for `x` of shape `[..., in_features]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_act(x, Activation::None)
    }

    /// `x @ Wᵀ + b + residual` in one product (`residual` broadcasts to the output `[..., out]`,
    /// any layout and the input's dtype): on Cpu the residual is added in the prepacked
    /// product's store (read in place when it is f32 rows), on Xpu in the fused product's store.
    pub fn forward_residual(&self, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        let out_shape = self.out_shape(x)?;
        x.same_device(residual, "Linear residual")?;
        x.same_dtype(residual, "Linear residual")?;
        let r = residual
            .broadcast_to(&out_shape)
            .map_err(|_| Error::ShapeMismatch {
                op: "Linear residual",
                expected: format!("a shape that broadcasts to the output {out_shape:?}"),
                got: format!("{:?}", residual.shape()),
            })?;
        if self.packed.is_none() {
            let wt = self.weight().t()?;
            let mut op = x.matmul_fused(&wt).residual(&r);
            if let Some(b) = &self.bias {
                op = op.bias(b);
            }
            return op.run();
        }
        let (rt, strides) = residual_rows(&r, self.out_features())?;
        self.run_packed(x, Activation::None, Some((rt.storage(), strides)))
    }

    /// The output shape for `x` `[..., in]`, checking device, dtype and the last dim.
    fn out_shape(&self, x: &Tensor) -> Result<Vec<usize>> {
        if x.device() != self.weight.device() {
            return Err(Error::DeviceMismatch {
                op: "Linear",
                lhs: x.device(),
                rhs: self.weight.device(),
            });
        }
        if x.dtype() != self.weight.dtype() {
            return Err(Error::DTypeMismatch {
                op: "Linear",
                expected: x.dtype(),
                got: self.weight.dtype(),
            });
        }
        let k = self.in_features();
        if x.rank() == 0 || x.shape()[x.rank() - 1] != k {
            return Err(Error::shape(
                "Linear",
                format!("an input of shape [..., {k}]"),
                x.shape(),
            ));
        }
        let mut out_shape = x.shape().to_vec();
        let last = out_shape.len() - 1;
        out_shape[last] = self.out_features();
        Ok(out_shape)
    }

    /// The prepacked Cpu product `act(x @ Wᵀ + b) + residual`.
    fn run_packed(
        &self,
        x: &Tensor,
        activation: Activation,
        residual: Option<ResidualRowsOf>,
    ) -> Result<Tensor> {
        let out_shape = self.out_shape(x)?;
        let k = self.in_features();
        let rows = x.numel() / k.max(1);
        let x2 = x.reshape(&[rows, k])?;
        match (&self.packed, x2.device()) {
            (Some(packed), Device::Cpu) => {
                let (weight, bias) = &**packed;
                let out = weight.apply(
                    (x2.storage(), x2.layout()),
                    bias.as_deref(),
                    activation,
                    residual,
                )?;
                Tensor::from_storage(out, Layout::contiguous(&[rows, self.out_features()]))
                    .reshape(&out_shape)
            }
            _ => Err(Error::invalid(
                "Linear",
                "internal: no prepacked Cpu weight",
            )),
        }
    }

    /// `act(x @ Wᵀ + b)` with the activation fused into the product's store.
    pub fn forward_act(&self, x: &Tensor, activation: Activation) -> Result<Tensor> {
        if self.packed.is_some() && x.device() == Device::Cpu {
            return self.run_packed(x, activation, None);
        }
        let out_shape = self.out_shape(x)?;
        let k = self.in_features();
        let x2 = x.reshape(&[x.numel() / k.max(1), k])?;
        let wt = self.weight().t()?;
        let mut op = x2.matmul_fused(&wt).activation(activation);
        if let Some(b) = &self.bias {
            op = op.bias(b);
        }
        op.run()?.reshape(&out_shape)
    }
}

/// `r` (already broadcast to `[..., cols]`) as rows of `cols` that the GEMM store reads in place
/// (f32, bf16 or f16): the tensor holding them and `(offset, row stride, column stride)`. A view
/// when its leading dims merge into one row stride (contiguous, a transposed view of tokens, a
/// broadcast); otherwise one dense copy in its own dtype.
pub(crate) fn residual_rows(r: &Tensor, cols: usize) -> Result<(Tensor, (usize, usize, usize))> {
    let (sh, st) = (r.shape(), r.strides());
    let last = sh.len().saturating_sub(1);
    // Leading dims that are not size 1, outermost first.
    let lead: Vec<(usize, usize)> = (0..last)
        .filter(|&d| sh[d] > 1)
        .map(|d| (sh[d], st[d]))
        .collect();
    let merged = lead.windows(2).all(|p| p[0].1 == p[1].0 * p[1].1);
    if merged && r.rank() > 0 {
        let row_stride = lead.last().map_or(0, |p| p.1);
        let off = r.layout().offset();
        return Ok((r.clone(), (off, row_stride, st[last])));
    }
    let dense = r.contiguous()?;
    let off = dense.layout().offset();
    Ok((dense, (off, cols, 1)))
}
