//! Launchers of the Winograd F(2×2, 3×3) transforms (`winograd.wgsl`); the point
//! products between them are batched matmuls (`crate::ops::conv_winograd_xpu`).
//!
//! Invariants: `U [16][Cp][O]` and `V [16][T][Cp]` hold the transformed-operand dtype
//! ([`operand_dtype`]: f32, or f16 where the f16 tensor cores multiply them), with the
//! channel count `Cp` padded to whole 32-bit words (even for 16-bit dtypes) and the pad
//! channels zero in both, so the padded product equals the unpadded one; `M [16][T][O]` is f32
//! (one rounding, in the output transform's store). The output store is the implicit GEMM's:
//! freshly allocated with the caller's strides, every 32-bit word written by one invocation
//! (16-bit outputs in pairs of channels when the channel stride is 1 and O is even, in pairs of
//! pixels along a row when the pixel stride is 1 and Wo is even; otherwise written in f32 and
//! rounded by one cast). All indices are 32-bit: every buffer is checked to fit.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::gpu::kernels::conv::{activation_code, ConvLaunch, Operand};
use crate::gpu::kernels::launch;
use crate::gpu::kernels::params::{grid, u32_arg, Params};
use crate::gpu::pipelines::{PipelineKey, ShaderId};
use crate::gpu::XpuStorage;
use crate::layout::Layout;
use crate::{DType, Result};

/// Points of an F(2×2, 3×3) tile.
pub(crate) const POINTS: usize = 16;

/// Flag bits of `wino_output`.
const BIAS: u32 = 1;
const RESIDUAL: u32 = 2;
const PAIR_CHANNELS: u32 = 4;

/// The dtype of the transformed filters and inputs of a convolution in `dtype`: f16 for f16
/// convolutions whose f16 products run on the tensor-core kernel (the point products then do
/// too), else f32 — the FMA kernels compute in f32 whatever they load, and f32 operands keep
/// bf16/f16 convolutions free of two extra roundings (of sums of up to four inputs, and of
/// the filter combinations), at twice the transformed data's bytes.
pub(crate) fn operand_dtype(dtype: DType, ctx: &crate::gpu::context::Context) -> DType {
    let own = dtype.size_in_bytes() == 2 && SIXTEEN_BIT_OPERANDS.load(Ordering::Relaxed);
    if own
        || (dtype == DType::F16
            && crate::gpu::kernels::matmul::select::coop16(&ctx.features)
            && crate::gpu::kernels::matmul::coop_check::verdict().is_ok())
    {
        dtype
    } else {
        DType::F32
    }
}

/// See [`set_sixteen_bit_operands`].
static SIXTEEN_BIT_OPERANDS: AtomicBool = AtomicBool::new(false);

/// Makes f16 and bf16 convolutions transform into their own dtype on every adapter (what f16
/// does where tensor cores serve), so tests cover the 16-bit transforms on any adapter.
pub(crate) fn set_sixteen_bit_operands(on: bool) {
    SIXTEEN_BIT_OPERANDS.store(on, Ordering::Relaxed);
}

/// Channels padded to whole 32-bit words of `dtype`.
pub(crate) fn padded_channels(c: usize, dtype: DType) -> usize {
    if dtype.size_in_bytes() == 2 {
        c.div_ceil(2) * 2
    } else {
        c
    }
}

/// Output tiles: (tiles per image row, tiles per image, all tiles).
pub(crate) fn tiles(l: &ConvLaunch) -> (usize, usize, usize) {
    let s = &l.shape;
    let (th, tw) = (s.ho.div_ceil(2), s.wo.div_ceil(2));
    (tw, th * tw, s.n * th * tw)
}

fn key(entry: &'static str, dt_in: DType, dt_out: DType) -> PipelineKey {
    crate::gpu::kernels::key(ShaderId::Winograd, entry, dt_in, dt_out, 0)
}

fn dispatch(
    out: &XpuStorage,
    k: PipelineKey,
    p: Params,
    inputs: &[&XpuStorage],
    invocations: usize,
) -> Result<()> {
    let max = out.ctx.limits.max_compute_workgroups_per_dimension;
    launch(out, k, p, inputs, grid(invocations.div_ceil(256), max))
}

/// `U [16][Cp][O]` in `udt` from a `[O, C, 3, 3]` weight view (any strides).
pub(crate) fn filters(weight: Operand, c: usize, o: usize, udt: DType) -> Result<XpuStorage> {
    let op = "conv2d (Winograd filters)";
    let (w, wl) = weight;
    let cp = padded_channels(c, udt);
    let total = POINTS * cp * o;
    let out = XpuStorage::alloc(&w.ctx, udt, total)?;
    if total == 0 {
        return Ok(out);
    }
    u32_arg(op, total)?;
    u32_arg(op, w.len)?;
    u32_arg(op, wl.max_offset())?;
    let words = (cp * o).div_ceil(4 / udt.size_in_bytes());
    let mut p = Params::new(words, op)?;
    for (at, v) in [(32, c), (33, cp), (34, o), (39, wl.offset())] {
        p.set(at, v, op)?;
    }
    for (i, &v) in wl.strides().iter().enumerate() {
        p.set(35 + i, v, op)?;
    }
    dispatch(&out, key("wino_filter", w.dtype, udt), p, &[w], words)?;
    Ok(out)
}

