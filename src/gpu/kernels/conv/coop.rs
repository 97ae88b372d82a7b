//! f16 convolutions on the tensor-core kernel (`mm_coop16` of `matmul/matmul_coop16.wgsl` in
//! its convolution-gather mode).
//!
//! Why a second conv path: `conv.wgsl` runs its products on f32 FMAs; where the driver
//! has 16x16x16 f16 cooperative matrices (NVIDIA's tensor cores) the same implicit GEMM runs on
//! them. The GEMM is `out[m, o] = sum_k A[m, k] W[o, k]` with m the output pixel, k = (ky, kx,
//! ci) and A gathered from a channels-last input in pairs of channels (one 32-bit word), so the
//! kernel needs the input channels-last with channel stride 1, the weight stored
//! `[O][kh][kw][C]`, and C and O even. Operands in other layouts are copied into those once per
//! call (an NCHW activation costs one transpose in and one out, small beside the product), and
//! the output is written channels-last and transposed only when NCHW is asked for.
//!
//! Invariants: serves only `ConvTile::Auto` launches ([`eligible`]): f16, one group, even C
//! and O, NCHW or channels-last output, sizes within the shader's i32 arithmetic and the grid
//! limits, on an adapter whose f16 cooperative matrices passed the once-per-process
//! self-checks (the matmul's and the gather's own, `coop_check`); [`conv2d`] refuses any
//! other launch with an error (the caller, the backend's autotuner, lists it only where
//! eligible). K is cut into the splits the caller asks for (`matmul::split_k`). The same
//! gather runs on `mm_coop16t` with any of its tile shapes that gathers at most 16 rows per
//! invocation ([`conv2d_on`]). The epilogue is
//! the matmul family's: `act(acc + bias) + residual`, rounded once.

use super::coop_check;
use super::{activation_code, ConvLaunch};
use crate::gpu::kernels::launch;
use crate::gpu::kernels::matmul::coop16_tiles::Coop16Tiles;
use crate::gpu::kernels::matmul::select::coop16;
use crate::gpu::kernels::matmul::{coop_check as matmul_check, split_k, SPLITS};
use crate::gpu::kernels::params::{
    grid as grid_for, u32_arg, Params, COUNT, EXTRA, OFFSET0, OFFSET1, RANK,
};
use crate::gpu::pipelines::{PipelineKey, ShaderId};
use crate::gpu::XpuStorage;
use crate::layout::Layout;
use crate::Error;
use crate::{DType, Result};

/// Flag bit of the matmul prelude's word 40 that selects the convolution gather.
const CONV_GATHER: u32 = 16;
/// Output rows and columns of one workgroup tile.
const TILE: usize = 128;

/// Whether f16 convolutions can run on the tensor-core kernel (the adapter has it and the
/// self-checks passed). Creates the Xpu context.
pub(crate) fn active() -> bool {
    crate::gpu::ctx().is_ok_and(|ctx| {
        coop16(&ctx.features) && matmul_check::verdict().is_ok() && coop_check::verdict().is_ok()
    })
}

/// Whether this launch can take the tensor-core path (before any work is recorded).
pub(crate) fn eligible(l: &ConvLaunch) -> bool {
    let s = &l.shape;
    let x = l.input.0;
    let (ho_wo, o) = (s.ho * s.wo, s.o);
    let channels_last_out = l.out_strides == [ho_wo * o, 1, o];
    let nchw_out = l.out_strides == [o * ho_wo, ho_wo, 1];
    // Padding and pixel-base arithmetic run in i32 in the shader (the input counted as given
    // and as the channels-last copy a call may make); the grid within the adapter's limits.
    let input_len = x.len.max(s.n * s.c * s.h * s.w);
    let fits_i32 = [
        s.h,
        s.w,
        s.ho * s.p.stride.0,
        s.wo * s.p.stride.1,
        input_len,
    ]
    .iter()
    .all(|&v| i32::try_from(v).is_ok());
    let max = x.ctx.limits.max_compute_workgroups_per_dimension as usize;
    let m = s.n * ho_wo;
    let grid_fits = o.div_ceil(TILE) <= max && m.div_ceil(TILE) <= max;
    l.tile == crate::desc::ConvTile::Auto
        && x.dtype == DType::F16
        && s.p.groups == 1
        && s.c > 0
        && s.c.is_multiple_of(2)
        && o.is_multiple_of(2)
        && (channels_last_out || nchw_out)
        && fits_i32
        && grid_fits
        && coop16(&x.ctx.features)
        && matmul_check::verdict().is_ok()
        && coop_check::verdict().is_ok()
}

/// The launch as split K sees it on `mm_coop16`: its 128x128 output tiles and K = kh·kw·C
/// (the static rule plans splits here, `split_k::rule`).
pub(crate) fn split_facts(l: &ConvLaunch) -> (usize, usize) {
    split_facts_on(l, None)
}

