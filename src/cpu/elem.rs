//! [`FloatElem`]: how each float dtype reaches the `f32` kernels.
//!
//! Invariants: `f32` slices go to the kernels directly (no copy); `f16`/`bf16` are widened
//! exactly into small stack blocks of [`BLOCK`] elements, computed in `f32`, and rounded once
//! (to nearest even) on the way back. Every helper processes the common prefix of its slices.

use super::simd::Kernels;
use crate::desc::kinds::{BinaryOp, UnaryOp};
use crate::WithDType;
use half::{bf16, f16};

/// Elements per conversion block (two or three such blocks live on the stack).
pub(crate) const BLOCK: usize = 512;

/// A float element type the CPU kernels support.
pub(crate) trait FloatElem: WithDType + bytemuck::Zeroable + super::pool::Recycle {
    /// The slice itself when `Self` is `f32`.
    fn as_f32(s: &[Self]) -> Option<&[f32]>;
    /// The slice itself when `Self` is `f32`.
    fn as_f32_mut(s: &mut [Self]) -> Option<&mut [f32]>;
    /// Exact widening of a block.
    fn load(k: Kernels, src: &[Self], dst: &mut [f32]);
    /// Rounding narrowing of a block.
    fn store(k: Kernels, src: &[f32], dst: &mut [Self]);
    /// One element to `f32`.
    fn to_f32(self) -> f32;
    /// Rounds an `f64` once to nearest even (through an `f32` rounded to odd, which is exact
    /// for the 16-bit formats; `half`'s own `from_f64` ignores the low 29 bits).
    fn from_f64_rne(v: f64) -> Self;

    /// `dst[i] = op(src[i])`.
    fn unary(k: Kernels, op: UnaryOp, src: &[Self], dst: &mut [Self]) {
        if let (Some(s), Some(d)) = (Self::as_f32(src), Self::as_f32_mut(dst)) {
            return k.unary_f32(op, s, d);
        }
        let (mut a, mut b) = ([0f32; BLOCK], [0f32; BLOCK]);
        for (s, d) in src.chunks(BLOCK).zip(dst.chunks_mut(BLOCK)) {
            let n = s.len().min(d.len());
            Self::load(k, s, &mut a[..n]);
            k.unary_f32(op, &a[..n], &mut b[..n]);
            Self::store(k, &b[..n], d);
        }
    }

    /// `dst[i] = op(x[i], y[i])` where each operand is a slice or a scalar.
    fn binary(
        k: Kernels,
        op: BinaryOp,
        x: Operand<'_, Self>,
        y: Operand<'_, Self>,
        dst: &mut [Self],
    ) {
        if let Some(d) = Self::as_f32_mut(dst) {
            match (x.as_f32(), y.as_f32()) {
                (Operand::Slice(a), Operand::Slice(b)) => return k.binary_f32(op, a, b, d),
                (Operand::Slice(a), Operand::Scalar(s)) => {
                    return k.binary_f32_scalar_rhs(op, a, s, d)
                }
                (Operand::Scalar(s), Operand::Slice(b)) => {
                    return k.binary_f32_scalar_lhs(op, s, b, d)
                }
                (Operand::Scalar(s), Operand::Scalar(t)) => {
                    let v = op.apply(f64::from(s), f64::from(t)) as f32;
                    return d.iter_mut().for_each(|o| *o = v);
                }
            }
        }
        let (mut a, mut b, mut c) = ([0f32; BLOCK], [0f32; BLOCK], [0f32; BLOCK]);
        for (i, d) in dst.chunks_mut(BLOCK).enumerate() {
            let n = d.len();
            let r = i * BLOCK..i * BLOCK + n;
            match (
                x.block(k, r.clone(), &mut a[..n]),
                y.block(k, r, &mut b[..n]),
            ) {
                (None, None) => k.binary_f32(op, &a[..n], &b[..n], &mut c[..n]),
                (None, Some(s)) => k.binary_f32_scalar_rhs(op, &a[..n], s, &mut c[..n]),
                (Some(s), None) => k.binary_f32_scalar_lhs(op, s, &b[..n], &mut c[..n]),
                (Some(s), Some(t)) => c[..n].fill(op.apply(f64::from(s), f64::from(t)) as f32),
            }
            Self::store(k, &c[..n], d);
        }
    }

