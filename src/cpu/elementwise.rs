//! Elementwise operations: [`CpuStorage::unary`] and [`CpuStorage::binary`] (and the joint-row
//! walk, `drive`, that `select.rs` reuses for comparisons).
//!
//! Invariants: outputs are contiguous with the input's (broadcast) shape; float dtypes run the
//! SIMD kernels (16-bit through `f32` blocks, one rounding), `i32` runs scalar integer
//! semantics (`BinaryOp::apply_i32`, wrapping); anything else is `UnsupportedDType`. Binary
//! operands are walked as joint rows: each row piece is a slice, a broadcast scalar, or (for
//! other strides) a gathered copy, so the common broadcasts (scalar, bias row, column) hit the
//! contiguous kernels directly. Work over 64K elements is split across threads.

use super::elem::{FloatElem, Operand};
use super::parallel;
use super::simd::Kernels;
use super::storage::CpuStorage;
use super::strided::{check_layout, contiguous_cow, JointRows};
use crate::desc::kinds::{BinaryOp, UnaryOp};
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};

fn unsupported(op: &'static str, dtype: DType, hint: String) -> Error {
    Error::UnsupportedDType {
        op,
        dtype,
        device: Device::Cpu,
        hint,
    }
}

/// Relative cost of one element of `op` (used to decide when to go multi-threaded).
fn unary_cost(op: UnaryOp) -> usize {
    match op {
        UnaryOp::Neg
        | UnaryOp::Abs
        | UnaryOp::Relu
        | UnaryOp::Affine { .. }
        | UnaryOp::MaxScalar(_)
        | UnaryOp::MinScalar(_)
        | UnaryOp::Square
        | UnaryOp::Floor
        | UnaryOp::Ceil
        | UnaryOp::Round
        | UnaryOp::Trunc
        | UnaryOp::Sign => 1,
        UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Recip => 2,
        _ => 8,
    }
}

fn unary_float<T: FloatElem>(
    k: Kernels,
    src: &[T],
    layout: &Layout,
    op: UnaryOp,
) -> Result<Vec<T>> {
    let n = check_layout("unary", layout, src.len())?;
    let input = contiguous_cow("unary", src, layout)?;
    // Every element is written below, so a recycled buffer is fine.
    let mut out = super::pool::take::<T>("unary", n)?;
    parallel::for_each_chunk(&mut out, 64, 64 * unary_cost(op), |start, chunk| {
        if let Some(s) = input.get(start..start + chunk.len()) {
            T::unary(k, op, s, chunk);
        }
    });
    Ok(out)
}

fn round_i32(v: f64) -> i32 {
    v.round_ties_even() as i32
}

fn unary_i32(src: &[i32], layout: &Layout, op: UnaryOp) -> Result<Vec<i32>> {
    let f: Box<dyn Fn(i32) -> i32 + Sync> = match op {
        UnaryOp::Neg => Box::new(i32::wrapping_neg),
        UnaryOp::Abs => Box::new(i32::wrapping_abs),
        UnaryOp::Relu => Box::new(|x: i32| x.max(0)),
        UnaryOp::Square => Box::new(|x: i32| x.wrapping_mul(x)),
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => Box::new(|x: i32| x),
        UnaryOp::Sign => Box::new(i32::signum),
        UnaryOp::Affine { mul, add } => {
            Box::new(move |x: i32| round_i32(f64::from(x) * f64::from(mul) + f64::from(add)))
        }
        UnaryOp::MaxScalar(s) => Box::new(move |x: i32| round_i32(f64::from(x).max(f64::from(s)))),
        UnaryOp::MinScalar(s) => Box::new(move |x: i32| round_i32(f64::from(x).min(f64::from(s)))),
        other => {
            return Err(unsupported(
                "unary",
                DType::I32,
                format!(
                    ": {} on i32 is not defined (i32 supports neg, abs, relu, affine, \
                     maximum_scalar, minimum_scalar, square, sign); cast to a float dtype first",
                    other.name()
                ),
            ))
        }
    };
    let n = check_layout("unary", layout, src.len())?;
    let input = contiguous_cow("unary", src, layout)?;
    let mut out = super::pool::take::<i32>("unary", n)?;
    parallel::for_each_flat(&mut out, |start, chunk| {
        for (o, &x) in chunk.iter_mut().zip(input.iter().skip(start)) {
            *o = f(x);
        }
    });
    Ok(out)
}

