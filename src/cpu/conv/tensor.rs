//! Tensor-level entry of the Cpu convolution engine: format conversions around
//! [`super::conv2d_nhwc`], weight packing from a tensor, and the residual as output rows.
//!
//! Invariants: the engine always sees an input with channel stride 1 and writes dense NHWC
//! rows; everything that is not already in that form is converted here exactly once.

use super::{conv2d_nhwc, nchw_to_nhwc, nhwc_to_nchw, ConvEpilogue, PackedConv};
use crate::backend::Storage;
use crate::cpu::gemm::{bf16_method, gemm_path, Bf16Method};
use crate::cpu::prepack::residual_of;
use crate::cpu::CpuStorage;
use crate::desc::Activation;
use crate::desc::ConvGeom;
use crate::{Conv2dParams, DType, Device, Error, Layout, MemoryFormat, Result, Tensor};

/// `act(conv(x, w) + bias) + residual` on the Cpu engine for a validated convolution `g`
/// (`epilogue` = activation and residual), with `packed` weights and the bias in f32; the
/// output is `[N, O, Ho, Wo]` in `fmt`. NCHW inputs are converted to NHWC once, an NCHW output
/// is converted back once (both with tiled transposes); channels-last costs neither.
pub(crate) fn conv2d_cpu(
    x_in: &Tensor,
    packed: &PackedConv,
    bias: Option<&[f32]>,
    (activation, residual_in): (Activation, Option<&Tensor>),
    g: &ConvGeom,
    fmt: MemoryFormat,
) -> Result<Tensor> {
    let op = "conv2d";
    // The input with channel stride 1: as is, or converted once.
    let x = if x_in.strides()[1] == 1 || g.c == 1 {
        x_in.clone()
    } else {
        match nchw_to_nhwc(cpu_storage(op, x_in)?, x_in.layout()) {
            Some(t) => Tensor::from_storage(Storage::Cpu(t), nhwc_layout([g.n, g.h, g.w, g.c])),
            None => x_in.to_memory_format(MemoryFormat::ChannelsLast)?,
        }
    };
    let res = residual_in.map(|r| residual_rows(r, g)).transpose()?;
    let residual = match &res {
        Some((t, rows)) => {
            let view = residual_of(cpu_storage(op, t)?, (g.m(), g.o), (rows.0, rows.1, rows.2));
            Some(view.ok_or_else(|| {
                Error::invalid(op, format!("a f32/bf16/f16 residual, got {}", t.dtype()))
            })?)
        }
        None => None,
    };
    let residual_image_stride = res.as_ref().and_then(|r| r.1 .3);
    let ep = ConvEpilogue {
        bias,
        activation,
        residual,
        residual_image_stride,
        out_dtype: x_in.dtype(),
        path: gemm_path(DType::F32),
    };
    let out = conv2d_nhwc(cpu_storage(op, &x)?, x.layout(), packed, g, &ep)?;
    let dims = [g.n, g.ho, g.wo, g.o];
    Ok(match fmt {
        MemoryFormat::ChannelsLast => Tensor::from_storage(Storage::Cpu(out), nhwc_layout(dims)),
        MemoryFormat::Contiguous => match nhwc_to_nchw(&out, dims) {
            Some(s) => Tensor::from_storage(Storage::Cpu(s), Layout::contiguous(&g.out_shape())),
            None => Tensor::from_storage(Storage::Cpu(out), nhwc_layout(dims)).contiguous()?,
        },
    })
}

/// The `[N, C, H, W]` layout of dense NHWC data `[n, h, w, c]`.
fn nhwc_layout([n, h, w, c]: [usize; 4]) -> Layout {
    Layout::from_parts(vec![n, c, h, w], vec![h * w * c, 1, w * c, c], 0)
}

fn cpu_storage<'t>(op: &'static str, t: &'t Tensor) -> Result<&'t CpuStorage> {
    match t.storage() {
        Storage::Cpu(s) => Ok(s),
        Storage::Xpu(_) => Err(Error::DeviceMismatch {
            op,
            lhs: Device::Cpu,
            rhs: Device::Xpu,
        }),
    }
}

/// A tensor's values as an f32 vector.
pub(crate) fn f32_vec(t: &Tensor) -> Result<Vec<f32>> {
    t.to_dtype(DType::F32)?.to_vec::<f32>()
}

/// Whether [`pack_weight`] may transform a 3×3 stride-1 layer for Winograd, and for what use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WinogradUse {
    /// Never: the implicit GEMM's panels.
    Off,
    /// Weights packed for one call: F(2,3), the cheaper filter transform.
    PerCall,
    /// A layer's weights, packed once and reused: the variant that runs fastest.
    Layer,
}

