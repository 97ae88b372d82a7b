//! `Conv2d`: PyTorch's `nn.Conv2d` (weight `[out, in/groups, kh, kw]`, optional bias `[out]`)
//! with a fused epilogue: `forward_fused(x, residual, act) = act(conv(x) + b) + residual`.
//!
//! Invariants: weight and bias share one device and dtype, checked at construction together with
//! the parameters; on the Cpu the weight is prepacked once into the implicit-GEMM engine's panels
//! (and the bias widened to f32) at construction, so a forward only gathers its input; the
//! output format follows [`Tensor::conv2d`] (channels-last in,
//! channels-last out); every forward computes exactly what [`Tensor::conv2d_fused`] computes.
//!
//! A Cpu layer built by a model loader that owns the weight alone ([`Conv2d::new_owned`]) holds
//! only its packs when the weight can come back exactly without them (implicit-GEMM panels hold
//! its values, a seeded source draws it again, a checkpoint file reads it again and checks it
//! unchanged, or a 16-bit copy holds every value: `restore.rs`); [`Conv2d::weight`] then
//! rebuilds it on first use, and a one-element stand-in broadcast to the weight's shape takes its
//! place in the op's shape, dtype and format checks. Winograd packs cannot give a 3×3 weight back, so
//! holding both cost an f32 SD 1.5 UNet 2.1 GB of its 7.7 GB.

use std::sync::Arc;

use crate::backend::prepared::LayerConv;
use crate::desc::Activation;
use crate::desc::ConvGeom;
use crate::nn::held_weight::HeldWeight;
use crate::nn::restore::{Regenerate, WeightRestore};
use crate::ops::conv::{layer_weight_format, prepare_layer_weight};
use crate::{Conv2dParams, DType, Device, Error, MemoryFormat, Result, Tensor};

/// Cpu only: the prepacked weight (packed again for the autotuner's winner) and the bias
/// widened to f32.
type Prepacked = Arc<LayerConv>;

/// A 2-D convolution layer.
#[derive(Clone)]
pub struct Conv2d {
    weight: HeldWeight,
    /// Layers that hold only their packs: how the weight comes back.
    restore: Option<WeightRestore>,
    /// Layers that hold only their packs: one element broadcast to the weight's shape (dtype and
    /// device of the weight, standard strides' format), for the op's checks.
    stand_in: Option<Tensor>,
    bias: Option<Tensor>,
    params: Conv2dParams,
    packed: Option<Prepacked>,
}

impl std::fmt::Debug for Conv2d {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Conv2d(in={}, out={}, kernel={:?}, {:?}, bias={}, {}, {}, prepacked={})",
            self.in_channels(),
            self.out_channels(),
            self.kernel_size(),
            self.params,
            self.bias.is_some(),
            self.weight.dtype(),
            self.weight.device(),
            self.packed.is_some(),
        )
    }
}

impl Conv2d {
    /// A layer from a `[out, in/groups, kh, kw]` weight, an optional `[out]` bias (same device
    /// and dtype) and the stride/padding/dilation/groups parameters.
    pub fn new(weight: Tensor, bias: Option<Tensor>, params: Conv2dParams) -> Result<Conv2d> {
        Self::build(weight, bias, params, None, false)
    }

    /// [`Conv2d::new`] for a caller that hands over the only reference to `weight` (a model
    /// loader): a Cpu layer then keeps only its packs where `regenerate` (which must draw the
    /// same bits again) or an exact 16-bit copy can give the weight back (module docs).
    pub(crate) fn new_owned(
        weight: Tensor,
        bias: Option<Tensor>,
        params: Conv2dParams,
        regenerate: Option<Regenerate>,
    ) -> Result<Conv2d> {
        Self::build(weight, bias, params, regenerate, true)
    }

