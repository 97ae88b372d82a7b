//! Winograd F(2×2, 3×3) convolutions on Xpu: filter and input transforms
//! (`gpu/kernels/winograd/winograd.wgsl`), 16 point products as one batched matmul on the matrix engine
//! (`[16, T, C] @ [16, C, O]`, f32 out), and an output transform that applies the conv
//! epilogue.
//!
//! Why: the implicit GEMM (`gpu/kernels/conv/conv.wgsl`) spends `9·C·O` multiply-adds per output pixel
//! on a 3×3 layer; F(2,3) spends `4·C·O` (2.25× fewer) plus two transforms that read and write
//! each activation a few times — cheap beside the product when channels are wide. The point
//! products reuse the matmul kernels (tiled, cooperative-matrix), so they gain from every
//! improvement there. On the H100 the f32 step spent 131 of 266 ms in 3×3 convolutions on
//! FMAs ; cuDNN uses the same idea. F(4,3) (4× fewer) was not
//! taken: its larger transform coefficients cost f16/bf16 operands their accuracy (see
//! `cpu::conv::winograd`), and one transform serves every dtype here.
//!
//! When: F(2,3) is a candidate of the autotuner's `gpu_conv2d` family wherever it computes the
//! geometry ([`fits`]: 3×3, stride 1, dilation 1, one group, the transformed data within one
//! storage binding). The static rule ([`auto_uses_winograd`]) takes it for f32 operands, and
//! 16-bit operands that would not run on the tensor-core convolution (its speed is measured
//! on hardware; Winograd's 16-bit point products on tensor cores are not yet); at least 128
//! input and output channels and 128 output tiles. The size floor is provisional: on lavapipe
//! Winograd won from 32 channels (2×32×32×32: 32.8 → 22.9 ms; 2×128×16×16 64.8 → 34.6;
//! 1×320×32×32 785 → 368), but a GPU's FMAs are cheap beside its memory traffic (H100 f32:
//! ~17 FLOP per byte against ~5 on the CPU lavapipe runs on), and the transforms move
//! `4·(C + O)` values per output pixel both ways against `5·C·O` multiply-adds saved: at 64
//! channels the two are close on an H100 at its peak, at 320 the saving is ~3× the traffic;
//! the autotuner measures where the floor really lies. `ConvTile::Winograd` forces it (an
//! ineligible geometry is an error).
//!
//! Invariants: the result equals the convolution up to f32 rounding of the transforms: the
//! transformed filters and inputs are f32 (f16 only where f16 tensor cores multiply them:
//! `kernels::winograd::operand_dtype`), the products accumulate in f32, the output transform
//! and epilogue run in f32 and round once to the convolution's dtype. (With bf16 transformed
//! operands, as the CPU's bf16 path uses for its `vdpbf16ps` rate, random UNets came out at
//! 2.3e-2 of diffusers' output against 1.75e-2 for the implicit GEMM; the Xpu's FMA kernels
//! gain nothing from 16-bit operands but bytes.) Extra memory: `U` (`16·C·O`,
//! unless the caller passes it prepared), `V` (`16·T·C`) and the f32 `M` (`16·T·O`), all
//! released when the call returns; where they exceed the allocator's limit, an automatic
//! choice runs the implicit GEMM instead (`ConvTile::Winograd` reports the OutOfMemory).

use super::{FusedArgs, Storage};
use crate::desc::{Activation, ConvGeom, MatmulKernel};
use crate::gpu::kernels::conv::ConvLaunch;
use crate::gpu::kernels::winograd::{
    filters, inputs, operand_dtype, outputs, padded_channels, tiles, POINTS,
};
use crate::gpu::XpuStorage;
use crate::{DType, Error, Layout, Result};

/// Whether F(2,3) computes this geometry: 3×3, stride 1, dilation 1, one group.
pub(crate) fn eligible(s: &ConvGeom) -> bool {
    (s.kh, s.kw) == (3, 3) && s.p.stride == (1, 1) && s.p.dilation == (1, 1) && s.p.groups == 1
}

/// Minimum input and output channels of an automatic Winograd convolution.
const MIN_CHANNELS: usize = 128;
/// Minimum output tiles (`N·⌈Ho/2⌉·⌈Wo/2⌉`) of an automatic Winograd convolution.
const MIN_TILES: usize = 128;

/// Whether F(2,3) can run this launch: an eligible geometry whose transformed inputs, point
/// products and filters each fit one storage binding.
pub(crate) fn fits(l: &ConvLaunch) -> bool {
    let s = &l.shape;
    if !eligible(s) {
        return false;
    }
    let dtype = l.input.0.dtype;
    let (_, _, t) = tiles(l);
    let ctx = &l.input.0.ctx;
    let vdt = operand_dtype(dtype, ctx);
    let cp = padded_channels(s.c, vdt);
    let max = ctx.limits.max_storage_buffer_binding_size;
    let fits = |elems: usize, bytes: usize| (elems as u64).saturating_mul(bytes as u64) <= max;
    fits(POINTS * t * cp, vdt.size_in_bytes())
        && fits(POINTS * t * s.o, 4)
        && fits(POINTS * cp * s.o, vdt.size_in_bytes())
}