impl CpuStorage {
    /// Applies `op` to every element of `layout`; the result is contiguous in `layout`'s shape.
    /// Float dtypes support every op; `i32` supports neg, abs, relu, affine (rounded to
    /// nearest, ties to even, saturating), maximum/minimum_scalar and square.
    pub fn unary(&self, layout: &Layout, op: UnaryOp) -> Result<CpuStorage> {
        let k = Kernels::current();
        Ok(match self {
            CpuStorage::F32(v) => CpuStorage::F32(unary_float(k, v, layout, op)?),
            CpuStorage::F16(v) => CpuStorage::F16(unary_float(k, v, layout, op)?),
            CpuStorage::BF16(v) => CpuStorage::BF16(unary_float(k, v, layout, op)?),
            CpuStorage::I32(v) => CpuStorage::I32(unary_i32(v, layout, op)?),
            CpuStorage::U8(_) => {
                return Err(unsupported(
                    "unary",
                    DType::U8,
                    format!(": {} needs a float or i32 tensor; cast first", op.name()),
                ))
            }
        })
    }

    /// `op(lhs, rhs)` elementwise. Both layouts must already have the same (broadcast) shape;
    /// strides may be 0. The result is contiguous in that shape. Same dtype required; floats and
    /// `i32` (wrapping integer semantics) are supported.
    pub fn binary(
        &self,
        lhs: &Layout,
        rhs: &CpuStorage,
        rhs_layout: &Layout,
        op: BinaryOp,
    ) -> Result<CpuStorage> {
        if self.dtype() != rhs.dtype() {
            return Err(Error::DTypeMismatch {
                op: op.name(),
                expected: self.dtype(),
                got: rhs.dtype(),
            });
        }
        if lhs.shape() != rhs_layout.shape() {
            return Err(Error::shape(
                op.name(),
                format!("both operands broadcast to {:?}", lhs.shape()),
                rhs_layout.shape(),
            ));
        }
        let k = Kernels::current();
        Ok(match (self, rhs) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => {
                CpuStorage::F32(binary_float(k, op, a, lhs, b, rhs_layout)?)
            }
            (CpuStorage::F16(a), CpuStorage::F16(b)) => {
                CpuStorage::F16(binary_float(k, op, a, lhs, b, rhs_layout)?)
            }
            (CpuStorage::BF16(a), CpuStorage::BF16(b)) => {
                CpuStorage::BF16(binary_float(k, op, a, lhs, b, rhs_layout)?)
            }
            (CpuStorage::I32(a), CpuStorage::I32(b)) => {
                CpuStorage::I32(binary_i32(op, a, lhs, b, rhs_layout)?)
            }
            _ => {
                return Err(unsupported(
                    op.name(),
                    self.dtype(),
                    ": binary ops need float or i32 operands; cast first".to_string(),
                ))
            }
        })
    }
}

/// One row piece of an operand: a slice, a broadcast element, or a gathered copy.
pub(super) enum Arg<'a, T> {
    Slice(&'a [T]),
    Scalar(T),
}

/// The piece of `len` elements from `base` at `stride` (a gathered copy into `scratch` for
/// strides other than 0 and 1: an error naming `op` when the host will not allocate it).
fn arg<'a, T: Copy>(
    op: &'static str,
    src: &'a [T],
    (base, stride, len): (usize, usize, usize),
    scratch: &'a mut Vec<T>,
) -> Result<Arg<'a, T>> {
    Ok(match stride {
        0 => match src.get(base) {
            Some(&v) => Arg::Scalar(v),
            None => Arg::Slice(&[]),
        },
        1 => Arg::Slice(src.get(base..base + len).unwrap_or(&[])),
        s => {
            scratch.clear();
            scratch
                .try_reserve(len)
                .map_err(|_| super::alloc::out_of_memory(op, super::alloc::bytes_of::<T>(len)))?;
            scratch.extend((0..len).filter_map(|j| src.get(base + j * s).copied()));
            Arg::Slice(scratch)
        }
    })
}