    /// Calls `f(start, block)` over the row widened to `f32` (one call for `f32` rows).
    fn for_each_f32_block(k: Kernels, row: &[Self], mut f: impl FnMut(usize, &[f32])) {
        if let Some(r) = Self::as_f32(row) {
            return f(0, r);
        }
        let mut a = [0f32; BLOCK];
        for (i, s) in row.chunks(BLOCK).enumerate() {
            Self::load(k, s, &mut a[..s.len()]);
            f(i * BLOCK, &a[..s.len()]);
        }
    }
}

/// One operand of a binary kernel call.
#[derive(Clone, Copy)]
pub(crate) enum Operand<'a, T> {
    /// Elementwise operand.
    Slice(&'a [T]),
    /// Broadcast scalar (already widened).
    Scalar(f32),
}

impl<'a, T: FloatElem> Operand<'a, T> {
    fn as_f32(self) -> Operand<'a, f32> {
        match self {
            Operand::Slice(s) => match T::as_f32(s) {
                Some(f) => Operand::Slice(f),
                None => Operand::Scalar(f32::NAN),
            },
            Operand::Scalar(s) => Operand::Scalar(s),
        }
    }

    /// Widens elements `r` into `buf` (returns `None`), or returns the scalar.
    fn block(self, k: Kernels, r: std::ops::Range<usize>, buf: &mut [f32]) -> Option<f32> {
        match self {
            Operand::Slice(s) => {
                if let Some(part) = s.get(r) {
                    T::load(k, part, buf);
                }
                None
            }
            Operand::Scalar(v) => Some(v),
        }
    }
}

impl FloatElem for f32 {
    fn as_f32(s: &[Self]) -> Option<&[f32]> {
        Some(s)
    }
    fn as_f32_mut(s: &mut [Self]) -> Option<&mut [f32]> {
        Some(s)
    }
    fn load(_: Kernels, src: &[Self], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        dst[..n].copy_from_slice(&src[..n]);
    }
    fn store(_: Kernels, src: &[f32], dst: &mut [Self]) {
        let n = src.len().min(dst.len());
        dst[..n].copy_from_slice(&src[..n]);
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f64_rne(v: f64) -> Self {
        v as f32
    }
}

impl FloatElem for f16 {
    fn as_f32(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn as_f32_mut(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
    fn load(k: Kernels, src: &[Self], dst: &mut [f32]) {
        k.f16_to_f32(src, dst)
    }
    fn store(k: Kernels, src: &[f32], dst: &mut [Self]) {
        k.f32_to_f16(src, dst)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f64_rne(v: f64) -> Self {
        f16::from_f32(f64_to_f32_round_odd(v))
    }
}

impl FloatElem for bf16 {
    fn as_f32(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn as_f32_mut(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
    fn load(k: Kernels, src: &[Self], dst: &mut [f32]) {
        k.bf16_to_f32(src, dst)
    }
    fn store(k: Kernels, src: &[f32], dst: &mut [Self]) {
        k.f32_to_bf16(src, dst)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f64_rne(v: f64) -> Self {
        super::simd::bf16_from_f32_rne(f64_to_f32_round_odd(v))
    }
}

/// `f64 -> f32` rounding to odd (truncate, then set the last bit if inexact), so that a second
/// rounding to a format at least two bits narrower equals one direct rounding.
pub(crate) fn f64_to_f32_round_odd(v: f64) -> f32 {
    let f = v as f32;
    if !f.is_finite() || f64::from(f) == v {
        return f;
    }
    let bits = f.to_bits();
    let toward_zero = if f64::from(f).abs() > v.abs() {
        bits - 1
    } else {
        bits
    };
    f32::from_bits(toward_zero | 1)
}