/// [`split_facts`] on `mm_coop16t` with `shape` (`None`: `mm_coop16`).
pub(crate) fn split_facts_on(l: &ConvLaunch, shape: Option<&Coop16Tiles>) -> (usize, usize) {
    let s = &l.shape;
    let [tm, tn] = tile_of(shape);
    let tiles = s.o.div_ceil(tn) * (s.n * s.ho * s.wo).div_ceil(tm);
    (tiles, s.kh * s.kw * s.c)
}

/// Output rows and columns of one workgroup of `mm_coop16t` with `shape` (`None`: of
/// `mm_coop16`).
fn tile_of(shape: Option<&Coop16Tiles>) -> [usize; 2] {
    shape.map_or([TILE, TILE], |t| [t.tile_m() as usize, t.tile_n() as usize])
}

/// `st` viewed through `layout` if that view has unit stride along `inner` and even offset and
/// outer strides; otherwise a contiguous copy of the view permuted by `order` (the axes of the
/// copy, outermost first). Returns the storage, its offset and its strides in `order`.
fn channels_inner(
    st: &XpuStorage,
    layout: &Layout,
    order: [usize; 4],
) -> Result<(Option<XpuStorage>, usize, [usize; 4])> {
    let (shape, strides) = (layout.shape(), layout.strides());
    let permuted = order.map(|d| strides[d]);
    let usable = permuted[3] == 1
        && layout.offset().is_multiple_of(2)
        && permuted[..3].iter().all(|v| v.is_multiple_of(2));
    if usable {
        return Ok((None, layout.offset(), permuted));
    }
    let view = Layout::from_parts(
        order.map(|d| shape[d]).to_vec(),
        permuted.to_vec(),
        layout.offset(),
    );
    let copy = st.copy_cast(&view, st.dtype)?;
    let dims = order.map(|d| shape[d]);
    let strides = [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1];
    Ok((Some(copy), 0, strides))
}

/// Runs the convolution on the tensor-core kernel with K cut into `splits` (1: whole); an
/// error where the launch is not [`eligible`].
pub(crate) fn conv2d(l: &ConvLaunch, splits: usize) -> Result<XpuStorage> {
    conv2d_on(l, splits, None)
}

/// [`conv2d`] on `mm_coop16t` with `shape` (`None`: on `mm_coop16`); a shape whose
/// invocations would gather more rows than the kernel holds is an error.
pub(crate) fn conv2d_on(
    l: &ConvLaunch,
    splits: usize,
    shape: Option<Coop16Tiles>,
) -> Result<XpuStorage> {
    let s = &l.shape;
    if shape.is_some_and(|t| !t.gathers()) {
        return Err(Error::invalid(
            "conv2d",
            "a tensor-core tile shape whose invocations gather at most 16 rows",
        ));
    }
    super::check(l)?;
    if !eligible(l) {
        return Err(Error::invalid(
            "conv2d",
            "the tensor-core convolution takes f16 launches of one group and even channel \
             counts with NCHW or channels-last output, on an adapter whose f16 cooperative \
             matrices passed the self-checks",
        ));
    }
    if s.n * s.ho * s.wo * s.o == 0 {
        return XpuStorage::alloc(&l.input.0.ctx, DType::F16, 0);
    }
    let (x, xl) = l.input;
    let (w, wl) = l.weight;
    let m = s.n * s.ho * s.wo;
    let k = s.kh * s.kw * s.c;
    // Input as [N][H][W][C], channels innermost.
    let (x_copy, x_off, xs) = channels_inner(x, xl, [0, 2, 3, 1])?;
    // Weight as packed [O][kh][kw][C] (what `Tensor::to_memory_format(ChannelsLast)` gives).
    let wp = [0, 2, 3, 1].map(|d| wl.strides()[d]);
    let w_copy = if wp == [k, s.kw * s.c, s.c, 1] && wl.offset().is_multiple_of(2) {
        None
    } else {
        let view = Layout::from_parts(vec![s.o, s.kh, s.kw, s.c], wp.to_vec(), wl.offset());
        Some(w.copy_cast(&view, w.dtype)?)
    };
    let w_off = if w_copy.is_some() { 0 } else { wl.offset() };
    finish(
        l,
        (x_copy.as_ref().unwrap_or(x), x_off, xs),
        (w_copy.as_ref().unwrap_or(w), w_off),
        m,
        k,
        (splits, shape),
    )
}

