//! The Xpu convolution engine's storage-level entry: the implicit GEMM on the matrix engine's
//! tiling (`gpu::kernels::conv`), or Winograd F(2×2, 3×3) (`conv_gpu_winograd`) where it is
//! forced or chosen.
//!
//! Invariant: every operand is checked to live on the Xpu before any GPU work is recorded; the
//! Tensor layer (`ops::conv_xpu`) has validated shapes and dtypes and broadcast the residual.

use super::conv_gpu_winograd as winograd;
use super::Storage;
use crate::desc::ConvTile;
use crate::desc::{Activation, ConvGeom};
use crate::gpu::kernels::conv::{conv2d, ConvLaunch, Operand};
use crate::{Device, Error, Layout, Result};

/// One Xpu convolution: the operands as storages with their layouts (the residual broadcast
/// to the output), the epilogue, the output strides and the tile choice.
pub(crate) struct GpuConv<'a> {
    pub geom: ConvGeom,
    pub input: (&'a Storage, &'a Layout),
    pub weight: (&'a Storage, &'a Layout),
    pub bias: Option<(&'a Storage, &'a Layout)>,
    pub residual: Option<(&'a Storage, &'a Layout)>,
    pub activation: Activation,
    /// `[batch, channel, pixel]` strides of the output.
    pub out_strides: [usize; 3],
    pub tile: ConvTile,
    /// Winograd filters prepared from this weight, if the caller keeps them.
    pub winograd_filters: Option<(&'a Storage, &'a Layout)>,
}

fn xpu_operand<'a>(op: &'static str, (s, l): (&'a Storage, &'a Layout)) -> Result<Operand<'a>> {
    match s {
        Storage::Xpu(x) => Ok((x, l)),
        Storage::Cpu(_) => Err(Error::DeviceMismatch {
            op,
            lhs: Device::Xpu,
            rhs: Device::Cpu,
        }),
    }
}

/// Runs `c` on the Xpu; returns the output storage (`[N, O, Ho, Wo]` at `c.out_strides`).
pub(crate) fn conv2d_gpu(c: &GpuConv) -> Result<Storage> {
    let op = "conv2d";
    let launch = ConvLaunch {
        shape: c.geom,
        input: xpu_operand(op, c.input)?,
        weight: xpu_operand(op, c.weight)?,
        bias: c.bias.map(|b| xpu_operand(op, b)).transpose()?,
        residual: c.residual.map(|r| xpu_operand(op, r)).transpose()?,
        activation: c.activation,
        out_strides: c.out_strides,
        tile: c.tile,
    };
    let out = match c.tile {
        ConvTile::Winograd => winograd::conv2d(&launch, c.winograd_filters)?,
        ConvTile::Auto
            if winograd::auto_uses_winograd(
                &launch,
                crate::gpu::kernels::conv::coop::eligible(&launch),
            ) =>
        {
            // Winograd's temporaries (transformed inputs and point products) take several
            // times the output's memory; where they do not fit, the implicit GEMM, which needs
            // only the output, still does (the temporaries are released on the way out).
            match winograd::conv2d(&launch, c.winograd_filters) {
                Err(Error::OutOfMemory { .. }) => conv2d(&launch)?,
                r => r?,
            }
        }
        _ => conv2d(&launch)?,
    };
    Ok(Storage::Xpu(out))
}

/// Winograd filters `[16, Cp, O]` of an Xpu weight `[O, C, 3, 3]` (see `conv_gpu_winograd`).
pub(crate) fn winograd_filters(weight: (&Storage, &Layout)) -> Result<(Storage, Layout)> {
    winograd::transform_filters(weight)
}

/// Test hook: 16-bit Winograd operands on every adapter (see `gpu::kernels::winograd`).
pub(crate) fn set_winograd_sixteen_bit_operands(on: bool) {
    crate::gpu::kernels::winograd::set_sixteen_bit_operands(on)
}
