//! Convolution dispatch: the storage-level entries of the Cpu convolution engine (layout
//! transposes, weight packing, the NHWC implicit GEMM with its fused epilogue) and of the Xpu
//! one, plus the prepared-weight type layers keep ([`PackedConv`]).
//!
//! Invariant: every function here takes storages with their layouts and checks the device of
//! each; the Tensor layer (`ops::conv*`) has validated shapes, dtypes and the geometry.

use super::*;
use crate::cpu::conv::{ConvEpilogue, WinogradUse};
use crate::cpu::gemm::{bf16_method, gemm_path, Bf16Method};
use crate::desc::{Activation, Conv2dParams, ConvGeom};

/// Convolution weights packed once for the Cpu engine: the prepared-weight type a
/// convolution layer keeps.
pub(crate) use crate::cpu::conv::PackedConv;

/// How a Cpu weight may be transformed for Winograd when packed (see `cpu::conv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConvPacking {
    /// Weights packed for one call.
    PerCall,
    /// A layer's weights, packed once and reused.
    Layer,
}

fn cpu<'s>(op: &'static str, s: &'s Storage) -> Result<&'s CpuStorage> {
    match s {
        Storage::Cpu(c) => Ok(c),
        Storage::Xpu(_) => Err(Error::DeviceMismatch {
            op,
            lhs: Device::Cpu,
            rhs: Device::Xpu,
        }),
    }
}

/// Whether `device` runs f16 convolutions on tensor cores (which gather channels-last inputs
/// and read weights as `[O][kh][kw][C]`).
pub(crate) fn tensor_core_convolutions(device: Device) -> bool {
    match device {
        Device::Cpu => false,
        Device::Xpu => crate::gpu::conv_coop_active(),
    }
}

/// The Winograd use of weights packed for one call of geometry `g` with `dtype` weights.
fn per_call_winograd(g: &ConvGeom, dtype: DType) -> WinogradUse {
    if crate::cpu::conv::winograd_per_call_layer_tile(g.m(), g.c, g.o) {
        WinogradUse::Layer
    } else if g.m() >= crate::cpu::conv::winograd_per_call_min_pixels(dtype) {
        WinogradUse::PerCall
    } else {
        WinogradUse::Off
    }
}

/// Packs a Cpu weight `[O, C/G, kh, kw]` for the engine. `w` is dense (contiguous) in its own
/// float dtype, `w_f32` its values in f32 when the caller has them at hand (else they are
/// read from `w`); `g` is the geometry of the call for [`ConvPacking::PerCall`].
pub(crate) fn pack_conv_weight(
    w: (&Storage, &Layout),
    params: Conv2dParams,
    packing: ConvPacking,
    g: Option<&ConvGeom>,
) -> Result<PackedConv> {
    let op = "conv2d";
    let (ws, wl) = (cpu(op, w.0)?, w.1);
    let &[o, cg, kh, kw] = wl.shape() else {
        return Err(Error::shape(op, "a 4-D weight", wl.shape()));
    };
    let shape = [o, cg, kh, kw];
    let groups = params.groups;
    let winograd = match (packing, g) {
        (ConvPacking::Layer, _) => WinogradUse::Layer,
        (ConvPacking::PerCall, Some(g)) => per_call_winograd(g, ws.dtype()),
        (ConvPacking::PerCall, None) => WinogradUse::Off,
    };
    let dense = wl.is_contiguous();
    let (off, n) = (wl.offset(), wl.numel());
    let bf16_panels = || -> Result<Option<PackedConv>> {
        match (ws, dense) {
            (CpuStorage::BF16(v), true) => match v.get(off..off + n) {
                Some(data) => PackedConv::new_amx(data, shape, groups),
                None => Ok(None),
            },
            _ => Ok(None),
        }
    };
    if bf16_method() == Bf16Method::Amx {
        if let Some(p) = bf16_panels()? {
            return Ok(p);
        }
    }
    let per_call = winograd == WinogradUse::PerCall;
    if winograd != WinogradUse::Off
        && crate::cpu::conv::winograd_suits(shape, &params)
        && crate::cpu::conv::winograd_enabled()
        && dense
    {
        let packed = match ws {
            CpuStorage::F32(v) => v
                .get(off..off + n)
                .map(|d| PackedConv::new_winograd(d, shape, params, per_call)),
            CpuStorage::F16(v) => v
                .get(off..off + n)
                .map(|d| PackedConv::new_winograd(d, shape, params, per_call)),
            CpuStorage::BF16(v) => v
                .get(off..off + n)
                .map(|d| PackedConv::new_winograd(d, shape, params, per_call)),
            _ => None,
        };
        if let Some(p) = packed {
            return p;
        }
    }
    if let Some(p) = bf16_panels()? {
        return Ok(p);
    }
    if let (CpuStorage::F32(v), true) = (ws, dense) {
        if let Some(data) = v.get(off..off + n) {
            return PackedConv::new(data, shape, groups);
        }
    }
    let f32_values = ws
        .cast(wl, DType::F32)?
        .to_vec::<f32>(&Layout::contiguous(wl.shape()))?;
    PackedConv::new(&f32_values, shape, groups)
}

