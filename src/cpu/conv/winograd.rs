//! Winograd F(2×2, 3×3) convolution for 3×3, stride-1, undilated, ungrouped layers on
//! channels-last data.
//!
//! Why: a 3×3 convolution computed as an implicit GEMM costs `9·C·O` multiply-adds per output
//! pixel; Winograd's minimal filtering computes each 2×2 output tile from a 4×4 input tile with
//! `16·C·O`, i.e. `4·C·O` per pixel — 2.25× fewer. The work becomes 16 independent plain GEMMs
//! (one per point of the transformed 4×4 tile) on the engine's own microkernels, plus two cheap
//! linear transforms that only add and subtract. SD's UNet spends most of its time in such
//! convolutions, so this is where a CPU step gains most (see BENCHMARKS.md).
//!
//! Why F(2,3) and not F(4,3) (6×6 tiles, 36 GEMMs, 2.25·C·O per pixel): its transformed filters
//! take 36/9 = 4× the weights' memory (16/9 here; an SD 1.5 UNet would carry about 7.6 GB of
//! them in f32), and its transforms multiply by up to 8, which costs about a decimal digit of
//! f32 accuracy; F(2,3)'s transforms only add, so its results stay within a few ulps of the
//! direct convolution.
//!
//! With `d` a 4×4 input tile, `g` the 3×3 filter and `Y` the 2×2 output tile:
//! `Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`, where the elementwise product is summed over input
//! channels — a `[tiles, C] @ [C, O]` product for each of the 16 points.
//!
//! Invariants:
//! - The filter transform `U = G g Gᵀ` is made once per layer in f64 and rounded to f32 (its
//!   entries are sums of halves and quarters of weights); the input and output transforms use
//!   only additions, so the only extra rounding against the direct convolution is the order of
//!   summation: errors stay within a few f32 ulps of the result's magnitude (tested against the
//!   implicit GEMM and a direct reference).
//! - Tile `(ty, tx)` of image `b` reads input pixels `(2ty − ph + i, 2tx − pw + j)`, `i, j < 4`
//!   (zeros outside the image), and writes the output pixels `(2ty + i, 2tx + j)`, `i, j < 2`,
//!   that exist: any input size and any padding are exact.
//! - Tiles run in blocks of whole tile rows, so each block's output is one contiguous run of
//!   NHWC rows and its transformed data (`16 · tiles · (C + O)` floats) stays near the cache.
//! - bf16 layers where the bf16 GEMM method is `vdpbf16ps` ([`Operands::Bf16`]) round `U` and
//!   the f32 input transform to bf16 once each and run the 16 GEMMs on the bf16 kernels (f32
//!   accumulation, twice the f32 FMA rate on CPUs with full-rate `vdpbf16ps`, such as AMD Zen
//!   4; half the filter memory). That adds two bf16 roundings (relative 2⁻⁹) to operands that
//!   were bf16 already, so the error stays of the order of a bf16 convolution's own (tested
//!   against the direct loops with a bf16 tolerance); f32 and f16 layers never take this path.
//! - The epilogue is the implicit GEMM's: `act(conv + bias) + residual` in f32, per output row.

#[cfg(target_arch = "x86_64")]
use super::winograd_avx2::input_tile8;
use super::winograd_math::{filter_transform, input_transform, L};
use super::winograd_out::finish_row;
use super::ConvEpilogue;
use crate::cpu::gemm::{
    self, bf16_method, Bf16Method, Epilogue, GemmPath, MatRef, PackedB, SrcKind, ToF32,
};
use crate::cpu::simd::Kernels;
use crate::layout::Layout;
use crate::ops::conv::ConvGeom;
use crate::{Conv2dParams, Error, Result};
use half::bf16;
use rayon::prelude::*;

/// Points of the transformed tile.
pub(super) const POINTS: usize = 16;
/// Target size of one block's transformed input and output (floats), raised for layers whose
/// transformed filters are larger (see [`block_floats`]).
const BLOCK_FLOATS: usize = 1 << 21;

