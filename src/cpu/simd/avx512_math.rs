//! Vectorised `f32` math on `__m512` (16 lanes): exp, log, tanh, sigmoid, GELU (erf and tanh
//! forms), sin and cos.
//!
//! Invariants: every function is lane-wise, NaN in gives NaN out, infinities follow `f64`
//! semantics of the reference (`UnaryOp::apply`), large |x| never produces a spurious NaN
//! (inputs are clamped before the polynomial) and accuracy is about 1-3 ulp (sin/cos: 2 ulp
//! for |x| <= 65536 after a three-part FMA Cody–Waite reduction; beyond that the lanes are
//! recomputed with the scalar `libm` routine). Callers must only run these on CPUs with
//! AVX-512F/DQ and FMA (the `unsafe` contract).

#![allow(clippy::excessive_precision)] // coefficients are quoted as published

use super::fallback::{
    ERFC_LARGE, ERF_SMALL, EXP_REDUCED, GELU_TANH_A, GELU_TANH_C, LN2_LO, TANH_SMALL,
};
use std::arch::x86_64::*;

const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn splat(x: f32) -> __m512 {
    _mm512_set1_ps(x)
}

/// Horner evaluation of `c[0] + c[1] u + ...`.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn horner(c: &[f32], u: __m512) -> __m512 {
    let mut acc = _mm512_setzero_ps();
    for &k in c.iter().rev() {
        acc = _mm512_fmadd_ps(acc, u, splat(k));
    }
    acc
}

/// `|x|`.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn abs(x: __m512) -> __m512 {
    _mm512_andnot_ps(splat(-0.0), x)
}

/// `-x`.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn neg(x: __m512) -> __m512 {
    _mm512_xor_ps(x, splat(-0.0))
}

/// `e^x`: Cody–Waite reduction by ln 2, degree-6 polynomial, `scalef` for the exponent (which
/// rounds overflow to inf and underflow to subnormals/0 exactly once).
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn exp(x: __m512) -> __m512 {
    // min/max return their second operand when one is NaN, so NaN survives the clamp.
    let x = _mm512_max_ps(splat(-104.0), _mm512_min_ps(splat(88.8), x));
    let n = _mm512_roundscale_ps::<RNE>(_mm512_mul_ps(x, splat(std::f32::consts::LOG2_E)));
    let r = _mm512_fnmadd_ps(n, splat(std::f32::consts::LN_2), x);
    let r = _mm512_fnmadd_ps(n, splat(LN2_LO), r);
    let p = horner(&EXP_REDUCED, r);
    let r2 = _mm512_mul_ps(r, r);
    let p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, splat(1.0)));
    _mm512_scalef_ps(p, n)
}

/// Natural logarithm (cephes `logf` polynomial on [sqrt(1/2), sqrt 2), exponent via `getexp`,
/// so subnormals are exact). `log(0) = -inf`, `log(x<0) = NaN`, `log(inf) = inf`.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn log(x: __m512) -> __m512 {
    let m = _mm512_getmant_ps::<_MM_MANT_NORM_1_2, _MM_MANT_SIGN_ZERO>(x);
    let e = _mm512_getexp_ps(x);
    let big = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(m, splat(std::f32::consts::SQRT_2));
    let m = _mm512_mask_mul_ps(m, big, m, splat(0.5));
    let e = _mm512_mask_add_ps(e, big, e, splat(1.0));
    let f = _mm512_sub_ps(m, splat(1.0));
    let z = _mm512_mul_ps(f, f);
    let p = horner(
        &[
            3.333_333_117_4e-1,
            -2.499_999_399_3e-1,
            2.000_071_476_5e-1,
            -1.666_805_766_5e-1,
            1.424_932_278_7e-1,
            -1.242_014_084_6e-1,
            1.167_699_874_0e-1,
            -1.151_461_031_0e-1,
            7.037_683_629_2e-2,
        ],
        f,
    );
    let y = _mm512_mul_ps(_mm512_mul_ps(p, f), z);
    let y = _mm512_fmadd_ps(e, splat(-2.121_944_4e-4), y);
    let y = _mm512_fnmadd_ps(splat(0.5), z, y);
    let r = _mm512_add_ps(f, y);
    let r = _mm512_fmadd_ps(e, splat(0.693_359_375), r);
    let zero = _mm512_setzero_ps();
    let r = _mm512_mask_mov_ps(
        r,
        _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(x, zero),
        splat(f32::NEG_INFINITY),
    );
    let r = _mm512_mask_mov_ps(
        r,
        _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, zero),
        splat(f32::NAN),
    );
    _mm512_mask_mov_ps(
        r,
        _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(x, splat(f32::INFINITY)),
        x,
    )
}

