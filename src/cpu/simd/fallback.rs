//! Portable kernels: plain Rust loops (auto-vectorised where the compiler can) and scalar math.
//!
//! Invariants: every function processes the common prefix of its slices and never panics;
//! results follow the same semantics as the AVX-512 kernels (see the parent module). Transcendentals
//! use the platform `libm` (`f32::exp`, `ln`, `tanh`, `sin`, `cos`, `powf`), which is accurate to
//! about 1 ulp; GELU's `erf` uses the polynomial shared with the AVX-512 path.

#![allow(clippy::excessive_precision)] // fitted coefficients are quoted as printed

use super::{bf16_from_f32_rne, MATMUL_NR};
use crate::desc::kinds::{BinaryOp, UnaryOp};
use half::{bf16, f16};

/// `(e^r - 1 - r) / r^2` as a polynomial in `r` for `|r| <= ln 2 / 2` (cephes `expf`), shared by
/// the AVX-512 and AVX2 `exp` (which add the `1 + r` part with one FMA).
#[cfg(target_arch = "x86_64")]
pub(super) const EXP_REDUCED: [f32; 6] = [
    5.000_000_120_1e-1,
    1.666_666_545_9e-1,
    4.166_579_589_4e-2,
    8.333_451_907_3e-3,
    1.398_199_950_7e-3,
    1.987_569_150_0e-4,
];

/// Low part of `ln 2` for the vector `exp`'s two-step range reduction (`LN_2` is the high part).
#[cfg(target_arch = "x86_64")]
pub(super) const LN2_LO: f32 = -1.904_654_3e-9;

/// `(tanh(x) - x) / x^3` as a polynomial in `x^2` for `|x| < 0.625` (cephes `tanhf`), shared by
/// the AVX-512 and AVX2 `tanh`.
#[cfg(target_arch = "x86_64")]
pub(super) const TANH_SMALL: [f32; 5] = [
    -3.333_328_194_22e-1,
    1.333_144_220_36e-1,
    -5.373_971_555_31e-2,
    2.063_908_879_54e-2,
    -5.704_988_727_45e-3,
];

/// `erf(z)/z` as a polynomial in `u = 2 z^2 - 1` for `|z| < 1` (Chebyshev fit, rel. err ~3e-8).
pub(super) const ERF_SMALL: [f32; 7] = [
    9.654_687_643e-1,
    -1.405_360_997e-1,
    1.985_249_668e-2,
    -2.285_419_498e-3,
    2.175_135_451e-4,
    -1.766_906_826e-5,
    1.230_605_449e-6,
];

/// `x e^{x^2} erfc(x)` as a polynomial in `u = 2/x - 1` for `x >= 1` (rel. err ~4e-8).
pub(super) const ERFC_LARGE: [f32; 13] = [
    5.107_913_613e-1,
    -8.360_549_062e-2,
    -9.158_377_536e-3,
    1.486_996_748e-2,
    -6.795_550_697e-3,
    1.329_960_534e-3,
    6.223_237_142e-4,
    -8.161_224_541e-4,
    5.148_762_721e-4,
    -1.805_442_298e-4,
    -5.434_532_068e-5,
    9.923_084_872e-5,
    -3.370_535_705e-5,
];

/// `sqrt(2/pi)`, the GELU-tanh constant.
pub(super) const GELU_TANH_C: f32 = 0.797_884_6;
/// The cubic coefficient of the GELU-tanh approximation.
pub(super) const GELU_TANH_A: f32 = 0.044_715;

#[inline(always)]
fn horner(c: &[f32], u: f32) -> f32 {
    c.iter().rev().fold(0.0, |acc, &k| acc * u + k)
}

/// `1/(1+e^-x)` without overflow: `e = exp(-|x|)` never exceeds 1.
#[inline(always)]
pub(super) fn sigmoid(x: f32) -> f32 {
    let e = (-x.abs()).exp();
    let r = 1.0 / (1.0 + e);
    if x >= 0.0 {
        r
    } else {
        e * r
    }
}

