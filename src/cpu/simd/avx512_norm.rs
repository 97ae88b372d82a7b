//! Fused passes of the channels-last group norm on AVX-512: the per-channel affine (with
//! optional SiLU) and the sum of squared deviations, each one pass over whole pixel rows
//! instead of one pass per elementwise op over tiled per-channel vectors.
//!
//! Invariant: every lane does exactly the f32 operations of the unfused slice kernels, in the
//! same order (`x - mean`, `· scale`, `+ shift`, then the same `silu`; the deviation squared in
//! f32, widened to f64 and added in pixel order), so results are bit for bit the same (tested
//! against the slice kernels in `cpu::norm`).

use super::avx512::tail_mask;
use super::avx512_math as m;
use std::arch::x86_64::*;

/// `dst[r·c + j] = act((x[r·c + j] - mean[j]) · scale[j] + shift[j])` for every whole row `r`
/// of `c = mean.len()` values (`act` SiLU or identity).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn channel_affine(
    x: &[f32],
    (mean, scale, shift): (&[f32], &[f32], &[f32]),
    silu: bool,
    dst: &mut [f32],
) {
    let c = mean.len().min(scale.len()).min(shift.len());
    if c == 0 {
        return;
    }
    let rows = x.len().min(dst.len()) / c;
    let (pm, ps, pb) = (mean.as_ptr(), scale.as_ptr(), shift.as_ptr());
    for r in 0..rows {
        let (xs, ds) = (x.as_ptr().add(r * c), dst.as_mut_ptr().add(r * c));
        let mut j = 0;
        while j < c {
            let k = if j + 16 <= c {
                0xffff
            } else {
                tail_mask(c - j)
            };
            let a = _mm512_sub_ps(
                _mm512_maskz_loadu_ps(k, xs.add(j)),
                _mm512_maskz_loadu_ps(k, pm.add(j)),
            );
            let b = _mm512_mul_ps(a, _mm512_maskz_loadu_ps(k, ps.add(j)));
            let y = _mm512_add_ps(b, _mm512_maskz_loadu_ps(k, pb.add(j)));
            let y = if silu { m::silu(y) } else { y };
            _mm512_mask_storeu_ps(ds.add(j), k, y);
            j += 16;
        }
    }
}

/// `acc[j] += ((x[r·c + j] - mean[j])²) as f64` over every whole row `r` in order, with
/// `c = mean.len()` (the square rounded to f32 first).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn add_sq_dev_f64(acc: &mut [f64], x: &[f32], mean: &[f32]) {
    let c = mean.len().min(acc.len());
    if c == 0 {
        return;
    }
    let rows = x.len() / c;
    let (pa, pm) = (acc.as_mut_ptr(), mean.as_ptr());
    for r in 0..rows {
        let xs = x.as_ptr().add(r * c);
        let mut j = 0;
        while j < c {
            let k = ((1u32 << (c - j).min(8)) - 1) as __mmask8;
            let d = _mm256_sub_ps(
                _mm256_maskz_loadu_ps(k, xs.add(j)),
                _mm256_maskz_loadu_ps(k, pm.add(j)),
            );
            let sq = _mm512_cvtps_pd(_mm256_mul_ps(d, d));
            let a = _mm512_maskz_loadu_pd(k, pa.add(j));
            _mm512_mask_storeu_pd(pa.add(j), k, _mm512_add_pd(a, sq));
            j += 8;
        }
    }
}
