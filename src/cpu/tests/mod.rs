//! Tests of the CPU backend against plain `f64` scalar references, at both SIMD levels.
//!
//! Invariant: every test runs its checks once per level in [`levels`] (forced per thread with
//! `with_simd_level`, or through `Kernels::new` for the slice kernels), so the portable path is
//! covered even on AVX-512 machines.

mod kernels;
mod ops;
mod reduce;
mod storage;

use super::simd::{hardware_simd_level, SimdLevel};
use crate::desc::kinds::{BinaryOp, UnaryOp};

/// Every length the element-wise tests sweep (tails, vector multiples, threading is separate).
pub(crate) const LENGTHS: [usize; 9] = [0, 1, 7, 15, 16, 17, 63, 65, 257];

/// The SIMD levels to test on this machine.
pub(crate) fn levels() -> Vec<SimdLevel> {
    let mut v = vec![SimdLevel::Fallback];
    if matches!(hardware_simd_level(), SimdLevel::Avx2 | SimdLevel::Avx512) {
        v.push(SimdLevel::Avx2);
    }
    if hardware_simd_level() == SimdLevel::Avx512 {
        v.push(SimdLevel::Avx512);
    }
    v
}

/// Deterministic pseudo-random numbers in `[lo, hi)`.
pub(crate) struct Lcg(u64);

impl Lcg {
    pub(crate) fn new(seed: u64) -> Lcg {
        Lcg(seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407))
    }
    pub(crate) fn next_f64(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    pub(crate) fn range(&mut self, lo: f64, hi: f64) -> f32 {
        (lo + (hi - lo) * self.next_f64()) as f32
    }
    pub(crate) fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f32> {
        (0..n).map(|_| self.range(lo, hi)).collect()
    }
}

/// Every unary op, with parameters.
pub(crate) fn all_unary() -> Vec<UnaryOp> {
    use UnaryOp::*;
    vec![
        Neg,
        Abs,
        Exp,
        Log,
        Sqrt,
        Rsqrt,
        Tanh,
        Sigmoid,
        Relu,
        GeluErf,
        GeluTanh,
        Silu,
        Sin,
        Cos,
        Affine {
            mul: 1.5,
            add: -0.25,
        },
        PowScalar(2.0),
        PowScalar(-1.5),
        PowScalar(0.5),
        MaxScalar(0.5),
        MinScalar(-0.5),
        Recip,
        Square,
        Floor,
        Ceil,
        Round,
        Trunc,
        Sign,
        Erf,
    ]
}

/// Input range that exercises `op` (wide but mostly meaningful).
pub(crate) fn input_range(op: UnaryOp) -> (f64, f64) {
    match op {
        UnaryOp::Exp => (-110.0, 95.0),
        UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt => (-1.0, 1000.0),
        UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Silu => (-30.0, 30.0),
        UnaryOp::GeluErf | UnaryOp::GeluTanh => (-12.0, 12.0),
        UnaryOp::Sin | UnaryOp::Cos => (-400.0, 400.0),
        UnaryOp::Erf => (-7.0, 7.0),
        UnaryOp::PowScalar(_) => (-3.0, 40.0),
        _ => (-50.0, 50.0),
    }
}

/// Special values every unary op must handle like `f64`.
pub(crate) const EDGES: [f32; 16] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    1.0,
    -1.0,
    1e-30,
    -1e-30,
    1e-40,
    88.7,
    -88.7,
    200.0,
    -200.0,
    3.0e38,
    -3.0e38,
];

/// Relative tolerance (in units of the dtype epsilon) and absolute tolerance of `op`.
pub(crate) fn tolerance(op: UnaryOp) -> (f64, f64) {
    match op {
        UnaryOp::Neg
        | UnaryOp::Abs
        | UnaryOp::Relu
        | UnaryOp::MaxScalar(_)
        | UnaryOp::MinScalar(_)
        | UnaryOp::Sqrt
        | UnaryOp::Recip
        | UnaryOp::Square
        | UnaryOp::Affine { .. }
        | UnaryOp::Floor
        | UnaryOp::Ceil
        | UnaryOp::Round
        | UnaryOp::Trunc
        | UnaryOp::Sign => (0.5, 0.0),
        UnaryOp::Rsqrt | UnaryOp::PowScalar(_) => (1.5, 0.0),
        UnaryOp::Sin | UnaryOp::Cos | UnaryOp::GeluErf | UnaryOp::GeluTanh | UnaryOp::Silu => {
            (8.0, 1e-6)
        }
        _ => (8.0, 0.0),
    }
}

/// Checks `got` against the `f64` reference `want` with `(ulps, atol)` where `eps` is the
/// dtype's epsilon. NaN must match NaN; infinities must match exactly after rounding.
pub(crate) fn close(got: f64, want: f64, eps: f64, (ulps, atol): (f64, f64)) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if got.is_nan() {
        return false;
    }
    let want_rounded = want as f32 as f64;
    if want_rounded.is_infinite() || got.is_infinite() {
        // Allow a finite value that rounds to infinity in a narrower dtype.
        return got == want_rounded
            || (got.abs() >= 65504.0 && got.signum() == want.signum() && eps > 1e-6);
    }
    let tol = ulps.max(0.5) * eps * want.abs() + atol + 1e-44;
    (got - want).abs() <= tol
}

/// The reference semantics (NaN propagates through max/min/relu, like PyTorch).
pub(crate) fn ref_unary(op: UnaryOp, x: f64) -> f64 {
    op.apply(x)
}

/// The reference semantics of binary ops.
pub(crate) fn ref_binary(op: BinaryOp, a: f64, b: f64) -> f64 {
    op.apply(a, b)
}