/// Block size for `c → o` channels: every block streams all 16 filter matrices (`16·C·O`
/// floats) through the GEMMs once, so blocks hold at least half that much transformed data —
/// the filter re-reads then cost at most twice the transformed data's own traffic (for SD's
/// 1280-channel layers at 16×16 that means one block instead of three passes over 105 MB).
fn block_floats(c: usize, o: usize) -> usize {
    BLOCK_FLOATS.max(POINTS * c * o / 2)
}

/// True when a layer of weight shape `[O, C, kh, kw]` and `params` can run as Winograd F(2,3)
/// and is large enough to gain from it (the transforms cost about `16·(C + O)` adds per tile).
pub(crate) fn suits(shape: [usize; 4], p: &Conv2dParams) -> bool {
    let [o, c, kh, kw] = shape;
    kh == 3
        && kw == 3
        && p.stride == (1, 1)
        && p.dilation == (1, 1)
        && p.groups == 1
        && c >= MIN_CHANNELS
        && o >= MIN_CHANNELS
}

/// Fewer channels than this on either side: the implicit GEMM is as fast.
const MIN_CHANNELS: usize = 16;

/// A convolution whose weights are transformed for this one call (not a prepacked layer) uses
/// Winograd only from this many output pixels (`N·Ho·Wo`) on: the filter transform and its
/// packing cost about `16·C·O` values, repaid by `5·C·O` fewer multiply-adds per pixel.
pub(crate) const PER_CALL_MIN_PIXELS: usize = 1024;

/// The element type the 16 point GEMMs multiply in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operands {
    /// Transformed filters and inputs in f32 (the f32 FMA kernels; every source dtype).
    F32,
    /// Both rounded to bf16, multiplied by the `vdpbf16ps` (or AMX, or portable pair) kernels
    /// with f32 accumulation: twice the f32 rate where `vdpbf16ps` is full speed.
    Bf16,
}

impl Operands {
    /// The operands a layer of `S` weights uses in this process: bf16 for bf16 layers where the
    /// bf16 GEMM method is `vdpbf16ps` (the run-time calibration found it faster than the FMA
    /// pipes), f32 otherwise — f32 and f16 layers never lose precision to this path.
    pub(crate) fn for_source<S: ToF32>() -> Self {
        if matches!(S::KIND, SrcKind::Bf16) && bf16_method() == Bf16Method::DotProduct {
            Operands::Bf16
        } else {
            Operands::F32
        }
    }
}

/// The 16 transformed filter matrices (`C × O` each), packed for the GEMM engine.
enum Filters {
    F32(Vec<PackedB<f32>>),
    Bf16(Vec<PackedB<bf16>>),
}

/// A 3×3 filter bank transformed for Winograd F(2,3): for each of the 16 points, the `C × O`
/// matrix `U[point][c][o]`, packed for the GEMM engine.
pub(crate) struct WinogradWeights {
    pub c: usize,
    pub o: usize,
    /// Padding the layer was built for (the transform does not depend on it; kept so a call
    /// with other parameters is refused rather than computed wrongly).
    pub params: Conv2dParams,
    u: Filters,
}

