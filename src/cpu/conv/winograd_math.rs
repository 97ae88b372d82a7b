//! The linear maps of Winograd F(2×2, 3×3) and F(4×4, 3×3) (Lavin & Gray's matrices), see
//! [`super::winograd`].
//!
//! Invariants: F(2,3)'s input and output maps only add and subtract (exact up to the rounding
//! of each addition, in a fixed order); F(4,3)'s also multiply by 2, 4, 5 and 8 (products by
//! powers of two are exact), again in a fixed order that the AVX2 versions
//! ([`super::winograd_avx2`]) repeat operation for operation, so both give the same bits. The
//! filter maps run in f64, 16 filters at a time, compiled for the widest vectors the CPU has.
//! Inner vectors are `L` channels wide so the compiler keeps them in 8-lane registers.

use crate::cpu::gemm::ToF32;
use crate::cpu::simd::SimdLevel;
use std::ops::Range;

/// A Winograd variant: the side of the output tile each transformed tile yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tile {
    /// F(2×2, 3×3): 4×4 input tiles, 16 points, `4·C·O` multiply-adds per output pixel.
    F2,
    /// F(4×4, 3×3): 6×6 input tiles, 36 points, `2.25·C·O` multiply-adds per output pixel.
    F4,
}

impl Tile {
    /// Output pixels per tile side (2 or 4).
    pub(crate) const fn out(self) -> usize {
        match self {
            Tile::F2 => 2,
            Tile::F4 => 4,
        }
    }

    /// Input pixels per tile side: `out + 2`.
    pub(crate) const fn side(self) -> usize {
        self.out() + 2
    }

    /// Points of the transformed tile (`side²`), i.e. the number of point GEMMs.
    pub(crate) const fn points(self) -> usize {
        self.side() * self.side()
    }
}

/// The most points of any tile (F(4,3)'s 36): the size of the per-tile scratch arrays.
pub(super) const MAX_POINTS: usize = 36;

/// F(2,3)'s `G` (4×3).
const G2: [[f64; 3]; 4] = [
    [1.0, 0.0, 0.0],
    [0.5, 0.5, 0.5],
    [0.5, -0.5, 0.5],
    [0.0, 0.0, 1.0],
];

/// F(4,3)'s `G` (6×3), for the points 0, 1, −1, 2, −2 and ∞.
const G4: [[f64; 3]; 6] = [
    [1.0 / 4.0, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];

/// Filters transformed together by [`filter_transform`]: one per lane.
pub(super) const FILTER_LANES: usize = 16;

/// `G g Gᵀ` of [`FILTER_LANES`] 3×3 filters at once (`g[i][lane]`: value `i` of the row-major
/// filter of each lane), in f64, handed to `sink(point, values per lane)` for each of the
/// `tile.points()` points (row-major `side × side`). Each lane's arithmetic is the scalar
/// formula's, in the same order (no contraction into FMAs), so the values do not depend on
/// the lane count; the lanes let the compiler vectorise it (a scalar transform per filter was
/// a fifth of a per-call 1280-channel Winograd convolution).
#[inline(always)]
fn filter_transform(
    tile: Tile,
    g: &[[f64; FILTER_LANES]; 9],
    sink: impl FnMut(usize, &[f64; FILTER_LANES]),
) {
    match tile {
        Tile::F2 => filter_transform_with(&G2, g, sink),
        Tile::F4 => filter_transform_with(&G4, g, sink),
    }
}

/// [`filter_transform`] for an `A × 3` matrix `G` (a constant size, so the loops unroll).
#[inline(always)]
fn filter_transform_with<const A: usize>(
    gm: &[[f64; 3]; A],
    g: &[[f64; FILTER_LANES]; 9],
    mut sink: impl FnMut(usize, &[f64; FILTER_LANES]),
) {
    // G g: A × 3.
    let mut gg = [[[0f64; FILTER_LANES]; 3]; A];
    for (row, gi) in gg.iter_mut().zip(gm) {
        for (j, v) in row.iter_mut().enumerate() {
            for l in 0..FILTER_LANES {
                v[l] = gi[0] * g[j][l] + gi[1] * g[3 + j][l] + gi[2] * g[6 + j][l];
            }
        }
    }
    for (i, row) in gg.iter().enumerate() {
        for (j, gj) in gm.iter().enumerate() {
            let point: [f64; FILTER_LANES] =
                std::array::from_fn(|l| row[0][l] * gj[0] + row[1][l] * gj[1] + row[2][l] * gj[2]);
            sink(i * A + j, &point);
        }
    }
}

/// Transforms the filters of input channels `cis` of an `[O, C, 3, 3]` bank `w`, in f64,
/// handing each point's values for 16 output channels to `sink` (channels
/// `o0..min(o0 + 16, O)`, `o0` a multiple of 16), compiled for the widest vectors
/// `level` allows (the lanes of [`filter_transform`] are f64: 8 per AVX-512 vector, 2 in the
/// baseline SSE2 build, where the transform took 20 ms of a 1280-channel bank). The values
/// are the same at every level (no FMA contraction). Output channels outermost: the filters
/// of `cis` lie together in each output channel's row of `9·C` weights, so every line read is
/// used whole (one input channel at a time read 36 bytes per line, lines 46 KB apart).
pub(super) fn transform_filters<S: ToF32, K: FilterSink>(
    level: SimdLevel,
    w: &[S],
    tile: Tile,
    co: (usize, usize),
    cis: Range<usize>,
    sink: &mut K,
) {
    #[cfg(target_arch = "x86_64")]
    match level {
        // SAFETY: the level is only Avx512 / Avx2 where those features were detected.
        SimdLevel::Avx512 => return unsafe { transform_filters_avx512(w, tile, co, cis, sink) },
        SimdLevel::Avx2 => return unsafe { transform_filters_avx2(w, tile, co, cis, sink) },
        SimdLevel::Fallback => {}
    }
    let _ = level;
    transform_filters_body(w, tile, co, cis, sink)
}

/// Where [`transform_filters`] puts its values. The methods are inlined into the transform's
/// loop (a closure sink could stay out of line, compiled for the baseline instruction set,
/// with its index arithmetic redone for every point).
pub(super) trait FilterSink {
    /// The values that follow are input channel `ci`'s, for output channels `o0..o0 + 16`
    /// (those below O); called in ascending `ci` within each `o0`.
    fn start(&mut self, ci: usize, o0: usize);
    /// Point `point`'s values for the output channels of the last [`FilterSink::start`].
    fn put(&mut self, point: usize, v: &[f64; FILTER_LANES]);
}

/// A sink into `u[ci - ci0][point][oi]` (row-major `C × O` point matrices interleaved by row,
/// rounded to f32).
pub(super) struct RowMajorSink<'a> {
    /// The rows of input channels `ci0..`.
    pub u: &'a mut [f32],
    pub ci0: usize,
    pub points: usize,
    pub o: usize,
    row: usize,
    o0: usize,
}