/// Records the product on channels-last operands (the input with its offset and strides, the
/// weight with its offset) and returns the output in the asked layout.
fn finish(
    l: &ConvLaunch,
    (x, x_off, xs): (&XpuStorage, usize, [usize; 4]),
    (w, w_off): (&XpuStorage, usize),
    m: usize,
    k: usize,
    (splits, shape): (usize, Option<Coop16Tiles>),
) -> Result<XpuStorage> {
    let op = "conv2d";
    let s = &l.shape;
    let o = s.o;
    // The residual as [M][O] rows: usable in place when its pixels are evenly strided.
    let mut res_copy = None;
    let mut res = None;
    if let Some((r, rl)) = l.residual {
        let st = rl.strides();
        let (pix, ch) = (st[3], st[1]);
        if st[2] == s.wo * pix && st[0] == s.ho * s.wo * pix {
            res = Some((r, rl.offset(), pix, ch));
        } else {
            let view = Layout::from_parts(
                vec![s.n, s.ho, s.wo, o],
                vec![st[0], st[2], st[3], st[1]],
                rl.offset(),
            );
            res_copy = Some(r.copy_cast(&view, r.dtype)?);
        }
    }
    if let Some(rc) = res_copy.as_ref() {
        res = Some((rc, 0, o, 1));
    }
    for v in [m, k, o, x.len, w.len, m * o] {
        u32_arg(op, v)?;
    }
    let mut flags = CONV_GATHER | activation_code(l.activation) << 8;
    let mut p = Params::new(1, op)?;
    p.0[RANK] = 0;
    p.set(OFFSET0, x_off, op)?
        .set(OFFSET1, w_off, op)?
        .scalars(1.0, 0.0);
    let geometry = [
        s.c,
        s.h,
        s.w,
        s.ho * s.wo,
        s.wo,
        s.kw,
        s.p.stride.0,
        s.p.stride.1,
        s.p.padding.0,
        s.p.padding.1,
        s.p.dilation.0,
        s.p.dilation.1,
        xs[0],
        xs[1],
        xs[2],
    ];
    for (i, &v) in geometry.iter().enumerate() {
        p.set(12 + i, v, op)?;
    }
    // M, N, K, A strides (unused by the gather), B strides ([O][K]: k stride 1), first batch.
    for (i, v) in [m, o, k, k, 1, 1, k, 0].into_iter().enumerate() {
        p.set(EXTRA + i, v, op)?;
    }
    if let Some((_, off, pix, ch)) = res {
        flags |= 4;
        p.set(EXTRA + 12, off, op)?
            .set(EXTRA + 13, pix, op)?
            .set(EXTRA + 14, ch, op)?;
    }
    if let Some((_, bl)) = l.bias {
        flags |= 2;
        p.set(EXTRA + 15, bl.offset(), op)?.set(
            EXTRA + 16,
            bl.strides().first().copied().unwrap_or(0),
            op,
        )?;
    }
    p.0[EXTRA + 8] = flags;
    p.set(EXTRA + 17, o, op)?.set(EXTRA + 18, o, op)?;
    let max = x.ctx.limits.max_compute_workgroups_per_dimension as usize;
    let [tile_m, tile_n] = tile_of(shape.as_ref());
    let grid = [o.div_ceil(tile_n), m.div_ceil(tile_m)];
    let out = XpuStorage::alloc(&x.ctx, DType::F16, m * o)?;
    let mut key = match shape {
        Some(t) => PipelineKey {
            shader: Coop16Tiles::SHADER,
            entry: Coop16Tiles::ENTRY,
            dt_in: DType::F16,
            dt_out: DType::F16,
            workgroup: t.workgroup(),
            variant: t.conv_variant(),
        },
        None => PipelineKey {
            shader: ShaderId::MatmulCoop16,
            entry: "mm_coop16",
            dt_in: DType::F16,
            dt_out: DType::F16,
            workgroup: 256,
            // Bit 6: the convolution gather (a pipeline constant of `mm_coop16`).
            variant: 64,
        },
    };
    let bias = l.bias.map_or(x, |(b, _)| b);
    let res_st = res.map_or(x, |(r, ..)| r);
    if let Some((splits, kc)) = split_k::split(k, splits) {
        // Split K: f32 partial products (the gather only, identity epilogue), then the matmul
        // family's epilogue pass sums them with bias, activation and residual.
        let prod = XpuStorage::alloc(&x.ctx, DType::F32, splits * m * o)?;
        let mut raw = p.clone();
        raw.0[EXTRA + 8] = CONV_GATHER;
        raw.set(SPLITS, splits, op)?.set(SPLITS + 1, kc, op)?;
        key.dt_out = DType::F32;
        let groups = [grid[0] as u32, grid[1] as u32, u32_arg(op, splits)?];
        launch(&prod, key, raw, &[x, w, x, x, x], groups)?;
        let words = m * o / 2;
        let mut sum = p;
        sum.set(COUNT, words, op)?.set(SPLITS, splits, op)?;
        let key = x.simple_key("epilogue", DType::F16);
        let g = grid_for(words.div_ceil(256), max as u32);
        let bindings = [(2, &prod), (4, x), (5, bias), (6, res_st)];
        crate::gpu::kernels::dispatch(&out, key, sum, &bindings, g.map(|v| v as usize), op)?;
    } else {
        launch(
            &out,
            key,
            p,
            &[x, w, x, bias, res_st],
            [grid[0] as u32, grid[1] as u32, 1],
        )?;
    }
    if l.out_strides == [s.ho * s.wo * o, 1, o] {
        return Ok(out);
    }
    // NCHW asked for: one transpose of the channels-last result.
    let nhwc_as_nchw = Layout::from_parts(
        vec![s.n, o, s.ho, s.wo],
        vec![s.ho * s.wo * o, 1, s.wo * o, o],
        0,
    );
    out.copy_cast(&nhwc_as_nchw, DType::F16)
}
