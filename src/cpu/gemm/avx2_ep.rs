//! AVX2 tile store with the fused epilogue, and the 8-lane activations it needs.
//!
//! Why: the per-element portable epilogue took 15% of an SD 1.5 step on a Zen 3 machine (f64
//! activations, per-element branches); this store runs full tiles in vectors and leaves only
//! edge tiles to the portable store.
//!
//! Invariants: only full tiles (`mr == MR`, 32 columns, or 16 output columns in GLU mode) come
//! here; the semantics are the portable store's ([`super::portable::store`]): C is read only
//! when accumulating a later K block or when `beta != 0`, GLU tiles are `(alpha·h + bias) ·
//! act(alpha·g + gate bias)` and never read C, the residual is added after the activation, and
//! a 16-bit output takes the last K block's values rounded to nearest even (bit for bit as
//! [`Out16::put`] and the AVX-512 store; bf16 NaNs made quiet), never C. 16-bit residuals are
//! widened exactly. Activations mirror the AVX-512 epilogue: `exp` by range reduction and a
//! degree-7 polynomial (rel. err. ~2e-7), `erf` by Abramowitz–Stegun 7.1.26 (abs. err. 1.5e-7),
//! exact divisions.

use super::avx2::MR;
use super::driver::{EpCtx, Tile};
use super::layout::NR;
use super::{Half, Out16, Residual};
use crate::desc::Activation;
use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx2,fma")]
fn splat(x: f32) -> __m256 {
    _mm256_set1_ps(x)
}

/// `e^x`, clamped to the normal f32 range.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp_ps(x: __m256) -> __m256 {
    let x = _mm256_min_ps(_mm256_max_ps(x, splat(-87.0)), splat(88.0));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        splat(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, splat(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, splat(-2.121_944_4e-4), r);
    let mut p = splat(1.0 / 5040.0);
    for c in [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = _mm256_fmadd_ps(p, r, splat(c));
    }
    let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    _mm256_mul_ps(p, _mm256_castsi256_ps(bits))
}

/// `x * sigmoid(s)` computed as `x / (1 + e^-s)`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn x_sigmoid(x: __m256, s: __m256) -> __m256 {
    let e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), s));
    _mm256_div_ps(x, _mm256_add_ps(splat(1.0), e))
}

/// Applies `act` to a vector.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn act_ps(act: Activation, x: __m256) -> __m256 {
    match act {
        Activation::None => x,
        Activation::Relu => _mm256_max_ps(x, _mm256_setzero_ps()),
        Activation::Gelu => crate::cpu::simd::avx2_math::gelu_erf(x),
        Activation::GeluTanh => {
            // 0.5 x (1 + tanh u) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
            let x2 = _mm256_mul_ps(x, x);
            let c = 0.797_884_6_f32;
            let two_u = _mm256_mul_ps(
                x,
                _mm256_fmadd_ps(x2, splat(2.0 * c * 0.044715), splat(2.0 * c)),
            );
            x_sigmoid(x, two_u)
        }
        Activation::Silu => x_sigmoid(x, x),
    }
}

/// Residual values of columns `col..col + 8` of `row` (16-bit residuals widened exactly).
///
/// # Safety
/// The residual was validated against the output shape and the columns are inside it.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn residual(res: &Residual, row: usize, col: usize) -> __m256 {
    match res {
        Residual::F32(m) if m.col_stride == 1 => {
            let p = m.data.as_ptr().add(m.offset + row * m.row_stride + col);
            return _mm256_loadu_ps(p);
        }
        Residual::Half(m, kind) if m.col_stride == 1 => {
            let p = m.data.as_ptr().add(m.offset + row * m.row_stride + col);
            let bits = _mm_loadu_si128(p as *const __m128i);
            return match kind {
                Half::Bf16 => {
                    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bits)))
                }
                Half::F16 => _mm256_cvtph_ps(bits),
            };
        }
        _ => {}
    }
    let mut tmp = [0f32; 8];
    for (j, t) in tmp.iter_mut().enumerate() {
        *t = res.at(row, col + j);
    }
    _mm256_loadu_ps(tmp.as_ptr())
}

