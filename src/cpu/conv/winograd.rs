//! Winograd F(2×2, 3×3) and F(4×4, 3×3) convolutions for 3×3, stride-1, undilated,
//! ungrouped layers on channels-last data.
//!
//! Why: a 3×3 convolution computed as an implicit GEMM costs `9·C·O` multiply-adds per output
//! pixel; Winograd's minimal filtering computes each `m×m` output tile from an `(m+2)×(m+2)`
//! input tile with `(m+2)²·C·O`: F(2,3) (m = 2, 16 points) needs `4·C·O` per pixel (2.25×
//! fewer), F(4,3) (m = 4, 36 points) `2.25·C·O` (4× fewer). The work becomes one independent
//! plain GEMM per point of the transformed tile, on the engine's own microkernels, plus two
//! cheap linear transforms. SD's UNet spends most of its time in such convolutions, so this
//! is where a CPU step gains most.
//!
//! Which variant ([`choose_tile`]): F(4,3) for f32 operands of layers below 1280·1280 channel
//! pairs — on Zen 4 it took SD's 2×320×64×64 layer from 42 to 28–34 ms and 2×640×32×32 from
//! 40–43 to 24 ms, and the f32 SD 1.5 step from about 7.0 to 6.3 s. F(2,3) for the widest
//! layers (F(4,3)'s filters take `36·C·O` values, 4× the weights: everywhere, it took SD 1.5's
//! f32 peak memory from 7.4 to 10.4 GB, for little gain at the 16×16 and 8×8 sizes those
//! layers run at), for bf16 operands (F(4,3)'s coefficients — up to 8 in the output map,
//! sixths in the filter map — turned the two bf16 roundings into 5% errors), and for
//! weights transformed for a single call (the cheaper filter transform). F(4,3)'s own f32
//! rounding stays far inside the f32 tolerances (the tests hold it to the direct loops within
//! 1e-4, as F(2,3)); F(6,3) and larger were not tried: their coefficients grow quickly.
//!
//! With `d` an input tile, `g` the 3×3 filter and `Y` the output tile:
//! `Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`, where the elementwise product is summed over input
//! channels — a `[tiles, C] @ [C, O]` product for each point.
//!
//! Invariants:
//! - The filter transform `U = G g Gᵀ` is made once per layer in f64 and rounded to f32;
//!   F(2,3)'s input and output transforms use only additions (its results stay within a few
//!   f32 ulps of the direct convolution), F(4,3)'s also products by 2, 4, 5 and 8, in a fixed
//!   order, whose growth costs some of f32's digits; both are tested against a direct f64
//!   reference within 1e-4 relative (and against the implicit GEMM through the public API).
//! - Tile `(ty, tx)` of image `b` reads input pixels `(m·ty − ph + i, m·tx − pw + j)`,
//!   `i, j < m + 2` (zeros outside the image), and writes the output pixels
//!   `(m·ty + i, m·tx + j)`, `i, j < m`, that exist: any input size and any padding are exact.
//! - Tiles run in blocks of whole tile rows, so each block's output is one contiguous run of
//!   NHWC rows and its transformed data (`points · tiles · (C + O)` floats) stays near the
//!   cache. A block is three parallel regions: its tile rows' input transforms, its points'
//!   products (one region; each product on one thread, see `point_products`) into point-major
//!   runs, and its tile rows' output transforms. Blocks take a multiple of the thread count
//!   of tile rows where they can, so the transforms split evenly.
//! - bf16 layers where the bf16 GEMM method is `vdpbf16ps` ([`Operands::Bf16`]) take F(2,3),
//!   round `U` and the f32 input transform to bf16 once each and run the 16 GEMMs on the bf16
//!   kernels (f32 accumulation, twice the f32 FMA rate on CPUs with full-rate `vdpbf16ps`,
//!   such as AMD Zen 4; half the filter memory). That adds two bf16 roundings (relative 2⁻⁹)
//!   to operands that were bf16 already, so the error stays of the order of a bf16
//!   convolution's own (tested against the direct loops with a bf16 tolerance); f32 and f16
//!   layers never take this path.
//! - The epilogue is the implicit GEMM's: `act(conv + bias) + residual` in f32, per output row.