/// The static rule for a launch whose tile is `ConvTile::Auto` (see the module docs);
/// `tensor_cores`: the tensor-core convolution can run the launch.
pub(crate) fn auto_uses_winograd(l: &ConvLaunch, tensor_cores: bool) -> bool {
    let s = &l.shape;
    if l.input.0.dtype != DType::F32 && tensor_cores {
        return false;
    }
    let (_, _, t) = tiles(l);
    fits(l) && s.c >= MIN_CHANNELS && s.o >= MIN_CHANNELS && t >= MIN_TILES
}

/// Checks a forced `ConvTile::Winograd` launch.
pub(crate) fn check_forced(s: &ConvGeom) -> Result<()> {
    if eligible(s) {
        return Ok(());
    }
    Err(Error::invalid(
        "conv2d",
        format!(
            "ConvTile::Winograd needs a 3×3 kernel, stride 1, dilation 1 and one group; got \
             kernel {}×{}, stride {:?}, dilation {:?}, groups {}",
            s.kh, s.kw, s.p.stride, s.p.dilation, s.p.groups
        ),
    ))
}

/// Shape of transformed filters in `udt` of a `[O, C, 3, 3]` weight.
pub(crate) fn filter_shape(c: usize, o: usize, udt: DType) -> [usize; 3] {
    [POINTS, padded_channels(c, udt), o]
}

/// Transformed filters `[16, Cp, O]` of an Xpu weight `[O, C, 3, 3]` (any strides), for
/// layers that keep them across calls: the storage and its (contiguous) layout.
pub(crate) fn transform_filters(weight: (&Storage, &Layout)) -> Result<(Storage, Layout)> {
    let (ws, wl) = weight;
    let &[o, c, 3, 3] = wl.shape() else {
        return Err(Error::shape(
            "conv2d (Winograd filters)",
            "a weight of shape [O, C, 3, 3]",
            wl.shape(),
        ));
    };
    let Storage::Xpu(w) = ws else {
        return Err(Error::invalid(
            "conv2d (Winograd filters)",
            "the weight must be on Xpu",
        ));
    };
    if !w.dtype.is_float() {
        return Err(Error::UnsupportedDType {
            op: "conv2d (Winograd filters)",
            dtype: w.dtype,
            device: crate::Device::Xpu,
            hint: ": conv2d takes f32, f16 or bf16".into(),
        });
    }
    let udt = operand_dtype(w.dtype, &w.ctx);
    let u = filters((w, wl), c, o, udt)?;
    Ok((
        Storage::Xpu(u),
        Layout::contiguous(&filter_shape(c, o, udt)),
    ))
}

/// Runs the convolution of `l` as F(2,3); `prepared` are filters from [`transform_filters`]
/// of the launch's weight (checked for shape and dtype, made here when absent).
pub(crate) fn conv2d(l: &ConvLaunch, prepared: Option<(&Storage, &Layout)>) -> Result<XpuStorage> {
    let s = &l.shape;
    check_forced(s)?;
    let vdt = operand_dtype(l.input.0.dtype, &l.input.0.ctx);
    let made;
    let u = match prepared {
        Some(u) => {
            let want = filter_shape(s.c, s.o, vdt);
            if u.1.shape() != want || u.0.dtype() != vdt {
                return Err(Error::shape(
                    "conv2d (Winograd filters)",
                    format!(
                        "prepared filters of shape {want:?} in {vdt} (from winograd_filters), got {}",
                        u.0.dtype()
                    ),
                    u.1.shape(),
                ));
            }
            if u.0.device() != crate::Device::Xpu {
                return Err(Error::invalid(
                    "conv2d (Winograd filters)",
                    "prepared filters must be on Xpu",
                ));
            }
            u
        }
        None => {
            made = (
                Storage::Xpu(filters(l.weight, s.c, s.o, vdt)?),
                Layout::contiguous(&filter_shape(s.c, s.o, vdt)),
            );
            (&made.0, &made.1)
        }
    };
    let (_, _, t) = tiles(l);
    let v = Storage::Xpu(inputs(l, vdt)?);
    let vl = Layout::contiguous(&[POINTS, t, padded_channels(s.c, vdt)]);
    let args = FusedArgs {
        alpha: 1.0,
        beta: 0.0,
        c: None,
        bias: None,
        activation: Activation::None,
        residual: None,
        geglu: false,
        kernel: MatmulKernel::Auto,
        out_dtype: DType::F32,
    };
    // The point products `[16, T, Cp] @ [16, Cp, O]`, contiguous `[16, T, O]` in f32.
    match v.matmul_fused(&vl, u.0, u.1, &args)? {
        Storage::Xpu(ms) => outputs(l, &ms),
        Storage::Cpu(_) => Err(Error::invalid(
            "conv2d (Winograd)",
            "the point products came back on the Cpu",
        )),
    }
}