/// Hyperbolic tangent: odd polynomial for |x| < 0.625, `1 - 2/(e^{2|x|}+1)` beyond.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn tanh(x: __m512) -> __m512 {
    let a = abs(x);
    let z = _mm512_mul_ps(x, x);
    let p = horner(&TANH_SMALL, z);
    let small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
    let e = exp(_mm512_add_ps(a, a));
    let one = splat(1.0);
    let large = _mm512_sub_ps(one, _mm512_div_ps(splat(2.0), _mm512_add_ps(e, one)));
    let large = _mm512_or_ps(large, _mm512_and_ps(x, splat(-0.0)));
    _mm512_mask_mov_ps(
        large,
        _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, splat(0.625)),
        small,
    )
}

/// `1/(1+e^-x)` computed from `e = exp(-|x|)` so that nothing overflows.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn sigmoid(x: __m512) -> __m512 {
    let e = exp(neg(abs(x)));
    let r = _mm512_div_ps(splat(1.0), _mm512_add_ps(splat(1.0), e));
    let negative = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
    _mm512_mask_mul_ps(r, negative, r, e)
}

/// `x * sigmoid(x)`.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn silu(x: __m512) -> __m512 {
    _mm512_mul_ps(x, sigmoid(x))
}

/// GELU, tanh form, as `x * sigmoid(2u)` (equal to `0.5 x (1 + tanh u)`).
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn gelu_tanh(x: __m512) -> __m512 {
    let x2 = _mm512_mul_ps(x, x);
    let inner = _mm512_fmadd_ps(splat(GELU_TANH_A), x2, splat(1.0));
    let u = _mm512_mul_ps(_mm512_mul_ps(splat(GELU_TANH_C), x), inner);
    _mm512_mul_ps(x, sigmoid(_mm512_add_ps(u, u)))
}

/// `erfc(a)` for `a >= 1` (other lanes are not used by the callers): `e^{-a^2} Q(2/a-1) / a`
/// with `a^2` split exactly by FMA and `a` capped at 10 (where erfc is far below f32's range).
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn erfc_large(a: __m512) -> __m512 {
    let one = splat(1.0);
    let t = _mm512_div_ps(one, a);
    let ac = _mm512_min_ps(a, splat(10.0));
    let hi = _mm512_mul_ps(ac, ac);
    let lo = _mm512_fmsub_ps(ac, ac, hi);
    let ex = _mm512_mul_ps(exp(neg(hi)), _mm512_sub_ps(one, lo));
    let q = horner(&ERFC_LARGE, _mm512_fmsub_ps(t, splat(2.0), one));
    _mm512_mul_ps(_mm512_mul_ps(ex, t), q)
}

/// GELU, exact erf form. |z| < 1: `erf(z) = z P(2z^2-1)`; otherwise through
/// `erfc(a) = e^{-a^2} Q(2/a-1) / a` with `a^2` split exactly by FMA.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(crate) unsafe fn gelu_erf(x: __m512) -> __m512 {
    let one = splat(1.0);
    let half = splat(0.5);
    let z = _mm512_mul_ps(x, splat(std::f32::consts::FRAC_1_SQRT_2));
    let a = abs(z);
    let u = _mm512_fmsub_ps(_mm512_add_ps(z, z), z, one);
    let erf = _mm512_mul_ps(z, horner(&ERF_SMALL, u));
    let small = _mm512_mul_ps(_mm512_mul_ps(half, x), _mm512_add_ps(one, erf));
    let erfc = erfc_large(a);
    let pos = _mm512_mul_ps(x, _mm512_fnmadd_ps(half, erfc, one));
    let negv = _mm512_mul_ps(_mm512_mul_ps(half, x), erfc);
    let positive = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm512_setzero_ps());
    let large = _mm512_mask_mov_ps(negv, positive, pos);
    _mm512_mask_mov_ps(large, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, one), small)
}