use super::winograd_in::transform_row;
pub(super) use super::winograd_in::Input;
pub(crate) use super::winograd_math::Tile;
use super::winograd_math::{transform_filters, RowMajorSink};
use super::winograd_out::{finish_row, BlockProducts};
use super::winograd_pack::{transform_packed_bf16, transform_packed_f32};
use super::ConvEpilogue;
use crate::cpu::gemm::{
    self, bf16_method, Bf16Method, Epilogue, GemmPath, MatRef, Out16, PackedB, SrcKind, ToF32,
};
use crate::cpu::simd::Kernels;
use crate::desc::ConvGeom;
use crate::layout::Layout;
use crate::{Conv2dParams, DType, Error, Result};
use half::bf16;
use rayon::prelude::*;

/// Target size of one block's transformed input and output (floats), raised for layers whose
/// transformed filters are larger (see [`block_floats`]).
const BLOCK_FLOATS: usize = 1 << 21;

/// Block size for `c → o` channels: every block streams all 16 filter matrices (`16·C·O`
/// floats) through the GEMMs once, so blocks hold at least half that much transformed data —
/// the filter re-reads then cost at most twice the transformed data's own traffic (for SD's
/// 1280-channel layers at 16×16 that means one block instead of three passes over 105 MB).
fn block_floats(tile: Tile, c: usize, o: usize) -> usize {
    BLOCK_FLOATS.max(tile.points() * c * o / 2)
}

/// True when a layer of weight shape `[O, C, kh, kw]` and `params` can run as Winograd (either
/// variant) and is large enough to gain from it (the transforms cost a few adds per point and
/// channel, against `C·O` multiply-adds per point).
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
/// Winograd only from this many output pixels (`N·Ho·Wo`) on: the filter transform costs
/// about `16·C·O` values, repaid by `5·C·O` fewer multiply-adds per pixel. With f32 operands
/// the transform is written straight into the packed layout (see `winograd_pack`) and pays
/// off from 256 px; bf16 operands go through an f32 intermediate, rounding and the pair
/// packer, against an implicit GEMM at twice the f32 rate, and wait for 1024 px. Throwaway
/// per-call loops on Zen 4 (channels-last, best of 6–8, implicit GEMM → F(2,3)): f32 at 512 px
/// 320 ch 5.4 → 4.0 ms, 448 ch 10.4 → 7.7, 640 ch 21.9 → 15.2, 1280 ch 85 → 59; at 256 px
/// 320 ch 3.1 → 3.1, 640 ch 12.8 → 12.0, 1280 ch 48.8 → 44.5; but 144 px 640 ch 8.1 → 9.0 and
/// 128 px 1280 ch 30.6 → 33.2; bf16 at 512 px 640 ch 11.1 → 14.1, 1280 ch 44.7 → 100.8.
pub(crate) fn per_call_min_pixels(dtype: DType) -> usize {
    let bf16_operands = dtype == DType::BF16 && Operands::for_source::<bf16>() == Operands::Bf16;
    if bf16_operands {
        1024
    } else {
        256
    }
}

/// Whether a per-call convolution over `pixels` output pixels and `c → o` channels takes the
/// variant a layer would ([`choose_tile`]: F(4,3) below the widest layers) instead of F(2,3):
/// from 4096 px on, or from 1024 px with at least 448·448 channel pairs, its 36-point
/// transforms cost less than the multiply-adds they save. Throwaway per-call loops on Zen 4
/// (f32, channels-last, best of 5–6, F(2,3) → F(4,3), with the vectorised filter transform; the
/// machine was noisy): 640 ch at 2048 px 57–60 → 40–41 ms, at 1024
/// px 33–35 → 31–32, 2×640×24×24 36.9 → 32.3, 2×448×24×24 22 → 12–19, 2×512×32×32 31–38 →
/// 25–27; but 320 ch at 2048 px 16–17 → 18–19 (at 3200 px 24.5–27.7 → 23.8–24.2), and at 512
/// px 640 ch 19.7 → 22.2, 960 ch 33–37 → 41–48.
pub(crate) fn per_call_layer_tile(pixels: usize, c: usize, o: usize) -> bool {
    pixels >= 4096 || (pixels >= 1024 && c.saturating_mul(o) >= 448 * 448)
}