/// `erfc(a)` for `a >= 1`: `e^{-a^2} Q(2/a-1) / a`, the exponential in f64 (`a` capped at 10).
#[inline(always)]
fn erfc_large(a: f32) -> f32 {
    let t = 1.0 / a;
    let ac = f64::from(a.min(10.0));
    let ex = (-ac * ac).exp() as f32;
    ex * t * horner(&ERFC_LARGE, 2.0 * t - 1.0)
}

/// `(x > 0) - (x < 0)`: `+0` for `±0` and NaN, as PyTorch.
#[inline(always)]
pub(super) fn sign(x: f32) -> f32 {
    f32::from(u8::from(x > 0.0)) - f32::from(u8::from(x < 0.0))
}

/// `erf(z)`: `z P(2z^2-1)` for `|z| < 1`, else `±(1 - erfc(|z|))` with the GELU's `erfc`
/// polynomial (relative accuracy near zero, where `1 - erfc` would cancel).
#[inline(always)]
pub(super) fn erf(z: f32) -> f32 {
    let a = z.abs();
    if a.is_nan() || a < 1.0 {
        return z * horner(&ERF_SMALL, 2.0 * z * z - 1.0);
    }
    (1.0 - erfc_large(a)).copysign(z)
}

/// Exact-erf GELU, `0.5 x (1 + erf(x/sqrt 2))`, computed through `erfc` for `|x| >= sqrt 2` so
/// that negative inputs keep their relative accuracy.
#[inline(always)]
pub(super) fn gelu_erf(x: f32) -> f32 {
    let z = x * std::f32::consts::FRAC_1_SQRT_2;
    let a = z.abs();
    if a < 1.0 {
        let erf = z * horner(&ERF_SMALL, 2.0 * z * z - 1.0);
        return 0.5 * x * (1.0 + erf);
    }
    let erfc = erfc_large(a);
    if x > 0.0 {
        x * (1.0 - 0.5 * erfc)
    } else {
        0.5 * x * erfc
    }
}

/// Tanh-approximated GELU, `0.5 x (1 + tanh(u)) = x * sigmoid(2u)` (no cancellation for x < 0).
#[inline(always)]
pub(super) fn gelu_tanh(x: f32) -> f32 {
    let u = GELU_TANH_C * x * (1.0 + GELU_TANH_A * x * x);
    x * sigmoid(2.0 * u)
}

/// `max` propagating NaN (PyTorch's `maximum`/`clamp`/`relu`), spelled out because `f32::max`
/// ignores NaN.
#[inline(always)]
fn maxnum(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if b > a {
        b
    } else {
        a
    }
}

/// `min` propagating NaN.
#[inline(always)]
fn minnum(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if b < a {
        b
    } else {
        a
    }
}

#[inline(always)]
fn map(src: &[f32], dst: &mut [f32], f: impl Fn(f32) -> f32) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f(s);
    }
}

/// `dst[i] = op(src[i])`.
#[inline(always)]
pub(crate) fn unary(op: UnaryOp, src: &[f32], dst: &mut [f32]) {
    match op {
        UnaryOp::Neg => map(src, dst, |x| -x),
        UnaryOp::Abs => map(src, dst, f32::abs),
        UnaryOp::Exp => map(src, dst, f32::exp),
        UnaryOp::Log => map(src, dst, f32::ln),
        UnaryOp::Sqrt => map(src, dst, f32::sqrt),
        UnaryOp::Rsqrt => map(src, dst, |x| 1.0 / x.sqrt()),
        UnaryOp::Tanh => map(src, dst, f32::tanh),
        UnaryOp::Sigmoid => map(src, dst, sigmoid),
        UnaryOp::Relu => map(src, dst, |x| maxnum(x, 0.0)),
        UnaryOp::GeluErf => map(src, dst, gelu_erf),
        UnaryOp::GeluTanh => map(src, dst, gelu_tanh),
        UnaryOp::Silu => map(src, dst, |x| x * sigmoid(x)),
        UnaryOp::Sin => map(src, dst, f32::sin),
        UnaryOp::Cos => map(src, dst, f32::cos),
        UnaryOp::Affine { mul, add } => {
            let (m, a) = (f64::from(mul), f64::from(add));
            map(src, dst, |x| (f64::from(x) * m + a) as f32)
        }
        UnaryOp::PowScalar(e) => map(src, dst, |x| x.powf(e)),
        UnaryOp::MaxScalar(s) => map(src, dst, |x| maxnum(x, s)),
        UnaryOp::MinScalar(s) => map(src, dst, |x| minnum(x, s)),
        UnaryOp::Recip => map(src, dst, |x| 1.0 / x),
        UnaryOp::Square => map(src, dst, |x| x * x),
        UnaryOp::Floor => map(src, dst, f32::floor),
        UnaryOp::Ceil => map(src, dst, f32::ceil),
        UnaryOp::Round => map(src, dst, f32::round_ties_even),
        UnaryOp::Trunc => map(src, dst, f32::trunc),
        UnaryOp::Sign => map(src, dst, sign),
        UnaryOp::Erf => map(src, dst, erf),
    }
}