impl<'a> RowMajorSink<'a> {
    /// A sink over the rows of input channels `ci0..` in `u`.
    pub(super) fn new(u: &'a mut [f32], ci0: usize, points: usize, o: usize) -> Self {
        RowMajorSink {
            u,
            ci0,
            points,
            o,
            row: 0,
            o0: 0,
        }
    }
}

impl FilterSink for RowMajorSink<'_> {
    #[inline(always)]
    fn start(&mut self, ci: usize, o0: usize) {
        self.row = (ci - self.ci0) * self.points * self.o;
        self.o0 = o0;
    }
    #[inline(always)]
    fn put(&mut self, point: usize, v: &[f64; FILTER_LANES]) {
        let at = self.row + point * self.o;
        for (d, &x) in self.u[at + self.o0..at + self.o].iter_mut().zip(v) {
            *d = x as f32;
        }
    }
}

/// [`transform_filters_body`] compiled for a target feature set (the caller checks it).
macro_rules! transform_filters_for {
    ($name:ident, $features:literal) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $name<S: ToF32, K: FilterSink>(
            w: &[S],
            tile: Tile,
            co: (usize, usize),
            cis: Range<usize>,
            sink: &mut K,
        ) {
            transform_filters_body(w, tile, co, cis, sink)
        }
    };
}

transform_filters_for!(transform_filters_avx512, "avx512f");
transform_filters_for!(transform_filters_avx2, "avx2");

/// The loop of [`transform_filters`].
#[inline(always)]
fn transform_filters_body<S: ToF32, K: FilterSink>(
    w: &[S],
    tile: Tile,
    (c, o): (usize, usize),
    cis: Range<usize>,
    sink: &mut K,
) {
    for o0 in (0..o).step_by(FILTER_LANES) {
        let lanes = (o - o0).min(FILTER_LANES);
        for ci in cis.clone() {
            let mut g = [[0f64; FILTER_LANES]; 9];
            for l in 0..lanes {
                let base = ((o0 + l) * c + ci) * 9;
                for (i, gi) in g.iter_mut().enumerate() {
                    gi[l] = w[base + i].to_f32() as f64;
                }
            }
            sink.start(ci, o0);
            filter_transform(tile, &g, |point, v| sink.put(point, v));
        }
    }
}

/// Lanes of the transforms' inner vectors.
pub(super) const L: usize = 8;

/// `Bᵀ d B` for 4×4 tiles of `L` channels, with `Bᵀ = [[1,0,−1,0],[0,1,1,0],[0,−1,1,0],[0,1,0,−1]]`.
#[inline(always)]
pub(super) fn input_transform(d: &[[f32; L]; 16]) -> [[f32; L]; 16] {
    let mut t = [[0f32; L]; 16];
    for j in 0..4 {
        for l in 0..L {
            let (d0, d1, d2, d3) = (d[j][l], d[4 + j][l], d[8 + j][l], d[12 + j][l]);
            t[j][l] = d0 - d2;
            t[4 + j][l] = d1 + d2;
            t[8 + j][l] = d2 - d1;
            t[12 + j][l] = d1 - d3;
        }
    }
    let mut v = [[0f32; L]; 16];
    for i in 0..4 {
        for l in 0..L {
            let r = i * 4;
            let (t0, t1, t2, t3) = (t[r][l], t[r + 1][l], t[r + 2][l], t[r + 3][l]);
            v[r][l] = t0 - t2;
            v[r + 1][l] = t1 + t2;
            v[r + 2][l] = t2 - t1;
            v[r + 3][l] = t1 - t3;
        }
    }
    v
}