/// The dense NHWC copy `[n, h, w, c]` of a Cpu `[N, C, H, W]` view by the tiled transpose, or
/// `None` where that transpose does not apply (the caller converts another way).
pub(crate) fn nchw_to_nhwc(x: &Storage, layout: &Layout) -> Result<Option<Storage>> {
    Ok(match x {
        Storage::Cpu(s) => crate::cpu::conv::nchw_to_nhwc(s, layout)?.map(Storage::Cpu),
        Storage::Xpu(_) => None,
    })
}

/// The dense NCHW copy of Cpu NHWC data `[n, h, w, c]`, or `None` where the tiled transpose
/// does not apply.
pub(crate) fn nhwc_to_nchw(x: &Storage, dims: [usize; 4]) -> Result<Option<Storage>> {
    Ok(match x {
        Storage::Cpu(s) => crate::cpu::conv::nhwc_to_nchw(s, dims)?.map(Storage::Cpu),
        Storage::Xpu(_) => None,
    })
}

/// Where a convolution's residual rows are: `(offset, row stride, column stride, image
/// stride)` of `[N·Ho·Wo, O]` rows in a storage (see `ops::conv_cpu`).
pub(crate) type ResidualRows = (usize, usize, usize, Option<usize>);

/// `act(conv(x, w) + bias) + residual` on the Cpu engine for input `x` with channel stride 1,
/// `packed` weights, the bias in f32 and the residual as rows; returns the dense NHWC output
/// `[N, Ho, Wo, O]` in `out_dtype`.
pub(crate) fn conv2d_nhwc(
    x: (&Storage, &Layout),
    packed: &PackedConv,
    g: &ConvGeom,
    bias: Option<&[f32]>,
    activation: Activation,
    residual: Option<(&Storage, ResidualRows)>,
    out_dtype: DType,
) -> Result<Storage> {
    let op = "conv2d";
    host_output(op, crate::layout::numel(&g.out_shape()), DType::F32)?;
    let residual_view = match residual {
        Some((s, (off, rs, cs, _))) => Some(
            crate::cpu::prepack::residual_of(cpu(op, s)?, (g.m(), g.o), (off, rs, cs)).ok_or_else(
                || Error::invalid(op, format!("a f32/bf16/f16 residual, got {}", s.dtype())),
            )?,
        ),
        None => None,
    };
    let ep = ConvEpilogue {
        bias,
        activation,
        residual: residual_view,
        residual_image_stride: residual.and_then(|r| r.1 .3),
        out_dtype,
        path: gemm_path(DType::F32),
    };
    Ok(Storage::Cpu(crate::cpu::conv::conv2d_nhwc(
        cpu(op, x.0)?,
        x.1,
        packed,
        g,
        &ep,
    )?))
}