fn binary_fn(op: BinaryOp) -> fn(f32, f32) -> f32 {
    match op {
        BinaryOp::Add => |a, b| a + b,
        BinaryOp::Sub => |a, b| a - b,
        BinaryOp::Mul => |a, b| a * b,
        BinaryOp::Div => |a, b| a / b,
        BinaryOp::Maximum => maxnum,
        BinaryOp::Minimum => minnum,
        BinaryOp::Pow => f32::powf,
    }
}

macro_rules! binary_loop {
    ($op:expr, |$x:ident, $y:ident| $lhs:expr, $rhs:expr, $dst:expr, $iter:expr) => {
        match $op {
            BinaryOp::Add => $iter.for_each(|(d, ($x, $y))| *d = $lhs + $rhs),
            BinaryOp::Sub => $iter.for_each(|(d, ($x, $y))| *d = $lhs - $rhs),
            BinaryOp::Mul => $iter.for_each(|(d, ($x, $y))| *d = $lhs * $rhs),
            BinaryOp::Div => $iter.for_each(|(d, ($x, $y))| *d = $lhs / $rhs),
            other => {
                let f = binary_fn(other);
                $iter.for_each(|(d, ($x, $y))| *d = f($lhs, $rhs))
            }
        }
    };
}

/// `dst[i] = op(a[i], b[i])`.
#[inline(always)]
pub(crate) fn binary(op: BinaryOp, a: &[f32], b: &[f32], dst: &mut [f32]) {
    binary_loop!(op, |x, y| *x, *y, dst, dst.iter_mut().zip(a.iter().zip(b)))
}

/// `dst[i] = op(a[i], s)`.
#[inline(always)]
pub(crate) fn binary_scalar_rhs(op: BinaryOp, a: &[f32], s: f32, dst: &mut [f32]) {
    binary_loop!(
        op,
        |x, _y| *x,
        s,
        dst,
        dst.iter_mut().zip(a.iter().zip(0..))
    )
}

/// `dst[i] = op(s, b[i])`.
#[inline(always)]
pub(crate) fn binary_scalar_lhs(op: BinaryOp, s: f32, b: &[f32], dst: &mut [f32]) {
    binary_loop!(
        op,
        |_x, y| s,
        *y,
        dst,
        dst.iter_mut().zip((0..).zip(b.iter()))
    )
}

/// Sum in `f64` with eight independent accumulators.
#[inline(always)]
pub(crate) fn sum(x: &[f32]) -> f64 {
    let mut acc = [0f64; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f64::from(v);
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&v| f64::from(v)).sum();
    acc.iter().sum::<f64>() + tail
}

/// NaN-propagating maximum.
#[inline(always)]
pub(crate) fn max(x: &[f32]) -> f32 {
    let mut m = f32::NEG_INFINITY;
    for &v in x {
        if v.is_nan() {
            return v;
        }
        if v > m {
            m = v;
        }
    }
    m
}