/// `(x > 0) - (x < 0)`: `+0` for `±0` and NaN, as PyTorch.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn sign(x: __m512) -> __m512 {
    let zero = _mm512_setzero_ps();
    let r = _mm512_mask_mov_ps(zero, _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, zero), splat(1.0));
    _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, zero), splat(-1.0))
}

/// `erf(z)`, the scalar `fallback::erf` in 16 lanes (`|z| < 1` and NaN lanes take the small
/// form, the rest `±(1 - erfc(|z|))` with `|z|^2` split exactly by FMA).
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn erf(z: __m512) -> __m512 {
    let one = splat(1.0);
    let a = abs(z);
    let u = _mm512_fmsub_ps(_mm512_add_ps(z, z), z, one);
    let small = _mm512_mul_ps(z, horner(&ERF_SMALL, u));
    let erfc = erfc_large(a);
    let sign_bit = _mm512_and_ps(z, splat(-0.0));
    let large = _mm512_or_ps(_mm512_sub_ps(one, erfc), sign_bit);
    // NaN lanes compare false and keep the small form (NaN in, NaN out).
    _mm512_mask_mov_ps(small, _mm512_cmp_ps_mask::<_CMP_GE_OQ>(a, one), large)
}

/// Largest |x| handled by the vector reduction; bigger lanes use scalar `libm`.
const SINCOS_MAX: f32 = 65536.0;

/// sin (`cos = false`) or cos (`cos = true`).
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn sin_cos(x: __m512, cos: bool) -> __m512 {
    let q = _mm512_roundscale_ps::<RNE>(_mm512_mul_ps(x, splat(std::f32::consts::FRAC_2_PI)));
    let r = _mm512_fnmadd_ps(q, splat(1.570_796_4), x);
    let r = _mm512_fnmadd_ps(q, splat(-4.371_139e-8), r);
    let r = _mm512_fnmadd_ps(q, splat(-1.715_124_6e-15), r);
    let mut qi = _mm512_cvtps_epi32(q);
    if cos {
        qi = _mm512_add_epi32(qi, _mm512_set1_epi32(1));
    }
    let z = _mm512_mul_ps(r, r);
    let ps = horner(
        &[-1.666_665_461_1e-1, 8.332_160_873_6e-3, -1.951_529_589_1e-4],
        z,
    );
    let s = _mm512_fmadd_ps(_mm512_mul_ps(z, r), ps, r);
    let pc = horner(
        &[
            4.166_664_568_298_827e-2,
            -1.388_731_625_493_765e-3,
            2.443_315_711_809_948e-5,
        ],
        z,
    );
    let c = _mm512_fmadd_ps(
        _mm512_mul_ps(z, z),
        pc,
        _mm512_fnmadd_ps(splat(0.5), z, splat(1.0)),
    );
    let odd = _mm512_test_epi32_mask(qi, _mm512_set1_epi32(1));
    let res = _mm512_mask_mov_ps(s, odd, c);
    let flip = _mm512_test_epi32_mask(qi, _mm512_set1_epi32(2));
    let mut res = _mm512_mask_xor_ps(res, flip, res, splat(-0.0));
    let big = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(abs(x), splat(SINCOS_MAX));
    if big != 0 {
        let mut xs = [0f32; 16];
        let mut rs = [0f32; 16];
        _mm512_storeu_ps(xs.as_mut_ptr(), x);
        _mm512_storeu_ps(rs.as_mut_ptr(), res);
        for (lane, (r, &v)) in rs.iter_mut().zip(&xs).enumerate() {
            if big & (1 << lane) != 0 {
                *r = if cos { v.cos() } else { v.sin() };
            }
        }
        res = _mm512_loadu_ps(rs.as_ptr());
    }
    res
}