/// `Aᵀ m A` for 4×4 tiles of `L` channels, with `Aᵀ = [[1,1,1,0],[0,1,−1,−1]]`: row-major 2×2.
#[inline(always)]
pub(super) fn output_transform(m: &[[f32; L]; 16]) -> [[f32; L]; 4] {
    let mut s = [[0f32; L]; 8];
    for j in 0..4 {
        for l in 0..L {
            let (m0, m1, m2, m3) = (m[j][l], m[4 + j][l], m[8 + j][l], m[12 + j][l]);
            s[j][l] = m0 + m1 + m2;
            s[4 + j][l] = m1 - m2 - m3;
        }
    }
    let mut y = [[0f32; L]; 4];
    for i in 0..2 {
        for l in 0..L {
            let r = i * 4;
            let (s0, s1, s2, s3) = (s[r][l], s[r + 1][l], s[r + 2][l], s[r + 3][l]);
            y[i * 2][l] = s0 + s1 + s2;
            y[i * 2 + 1][l] = s1 - s2 - s3;
        }
    }
    y
}

/// F(4,3)'s `Bᵀ` on six values (one lane), with
/// `Bᵀ = [[4,0,−5,0,1,0],[0,−4,−4,1,1,0],[0,4,−4,−1,1,0],[0,−2,−1,2,1,0],[0,2,−1,−2,1,0],[0,4,0,−5,0,1]]`.
#[inline(always)]
pub(super) fn bt4(d: [f32; 6]) -> [f32; 6] {
    let a = d[4] - 4.0 * d[2];
    let b = d[3] - 4.0 * d[1];
    let c = d[4] - d[2];
    let e = 2.0 * (d[3] - d[1]);
    [
        (4.0 * d[0] - 5.0 * d[2]) + d[4],
        a + b,
        a - b,
        c + e,
        c - e,
        (4.0 * d[1] - 5.0 * d[3]) + d[5],
    ]
}

/// F(4,3)'s `Aᵀ` on six values (one lane), with
/// `Aᵀ = [[1,1,1,1,1,0],[0,1,−1,2,−2,0],[0,1,1,4,4,0],[0,1,−1,8,−8,1]]`.
#[inline(always)]
pub(super) fn at4(m: [f32; 6]) -> [f32; 4] {
    let s12 = m[1] + m[2];
    let d12 = m[1] - m[2];
    let s34 = m[3] + m[4];
    let d34 = m[3] - m[4];
    [
        (m[0] + s12) + s34,
        d12 + 2.0 * d34,
        s12 + 4.0 * s34,
        (d12 + 8.0 * d34) + m[5],
    ]
}

/// `Bᵀ d B` for 6×6 tiles of `L` channels (F(4,3)): columns first, then rows.
#[inline(always)]
pub(super) fn input_transform4(d: &[[f32; L]; MAX_POINTS]) -> [[f32; L]; MAX_POINTS] {
    let mut t = [[0f32; L]; MAX_POINTS];
    for j in 0..6 {
        for l in 0..L {
            let col = bt4(std::array::from_fn(|i| d[i * 6 + j][l]));
            for (i, v) in col.into_iter().enumerate() {
                t[i * 6 + j][l] = v;
            }
        }
    }
    let mut v = [[0f32; L]; MAX_POINTS];
    for i in 0..6 {
        for l in 0..L {
            let row = bt4(std::array::from_fn(|j| t[i * 6 + j][l]));
            for (j, x) in row.into_iter().enumerate() {
                v[i * 6 + j][l] = x;
            }
        }
    }
    v
}

/// `Aᵀ m A` for 6×6 tiles of `L` channels (F(4,3)): row-major 4×4.
#[inline(always)]
pub(super) fn output_transform4(m: &[[f32; L]; MAX_POINTS]) -> [[f32; L]; 16] {
    let mut s = [[0f32; L]; 24];
    for j in 0..6 {
        for l in 0..L {
            let col = at4(std::array::from_fn(|i| m[i * 6 + j][l]));
            for (i, v) in col.into_iter().enumerate() {
                s[i * 6 + j][l] = v;
            }
        }
    }
    let mut y = [[0f32; L]; 16];
    for i in 0..4 {
        for l in 0..L {
            let row = at4(std::array::from_fn(|j| s[i * 6 + j][l]));
            for (j, x) in row.into_iter().enumerate() {
                y[i * 4 + j][l] = x;
            }
        }
    }
    y
}
