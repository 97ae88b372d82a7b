//! `ConvTranspose2d`: PyTorch's `nn.ConvTranspose2d` (weight `[in, out/groups, kh, kw]`,
//! optional bias `[out]`), computing exactly what [`Tensor::conv_transpose2d`] computes.
//!
//! Why a layer: the functional op rearranges the weight into the stride-1 convolution it runs
//! (the sub-pixel phases, flipped; `ops::conv_transpose`) on every call, and on the Cpu the
//! convolution then packs it again: at 1280 channels and a 4×4 kernel that is a 105 MB weight
//! moved twice per call, more time than the products. The layer does both once, at
//! construction, and keeps only the rearranged convolution (an [`crate::nn::Conv2d`], prepacked
//! on the Cpu).
//!
//! Invariants: weight and bias share one device and dtype, checked at construction with the
//! parameters; a forward checks its input against the weight's `in` channels and runs the same
//! stride-1 convolution and interleave as the functional op (only the packing is hoisted: the
//! results agree to rounding, bit for bit where the Cpu packs the same panels either way); the
//! output follows the input's memory format.

use crate::nn::Conv2d;
use crate::ops::conv_transpose::{apply, check_weight, geometry, stride1_weights};
use crate::{ConvTranspose2dParams, DType, Device, Error, Result, Tensor};

/// A 2-D transposed convolution layer.
#[derive(Clone, Debug)]
pub struct ConvTranspose2d {
    /// The stride-1 convolution that computes it (module docs).
    conv: Conv2d,
    /// The original weight's shape `[in, out/groups, kh, kw]`.
    shape: [usize; 4],
    params: ConvTranspose2dParams,
}

impl ConvTranspose2d {
    /// A layer from an `[in, out/groups, kh, kw]` weight, an optional `[out]` bias (same device
    /// and dtype) and the stride/padding/output padding/dilation/groups parameters.
    pub fn new(
        weight: Tensor,
        bias: Option<Tensor>,
        params: ConvTranspose2dParams,
    ) -> Result<ConvTranspose2d> {
        let op = "ConvTranspose2d";
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
        }
        check_weight(op, weight.shape(), bias.as_ref().map(|b| b.shape()), params)?;
        let s = weight.shape();
        let shape = [s[0], s[1], s[2], s[3]];
        let (w, b, conv) = stride1_weights(&weight, bias.as_ref(), params)?;
        drop(weight);
        Ok(ConvTranspose2d {
            conv: Conv2d::new(w, b, conv)?,
            shape,
            params,
        })
    }

    /// Input channels.
    pub fn in_channels(&self) -> usize {
        self.shape[0]
    }

    /// Output channels (`groups · out/groups`).
    pub fn out_channels(&self) -> usize {
        self.shape[1] * self.params.groups
    }

    /// `(kh, kw)`.
    pub fn kernel_size(&self) -> (usize, usize) {
        (self.shape[2], self.shape[3])
    }

    /// Stride, padding, output padding, dilation and groups.
    pub fn params(&self) -> ConvTranspose2dParams {
        self.params
    }

    /// The device of the weights.
    pub fn device(&self) -> Device {
        self.conv.weight().device()
    }

    /// The layer on `device` (packed again when moving to the Cpu).
    pub fn to(&self, device: Device) -> Result<ConvTranspose2d> {
        Ok(ConvTranspose2d {
            conv: self.conv.to(device)?,
            ..self.clone()
        })
    }

    /// The layer with weights converted to `dtype`.
    pub fn to_dtype(&self, dtype: DType) -> Result<ConvTranspose2d> {
        Ok(ConvTranspose2d {
            conv: self.conv.to_dtype(dtype)?,
            ..self.clone()
        })
    }

    /// `conv_transpose2d(x, W) + b` for `x` of shape `[N, in, H, W]` (NCHW or channels-last;
    /// the output has the input's format).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let op = "ConvTranspose2d";
        let geo = geometry(op, x.shape(), self.shape, self.params)?;
        let kernel = (self.shape[2], self.shape[3]);
        apply(
            x,
            &|xs: &Tensor| self.conv.forward(xs),
            (self.shape[1], kernel),
            self.params,
            geo,
        )
    }
}
