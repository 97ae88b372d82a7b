//! The Winograd input transforms of one tile (F(2,3): 4×4, F(4,3): 6×6), eight channels at a
//! time, in AVX2 registers.
//!
//! Why: the portable body ([`super::winograd_math::input_transform`] over `[f32; 8]` arrays)
//! zeroed and refilled a 512-byte stack tile per eight channels and read it back at other
//! widths; `perf annotate` put most of the transform's time (13% of a 2×320×64×64 layer) on
//! those stack stores. Here the 16 input vectors are loaded (or zero outside the image),
//! transformed and stored straight to the tile's 16 point runs. Measured (perf, one thread,
//! Zen 3, same layer): the transform's share fell from 23% to 11% of the GEMM tiles' time.
//!
//! Invariants: the same operations in the same order as `input_transform` and
//! `input_transform4` (products and sums, never fused into FMAs), so results are bit for bit
//! those of the portable path; 16-bit inputs widen exactly (F16C, or a shift for
//! bf16); every access is inside slices whose lengths are checked before the unsafe loads.

use crate::cpu::gemm::{load8, ToF32};
use std::arch::x86_64::*;

/// Transforms channels `c0..c0 + 8` of one tile: `starts[k]` is the index in `data` of input
/// pixel `k`'s channel 0 (row-major 4×4 tile; `None` outside the image), and point `k` of the
/// result goes to `vt[k·c + c0..][..8]`. Returns false (writing nothing) if any run would leave
/// its slice.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn input_tile8<S: ToF32>(
    data: &[S],
    starts: &[Option<usize>],
    c0: usize,
    c: usize,
    vt: &mut [f32],
) -> bool {
    if starts.len() != 16 || !runs_fit(data.len(), starts, c0, c, vt.len()) {
        return false;
    }
    let mut d = [_mm256_setzero_ps(); 16];
    for (dk, s) in d.iter_mut().zip(starts) {
        if let Some(s) = s {
            // SAFETY: s + c0 + 8 <= data.len(), checked above.
            *dk = load8(data.as_ptr().add(s + c0));
        }
    }
    // Bᵀ d (columns), then (Bᵀ d) B (rows): the additions of `input_transform`.
    let mut t = [_mm256_setzero_ps(); 16];
    for j in 0..4 {
        let (d0, d1, d2, d3) = (d[j], d[4 + j], d[8 + j], d[12 + j]);
        t[j] = _mm256_sub_ps(d0, d2);
        t[4 + j] = _mm256_add_ps(d1, d2);
        t[8 + j] = _mm256_sub_ps(d2, d1);
        t[12 + j] = _mm256_sub_ps(d1, d3);
    }
    let out = vt.as_mut_ptr();
    for r in (0..16).step_by(4) {
        let (t0, t1, t2, t3) = (t[r], t[r + 1], t[r + 2], t[r + 3]);
        let v = [
            _mm256_sub_ps(t0, t2),
            _mm256_add_ps(t1, t2),
            _mm256_sub_ps(t2, t1),
            _mm256_sub_ps(t1, t3),
        ];
        for (i, vi) in v.into_iter().enumerate() {
            // SAFETY: (r + i)·c + c0 + 8 <= 15·c + c0 + 8 <= vt.len(), checked above.
            _mm256_storeu_ps(out.add((r + i) * c + c0), vi);
        }
    }
    true
}

/// True when every pixel run `starts[k] + c0 .. + 8` lies in `data` and every point run
/// `k·c + c0 .. + 8` (k < starts.len()) in `vt`.
fn runs_fit(data_len: usize, starts: &[Option<usize>], c0: usize, c: usize, vt_len: usize) -> bool {
    let fits_in = starts
        .iter()
        .flatten()
        .all(|&s| s.checked_add(c0 + 8).is_some_and(|e| e <= data_len));
    fits_in && vt_len >= (starts.len() - 1) * c + c0 + 8
}

/// [`super::winograd_math::bt4`] on eight lanes: the same operations in the same order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bt4v(d: [__m256; 6]) -> [__m256; 6] {
    let (two, four, five) = (
        _mm256_set1_ps(2.0),
        _mm256_set1_ps(4.0),
        _mm256_set1_ps(5.0),
    );
    let a = _mm256_sub_ps(d[4], _mm256_mul_ps(four, d[2]));
    let b = _mm256_sub_ps(d[3], _mm256_mul_ps(four, d[1]));
    let c = _mm256_sub_ps(d[4], d[2]);
    let e = _mm256_mul_ps(two, _mm256_sub_ps(d[3], d[1]));
    let first = _mm256_sub_ps(_mm256_mul_ps(four, d[0]), _mm256_mul_ps(five, d[2]));
    let last = _mm256_sub_ps(_mm256_mul_ps(four, d[1]), _mm256_mul_ps(five, d[3]));
    [
        _mm256_add_ps(first, d[4]),
        _mm256_add_ps(a, b),
        _mm256_sub_ps(a, b),
        _mm256_add_ps(c, e),
        _mm256_sub_ps(c, e),
        _mm256_add_ps(last, d[5]),
    ]
}

/// [`input_tile8`] for F(4,3): `starts` holds the 36 pixels of a row-major 6×6 tile, and the
/// 36 points go to `vt[k·c + c0..][..8]`. Returns false (writing nothing) if any run would
/// leave its slice.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn input_tile8_f4<S: ToF32>(
    data: &[S],
    starts: &[Option<usize>],
    c0: usize,
    c: usize,
    vt: &mut [f32],
) -> bool {
    if starts.len() != 36 || !runs_fit(data.len(), starts, c0, c, vt.len()) {
        return false;
    }
    // Bᵀ d, one column of six pixels at a time, into t (row-major 6×6).
    let mut t = [_mm256_setzero_ps(); 36];
    for j in 0..6 {
        // Plain loops, no closures: a closure would not inherit this function's features.
        let mut col = [_mm256_setzero_ps(); 6];
        for (i, v) in col.iter_mut().enumerate() {
            if let Some(s) = starts[i * 6 + j] {
                // SAFETY: s + c0 + 8 <= data.len(), checked above.
                *v = load8(data.as_ptr().add(s + c0));
            }
        }
        for (i, v) in bt4v(col).into_iter().enumerate() {
            t[i * 6 + j] = v;
        }
    }
    // (Bᵀ d) B, row by row, straight to the point runs.
    let out = vt.as_mut_ptr();
    for i in 0..6 {
        let mut row = [_mm256_setzero_ps(); 6];
        row.copy_from_slice(&t[i * 6..i * 6 + 6]);
        let row = bt4v(row);
        for (j, v) in row.into_iter().enumerate() {
            // SAFETY: (6i + j)·c + c0 + 8 <= 35·c + c0 + 8 <= vt.len(), checked above.
            _mm256_storeu_ps(out.add((i * 6 + j) * c + c0), v);
        }
    }
    true
}