/// Layers with `C·O` below this take F(4,3) by default (see [`choose_tile`]): its transformed
/// filters take `36·C·O` values (4× the weights) against F(2,3)'s `16·C·O`, so the widest
/// layers, whose filters dominate a model's memory, keep F(2,3). In SD 1.5 that keeps the
/// 1280-channel layers on F(2,3) (F(4,3) everywhere took the f32 step's peak memory from 7.4
/// to 10.4 GB), and they gain least from F(4,3) anyway: they run at 16×16 and 8×8, where a
/// call has few tiles (measured on Zen 4: 2×1280×16×16 38 → 32–37 ms, against 42 → 28–34 ms
/// for 2×320×64×64 and 40–43 → 24 ms for 2×640×32×32).
const F4_CO_LIMIT: usize = 1280 * 1280;

/// Whether F(4,3) may serve a `c → o` layer whose point GEMMs multiply `operands`: f32
/// operands only (F(4,3)'s larger transform coefficients turn bf16 operands' two extra
/// roundings into errors of several percent, see the tests), and layers below
/// [`F4_CO_LIMIT`] (its filters take 4× the weights' memory).
pub(crate) fn f4_allowed(c: usize, o: usize, operands: Operands) -> bool {
    operands == Operands::F32 && c.saturating_mul(o) < F4_CO_LIMIT
}

/// The static rule's Winograd variant for a layer: F(4,3) wherever [`f4_allowed`], else
/// F(2,3).
pub(crate) fn choose_tile(c: usize, o: usize, operands: Operands) -> Tile {
    if f4_allowed(c, o, operands) {
        Tile::F4
    } else {
        Tile::F2
    }
}

/// The element type the point GEMMs multiply in.
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

/// Input channels whose filters one task of the filter transform takes.
pub(super) const CI_BLOCK: usize = 16;

/// The transformed filter matrices (one per point) (`C × O` each), packed for the GEMM engine.
enum Filters {
    F32(Vec<PackedB<f32>>),
    Bf16(Vec<PackedB<bf16>>),
}

/// A 3×3 filter bank transformed for Winograd F(2,3) or F(4,3): for each point of the tile,
/// the `C × O` matrix `U[point][c][o]`, packed for the GEMM engine.
pub(crate) struct WinogradWeights {
    pub c: usize,
    pub o: usize,
    /// Padding the layer was built for (the transform does not depend on it; kept so a call
    /// with other parameters is refused rather than computed wrongly).
    pub params: Conv2dParams,
    /// The variant the filters were transformed for.
    pub tile: Tile,
    u: Filters,
}

