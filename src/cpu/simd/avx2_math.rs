//! Vectorised `f32` math on `__m256` (8 lanes) for the AVX2 level: exp, tanh, sigmoid, SiLU and
//! GELU (erf and tanh forms), ported from the AVX-512 versions (`avx512_math.rs`) with the same
//! polynomials, so both levels agree to rounding.
//!
//! Invariants: every function is lane-wise, NaN in gives NaN out, infinities follow the
//! reference (`UnaryOp::apply`), large |x| never produces a spurious NaN (inputs are clamped
//! before the polynomial). AVX2 has no `scalef`: `2^n` is applied as two exact power-of-two
//! factors, so overflow still rounds to inf and underflow to subnormals/0 exactly once.
//! Callers must only run these on CPUs with AVX2 and FMA (the `unsafe` contract).

#![allow(clippy::excessive_precision)] // coefficients are quoted as published

use super::fallback::{
    ERFC_LARGE, ERF_SMALL, EXP_REDUCED, GELU_TANH_A, GELU_TANH_C, LN2_LO, TANH_SMALL,
};
use std::arch::x86_64::*;

const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

#[inline]
#[target_feature(enable = "avx2,fma")]
fn splat(x: f32) -> __m256 {
    _mm256_set1_ps(x)
}

/// Horner evaluation of `c[0] + c[1] u + ...`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn horner(c: &[f32], u: __m256) -> __m256 {
    let mut acc = _mm256_setzero_ps();
    for &k in c.iter().rev() {
        acc = _mm256_fmadd_ps(acc, u, splat(k));
    }
    acc
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn abs(x: __m256) -> __m256 {
    _mm256_andnot_ps(splat(-0.0), x)
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn neg(x: __m256) -> __m256 {
    _mm256_xor_ps(x, splat(-0.0))
}

/// `2^k` for integer lanes `k` in [-126, 127] (normal floats).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn pow2i(k: __m256i) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        k,
        _mm256_set1_epi32(127),
    )))
}

/// `p · 2^n` for integer-valued `n` in [-151, 129], rounded once (as `vscalefps`): `2^n` is
/// split into two normal factors, the first product is exact.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn scale(p: __m256, n: __m256) -> __m256 {
    let ni = _mm256_cvtps_epi32(n);
    let n1 = _mm256_srai_epi32::<1>(ni);
    let n2 = _mm256_sub_epi32(ni, n1);
    _mm256_mul_ps(_mm256_mul_ps(p, pow2i(n1)), pow2i(n2))
}

/// `e^x`: Cody–Waite reduction by ln 2, degree-6 polynomial, [`scale`] for the exponent.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn exp(x: __m256) -> __m256 {
    // min/max return their second operand when one is NaN, so NaN survives the clamp.
    let x = _mm256_max_ps(splat(-104.0), _mm256_min_ps(splat(88.8), x));
    let n = _mm256_round_ps::<RNE>(_mm256_mul_ps(x, splat(std::f32::consts::LOG2_E)));
    let r = _mm256_fnmadd_ps(n, splat(std::f32::consts::LN_2), x);
    let r = _mm256_fnmadd_ps(n, splat(LN2_LO), r);
    let p = horner(&EXP_REDUCED, r);
    let r2 = _mm256_mul_ps(r, r);
    let p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, splat(1.0)));
    // NaN lanes: n converts to i32::MIN, but p is NaN and stays NaN through the products.
    scale(p, n)
}

/// Hyperbolic tangent: odd polynomial for |x| < 0.625, `1 - 2/(e^{2|x|}+1)` beyond.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn tanh(x: __m256) -> __m256 {
    let a = abs(x);
    let z = _mm256_mul_ps(x, x);
    let p = horner(&TANH_SMALL, z);
    let small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    let e = exp(_mm256_add_ps(a, a));
    let one = splat(1.0);
    let large = _mm256_sub_ps(one, _mm256_div_ps(splat(2.0), _mm256_add_ps(e, one)));
    let large = _mm256_or_ps(large, _mm256_and_ps(x, splat(-0.0)));
    _mm256_blendv_ps(large, small, _mm256_cmp_ps::<_CMP_LT_OQ>(a, splat(0.625)))
}

/// `1 / (1 + e^-x)`, from `e^-|x|` so neither side overflows.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn sigmoid(x: __m256) -> __m256 {
    let e = exp(neg(abs(x)));
    let r = _mm256_div_ps(splat(1.0), _mm256_add_ps(splat(1.0), e));
    let negative = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps());
    _mm256_blendv_ps(r, _mm256_mul_ps(r, e), negative)
}

/// `x · sigmoid(x)`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn silu(x: __m256) -> __m256 {
    _mm256_mul_ps(x, sigmoid(x))
}

/// Tanh-form GELU as `x · sigmoid(2u)`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn gelu_tanh(x: __m256) -> __m256 {
    let x2 = _mm256_mul_ps(x, x);
    let inner = _mm256_fmadd_ps(splat(GELU_TANH_A), x2, splat(1.0));
    let u = _mm256_mul_ps(_mm256_mul_ps(splat(GELU_TANH_C), x), inner);
    _mm256_mul_ps(x, sigmoid(_mm256_add_ps(u, u)))
}

/// Exact GELU: the portable kernel's erf polynomial for |z| < 1, its erfc expansion beyond.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn gelu_erf(x: __m256) -> __m256 {
    let one = splat(1.0);
    let half = splat(0.5);
    let z = _mm256_mul_ps(x, splat(std::f32::consts::FRAC_1_SQRT_2));
    let a = abs(z);
    let u = _mm256_fmsub_ps(_mm256_add_ps(z, z), z, one);
    let erf = _mm256_mul_ps(z, horner(&ERF_SMALL, u));
    let small = _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, erf));

    let t = _mm256_div_ps(one, a);
    let ac = _mm256_min_ps(a, splat(10.0));
    let hi = _mm256_mul_ps(ac, ac);
    let lo = _mm256_fmsub_ps(ac, ac, hi);
    let ex = _mm256_mul_ps(exp(neg(hi)), _mm256_sub_ps(one, lo));
    let q = horner(&ERFC_LARGE, _mm256_fmsub_ps(t, splat(2.0), one));
    let erfc = _mm256_mul_ps(_mm256_mul_ps(ex, t), q);
    let pos = _mm256_mul_ps(x, _mm256_fnmadd_ps(half, erfc, one));
    let negv = _mm256_mul_ps(_mm256_mul_ps(half, x), erfc);
    let positive = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_setzero_ps());
    let large = _mm256_blendv_ps(negv, pos, positive);
    _mm256_blendv_ps(large, small, _mm256_cmp_ps::<_CMP_LT_OQ>(a, one))
}
