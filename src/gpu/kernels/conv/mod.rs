//! 2-D convolution on Xpu as an implicit GEMM (`conv.wgsl`, `conv_vec4.wgsl`), and on the
//! tensor cores where the adapter has them ([`coop`]); the caller (the backend's autotuner,
//! family `gpu_conv2d`) chooses between them.
//!
//! Invariants: no im2col buffer exists: the kernel gathers its A tiles from the input through
//! the input's four strides (any layout: NCHW, channels-last, other views) and reads the weight
//! `[O, C/g, kh, kw]`, bias, and residual through theirs; products accumulate in f32 and are
//! rounded once in the fused store `act(acc + bias) + residual`. The output is freshly
//! allocated with the strides the caller asks for ([`ConvLaunch::out_strides`]), and every 32-bit
//! output word is written by exactly one invocation: 16-bit outputs are stored as pairs of
//! elements adjacent in memory, which needs an even pixel count (NCHW-like outputs, pairs of
//! pixels) or an even `O/g` (channels-last outputs, pairs of channels); otherwise the kernel
//! writes f32 and one cast pass rounds it. Groups run on the grid's z dimension. All indices
//! are 32-bit: every buffer involved is checked to fit.

pub(crate) mod coop;
mod coop_check;

use crate::desc::Activation;
use crate::desc::ConvGeom;
use crate::desc::ConvTile;
use crate::gpu::kernels::launch;
use crate::gpu::kernels::params::{u32_arg, Params};
use crate::gpu::pipelines::{PipelineKey, ShaderId};
use crate::gpu::XpuStorage;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};

/// An Xpu operand: storage and the view of it.
pub(crate) type Operand<'a> = (&'a XpuStorage, &'a Layout);

/// Everything one convolution launch needs.
pub(crate) struct ConvLaunch<'a> {
    /// The validated geometry.
    pub shape: ConvGeom,
    pub input: Operand<'a>,
    pub weight: Operand<'a>,
    pub bias: Option<Operand<'a>>,
    /// A view of shape `[N, O, Ho, Wo]` (may be broadcast).
    pub residual: Option<Operand<'a>>,
    pub activation: Activation,
    /// Output strides over `(image, channel, pixel = oh·Wo + ow)`: `[O·Ho·Wo, Ho·Wo, 1]` for
    /// NCHW, `[Ho·Wo·O, 1, O]` for channels-last.
    pub out_strides: [usize; 3],
    pub tile: ConvTile,
}

/// Shader, entry point and output tile (rows = pixels, columns = output channels of a group)
/// of a config (`Large` and `Medium` name the same kernels as their `Vec4` forms, whose
/// workgroup tiles are vec4).
fn geometry(tile: ConvTile) -> (ShaderId, &'static str, usize, usize) {
    match tile {
        ConvTile::Large | ConvTile::LargeVec4 => (ShaderId::ConvVec4, "conv_large4", 128, 128),
        ConvTile::Narrow => (ShaderId::Conv, "conv_narrow", 128, 16),
        ConvTile::Medium | ConvTile::MediumVec4 | ConvTile::Auto | ConvTile::Winograd => {
            (ShaderId::ConvVec4, "conv_medium4", 64, 64)
        }
    }
}

/// The automatic config: narrow tiles for up to 16 output channels per group; large tiles
/// when they waste at most a quarter of their columns and still give at least 256 workgroups
/// (enough to fill a large GPU); medium tiles otherwise.
pub(crate) fn auto_tile(m: usize, og: usize, groups: usize) -> ConvTile {
    if og <= 16 {
        return ConvTile::Narrow;
    }
    let large_cols = og.div_ceil(128) * 128;
    let large_groups = m.div_ceil(128) * og.div_ceil(128) * groups;
    if 4 * og >= 3 * large_cols && large_groups >= 256 {
        ConvTile::LargeVec4
    } else {
        ConvTile::MediumVec4
    }
}

