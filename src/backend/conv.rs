//! Convolution dispatch: the storage-level entries of the Cpu convolution engine (layout
//! transposes, weight packing, the NHWC implicit GEMM with its fused epilogue) and of the Xpu
//! one, plus the prepared-weight type layers keep ([`PackedConv`]).
//!
//! Invariant: every function here takes storages with their layouts and checks the device of
//! each; the Tensor layer (`ops::conv*`) has validated shapes, dtypes and the geometry.

use super::*;
pub(crate) use crate::cpu::conv::ConvKernel;
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

/// The Cpu kernels that can run a convolution with an `[O, C/G, kh, kw]` weight of `dtype`
/// and `params`, and the index of the static rule's pick for weights packed as `packing`
/// (`g`: the call's geometry for [`ConvPacking::PerCall`]). Winograd serves 3×3 stride-1
/// undilated ungrouped layers of at least 16 channels each way; F(4,3) only where
/// `cpu::conv::winograd_f4_allowed` (f32 operands, filters of bounded memory), and for weights
/// packed per call only where the rule takes it; for bf16 weights on AMX only when forced by
/// name. The rule: the
/// implicit GEMM for bf16 weights on AMX or small per-call problems; F(2,3) for other per-call
/// problems; else the layer's variant (`cpu::conv::winograd::choose_tile`).
pub(crate) fn cpu_conv_kernels(
    shape: [usize; 4],
    params: &Conv2dParams,
    dtype: DType,
    packing: ConvPacking,
    g: Option<&ConvGeom>,
) -> (Vec<ConvKernel>, usize) {
    use crate::cpu::conv::WinogradTile;
    let [o, c, _, _] = shape;
    let mut list = vec![ConvKernel::ImplicitGemm];
    if !(dtype.is_float() && crate::cpu::conv::winograd_suits(shape, params)) {
        return (list, 0);
    }
    let operands = winograd_operands(dtype);
    list.push(ConvKernel::WinogradF2);
    if crate::cpu::conv::winograd_f4_allowed(c, o, operands) {
        list.push(ConvKernel::WinogradF4);
    }
    let amx_bf16 = dtype == DType::BF16 && bf16_method() == Bf16Method::Amx;
    if amx_bf16 {
        // Winograd's point products take f32 FMA operands where bf16 products run on AMX tiles,
        // which do 16× the FMA pipes' multiply-adds per cycle; F(4,3) saves at most 4×. On a
        // Xeon with AMX every bf16 Winograd layer of SD's UNet and VAE measured 4–14× slower
        // than the implicit GEMM, and measuring them took 12 s and 1.8 GB more on a first
        // 512×512 VAE decode: they are not measured there, and run only when forced by name.
        let forced = crate::config::with(|c| c.autotune.forced(CONV_FAMILY).map(str::to_owned));
        list.retain(|k| *k == ConvKernel::ImplicitGemm || forced.as_deref() == Some(k.name()));
    }
    let use_ = match (packing, g) {
        (ConvPacking::Layer, _) => WinogradUse::Layer,
        (ConvPacking::PerCall, Some(g)) => per_call_winograd(g, dtype),
        (ConvPacking::PerCall, None) => WinogradUse::Off,
    };
    let rule = if amx_bf16 {
        ConvKernel::ImplicitGemm
    } else {
        match use_ {
            WinogradUse::Off => ConvKernel::ImplicitGemm,
            WinogradUse::PerCall => ConvKernel::WinogradF2,
            WinogradUse::Layer => match crate::cpu::conv::winograd_choose_tile(c, o, operands) {
                WinogradTile::F4 => ConvKernel::WinogradF4,
                WinogradTile::F2 => ConvKernel::WinogradF2,
            },
        }
    };
    // Weights packed for one call take F(4,3) only where the rule does: its larger transform
    // error stays with the layers (and large calls) that always took it.
    if packing == ConvPacking::PerCall && rule != ConvKernel::WinogradF4 {
        list.retain(|k| *k != ConvKernel::WinogradF4);
    }
    let rule = list.iter().position(|k| *k == rule).unwrap_or(0);
    (list, rule)
}

