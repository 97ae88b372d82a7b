//! conv2d on Xpu as an implicit GEMM on the matrix engine's tiling (`gpu/kernels/conv/conv.wgsl`,
//! `xpu::kernels::conv`), with PyTorch semantics (`F.conv2d`: stride, padding, dilation,
//! groups) and a fused epilogue `act(conv + bias) + residual`.
//!
//! Invariants: no im2col buffer: the kernel gathers input tiles through the input's strides, so
//! NCHW, channels-last (`x_nhwc.permute([0, 3, 1, 2])`) and other strided views are read in
//! place, and so are the weight, bias and residual views. Extra memory is the output only (plus
//! an f32 staging output for 16-bit results whose elements cannot be stored in pairs, see the
//! kernel module). The result has shape `[N, O, Ho, Wo]` and the input's dtype; its strides are
//! NCHW-contiguous, or channels-last `[Ho·Wo·O, 1, Wo·O, O]` when asked (PyTorch gives a
//! channels-last output for a channels-last input). Every check happens here, before any GPU
//! work is recorded.

use crate::backend::conv_gpu::{conv2d_gpu, GpuConv};
use crate::desc::Activation;
use crate::desc::ConvGeom;
use crate::{Conv2dParams, Error, Layout, Result, Tensor};

pub use crate::desc::ConvTile;

/// Epilogue and output options of [`conv2d_xpu`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvXpuArgs<'a> {
    /// `[O]`, added to every output channel.
    pub bias: Option<&'a Tensor>,
    /// Added after the activation; any view broadcastable to `[N, O, Ho, Wo]`.
    pub residual: Option<&'a Tensor>,
    /// Applied to `conv + bias`.
    pub activation: Activation,
    /// Give the output channels-last strides `[Ho·Wo·O, 1, Wo·O, O]` (else NCHW-contiguous).
    pub channels_last_out: bool,
    /// Kernel config (tests force each one).
    pub tile: ConvTile,
    /// Filters prepared by [`winograd_filters`] from this weight, used when the convolution
    /// runs as Winograd (else the call transforms the weight itself).
    pub winograd_filters: Option<&'a Tensor>,
}

/// The weight `[O, C, 3, 3]` (on Xpu) transformed for Winograd F(2×2, 3×3): a layer that
/// keeps them passes them as [`ConvXpuArgs::winograd_filters`] and saves the transform on
/// every call. Shape `[16, C', O]`, `C'` being `C` rounded up to even for 16-bit dtypes.
pub fn winograd_filters(weight: &Tensor) -> Result<Tensor> {
    let (s, l) = crate::backend::conv_gpu::winograd_filters((weight.storage(), weight.layout()))?;
    Ok(Tensor::from_storage(s, l))
}

/// Test hook: f16 and bf16 Winograd convolutions keep their transformed filters and inputs in
/// their own dtype on every adapter (by default they are f32, except f16 on adapters whose
/// tensor cores multiply them), so the 16-bit transforms run on any adapter. Process-wide.
#[doc(hidden)]
pub fn set_winograd_sixteen_bit_operands(on: bool) {
    crate::backend::conv_gpu::set_winograd_sixteen_bit_operands(on)
}

/// `F.conv2d(input, weight, bias, stride, padding, dilation, groups)` on Xpu, followed by the
/// fused `activation` and `residual` add, for `input` `[N, C, H, W]` (any strides) and `weight`
/// `[O, C/groups, kh, kw]`; returns `[N, O, Ho, Wo]` in the input's dtype (f32, f16 or bf16).
/// Every operand must be on `Device::Xpu` with the input's dtype.
pub fn conv2d_xpu(
    input: &Tensor,
    weight: &Tensor,
    p: Conv2dParams,
    args: &ConvXpuArgs,
) -> Result<Tensor> {
    let op = "conv2d";
    let geom = ConvGeom::new(op, input.shape(), weight.shape(), p)?;
    let (n, o, ho, wo) = (geom.n, geom.o, geom.ho, geom.wo);
    let mut operands = vec![weight];
    if let Some(b) = args.bias {
        if b.shape() != [o] {
            return Err(Error::shape(
                op,
                format!("a bias of shape [{o}]"),
                b.shape(),
            ));
        }
        operands.push(b);
    }
    let out_shape = [n, o, ho, wo];
    let residual = args
        .residual
        .map(|r| {
            r.broadcast_to(&out_shape).map_err(|_| {
                Error::shape(
                    op,
                    format!("a residual broadcastable to the output {out_shape:?}"),
                    r.shape(),
                )
            })
        })
        .transpose()?;
    operands.extend(residual.as_ref());
    for t in operands {
        input.same_device(t, op)?;
        input.same_dtype(t, op)?;
    }
    let (pix, chan) = (ho * wo, o);
    let (strides, out_strides) = if args.channels_last_out {
        (vec![pix * chan, 1, wo * chan, chan], [pix * chan, 1, chan])
    } else {
        (vec![chan * pix, pix, wo, 1], [chan * pix, pix, 1])
    };
    let out = conv2d_gpu(&GpuConv {
        geom,
        input: (input.storage(), input.layout()),
        weight: (weight.storage(), weight.layout()),
        bias: args.bias.map(|b| (b.storage(), b.layout())),
        residual: residual.as_ref().map(|r| (r.storage(), r.layout())),
        activation: args.activation,
        out_strides,
        tile: args.tile,
        winograd_filters: args.winograd_filters.map(|u| (u.storage(), u.layout())),
    })?;
    Ok(Tensor::from_storage(
        out,
        Layout::from_parts(out_shape.to_vec(), strides, 0),
    ))
}
