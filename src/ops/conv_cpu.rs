//! The Tensor side of the Cpu convolution engine: format conversions around the backend's NHWC
//! implicit GEMM (`backend::conv`), weight packing from a tensor, and the residual as output
//! rows.
//!
//! Invariants: the engine always sees an input with channel stride 1 and writes dense NHWC
//! rows; everything that is not already in that form is converted here exactly once.

use std::sync::Arc;

use crate::backend::conv::{
    conv2d_nhwc, cpu_conv_kernels, nchw_to_nhwc, nhwc_to_nchw, pack_conv_kernel, pack_conv_weight,
    ConvKernel, ConvPacking, PackedConv, ResidualRows, CONV_FAMILY,
};
use crate::backend::prepared::LayerConv;
use crate::backend::tuning;
use crate::desc::{Activation, ConvGeom};
use crate::{Conv2dParams, DType, Layout, MemoryFormat, Result, Tensor};

/// The autotuner's problem text of a Cpu convolution: how its weights are packed, the dtype,
/// the batch and spatial sizes bucketed, channels and kernel exact, and the output format.
fn conv_problem(packing: ConvPacking, g: &ConvGeom, dtype: DType, fmt: MemoryFormat) -> String {
    use crate::autotune::bucket;
    let packing = match packing {
        ConvPacking::Layer => "layer",
        ConvPacking::PerCall => "per call",
    };
    format!(
        "{packing} {dtype} n {} c {} o {} hw {}x{} k {}x{} {}",
        bucket(g.n),
        g.c,
        g.o,
        bucket(g.h),
        bucket(g.w),
        g.kh,
        g.kw,
        if fmt == MemoryFormat::ChannelsLast {
            "nhwc"
        } else {
            "nchw"
        }
    )
}

/// Whether two convolution outputs agree (tolerance for the dtype: Winograd's transforms
/// round differently from the implicit GEMM).
fn outputs_agree(want: &Tensor, got: &Tensor) -> bool {
    let tol = if want.dtype() == DType::F32 {
        1e-3
    } else {
        3e-2
    };
    match (f32_vec(want), f32_vec(got)) {
        (Ok(w), Ok(g)) => tuning::values_agree(&w, &g, tol),
        _ => false,
    }
}

/// A convolution on the Cpu engine with weights packed for this call, by the kernel the
/// autotuner picks (the packing is part of each candidate's time).
pub(crate) fn conv2d_cpu_per_call(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&[f32]>,
    epilogue: (Activation, Option<&Tensor>),
    g: &ConvGeom,
    fmt: MemoryFormat,
) -> Result<Tensor> {
    let shape = [g.o, g.c / g.p.groups.max(1), g.kh, g.kw];
    let (kernels, rule) =
        cpu_conv_kernels(shape, &g.p, weight.dtype(), ConvPacking::PerCall, Some(g));
    let names: Vec<&'static str> = kernels.iter().map(|k| k.name()).collect();
    let key = tuning::cpu_key(
        CONV_FAMILY,
        &conv_problem(ConvPacking::PerCall, g, x.dtype(), fmt),
    );
    let dense = weight.contiguous()?;
    tuning::run_tuned(
        &key,
        &names,
        rule,
        &mut |i| {
            let packed = pack_conv_kernel((dense.storage(), dense.layout()), g.p, kernels[i])?;
            conv2d_cpu(x, &packed, bias, epilogue, g, fmt)
        },
        &|| Ok(()),
        &outputs_agree,
    )
}

/// A convolution layer's call on the Cpu engine with its packs (`layer`), by the kernel the
/// autotuner picks for the problem: the packs in use where they are that kernel, else the
/// weight (from `weight`) packed for it, which then replaces the layer's packs (outside a
/// measurement, so a layer keeps the winner of its latest problem).
pub(crate) fn conv2d_cpu_layer(
    x: &Tensor,
    layer: &LayerConv,
    weight: &dyn Fn() -> Result<Tensor>,
    epilogue: (Activation, Option<&Tensor>),
    g: &ConvGeom,
    fmt: MemoryFormat,
) -> Result<Tensor> {
    let current = layer.current();
    let shape = [g.o, g.c / g.p.groups.max(1), g.kh, g.kw];
    let (mut kernels, _) = cpu_conv_kernels(shape, &g.p, x.dtype(), ConvPacking::Layer, None);
    // The rule is the kernel the layer was packed for.
    let rule = match kernels.iter().position(|k| *k == current.kernel()) {
        Some(i) => i,
        None => {
            kernels.push(current.kernel());
            kernels.len() - 1
        }
    };
    let bias = layer.bias.as_deref();
    if kernels.len() == 1 {
        return conv2d_cpu(x, &current, bias, epilogue, g, fmt);
    }
    let names: Vec<&'static str> = kernels.iter().map(|k| k.name()).collect();
    let key = tuning::cpu_key(
        CONV_FAMILY,
        &conv_problem(ConvPacking::Layer, g, x.dtype(), fmt),
    );
    // The weight, rebuilt at most once per call however many candidates pack it.
    let rebuilt = std::cell::OnceCell::new();
    let weight_once = || -> Result<Tensor> {
        if let Some(w) = rebuilt.get() {
            return Ok(Tensor::clone(w));
        }
        let w = weight()?.contiguous()?;
        Ok(Tensor::clone(rebuilt.get_or_init(|| w)))
    };
    // Making a candidate's packs (the weight rebuilt, its transform) is a one-time cost of the
    // layer, left out of the candidates' times; the winner's are kept.
    tuning::run_tuned_repacking(
        &key,
        &names,
        rule,
        &current,
        &|i| packs_for(layer, &current, kernels[i], &weight_once, g.p),
        &|packed| conv2d_cpu(x, packed, bias, epilogue, g, fmt),
        &outputs_agree,
        &|winner| layer.replace(winner),
    )
}

