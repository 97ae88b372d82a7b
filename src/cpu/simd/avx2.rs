//! The portable slice kernels compiled for AVX2 + FMA + F16C (the [`super::SimdLevel::Avx2`]
//! level): each function here is the [`super::fallback`] function of the same name, inlined into
//! a `#[target_feature]` wrapper so the compiler vectorises its loops 8 lanes wide and uses
//! F16C for the f16 conversions.
//!
//! Why not hand-written intrinsics for everything as for AVX-512: on the machines this level
//! serves the slice kernels are a few percent of a model's time (GEMM, convolution and attention
//! have their own AVX2 kernels), and sharing the portable source keeps one implementation of
//! the semantics. The exceptions are the transcendentals the compiler cannot vectorise (the
//! portable code calls `libm` per element): exp, tanh, sigmoid, SiLU and both GELUs run the
//! 8-lane ports of the AVX-512 polynomials in `avx2_math.rs`.
//!
//! Invariants: the functions are only called when the CPU has AVX2, FMA and F16C (the level
//! is clamped to the hardware, see `clamp_to_hardware`); results equal the portable kernels'
//! (no fast-math: vectorisation does not reorder float operations, reductions stay serial).

use super::avx2_math as m;
use super::fallback;
use half::{bf16, f16};
use std::arch::x86_64::*;

macro_rules! avx2_versions {
    ($($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?;)*) => {
        $(
            $(#[$m])*
            #[target_feature(enable = "avx2,fma,f16c")]
            pub(super) fn $name($($arg: $ty),*) $(-> $ret)? {
                fallback::$name($($arg),*)
            }
        )*
    };
}

use crate::desc::kinds::{BinaryOp, UnaryOp};

avx2_versions! {
    fn binary(op: BinaryOp, a: &[f32], b: &[f32], dst: &mut [f32]);
    fn binary_scalar_rhs(op: BinaryOp, a: &[f32], s: f32, dst: &mut [f32]);
    fn binary_scalar_lhs(op: BinaryOp, s: f32, b: &[f32], dst: &mut [f32]);
    fn sum(x: &[f32]) -> f64;
    fn max(x: &[f32]) -> f32;
    fn min(x: &[f32]) -> f32;
    fn argmax(x: &[f32]) -> Option<usize>;
    fn argmin(x: &[f32]) -> Option<usize>;
    fn add_assign_f64(acc: &mut [f64], x: &[f32]);
    fn max_assign(acc: &mut [f32], x: &[f32]);
    fn min_assign(acc: &mut [f32], x: &[f32]);
    fn softmax_row(src: &[f32], dst: &mut [f32]);
    fn f16_to_f32(src: &[f16], dst: &mut [f32]);
    fn f32_to_f16(src: &[f32], dst: &mut [f16]);
    fn bf16_to_f32(src: &[bf16], dst: &mut [f32]);
    fn f32_to_bf16(src: &[f32], dst: &mut [bf16]);
    #[allow(clippy::too_many_arguments)]
    fn matmul_tile(
        a: &[f32],
        strides: (usize, usize),
        b: &[f32],
        ldb: usize,
        c: &mut [f32],
        ldc: usize,
        dims: (usize, usize, usize),
    );
}

/// `dst[i] = op(src[i])`: transcendentals through the 8-lane polynomials (the tail through a
/// padded vector, so every element takes the same code), everything else portable.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn unary(op: UnaryOp, src: &[f32], dst: &mut [f32]) {
    match op {
        UnaryOp::Exp => map8(src, dst, |v| m::exp(v)),
        UnaryOp::Tanh => map8(src, dst, |v| m::tanh(v)),
        UnaryOp::Sigmoid => map8(src, dst, |v| m::sigmoid(v)),
        UnaryOp::Silu => map8(src, dst, |v| m::silu(v)),
        UnaryOp::GeluErf => map8(src, dst, |v| m::gelu_erf(v)),
        UnaryOp::GeluTanh => map8(src, dst, |v| m::gelu_tanh(v)),
        _ => fallback::unary(op, src, dst),
    }
}

/// `dst[i] = f(src[i])` over the common prefix, 8 lanes at a time.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn map8(src: &[f32], dst: &mut [f32], f: impl Fn(__m256) -> __m256) {
    let n = src.len().min(dst.len());
    let (mut s, mut d) = (src[..n].chunks_exact(8), dst[..n].chunks_exact_mut(8));
    for (si, di) in (&mut s).zip(&mut d) {
        // SAFETY: both chunks hold 8 floats.
        unsafe { _mm256_storeu_ps(di.as_mut_ptr(), f(_mm256_loadu_ps(si.as_ptr()))) };
    }
    let (st, dt) = (s.remainder(), d.into_remainder());
    if !st.is_empty() {
        let mut buf = [0f32; 8];
        buf[..st.len()].copy_from_slice(st);
        // SAFETY: buf holds 8 floats.
        unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), f(_mm256_loadu_ps(buf.as_ptr()))) };
        dt.copy_from_slice(&buf[..dt.len()]);
    }
}
