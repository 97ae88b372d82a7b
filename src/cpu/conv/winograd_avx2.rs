//! The Winograd input transform of one tile, eight channels at a time, in AVX2 registers.
//!
//! Why: the portable body ([`super::winograd_math::input_transform`] over `[f32; 8]` arrays)
//! zeroed and refilled a 512-byte stack tile per eight channels and read it back at other
//! widths; `perf annotate` put most of the transform's time (13% of a 2×320×64×64 layer) on
//! those stack stores. Here the 16 input vectors are loaded (or zero outside the image),
//! transformed and stored straight to the tile's 16 point runs. Measured (perf, one thread,
//! Zen 3, same layer): the transform's share fell from 23% to 11% of the GEMM tiles' time.
//!
//! Invariants: the same additions in the same order as `input_transform`, so results are bit
//! for bit those of the portable path; 16-bit inputs widen exactly (F16C, or a shift for
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
    starts: &[Option<usize>; 16],
    c0: usize,
    c: usize,
    vt: &mut [f32],
) -> bool {
    let fits_in = starts
        .iter()
        .flatten()
        .all(|&s| s.checked_add(c0 + 8).is_some_and(|e| e <= data.len()));
    if !fits_in || vt.len() < 15 * c + c0 + 8 {
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