impl WinogradWeights {
    /// Transforms an `[O, C, 3, 3]` row-major filter bank (any float source widened to f64)
    /// for `tile` and GEMMs on `operands`.
    pub(crate) fn new<S: ToF32>(
        w: &[S],
        (o, c): (usize, usize),
        params: Conv2dParams,
        operands: Operands,
        tile: Tile,
    ) -> Result<Self> {
        let points = tile.points();
        if operands == Operands::Bf16 && tile != Tile::F2 {
            return Err(Error::invalid(
                "conv2d prepack",
                "Winograd F(4,3) with bf16 operands (too inexact; F(2,3) serves bf16)",
            ));
        }
        if w.len() != o * c * 9 {
            return Err(Error::invalid(
                "conv2d prepack",
                format!("a [{o}, {c}, 3, 3] weight, got {} values", w.len()),
            ));
        }
        let level = Kernels::current().level();
        let u = match operands {
            Operands::F32 => Filters::F32(transform_packed_f32(w, (o, c), tile, level)?),
            Operands::Bf16 => {
                if let Some(packed) = transform_packed_bf16(w, (o, c), tile, level)? {
                    return Ok(WinogradWeights {
                        c,
                        o,
                        params,
                        tile,
                        u: Filters::Bf16(packed),
                    });
                }
                // Another bf16 layout: `u[ci][point][oi]`, tasks over blocks of CI_BLOCK input
                // channels; rounded to bf16 (nearest even) once, from the f64 transform's f32
                // values, then packed by the packer.
                const OP: &str = "conv2d prepack";
                let mut u = crate::cpu::alloc::zeroed::<f32>(OP, points * c * o)?;
                u.par_chunks_mut(points * o * CI_BLOCK)
                    .enumerate()
                    .for_each(|(cb, ucb)| {
                        let cis = cb * CI_BLOCK..((cb + 1) * CI_BLOCK).min(c);
                        let mut sink = RowMajorSink::new(ucb, cis.start, points, o);
                        transform_filters(level, w, tile, (c, o), cis, &mut sink)
                    });
                let mut h = crate::cpu::alloc::zeroed::<bf16>(OP, u.len())?;
                Kernels::current().f32_to_bf16(&u, &mut h);
                drop(u);
                let view = |point: usize| (point * o, c, o, points * o, 1);
                Filters::Bf16(
                    (0..points)
                        .map(|p| {
                            let (off, r, cl, rs, cs) = view(p);
                            PackedB::new(MatRef::new(&h, off, r, cl, rs, cs))
                        })
                        .collect::<Result<Vec<_>>>()?,
                )
            }
        };
        Ok(WinogradWeights {
            c,
            o,
            params,
            tile,
            u,
        })
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

/// `act(conv(x, w) + bias) + residual` into the f32 NHWC rows `out` (`N·Ho·Wo × O`), for the
/// input view `xl` (channel stride 1, checked against `data` by the caller). With `out16` the
/// final values are also rounded into those 16-bit rows, each tile row by the thread that
/// finished it while its values are in cache (`out` is then scratch).
pub(crate) fn conv_winograd<S: ToF32>(
    path: GemmPath,
    data: &[S],
    xl: &Layout,
    w: &WinogradWeights,
    g: &ConvGeom,
    ep: &ConvEpilogue,
    (out, out16): (&mut [f32], Option<Out16>),
) -> Result<()> {
    let block = block_floats(w.tile, g.c, g.o);
    run_blocked_into(path, (data, xl), w, g, ep, (out, out16), block)
}

/// [`conv_winograd`] into f32 rows with blocks of about `block_floats` transformed values
/// (tests use small blocks to cross block boundaries on small inputs).
#[cfg(test)]
pub(super) fn run_blocked<S: ToF32>(
    path: GemmPath,
    (data, xl): (&[S], &Layout),
    w: &WinogradWeights,
    g: &ConvGeom,
    ep: &ConvEpilogue,
    out: &mut [f32],
    block_floats: usize,
) -> Result<()> {
    run_blocked_into(path, (data, xl), w, g, ep, (out, None), block_floats)
}

/// [`conv_winograd`] with blocks of about `block_floats` transformed values.
fn run_blocked_into<S: ToF32>(
    path: GemmPath,
    (data, xl): (&[S], &Layout),
    w: &WinogradWeights,
    g: &ConvGeom,
    ep: &ConvEpilogue,
    (out, out16): (&mut [f32], Option<Out16>),
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
    let (tile, t) = (w.tile, w.tile.out());
    let points = tile.points();
    let inp = Input {
        base: xl.offset(),
        sn: s[0],
        sh: s[2],
        sw: s[3],
        tiles_y: g.ho.div_ceil(t),
        tiles_x: g.wo.div_ceil(t),
    };
    let (c, o) = (g.c, g.o);
    let tile_rows = g.n * inp.tiles_y;
    let row_floats = inp.tiles_x * points * (c + o);
    let rows_per_block = balanced_rows(
        (block_floats / row_floats).clamp(1, tile_rows),
        tile_rows,
        rayon::current_num_threads(),
    );
    let kernels = Kernels::current();
    let avx2 = kernels.level() != crate::cpu::simd::SimdLevel::Fallback;
    let row_in = inp.tiles_x * points * c;
    let bf16_ops = w.operands() == Operands::Bf16;
    let take32 = |n| crate::cpu::pool::take::<f32>(op, n);
    let mut v = take32(if bf16_ops { 0 } else { rows_per_block * row_in })?;
    let mut vh =
        crate::cpu::pool::take::<bf16>(op, if bf16_ops { rows_per_block * row_in } else { 0 })?;
    let mut m = take32(rows_per_block * inp.tiles_x * points * o)?;
    // Output rows of tile row r start at `row_start(r)`.
    let row_start = |r: usize| {
        let (b, ty) = (r / inp.tiles_y, r % inp.tiles_y);
        (b * g.ho + (t * ty).min(g.ho)) * g.wo * o
    };
    let mut r0 = 0;
    while r0 < tile_rows {
        let r1 = (r0 + rows_per_block).min(tile_rows);
        let tiles = (r1 - r0) * inp.tiles_x;
        // Point-major: point k's `tiles × o` product is the k-th run of `tiles · o` floats.
        let m = &mut m[..tiles * points * o];
        let a_view = |point| (point * c, tiles, c, points * c, 1);
        match &w.u {
            Filters::F32(u) => {
                let v = &mut v[..tiles * points * c];
                v.par_chunks_mut(row_in)
                    .enumerate()
                    .for_each(|(i, vr)| transform_row((avx2, tile), data, &inp, g, r0 + i, vr));
                let v = &*v;
                point_products(m, tiles * o, u, |point, u, mk| {
                    let (off, rows, cols, rs, cs) = a_view(point);
                    let a = MatRef::new(v, off, rows, cols, rs, cs);
                    gemm::gemm_prepacked_on(path, a, u, mk, o, &Epilogue::new())
                })?;
            }
            Filters::Bf16(u) => {
                // Each tile row is transformed in f32 (exact: additions of at most four
                // inputs) into a per-thread row that stays in cache, then rounded once.
                let vh = &mut vh[..tiles * points * c];
                vh.par_chunks_mut(row_in)
                    .enumerate()
                    .try_for_each(|(i, vr)| -> Result<()> {
                        F32_ROW.with(|cell| {
                            let mut fresh = Vec::new();
                            let mut kept = cell.try_borrow_mut();
                            let row = match kept.as_deref_mut() {
                                Ok(row) => row,
                                Err(_) => &mut fresh,
                            };
                            crate::cpu::alloc::resize(op, row, row_in, 0.0)?;
                            transform_row((avx2, tile), data, &inp, g, r0 + i, row);
                            kernels.f32_to_bf16(row, vr);
                            Ok(())
                        })
                    })?;
                let vh = &*vh;
                point_products(m, tiles * o, u, |point, u, mk| {
                    let (off, rows, cols, rs, cs) = a_view(point);
                    let a = MatRef::new(vh, off, rows, cols, rs, cs);
                    gemm::gemm_prepacked_on(path, a, u, mk, o, &Epilogue::new())
                })?;
            }
        }
        // Split this block's output into its tile rows' runs.
        let mut parts = crate::cpu::alloc::with_capacity(op, r1 - r0)?;
        let mut rest = &mut out[row_start(r0)..row_start(r1 - 1) + rows_len(g, &inp, t, r1 - 1)];
        for r in r0..r1 {
            let (head, tail) = rest.split_at_mut(rows_len(g, &inp, t, r));
            parts.push(head);
            rest = tail;
        }
        let m = &*m;
        parts.into_par_iter().enumerate().try_for_each(
            |(i, part): (usize, &mut [f32])| -> Result<()> {
                let first_tile = i * inp.tiles_x;
                let mr = BlockProducts {
                    m,
                    tiles,
                    o,
                    first_tile,
                };
                finish_row((avx2, tile), &mr, g, &inp, r0 + i, ep, kernels, part)?;
                if let Some(o16) = out16 {
                    o16.offset(row_start(r0 + i)).store_rows(part, o);
                }
                Ok(())
            },
        )?;
        r0 = r1;
    }
    crate::cpu::pool::give(v);
    crate::cpu::pool::give(vh);
    crate::cpu::pool::give(m);
    Ok(())
}

/// Runs `product(point, filters, out)` for every point in one parallel region, each product on
/// its thread ([`gemm::sequential`]): `m` is split into the points' runs of `run` floats. One
/// region per block instead of one per point: with a region per point, SD's 2×320×64×64 layer
/// (36 products of 80 × 320 × 320 per block) ran at 1.3× its one-thread speed on 2 threads.
fn point_products<U: Sync>(
    m: &mut [f32],
    run: usize,
    filters: &[U],
    product: impl Fn(usize, &U, &mut [f32]) -> Result<()> + Sync,
) -> Result<()> {
    m.par_chunks_mut(run.max(1))
        .zip(filters.par_iter())
        .enumerate()
        .try_for_each(|(point, (mk, u))| gemm::sequential(|| product(point, u, mk)))
}

/// Tile rows per block: `rows` (the cache-sized count) rounded down to a multiple of
/// `threads` where that leaves at least `threads` rows, so the parallel transforms of every
/// block but the last split evenly; never more than `tile_rows`.
pub(super) fn balanced_rows(rows: usize, tile_rows: usize, threads: usize) -> usize {
    let threads = threads.max(1);
    let rows = rows.clamp(1, tile_rows.max(1));
    if rows >= threads {
        rows / threads * threads
    } else {
        rows
    }
}

/// Output floats of tile row `r` (output tiles of side `t`): its output rows (at most `t`).
fn rows_len(g: &ConvGeom, inp: &Input, t: usize, r: usize) -> usize {
    let ty = r % inp.tiles_y;
    (g.ho - t * ty).min(t) * g.wo * g.o
}