impl WinogradWeights {
    /// Transforms an `[O, C, 3, 3]` row-major filter bank (any float source widened to f64)
    /// for GEMMs on `operands`.
    pub(crate) fn new<S: ToF32>(
        w: &[S],
        o: usize,
        c: usize,
        params: Conv2dParams,
        operands: Operands,
    ) -> Result<Self> {
        if w.len() != o * c * 9 {
            return Err(Error::invalid(
                "conv2d prepack",
                format!("a [{o}, {c}, 3, 3] weight, got {} values", w.len()),
            ));
        }
        // `u[ci][point][oi]`: each input channel's block is written by one task, reading its
        // filters in blocks of output channels (rows of `9·C` weights, 9 at a time).
        let mut u = vec![0f32; POINTS * c * o];
        u.par_chunks_mut(POINTS * o)
            .enumerate()
            .for_each(|(ci, uc)| {
                for oi in 0..o {
                    let base = (oi * c + ci) * 9;
                    let g: [f64; 9] = std::array::from_fn(|i| w[base + i].to_f32() as f64);
                    for (point, v) in filter_transform(&g).into_iter().enumerate() {
                        uc[point * o + oi] = v as f32;
                    }
                }
            });
        let view = |point: usize| (point * o, c, o, POINTS * o, 1);
        let u = match operands {
            Operands::F32 => Filters::F32(
                (0..POINTS)
                    .map(|p| {
                        let (off, r, cl, rs, cs) = view(p);
                        PackedB::new(MatRef::new(&u, off, r, cl, rs, cs))
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
            Operands::Bf16 => {
                // Rounded to nearest even once, from the f32 transform.
                let mut h = vec![bf16::ZERO; u.len()];
                Kernels::current().f32_to_bf16(&u, &mut h);
                drop(u);
                Filters::Bf16(
                    (0..POINTS)
                        .map(|p| {
                            let (off, r, cl, rs, cs) = view(p);
                            PackedB::new(MatRef::new(&h, off, r, cl, rs, cs))
                        })
                        .collect::<Result<Vec<_>>>()?,
                )
            }
        };
        Ok(WinogradWeights { c, o, params, u })
    }

    /// The element type the point GEMMs multiply in.
    pub(crate) fn operands(&self) -> Operands {
        match self.u {
            Filters::F32(_) => Operands::F32,
            Filters::Bf16(_) => Operands::Bf16,
        }
    }
}

thread_local! {
    /// One tile row's f32 transform on its way to bf16 (per thread, reused across calls).
    static F32_ROW: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The input geometry the transforms need.
#[derive(Clone, Copy)]
pub(super) struct Input {
    /// Element index of `x[0, 0, 0, 0]` and the N, H, W strides (C has stride 1).
    pub base: usize,
    pub sn: usize,
    pub sh: usize,
    pub sw: usize,
    pub tiles_y: usize,
    pub tiles_x: usize,
}

/// Transforms tile row `row` (image `row / tiles_y`) into `v`: per tile, 16 runs of `c` floats.
#[inline(always)]
fn transform_row_body<S: ToF32, const AVX2: bool>(
    data: &[S],
    inp: &Input,
    g: &ConvGeom,
    row: usize,
    v: &mut [f32],
) {
    let c = g.c;
    let (b, ty) = (row / inp.tiles_y, row % inp.tiles_y);
    let (ph, pw) = g.p.padding;
    for (tx, vt) in v.chunks_exact_mut(POINTS * c).enumerate() {
        // The 16 input pixels' first elements, or None outside the image.
        let starts: [Option<usize>; 16] = std::array::from_fn(|k| {
            let iy = (2 * ty + k / 4).wrapping_sub(ph);
            let ix = (2 * tx + k % 4).wrapping_sub(pw);
            (iy < g.h && ix < g.w).then(|| inp.base + b * inp.sn + iy * inp.sh + ix * inp.sw)
        });
        let mut c0 = 0;
        #[cfg(target_arch = "x86_64")]
        if AVX2 {
            // SAFETY: `AVX2` is true only in `transform_row_avx2`, which runs where the
            // hardware has AVX2, FMA and F16C.
            while c0 + L <= c && unsafe { input_tile8(data, &starts, c0, c, vt) } {
                c0 += L;
            }
        }
        while c0 < c {
            let n = L.min(c - c0);
            let mut d = [[0f32; L]; 16];
            for (dk, start) in d.iter_mut().zip(&starts) {
                if let Some(s) = start {
                    let run = &data[s + c0..s + c0 + n];
                    if let Ok(full) = <&[S; L]>::try_from(run) {
                        *dk = full.map(S::to_f32);
                    } else {
                        for (x, src) in dk.iter_mut().zip(run) {
                            *x = src.to_f32();
                        }
                    }
                }
            }
            let t = input_transform(&d);
            for (k, tk) in t.iter().enumerate() {
                let dst = &mut vt[k * c + c0..k * c + c0 + n];
                if let Ok(full) = <&mut [f32; L]>::try_from(&mut *dst) {
                    *full = *tk;
                } else {
                    dst.copy_from_slice(&tk[..n]);
                }
            }
            c0 += n;
        }
    }
}

/// [`transform_row_body`] built for AVX2 (8-lane vectors, F16C conversions). Named wrappers
/// rather than one closure-taking trampoline: a closure passed to a `#[target_feature]`
/// function is not reliably inlined into it (the output transform's was not, and ran without
/// AVX2), while these bodies are `#[inline(always)]` into the wrappers.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn transform_row_avx2<S: ToF32>(
    data: &[S],
    inp: &Input,
    g: &ConvGeom,
    row: usize,
    v: &mut [f32],
) {
    transform_row_body::<S, true>(data, inp, g, row, v)
}

fn transform_row<S: ToF32>(
    avx2: bool,
    data: &[S],
    inp: &Input,
    g: &ConvGeom,
    row: usize,
    v: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` is set only when the kernels' level is AVX2 or above, which the
        // hardware check guarantees has AVX2, FMA and F16C.
        return unsafe { transform_row_avx2(data, inp, g, row, v) };
    }
    let _ = avx2;
    transform_row_body::<S, false>(data, inp, g, row, v)
}

/// `act(conv(x, w) + bias) + residual` into the f32 NHWC rows `out` (`N·Ho·Wo × O`), for the
/// input view `xl` (channel stride 1, checked against `data` by the caller).
pub(crate) fn conv_winograd<S: ToF32>(
    path: GemmPath,
    data: &[S],
    xl: &Layout,
    w: &WinogradWeights,
    g: &ConvGeom,
    ep: &ConvEpilogue,
    out: &mut [f32],
) -> Result<()> {
    run_blocked(path, (data, xl), w, g, ep, out, block_floats(g.c, g.o))
}

/// [`conv_winograd`] with blocks of about `block_floats` transformed values (tests use small
/// blocks to cross block boundaries on small inputs).
pub(super) fn run_blocked<S: ToF32>(
    path: GemmPath,
    (data, xl): (&[S], &Layout),
    w: &WinogradWeights,
    g: &ConvGeom,
    ep: &ConvEpilogue,
    out: &mut [f32],
    block_floats: usize,
) -> Result<()> {
    let op = "conv2d";
    if (g.c, g.o, g.kh, g.kw) != (w.c, w.o, 3, 3) || g.p != w.params || out.len() != g.m() * g.o {
        return Err(Error::invalid(
            op,
            "Winograd weights or output rows used for a convolution of another shape",
        ));
    }
    if out.is_empty() {
        return Ok(());
    }
    if let Some(r) = &ep.residual {
        match ep.residual_image_stride {
            Some(st) => {
                for b in 0..g.n {
                    r.shifted(b * st, g.ho * g.wo, g.o).validate(op)?;
                }
            }
            None => r.validate(op)?,
        }
    }
    let s = xl.strides();
    let inp = Input {
        base: xl.offset(),
        sn: s[0],
        sh: s[2],
        sw: s[3],
        tiles_y: g.ho.div_ceil(2),
        tiles_x: g.wo.div_ceil(2),
    };
    let (c, o) = (g.c, g.o);
    let tile_rows = g.n * inp.tiles_y;
    let row_floats = inp.tiles_x * POINTS * (c + o);
    let rows_per_block = (block_floats / row_floats).clamp(1, tile_rows);
    let kernels = Kernels::current();
    let avx2 = kernels.level() != crate::cpu::simd::SimdLevel::Fallback;
    let row_in = inp.tiles_x * POINTS * c;
    let bf16_ops = w.operands() == Operands::Bf16;
    let mut v = crate::cpu::pool::take::<f32>(if bf16_ops { 0 } else { rows_per_block * row_in });
    let mut vh = crate::cpu::pool::take::<bf16>(if bf16_ops { rows_per_block * row_in } else { 0 });
    let mut m = crate::cpu::pool::take::<f32>(rows_per_block * inp.tiles_x * POINTS * o);
    // Output rows of tile row r start at `row_start(r)`.
    let row_start = |r: usize| {
        let (b, ty) = (r / inp.tiles_y, r % inp.tiles_y);
        (b * g.ho + (2 * ty).min(g.ho)) * g.wo * o
    };
    let mut r0 = 0;
    while r0 < tile_rows {
        let r1 = (r0 + rows_per_block).min(tile_rows);
        let tiles = (r1 - r0) * inp.tiles_x;
        let m = &mut m[..tiles * POINTS * o];
        let a_view = |point| (point * c, tiles, c, POINTS * c, 1);
        match &w.u {
            Filters::F32(u) => {
                let v = &mut v[..tiles * POINTS * c];
                v.par_chunks_mut(row_in)
                    .enumerate()
                    .for_each(|(i, vr)| transform_row(avx2, data, &inp, g, r0 + i, vr));
                for (point, u) in u.iter().enumerate() {
                    let (off, rows, cols, rs, cs) = a_view(point);
                    let a = MatRef::new(&*v, off, rows, cols, rs, cs);
                    let c_out = &mut m[point * o..];
                    gemm::gemm_prepacked_on(path, a, u, c_out, POINTS * o, &Epilogue::new())?;
                }
            }
            Filters::Bf16(u) => {
                // Each tile row is transformed in f32 (exact: additions of at most four
                // inputs) into a per-thread row that stays in cache, then rounded once.
                let vh = &mut vh[..tiles * POINTS * c];
                vh.par_chunks_mut(row_in).enumerate().for_each(|(i, vr)| {
                    F32_ROW.with(|cell| {
                        let mut fresh = Vec::new();
                        let mut kept = cell.try_borrow_mut();
                        let row = match kept.as_deref_mut() {
                            Ok(row) => row,
                            Err(_) => &mut fresh,
                        };
                        row.resize(row_in, 0.0);
                        transform_row(avx2, data, &inp, g, r0 + i, row);
                        kernels.f32_to_bf16(row, vr);
                    })
                });
                for (point, u) in u.iter().enumerate() {
                    let (off, rows, cols, rs, cs) = a_view(point);
                    let a = MatRef::new(&*vh, off, rows, cols, rs, cs);
                    let c_out = &mut m[point * o..];
                    gemm::gemm_prepacked_on(path, a, u, c_out, POINTS * o, &Epilogue::new())?;
                }
            }
        }
        // Split this block's output into its tile rows' runs.
        let mut parts = Vec::with_capacity(r1 - r0);
        let mut rest = &mut out[row_start(r0)..row_start(r1 - 1) + rows_len(g, &inp, r1 - 1)];
        for r in r0..r1 {
            let (head, tail) = rest.split_at_mut(rows_len(g, &inp, r));
            parts.push(head);
            rest = tail;
        }
        let m = &*m;
        parts.into_par_iter().enumerate().for_each(|(i, part)| {
            let mr = &m[i * inp.tiles_x * POINTS * o..(i + 1) * inp.tiles_x * POINTS * o];
            finish_row(avx2, mr, g, &inp, r0 + i, ep, kernels, part);
        });
        r0 = r1;
    }
    crate::cpu::pool::give(v);
    crate::cpu::pool::give(vh);
    crate::cpu::pool::give(m);
    Ok(())
}

/// Output floats of tile row `r`: its one or two output rows.
fn rows_len(g: &ConvGeom, inp: &Input, r: usize) -> usize {
    let ty = r % inp.tiles_y;
    (g.ho - 2 * ty).min(2) * g.wo * g.o
}