/// Walks the joint rows of two checked layouts, calling `piece(lhs, rhs, dst)` per row piece;
/// `cost` is the relative work of one element (for the threading decision).
pub(super) fn drive<T, O, F>(
    name: &'static str,
    (a, al): (&[T], &Layout),
    (b, bl): (&[T], &Layout),
    cost: usize,
    piece: F,
) -> Result<Vec<O>>
where
    T: Copy + Send + Sync,
    O: Copy + Send + Sync + super::pool::Recycle,
    F: Fn(Arg<'_, T>, Arg<'_, T>, &mut [O]) + Sync,
{
    let n = check_layout(name, al, a.len())?;
    check_layout(name, bl, b.len())?;
    // Every element is written below, so a recycled buffer is fine.
    let mut out = super::pool::take::<O>(name, n)?;
    if n == 0 {
        return Ok(out);
    }
    let rows = JointRows::new(al, bl);
    // A gathered piece the host will not allocate stops the op (errors leave the tasks).
    let failed = super::alloc::FirstError::default();
    parallel::for_each_chunk(&mut out, 64, cost, |start, chunk| {
        let (mut sa, mut sb) = (Vec::new(), Vec::new());
        rows.for_each_piece(start, chunk.len(), |o, ba, bb, len| {
            if failed.failed() {
                return;
            }
            if let Some(dst) = chunk.get_mut(o..o + len) {
                let x = arg(name, a, (ba, rows.strides.0, len), &mut sa);
                let y = arg(name, b, (bb, rows.strides.1, len), &mut sb);
                match (x, y) {
                    (Ok(x), Ok(y)) => piece(x, y, dst),
                    (Err(e), _) | (_, Err(e)) => failed.record(Err(e)),
                }
            }
        });
    });
    failed.into_result()?;
    Ok(out)
}

/// Relative cost of one element of a binary op.
fn binary_cost(op: BinaryOp) -> usize {
    if op == BinaryOp::Pow {
        512
    } else {
        64
    }
}

fn binary_float<T: FloatElem>(
    k: Kernels,
    op: BinaryOp,
    a: &[T],
    al: &Layout,
    b: &[T],
    bl: &Layout,
) -> Result<Vec<T>> {
    drive(op.name(), (a, al), (b, bl), binary_cost(op), |x, y, dst| {
        T::binary(k, op, widen(x), widen(y), dst)
    })
}

fn widen<T: FloatElem>(x: Arg<'_, T>) -> Operand<'_, T> {
    match x {
        Arg::Slice(s) => Operand::Slice(s),
        Arg::Scalar(v) => Operand::Scalar(v.to_f32()),
    }
}

fn binary_i32(op: BinaryOp, a: &[i32], al: &Layout, b: &[i32], bl: &Layout) -> Result<Vec<i32>> {
    drive(op.name(), (a, al), (b, bl), binary_cost(op), |x, y, dst| {
        zip_piece(x, y, dst, |p, q| op.apply_i32(p, q))
    })
}

/// `dst[i] = f(x[i], y[i])` over one row piece of two operands (slices or broadcast scalars).
pub(super) fn zip_piece<T: Copy, O: Copy>(
    x: Arg<'_, T>,
    y: Arg<'_, T>,
    dst: &mut [O],
    f: impl Fn(T, T) -> O,
) {
    match (x, y) {
        (Arg::Slice(x), Arg::Slice(y)) => {
            for (d, (&p, &q)) in dst.iter_mut().zip(x.iter().zip(y)) {
                *d = f(p, q);
            }
        }
        (Arg::Slice(x), Arg::Scalar(q)) => {
            for (d, &p) in dst.iter_mut().zip(x) {
                *d = f(p, q);
            }
        }
        (Arg::Scalar(p), Arg::Slice(y)) => {
            for (d, &q) in dst.iter_mut().zip(y) {
                *d = f(p, q);
            }
        }
        (Arg::Scalar(p), Arg::Scalar(q)) => dst.fill(f(p, q)),
    }
}