/// The layer's packs for `kernel`: those in use, or new ones (installed in the layer unless
/// the autotuner is measuring).
fn packs_for(
    layer: &LayerConv,
    current: &Arc<PackedConv>,
    kernel: ConvKernel,
    weight: &dyn Fn() -> Result<Tensor>,
    params: Conv2dParams,
) -> Result<Arc<PackedConv>> {
    if current.kernel() == kernel {
        return Ok(Arc::clone(current));
    }
    let w = weight()?.contiguous()?;
    let packed = Arc::new(pack_conv_kernel((w.storage(), w.layout()), params, kernel)?);
    if !crate::autotune::measuring() {
        layer.replace(Arc::clone(&packed));
    }
    Ok(packed)
}

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
    // Every buffer of the call, checked together before the work: the input's NHWC copy, the
    // output rows (with f32 partial sums for 16-bit outputs) and the NCHW copy of them.
    let size = |n: usize, dtype: DType| n as u128 * dtype.size_in_bytes() as u128;
    let out = (g.m() as u128 * g.o as u128) as usize;
    let mut bytes = size(out, x_in.dtype());
    if x_in.dtype() != DType::F32 {
        bytes += size(out, DType::F32);
    }
    if !(x_in.strides()[1] == 1 || g.c == 1) {
        bytes += size(x_in.numel(), x_in.dtype());
    }
    if fmt == MemoryFormat::Contiguous {
        bytes += size(out, x_in.dtype());
    }
    crate::backend::ensure_host_bytes("conv2d", u64::try_from(bytes).unwrap_or(u64::MAX))?;
    // The input with channel stride 1: as is, or converted once.
    let x = if x_in.strides()[1] == 1 || g.c == 1 {
        x_in.clone()
    } else {
        match nchw_to_nhwc(x_in.storage(), x_in.layout())? {
            Some(t) => Tensor::from_storage(t, nhwc_layout([g.n, g.h, g.w, g.c])),
            None => x_in.to_memory_format(MemoryFormat::ChannelsLast)?,
        }
    };
    let res = residual_in.map(|r| residual_rows(r, g)).transpose()?;
    let residual = res.as_ref().map(|(t, rows)| (t.storage(), *rows));
    let out = conv2d_nhwc(
        (x.storage(), x.layout()),
        packed,
        g,
        bias,
        activation,
        residual,
        x_in.dtype(),
    )?;
    let dims = [g.n, g.ho, g.wo, g.o];
    Ok(match fmt {
        MemoryFormat::ChannelsLast => Tensor::from_storage(out, nhwc_layout(dims)),
        MemoryFormat::Contiguous => match nhwc_to_nchw(&out, dims)? {
            Some(s) => Tensor::from_storage(s, Layout::contiguous(&g.out_shape())),
            None => Tensor::from_storage(out, nhwc_layout(dims)).contiguous()?,
        },
    })
}

/// The `[N, C, H, W]` layout of dense NHWC data `[n, h, w, c]`.
fn nhwc_layout([n, h, w, c]: [usize; 4]) -> Layout {
    Layout::from_parts(vec![n, c, h, w], vec![h * w * c, 1, w * c, c], 0)
}

/// A tensor's values as an f32 vector.
pub(crate) fn f32_vec(t: &Tensor) -> Result<Vec<f32>> {
    t.to_dtype(DType::F32)?.to_vec::<f32>()
}

/// Packs a Cpu weight `[O, C/G, kh, kw]` (any layout and float dtype) for `params` (see
/// `backend::conv::pack_conv_weight`); `call` is the geometry of the one call weights packed
/// per call serve.
pub(crate) fn pack_weight(
    w: &Tensor,
    params: Conv2dParams,
    packing: ConvPacking,
    call: Option<&ConvGeom>,
) -> Result<PackedConv> {
    let dense = w.contiguous()?;
    pack_conv_weight((dense.storage(), dense.layout()), params, packing, call)
}

/// The residual as `[N·Ho·Wo, O]` rows in its own dtype (the store reads f32, bf16 and f16 in
/// place): the tensor holding them and `(offset, row stride, column stride, image stride)`. A
/// view when the residual has channel stride 1 (or one channel) and its pixels at one stride,
/// either across the whole batch (image stride `None`) or within each image (image stride
/// `Some`, e.g. a `[N, O, 1, 1]` broadcast with row stride 0); otherwise one conversion to dense
/// NHWC.
fn residual_rows(r: &Tensor, g: &ConvGeom) -> Result<(Tensor, ResidualRows)> {
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
    let dense = if rb.dtype() == DType::F32 && rb.is_contiguous() {
        nchw_to_nhwc(rb.storage(), rb.layout())?
            .map(|t| Tensor::from_storage(t, nhwc_layout([g.n, g.ho, g.wo, g.o])))
    } else {
        None
    };
    let dense = match dense {
        Some(t) => t,
        None => rb.to_memory_format(MemoryFormat::ChannelsLast)?,
    };
    Ok((dense, (0, g.o, 1, None)))
}