/// The element type Winograd's point GEMMs multiply in for `dtype` weights.
fn winograd_operands(dtype: DType) -> crate::cpu::conv::WinogradOperands {
    use crate::cpu::conv::WinogradOperands;
    if dtype == DType::BF16 && bf16_method() == Bf16Method::DotProduct {
        WinogradOperands::Bf16
    } else {
        WinogradOperands::F32
    }
}

/// Packs a Cpu weight `[O, C/G, kh, kw]` for the engine, for the kernel a forced candidate
/// (`cpu_conv2d`) or the static rule of [`cpu_conv_kernels`] takes. `w` is dense (contiguous)
/// in its own float dtype; `g` is the geometry of the call for [`ConvPacking::PerCall`].
pub(crate) fn pack_conv_weight(
    w: (&Storage, &Layout),
    params: Conv2dParams,
    packing: ConvPacking,
    g: Option<&ConvGeom>,
) -> Result<PackedConv> {
    let op = "conv2d";
    let &[o, cg, kh, kw] = w.1.shape() else {
        return Err(Error::shape(op, "a 4-D weight", w.1.shape()));
    };
    let (list, rule) = cpu_conv_kernels([o, cg, kh, kw], &params, w.0.dtype(), packing, g);
    let forced = crate::config::with(|c| {
        c.autotune
            .forced(CONV_FAMILY)
            .and_then(|f| list.iter().position(|k| k.name() == f))
    });
    pack_conv_kernel(w, params, list[forced.unwrap_or(rule)])
}

/// The autotuner's family of the Cpu convolution kernels.
pub(crate) const CONV_FAMILY: &str = "cpu_conv2d";

/// Packs a Cpu weight `[O, C/G, kh, kw]` (dense, in its own float dtype) for `kernel`, which
/// must be one [`cpu_conv_kernels`] lists for it.
pub(crate) fn pack_conv_kernel(
    w: (&Storage, &Layout),
    params: Conv2dParams,
    kernel: ConvKernel,
) -> Result<PackedConv> {
    use crate::cpu::conv::WinogradTile;
    let op = "conv2d";
    let (ws, wl) = (cpu(op, w.0)?, w.1);
    let &[o, cg, kh, kw] = wl.shape() else {
        return Err(Error::shape(op, "a 4-D weight", wl.shape()));
    };
    let shape = [o, cg, kh, kw];
    let groups = params.groups;
    let dense = wl.is_contiguous();
    let (off, n) = (wl.offset(), wl.numel());
    if kernel != ConvKernel::ImplicitGemm {
        let tile = if kernel == ConvKernel::WinogradF4 {
            WinogradTile::F4
        } else {
            WinogradTile::F2
        };
        let operands = winograd_operands(ws.dtype());
        if !dense || !crate::cpu::conv::winograd_suits(shape, &params) {
            return Err(Error::invalid(
                op,
                format!("the {} kernel for a dense 3x3 stride-1 layer of 16+ channels, got {shape:?} {params:?}", kernel.name()),
            ));
        }
        let packed = match ws {
            CpuStorage::F32(v) => v
                .get(off..off + n)
                .map(|d| PackedConv::new_winograd_on(d, shape, params, operands, tile)),
            CpuStorage::F16(v) => v
                .get(off..off + n)
                .map(|d| PackedConv::new_winograd_on(d, shape, params, operands, tile)),
            CpuStorage::BF16(v) => v
                .get(off..off + n)
                .map(|d| PackedConv::new_winograd_on(d, shape, params, operands, tile)),
            _ => None,
        };
        return packed.unwrap_or_else(|| {
            Err(Error::invalid(
                op,
                format!("a float weight within its storage, got {}", ws.dtype()),
            ))
        });
    }
    if let (CpuStorage::BF16(v), true) = (ws, dense) {
        if let Some(data) = v.get(off..off + n) {
            if let Some(p) = PackedConv::new_amx(data, shape, groups)? {
                return Ok(p);
            }
        }
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