/// Bias values of columns `col..col + 8`, or zeros.
///
/// # Safety
/// The bias was validated against the output columns.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn bias(ep: &EpCtx, col: usize) -> __m256 {
    match ep.bias {
        Some(b) => _mm256_loadu_ps(b.as_ptr().add(col)),
        None => _mm256_setzero_ps(),
    }
}

/// Rounds 8 values to nearest even 16-bit floats (bf16: NaN made quiet, as the library's
/// narrowing conversions and the AVX-512 store) and writes them at (`row`, `col..col + 8`).
///
/// # Safety
/// The entry points validated `o` for every element of the tile.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn store16(o: &Out16, row: usize, col: usize, v: __m256) {
    let dst = o.ptr.add(row * o.ld + col) as *mut __m128i;
    let packed = match o.kind {
        Half::Bf16 => {
            let b = _mm256_castps_si256(v);
            let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(b), _mm256_set1_epi32(1));
            let bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
            let r = _mm256_srli_epi32::<16>(_mm256_add_epi32(b, bias));
            let q = _mm256_or_si256(_mm256_srli_epi32::<16>(b), _mm256_set1_epi32(0x40));
            let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
            let h = _mm256_blendv_epi8(r, q, nan);
            // Lanes hold values below 2^16: pack the two 128-bit halves without saturation.
            _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
        }
        Half::F16 => _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v),
    };
    _mm_storeu_si128(dst, packed);
}

/// Writes the final values of columns `col..col + 8` of tile row `r` (residual added).
///
/// # Safety
/// As [`store`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn put(t: &Tile, ep: &EpCtx, r: usize, j: usize, mut v: __m256) {
    let (row, col) = (t.row0 + r, t.col0 + j);
    if let Some(res) = &ep.residual {
        v = _mm256_add_ps(v, residual(res, row, col));
    }
    match &ep.out16 {
        Some(o) => store16(o, row, col, v),
        None => _mm256_storeu_ps(t.c.add(r * t.ldc + j), v),
    }
}

/// Stores a full tile (accumulators `out`, 32 lanes per row) with the epilogue; false (and
/// nothing written) for tiles this store does not take (edges).
///
/// # Safety
/// As [`super::driver::Kernel::tile`]; AVX2 and FMA available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn store(out: &[[f32; NR]; MR], t: &Tile, ep: &EpCtx) -> bool {
    let full = if ep.glu { t.nr == 16 } else { t.nr == NR };
    if t.mr != MR || !full {
        return false;
    }
    let alpha = splat(ep.alpha);
    if ep.glu {
        for (r, row) in out.iter().enumerate() {
            for j in (0..16).step_by(8) {
                // mul then add, as the portable store (no contraction).
                let h = _mm256_add_ps(
                    _mm256_mul_ps(alpha, _mm256_loadu_ps(row.as_ptr().add(j))),
                    bias(ep, t.col0 + j),
                );
                let g = _mm256_add_ps(
                    _mm256_mul_ps(alpha, _mm256_loadu_ps(row.as_ptr().add(16 + j))),
                    bias(ep, ep.n + t.col0 + j),
                );
                put(t, ep, r, j, _mm256_mul_ps(h, act_ps(ep.act, g)));
            }
        }
        return true;
    }
    let beta = splat(ep.beta);
    for (r, row) in out.iter().enumerate() {
        let cp = t.c.add(r * t.ldc);
        for j in (0..NR).step_by(8) {
            let mut v = _mm256_mul_ps(alpha, _mm256_loadu_ps(row.as_ptr().add(j)));
            if !t.first {
                v = _mm256_add_ps(v, _mm256_loadu_ps(cp.add(j)));
            } else if ep.beta != 0.0 {
                v = _mm256_add_ps(v, _mm256_mul_ps(beta, _mm256_loadu_ps(cp.add(j))));
            }
            if !t.last {
                _mm256_storeu_ps(cp.add(j), v);
                continue;
            }
            let v = act_ps(ep.act, _mm256_add_ps(v, bias(ep, t.col0 + j)));
            put(t, ep, r, j, v);
        }
    }
    true
}