/// `V [16][T][Cp]` in `vdt` from the launch's input.
pub(crate) fn inputs(l: &ConvLaunch, vdt: DType) -> Result<XpuStorage> {
    let op = "conv2d (Winograd inputs)";
    let s = &l.shape;
    let (x, xl) = l.input;
    let cp = padded_channels(s.c, vdt);
    let (tw, per_image, t) = tiles(l);
    let total = POINTS * t * cp;
    let out = XpuStorage::alloc(&x.ctx, vdt, total)?;
    if total == 0 {
        return Ok(out);
    }
    u32_arg(op, total)?;
    u32_arg(op, x.len)?;
    u32_arg(op, xl.max_offset())?;
    // Tile positions are signed in the shader.
    for v in [s.h + 2 * s.p.padding.0 + 4, s.w + 2 * s.p.padding.1 + 4] {
        i32::try_from(v).map_err(|_| crate::Error::invalid(op, format!("size {v} exceeds i32")))?;
    }
    let row_words = cp * vdt.size_in_bytes() / 4;
    let invocations = t * row_words;
    let mut p = Params::new(invocations, op)?;
    let words = [
        (32, s.c),
        (33, row_words),
        (34, t),
        (35, tw),
        (36, per_image),
        (37, s.h),
        (38, s.w),
        (39, s.p.padding.0),
        (40, s.p.padding.1),
        (45, xl.offset()),
    ];
    for (at, v) in words {
        p.set(at, v, op)?;
    }
    for (i, &v) in xl.strides().iter().enumerate() {
        p.set(41 + i, v, op)?;
    }
    dispatch(&out, key("wino_input", x.dtype, vdt), p, &[x], invocations)?;
    Ok(out)
}

/// How a 16-bit output is stored: `Some(true)` channel pairs, `Some(false)` pixel pairs,
/// `None` not in pairs (written in f32, then cast).
fn pairing(l: &ConvLaunch) -> Option<bool> {
    let s = &l.shape;
    let st = l.out_strides;
    if st[1] == 1 && s.o.is_multiple_of(2) && st[0].is_multiple_of(2) && st[2].is_multiple_of(2) {
        Some(true)
    } else if st[2] == 1
        && s.wo.is_multiple_of(2)
        && st[0].is_multiple_of(2)
        && st[1].is_multiple_of(2)
    {
        Some(false)
    } else {
        None
    }
}

/// The convolution's output from the f32 point products `m` (`[16][T][O]`), with the launch's
/// epilogue, dtype and output strides.
pub(crate) fn outputs(l: &ConvLaunch, m: &XpuStorage) -> Result<XpuStorage> {
    let s = &l.shape;
    let dtype = l.input.0.dtype;
    let pairs = if dtype == DType::F32 {
        Some(false)
    } else {
        pairing(l)
    };
    let out_dtype = if pairs.is_some() { dtype } else { DType::F32 };
    let total = s.n * s.o * s.ho * s.wo;
    let out = XpuStorage::alloc(&m.ctx, out_dtype, total)?;
    if total > 0 {
        record_outputs(l, m, &out, pairs == Some(true) && dtype != DType::F32)?;
    }
    if out_dtype == dtype {
        return Ok(out);
    }
    out.copy_cast(&Layout::contiguous(&[total]), dtype)
}

fn record_outputs(
    l: &ConvLaunch,
    m: &XpuStorage,
    out: &XpuStorage,
    pair_channels: bool,
) -> Result<()> {
    let op = "conv2d (Winograd outputs)";
    let s = &l.shape;
    let (tw, per_image, t) = tiles(l);
    let units = if pair_channels { s.o / 2 } else { s.o };
    let invocations = t * units;
    for st in [
        Some(m),
        Some(out),
        l.bias.map(|b| b.0),
        l.residual.map(|r| r.0),
    ]
    .into_iter()
    .flatten()
    {
        u32_arg(op, st.len)?;
    }
    let mut p = Params::new(invocations, op)?;
    let words = [
        (32, s.o),
        (33, units),
        (34, t),
        (35, tw),
        (36, per_image),
        (37, s.ho),
        (38, s.wo),
        (39, l.out_strides[0]),
        (40, l.out_strides[1]),
        (41, l.out_strides[2]),
    ];
    for (at, v) in words {
        p.set(at, v, op)?;
    }
    let mut flags = activation_code(l.activation) << 8;
    if pair_channels {
        flags |= PAIR_CHANNELS;
    }
    if let Some((_, bl)) = l.bias {
        flags |= BIAS;
        u32_arg(op, bl.max_offset())?;
        p.set(43, bl.offset(), op)?
            .set(44, bl.strides().first().copied().unwrap_or(0), op)?;
    }
    if let Some((_, rl)) = l.residual {
        flags |= RESIDUAL;
        u32_arg(op, rl.max_offset())?;
        p.set(45, rl.offset(), op)?;
        for (i, &v) in rl.strides().iter().enumerate() {
            p.set(46 + i, v, op)?;
        }
    }
    p.0[42] = flags;
    let bias = l.bias.map_or(m, |(b, _)| b);
    let res = l.residual.map_or(m, |(r, _)| r);
    let k = key("wino_output", l.input.0.dtype, out.dtype);
    dispatch(out, k, p, &[m, bias, res], invocations)
}