/// Packs a Cpu weight `[O, C/G, kh, kw]` (any layout and float dtype) for `params`: bf16
/// weights in the AMX layout when AMX is this process's bf16 method; else, unless `winograd`
/// is `Off`, a 3×3 stride-1 layer that suits it as Winograd points; else bf16 weights in the
/// `vdpbf16ps` pair layout when dot products are the bf16 method; else f32 panels for the
/// implicit GEMM.
pub(crate) fn pack_weight(
    w: &Tensor,
    params: Conv2dParams,
    winograd: WinogradUse,
) -> Result<PackedConv> {
    let groups = params.groups;
    let shape = [w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]];
    let bf16_panels = || -> Result<Option<PackedConv>> {
        if w.dtype() != DType::BF16 {
            return Ok(None);
        }
        let dense = w.contiguous()?;
        if let Storage::Cpu(CpuStorage::BF16(v)) = dense.storage() {
            let off = dense.layout().offset();
            if let Some(data) = v.get(off..off + dense.numel()) {
                return PackedConv::new_amx(data, shape, groups);
            }
        }
        Ok(None)
    };
    if bf16_method() == Bf16Method::Amx {
        if let Some(p) = bf16_panels()? {
            return Ok(p);
        }
    }
    let per_call = winograd == WinogradUse::PerCall;
    if winograd != WinogradUse::Off && super::winograd_suits(shape, &params) && winograd_enabled() {
        let dense = w.contiguous()?;
        let off = dense.layout().offset();
        let n = dense.numel();
        let packed = match dense.storage() {
            Storage::Cpu(CpuStorage::F32(v)) => v
                .get(off..off + n)
                .map(|d| PackedConv::new_winograd(d, shape, params, per_call)),
            Storage::Cpu(CpuStorage::F16(v)) => v
                .get(off..off + n)
                .map(|d| PackedConv::new_winograd(d, shape, params, per_call)),
            Storage::Cpu(CpuStorage::BF16(v)) => v
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
    if let (Storage::Cpu(CpuStorage::F32(v)), true) = (w.storage(), w.is_contiguous()) {
        let off = w.layout().offset();
        if let Some(data) = v.get(off..off + w.numel()) {
            return PackedConv::new(data, shape, groups);
        }
    }
    PackedConv::new(&f32_vec(w)?, shape, groups)
}

/// 0: no override; 1: Winograd on; 2: off (see [`set_winograd_override`]).
static WINOGRAD_OVERRIDE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Turns the Winograd path for 3×3 stride-1 convolutions on or off for every weight packed
/// from now on (process-wide; layers already built keep their panels), or with `None` returns
/// to the default: on, unless `XPU_CPU_WINOGRAD=0`.
pub fn set_winograd_override(on: Option<bool>) {
    let v = match on {
        None => 0,
        Some(true) => 1,
        Some(false) => 2,
    };
    WINOGRAD_OVERRIDE.store(v, std::sync::atomic::Ordering::Relaxed);
}

/// Whether weights packed now may take the Winograd path: the override, else false under
/// `config::CpuConfig::winograd` (default true).
fn winograd_enabled() -> bool {
    match WINOGRAD_OVERRIDE.load(std::sync::atomic::Ordering::Relaxed) {
        1 => return true,
        2 => return false,
        _ => {}
    }
    crate::config::with(|c| c.cpu.winograd)
}

/// The residual as `[N·Ho·Wo, O]` rows in its own dtype (the store reads f32, bf16 and f16 in
/// place): the tensor holding them and `(offset, row stride, column stride, image stride)`. A
/// view when the residual has channel stride 1 (or one channel) and its pixels at one stride,
/// either across the whole batch (image stride `None`) or within each image (image stride
/// `Some`, e.g. a `[N, O, 1, 1]` broadcast with row stride 0); otherwise one conversion to dense
/// NHWC.
#[allow(clippy::type_complexity)]
fn residual_rows(
    r: &Tensor,
    g: &ConvGeom,
) -> Result<(Tensor, (usize, usize, usize, Option<usize>))> {
    let rb = r.broadcast_to(&g.out_shape())?;
    let (sh, st) = (rb.shape().to_vec(), rb.strides().to_vec());
    // Dims that are not size 1 among `dims`, outermost first, and whether they merge into one.
    let merge = |dims: &[usize]| -> (bool, usize) {
        let px: Vec<(usize, usize)> = dims
            .iter()
            .filter(|&&d| sh[d] > 1)
            .map(|&d| (sh[d], st[d]))
            .collect();
        let merged = px.windows(2).all(|p| p[0].1 == p[1].0 * p[1].1);
        (merged, px.last().map_or(0, |p| p.1))
    };
    if st[1] == 1 || g.o == 1 {
        let off = rb.layout().offset();
        if let (true, row_stride) = merge(&[0, 2, 3]) {
            return Ok((rb, (off, row_stride, st[1], None)));
        }
        if let (true, row_stride) = merge(&[2, 3]) {
            return Ok((rb, (off, row_stride, st[1], Some(st[0]))));
        }
    }
    let dense = match (rb.dtype(), cpu_storage("conv2d", &rb)?) {
        (DType::F32, s) if rb.is_contiguous() => nchw_to_nhwc(s, rb.layout())
            .map(|t| Tensor::from_storage(Storage::Cpu(t), nhwc_layout([g.n, g.ho, g.wo, g.o]))),
        _ => None,
    };
    let dense = match dense {
        Some(t) => t,
        None => rb.to_memory_format(MemoryFormat::ChannelsLast)?,
    };
    Ok((dense, (0, g.o, 1, None)))
}