    fn build(
        weight: Tensor,
        bias: Option<Tensor>,
        params: Conv2dParams,
        regenerate: Option<Regenerate>,
        owned: bool,
    ) -> Result<Conv2d> {
        let op = "Conv2d";
        let &[o, cg, kh, kw] = weight.shape() else {
            return Err(Error::shape(
                op,
                "a weight of shape [out, in/groups, kh, kw]",
                weight.shape(),
            ));
        };
        if !weight.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: weight.dtype(),
                device: weight.device(),
                hint: "; weights must be f32, f16 or bf16".into(),
            });
        }
        if let Some(b) = &bias {
            weight.same_device(b, op)?;
            weight.same_dtype(b, op)?;
            if b.shape() != [o] {
                return Err(Error::shape(
                    op,
                    format!("a bias of shape [{o}]"),
                    b.shape(),
                ));
            }
        }
        // Validate the parameters against the smallest input the kernel fits.
        let (g, d, pd) = (params.groups, params.dilation, params.padding);
        let fit = |k: usize, dil: usize, pad: usize| {
            (dil * k.saturating_sub(1) + 1)
                .saturating_sub(2 * pad)
                .max(1)
        };
        ConvGeom::new(
            op,
            &[1, cg * g, fit(kh, d.0, pd.0), fit(kw, d.1, pd.1)],
            weight.shape(),
            params,
        )?;
        let packed = prepare_layer_weight(&weight, bias.as_ref(), params)?.map(Arc::new);
        // Tensor-core convolutions read the weight as [O][kh][kw][C]: store it so once,
        // instead of a repacking copy per call.
        let weight = match layer_weight_format(&weight, g) {
            Some(fmt) => weight.to_memory_format(fmt)?,
            None => weight,
        };
        let packs_only = owned
            && packed.is_some()
            && weight.is_contiguous()
            && weight.memory_format() == MemoryFormat::Contiguous;
        let restore = if packs_only {
            // Cheapest first: panels that hold the values, a source that makes them again
            // (a seeded draw, a checkpoint read again), an exact 16-bit copy.
            packed
                .as_ref()
                .and_then(|layer| WeightRestore::from_packs(layer, weight.shape(), weight.dtype()))
                .or_else(|| regenerate.map(WeightRestore::Regenerate))
                .or_else(|| WeightRestore::narrow_exact(&weight))
        } else {
            None
        };
        let (weight, stand_in) = match restore {
            Some(_) => (
                HeldWeight::packed_only(&weight),
                Some(
                    Tensor::zeros(&[1, 1, 1, 1], weight.dtype(), weight.device())?
                        .broadcast_to(weight.shape())?,
                ),
            ),
            None => (HeldWeight::tensor(weight), None),
        };
        Ok(Conv2d {
            weight,
            restore,
            stand_in,
            bias,
            params,
            packed,
        })
    }

    /// Input channels (`C`).
    pub fn in_channels(&self) -> usize {
        self.weight.shape()[1] * self.params.groups
    }

    /// Output channels (`O`).
    pub fn out_channels(&self) -> usize {
        self.weight.shape()[0]
    }

    /// `(kh, kw)`.
    pub fn kernel_size(&self) -> (usize, usize) {
        (self.weight.shape()[2], self.weight.shape()[3])
    }

    /// Stride, padding, dilation and groups.
    pub fn params(&self) -> Conv2dParams {
        self.params
    }

    /// The `[out, in/groups, kh, kw]` weight (on the Cpu possibly rebuilt on first use: module
    /// docs). A layer loaded from a checkpoint file that changed since reads zeros here, with a
    /// message on stderr; [`Conv2d::to`] and [`Conv2d::to_dtype`] fail instead.
    pub fn weight(&self) -> &Tensor {
        self.weight.get_tensor(|| self.rebuild())
    }

    /// The weight without keeping a rebuilt copy in this layer (for conversions).
    pub(crate) fn weight_owned(&self) -> Tensor {
        self.weight.owned_tensor(|| self.rebuild())
    }

    fn rebuild(&self) -> Option<Tensor> {
        self.restore.as_ref()?.rebuild()
    }

    /// The weight without keeping a rebuilt copy, or why it could not be rebuilt (a checkpoint
    /// file changed since loading, out of memory).
    pub(crate) fn try_weight_owned(&self) -> Result<Tensor> {
        if self.weight.is_held() {
            return Ok(self.weight_owned());
        }
        let t = match &self.restore {
            Some(r) => r.try_rebuild()?,
            None => return Ok(self.weight_owned()),
        };
        if t.shape() != self.weight.shape()
            || t.dtype() != self.weight.dtype()
            || t.device() != Device::Cpu
            || !t.is_contiguous()
        {
            return Err(Error::invalid(
                "Conv2d",
                format!(
                    "a rebuilt contiguous Cpu weight of shape {:?} and dtype {}, got {:?} {}",
                    self.weight.shape(),
                    self.weight.dtype(),
                    t.shape(),
                    t.dtype()
                ),
            ));
        }
        Ok(t)
    }

    /// The weight for packing it again for another kernel (the autotuner's): a layer that
    /// gives its weight back from its implicit-GEMM packs keeps it from now on, since the new
    /// packs may not give it back (`restore.rs`); others rebuild it without keeping it.
    fn weight_for_repack(&self) -> Result<Tensor> {
        match self.restore {
            Some(WeightRestore::Packs { .. }) => Ok(self.weight().clone()),
            _ => self.try_weight_owned(),
        }
    }

    /// True when the layer holds its weight tensor (false for a Cpu layer that holds only its
    /// packs until [`Conv2d::weight`] is first called: module docs).
    pub fn holds_weight_tensor(&self) -> bool {
        self.weight.is_held()
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// True when the Cpu engine's prepacked weights are in use (layers on the Cpu).
    pub fn is_prepacked(&self) -> bool {
        self.packed.is_some()
    }

    /// True when the Cpu layer's packs are Winograd's, F(4×4, 3×3) or F(2×2, 3×3) (3×3, stride
    /// 1, no dilation, one group, at least 16 channels each way): the static rule's choice at
    /// construction, or the autotuner's winner for the layer's latest problem (`cpu_conv2d`);
    /// else the implicit GEMM. Always false on the Xpu, which chooses per call
    /// (`gpu_conv2d`).
    pub fn uses_winograd(&self) -> bool {
        self.packed
            .as_ref()
            .is_some_and(|p| p.current().is_winograd())
    }

    /// The layer on `device` (weights are prepacked again when moving to the Cpu).
    pub fn to(&self, device: Device) -> Result<Conv2d> {
        Conv2d::new_owned(
            self.try_weight_owned()?.to(device)?,
            self.bias.as_ref().map(|b| b.to(device)).transpose()?,
            self.params,
            None,
        )
    }

    /// The layer with weights converted to `dtype`.
    pub fn to_dtype(&self, dtype: DType) -> Result<Conv2d> {
        Conv2d::new_owned(
            self.try_weight_owned()?.to_dtype(dtype)?,
            self.bias.as_ref().map(|b| b.to_dtype(dtype)).transpose()?,
            self.params,
            None,
        )
    }

    /// `conv2d(x, W) + b` for `x` of shape `[N, in, H, W]` (NCHW or channels-last).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_fused(x, None, Activation::None)
    }

    /// `act(conv2d(x, W) + b) + residual` in one pass over the output (`residual` broadcasts to
    /// the output, any layout).
    pub fn forward_fused(
        &self,
        x: &Tensor,
        residual: Option<&Tensor>,
        activation: Activation,
    ) -> Result<Tensor> {
        // The stand-in serves the checks unless the packs cannot run `x` (bf16 AMX panels
        // with AMX off since), where the unprepacked path needs the weight itself.
        let unserved = x.device() == Device::Cpu
            && x.dtype() == self.weight.dtype()
            && self
                .packed
                .as_ref()
                .is_some_and(|p| !p.current().serves(x.dtype()));
        let weight = match &self.stand_in {
            Some(s) if !unserved => s,
            _ => self.weight(),
        };
        let mut op = x.conv2d_fused(weight, self.params).activation(activation);
        if let Some(b) = &self.bias {
            op = op.bias(b);
        }
        if let Some(r) = residual {
            op = op.residual(r);
        }
        match (&self.packed, x.device()) {
            (Some(p), Device::Cpu) => op.run_prepacked(p, &|| self.weight_for_repack()),
            _ => op.run(),
        }
    }
}