/// NaN-propagating minimum.
#[inline(always)]
pub(crate) fn min(x: &[f32]) -> f32 {
    let mut m = f32::INFINITY;
    for &v in x {
        if v.is_nan() {
            return v;
        }
        if v < m {
            m = v;
        }
    }
    m
}

/// First index of the maximum (first NaN wins).
#[inline(always)]
pub(crate) fn argmax(x: &[f32]) -> Option<usize> {
    let mut best = (0usize, *x.first()?);
    for (i, &v) in x.iter().enumerate() {
        if v.is_nan() {
            return Some(i);
        }
        if v > best.1 {
            best = (i, v);
        }
    }
    Some(best.0)
}

/// First index of the minimum (first NaN wins).
#[inline(always)]
pub(crate) fn argmin(x: &[f32]) -> Option<usize> {
    let mut best = (0usize, *x.first()?);
    for (i, &v) in x.iter().enumerate() {
        if v.is_nan() {
            return Some(i);
        }
        if v < best.1 {
            best = (i, v);
        }
    }
    Some(best.0)
}

/// `acc[i] += x[i]` in `f64`.
#[inline(always)]
pub(crate) fn add_assign_f64(acc: &mut [f64], x: &[f32]) {
    for (a, &v) in acc.iter_mut().zip(x) {
        *a += f64::from(v);
    }
}

/// NaN-propagating elementwise maximum into `acc`.
#[inline(always)]
pub(crate) fn max_assign(acc: &mut [f32], x: &[f32]) {
    for (a, &v) in acc.iter_mut().zip(x) {
        if v > *a || v.is_nan() {
            *a = v;
        }
    }
}

/// NaN-propagating elementwise minimum into `acc`.
#[inline(always)]
pub(crate) fn min_assign(acc: &mut [f32], x: &[f32]) {
    for (a, &v) in acc.iter_mut().zip(x) {
        if v < *a || v.is_nan() {
            *a = v;
        }
    }
}

/// Stable softmax of one row (sum in `f64`).
#[inline(always)]
pub(crate) fn softmax_row(src: &[f32], dst: &mut [f32]) {
    let m = max(src);
    let mut s = 0f64;
    for (d, &x) in dst.iter_mut().zip(src) {
        let e = (x - m).exp();
        *d = e;
        s += f64::from(e);
    }
    let inv = (1.0 / s) as f32;
    for d in dst.iter_mut().take(src.len()) {
        *d *= inv;
    }
}

/// Exact `f16 -> f32`.
#[inline(always)]
pub(crate) fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

/// `f32 -> f16`, round to nearest even.
#[inline(always)]
pub(crate) fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f16::from_f32(s);
    }
}

/// Exact `bf16 -> f32`.
#[inline(always)]
pub(crate) fn bf16_to_f32(src: &[bf16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f32::from_bits(u32::from(s.to_bits()) << 16);
    }
}

/// `f32 -> bf16`, round to nearest even.
#[inline(always)]
pub(crate) fn f32_to_bf16(src: &[f32], dst: &mut [bf16]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = bf16_from_f32_rne(s);
    }
}

/// Portable matmul tile (bounds already checked by the caller; safe indexing anyway).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn matmul_tile(
    a: &[f32],
    (rsa, csa): (usize, usize),
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    (mr, nc, k): (usize, usize, usize),
) {
    let mut acc = [[0f32; MATMUL_NR]; super::MATMUL_MR];
    for p in 0..k {
        let Some(brow) = b.get(p * ldb..p * ldb + nc) else {
            return;
        };
        for (i, row) in acc.iter_mut().enumerate().take(mr) {
            let av = a.get(i * rsa + p * csa).copied().unwrap_or(0.0);
            for (o, &bv) in row.iter_mut().zip(brow) {
                *o += av * bv;
            }
        }
    }
    for (i, row) in acc.iter().enumerate().take(mr) {
        if let Some(out) = c.get_mut(i * ldc..i * ldc + nc) {
            out.copy_from_slice(&row[..nc]);
        }
    }
}