/// The activation codes of the shaders' fused epilogues (`conv.wgsl`, `matmul.wgsl`).
pub(crate) fn activation_code(a: Activation) -> u32 {
    match a {
        Activation::None => 0,
        Activation::Relu => 1,
        Activation::Gelu => 2,
        Activation::GeluTanh => 3,
        Activation::Silu => 4,
    }
}

/// Flag bits of `conv.wgsl`.
const BIAS: u32 = 1;
const RESIDUAL: u32 = 2;
const A_K_FAST: u32 = 4;
const B_K_FAST: u32 = 8;
const PAIR_CHANNELS: u32 = 16;
const ROWS_ALONG_X: u32 = 32;

/// Whether a 16-bit output can be stored in pairs, and along which axis (true: channels).
fn pairing(l: &ConvLaunch) -> Option<bool> {
    let s = &l.shape;
    let og = s.o / s.p.groups.max(1);
    if l.out_strides[1] == 1 {
        og.is_multiple_of(2).then_some(true)
    } else if l.out_strides[2] == 1 && l.out_strides[1] == s.ho * s.wo {
        (s.ho * s.wo).is_multiple_of(2).then_some(false)
    } else {
        None
    }
}

/// Checks a launch's dtypes and contexts: every operand a float of the input's dtype on the
/// input's context.
pub(crate) fn check(l: &ConvLaunch) -> Result<()> {
    let op = "conv2d";
    let x = l.input.0;
    let dtype = x.dtype;
    if !dtype.is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype,
            device: Device::Xpu,
            hint: ": conv2d takes f32, f16 or bf16".into(),
        });
    }
    for (s, _) in [Some(l.weight), l.bias, l.residual].into_iter().flatten() {
        x.check_same_context(s, op)?;
        if s.dtype != dtype {
            return Err(Error::DTypeMismatch {
                op,
                expected: dtype,
                got: s.dtype,
            });
        }
    }
    Ok(())
}

/// Runs the convolution as the FMA implicit GEMM (the launch's tile; `Auto` by
/// [`auto_tile`]); returns storage of `N·O·Ho·Wo` elements of the input's dtype laid out by
/// `out_strides`. (The tensor-core form is [`coop::conv2d`].)
pub(crate) fn conv2d(l: &ConvLaunch) -> Result<XpuStorage> {
    check(l)?;
    let x = l.input.0;
    let dtype = x.dtype;
    let s = &l.shape;
    let total = s.n * s.o * s.ho * s.wo;
    let pairs = if dtype == DType::F32 {
        Some(false)
    } else {
        pairing(l)
    };
    // Without clean 16-bit pairs the kernel writes f32 and one cast rounds it.
    let out_dtype = if pairs.is_some() { dtype } else { DType::F32 };
    let out = XpuStorage::alloc(&x.ctx, out_dtype, total)?;
    if total > 0 {
        record(l, &out, pairs.unwrap_or(false))?;
    }
    if out_dtype == dtype {
        return Ok(out);
    }
    out.copy_cast(&Layout::contiguous(&[total]), dtype)
}

