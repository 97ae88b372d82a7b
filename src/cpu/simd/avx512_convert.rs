//! AVX-512 bulk conversions between `f32` and the 16-bit float formats.
//!
//! Invariants: exact widening; narrowing rounds to nearest even exactly like the `half` crate
//! (f16 through `vcvtps2ph`, bf16 with integer arithmetic so subnormals are kept, NaN made
//! quiet); the common prefix of the slices is processed, remainders through masked
//! loads/stores. `unsafe`: callers must have checked AVX-512F/BW/VL and F16C.

use super::avx512::tail_mask;
use half::{bf16, f16};
use std::arch::x86_64::*;

/// Exact `f16 -> f32` with `vcvtph2ps`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let (s, d) = (src.as_ptr() as *const i16, dst.as_mut_ptr());
    let mut i = 0;
    while i < n {
        let k = if i + 16 <= n {
            0xffff
        } else {
            tail_mask(n - i)
        };
        let h = _mm256_maskz_loadu_epi16(k, s.add(i));
        _mm512_mask_storeu_ps(d.add(i), k, _mm512_cvtph_ps(h));
        i += 16;
    }
}

/// `f32 -> f16` with `vcvtps2ph`, round to nearest even.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    let n = src.len().min(dst.len());
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr() as *mut i16);
    let mut i = 0;
    while i < n {
        let k = if i + 16 <= n {
            0xffff
        } else {
            tail_mask(n - i)
        };
        let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_maskz_loadu_ps(k, s.add(i)),
        );
        _mm256_mask_storeu_epi16(d.add(i), k, h);
        i += 16;
    }
}

/// Exact `bf16 -> f32`: zero-extend and shift left by 16.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn bf16_to_f32(src: &[bf16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let (s, d) = (src.as_ptr() as *const i16, dst.as_mut_ptr());
    let mut i = 0;
    while i < n {
        let k = if i + 16 <= n {
            0xffff
        } else {
            tail_mask(n - i)
        };
        let w =
            _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, s.add(i))));
        _mm512_mask_storeu_ps(d.add(i), k, _mm512_castsi512_ps(w));
        i += 16;
    }
}

/// `f32 -> bf16` with integer round-to-nearest-even (exact for subnormals, unlike
/// `vcvtneps2bf16`, which flushes them); NaN becomes `(bits >> 16) | 0x40`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn f32_to_bf16(src: &[f32], dst: &mut [bf16]) {
    let n = src.len().min(dst.len());
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr() as *mut i16);
    let (bias, one) = (_mm512_set1_epi32(0x7fff), _mm512_set1_epi32(1));
    let mut i = 0;
    while i < n {
        let k = if i + 16 <= n {
            0xffff
        } else {
            tail_mask(n - i)
        };
        let v = _mm512_maskz_loadu_ps(k, s.add(i));
        let b = _mm512_castps_si512(v);
        let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(b), one);
        let r = _mm512_srli_epi32::<16>(_mm512_add_epi32(b, _mm512_add_epi32(bias, lsb)));
        let q = _mm512_or_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(0x40));
        let r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v), q);
        _mm256_mask_storeu_epi16(d.add(i), k, _mm512_cvtepi32_epi16(r));
        i += 16;
    }
}