/// Builds the parameter block and records the dispatches (in chunks of the grid limits).
fn record(l: &ConvLaunch, out: &XpuStorage, pair_channels: bool) -> Result<()> {
    let op = "conv2d";
    let s = &l.shape;
    let (x, xl) = l.input;
    let (w, wl) = l.weight;
    let g = s.p.groups;
    let (cg, og) = (s.c / g, s.o / g);
    let m = s.n * s.ho * s.wo;
    for (st, lay) in [Some(l.input), Some(l.weight), l.bias, l.residual]
        .into_iter()
        .flatten()
    {
        u32_arg(op, st.len)?;
        u32_arg(op, lay.max_offset())?;
    }
    u32_arg(op, out.len)?;
    let tile = match l.tile {
        ConvTile::Auto => auto_tile(m, og, g),
        t => t,
    };
    let (shader, entry, tm, tn) = geometry(tile);
    let (xs, ws) = (xl.strides(), wl.strides());
    let mut flags = activation_code(l.activation) << 8;
    if xs[1] < xs[3] {
        flags |= A_K_FAST;
    }
    if ws[1] <= ws[0] {
        flags |= B_K_FAST;
    }
    if pair_channels {
        flags |= PAIR_CHANNELS;
    }
    if l.out_strides[2] == 1 {
        flags |= ROWS_ALONG_X;
    }
    let mut p = Params::new(out.len, op)?;
    let words: [(usize, usize); 25] = [
        (4, xs[0]),
        (5, xs[1]),
        (6, xs[2]),
        (7, xs[3]),
        (8, xl.offset()),
        (9, ws[0]),
        (10, ws[1]),
        (11, ws[2]),
        (12, ws[3]),
        (13, wl.offset()),
        (14, cg),
        (15, s.h),
        (16, s.w),
        (17, og),
        (18, s.kh),
        (19, s.kw),
        (20, s.ho),
        (21, s.wo),
        (22, s.p.stride.0),
        (23, s.p.stride.1),
        (24, s.p.padding.0),
        (25, s.p.padding.1),
        (26, s.p.dilation.0),
        (27, s.p.dilation.1),
        (28, m),
    ];
    for (at, v) in words {
        p.set(at, v, op)?;
    }
    for (i, &v) in l.out_strides.iter().enumerate() {
        p.set(29 + i, v, op)?;
    }
    if let Some((_, bl)) = l.bias {
        flags |= BIAS;
        p.set(33, bl.offset(), op)?
            .set(34, bl.strides().first().copied().unwrap_or(0), op)?;
    }
    if let Some((_, rl)) = l.residual {
        flags |= RESIDUAL;
        p.set(35, rl.offset(), op)?;
        for (i, &v) in rl.strides().iter().enumerate() {
            p.set(36 + i, v, op)?;
        }
    }
    p.0[32] = flags;
    // Padding arithmetic runs in i32 in the shader.
    for v in [s.h, s.w, s.ho * s.p.stride.0, s.wo * s.p.stride.1] {
        i32::try_from(v).map_err(|_| Error::invalid(op, format!("size {v} exceeds i32")))?;
    }
    let key = PipelineKey {
        shader,
        entry,
        dt_in: x.dtype,
        dt_out: out.dtype,
        workgroup: 256,
        variant: 0,
    };
    let bias = l.bias.map_or(x, |(b, _)| b);
    let res = l.residual.map_or(x, |(r, _)| r);
    let inputs = [x, w, bias, res];
    let max = x.ctx.limits.max_compute_workgroups_per_dimension as usize;
    let (cols, rows) = (og.div_ceil(tn), m.div_ceil(tm));
    if cols > max {
        return Err(Error::invalid(
            op,
            format!(
                "{og} output channels per group need {cols} column tiles; the adapter allows {max}"
            ),
        ));
    }
    let mut g0 = 0;
    while g0 < g {
        let gn = (g - g0).min(max);
        let mut r0 = 0;
        while r0 < rows {
            let rn = (rows - r0).min(max);
            let mut pc = Params(p.0);
            pc.set(40, r0, op)?.set(41, g0, op)?;
            launch(out, key, pc, &inputs, [cols as u32, rn as u32, gn as u32])?;
            r0 += rn;
        }
        g0 += gn;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Large` and `Medium` name the vec4 kernels; Auto picks narrow, large or medium by shape.
    #[test]
    fn tiles_select_their_kernels() {
        assert_eq!(geometry(ConvTile::Large), geometry(ConvTile::LargeVec4));
        assert_eq!(geometry(ConvTile::Medium), geometry(ConvTile::MediumVec4));
        assert_eq!(geometry(ConvTile::Narrow).1, "conv_narrow");
        assert_eq!(auto_tile(4096, 16, 1), ConvTile::Narrow);
        assert_eq!(auto_tile(2 * 64 * 64, 320, 1), ConvTile::MediumVec4);
        assert_eq!(auto_tile(2 * 64 * 64 * 4, 384, 1), ConvTile::LargeVec4);
    }
}
