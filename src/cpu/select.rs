//! Comparisons and selection on the Cpu: [`CpuStorage::cmp`] and [`CpuStorage::select`].
//!
//! Invariants: both are exact (no arithmetic: values are compared or copied bit for bit);
//! outputs are contiguous in the operands' common (already broadcast) shape; comparisons take
//! two operands of one dtype (any dtype: 16-bit floats compare as their exact values, NaN
//! compares false except under `Ne`) and give `u8` 0/1; selection takes a `u8` mask (nonzero
//! picks the first value operand) and two value operands of one dtype. Operands are read in
//! place by their strides: comparisons walk joint rows (a broadcast operand is never
//! materialised), selection gathers a strided or broadcast operand once.

use std::borrow::Cow;

use super::elementwise::{drive, zip_piece};
use super::parallel;
use super::storage::CpuStorage;
use super::strided::{check_layout, contiguous_cow};
use crate::layout::Layout;
use crate::ops::kinds::CmpOp;
use crate::{Error, Result};

/// `op(a, b)` as 0/1 over joint rows.
fn cmp_values<T: Copy + PartialOrd + Send + Sync>(
    op: CmpOp,
    a: (&[T], &Layout),
    b: (&[T], &Layout),
) -> Result<Vec<u8>> {
    drive(op.name(), a, b, 8, |x, y, dst: &mut [u8]| {
        zip_piece(x, y, dst, |p, q| u8::from(op.apply(p, q)))
    })
}

/// `mask ? a : b` elementwise over three layouts of one shape.
fn select_values<T>(
    (mask, ml): (&[u8], &Layout),
    (a, al): (&[T], &Layout),
    (b, bl): (&[T], &Layout),
) -> Result<Vec<T>>
where
    T: Copy + Send + Sync + bytemuck::Zeroable + super::pool::Recycle,
    [T]: ToOwned<Owned = Vec<T>>,
{
    let n = check_layout("where_cond", ml, mask.len())?;
    check_layout("where_cond", al, a.len())?;
    check_layout("where_cond", bl, b.len())?;
    let m: Cow<[u8]> = contiguous_cow::<u8>(mask, ml);
    let x: Cow<[T]> = contiguous_cow::<T>(a, al);
    let y: Cow<[T]> = contiguous_cow::<T>(b, bl);
    // Every element is written below, so a recycled buffer is fine.
    let mut out = super::pool::take::<T>(n);
    parallel::for_each_flat(&mut out, |start, chunk| {
        let end = start + chunk.len();
        if let (Some(m), Some(x), Some(y)) =
            (m.get(start..end), x.get(start..end), y.get(start..end))
        {
            for (((d, &keep), &p), &q) in chunk.iter_mut().zip(m).zip(x).zip(y) {
                *d = if keep != 0 { p } else { q };
            }
        }
    });
    Ok(out)
}

impl CpuStorage {
    /// `op(self, rhs)` as a `u8` 0/1 tensor; both layouts already have one (broadcast) shape.
    pub fn cmp(&self, l: &Layout, rhs: &CpuStorage, r: &Layout, op: CmpOp) -> Result<CpuStorage> {
        if self.dtype() != rhs.dtype() {
            return Err(Error::DTypeMismatch {
                op: op.name(),
                expected: self.dtype(),
                got: rhs.dtype(),
            });
        }
        if l.shape() != r.shape() {
            return Err(Error::shape(
                op.name(),
                format!("both operands broadcast to {:?}", l.shape()),
                r.shape(),
            ));
        }
        let out = match (self, rhs) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => cmp_values(op, (a, l), (b, r))?,
            (CpuStorage::F16(a), CpuStorage::F16(b)) => cmp_values(op, (a, l), (b, r))?,
            (CpuStorage::BF16(a), CpuStorage::BF16(b)) => cmp_values(op, (a, l), (b, r))?,
            (CpuStorage::I32(a), CpuStorage::I32(b)) => cmp_values(op, (a, l), (b, r))?,
            (CpuStorage::U8(a), CpuStorage::U8(b)) => cmp_values(op, (a, l), (b, r))?,
            _ => {
                return Err(Error::DTypeMismatch {
                    op: op.name(),
                    expected: self.dtype(),
                    got: rhs.dtype(),
                })
            }
        };
        Ok(CpuStorage::U8(out))
    }

    /// `self ? a : b` for a `u8` mask `self` (nonzero picks `a`); the three layouts already have
    /// one (broadcast) shape and `a`, `b` one dtype.
    pub fn select(
        &self,
        ml: &Layout,
        (a, al): (&CpuStorage, &Layout),
        (b, bl): (&CpuStorage, &Layout),
    ) -> Result<CpuStorage> {
        let op = "where_cond";
        let CpuStorage::U8(mask) = self else {
            return Err(Error::DTypeMismatch {
                op,
                expected: crate::DType::U8,
                got: self.dtype(),
            });
        };
        if al.shape() != ml.shape() || bl.shape() != ml.shape() {
            return Err(Error::ShapeMismatch {
                op,
                expected: format!("mask and values broadcast to {:?}", ml.shape()),
                got: format!("{:?} and {:?}", al.shape(), bl.shape()),
            });
        }
        let m = (mask.as_slice(), ml);
        Ok(match (a, b) {
            (CpuStorage::F32(x), CpuStorage::F32(y)) => {
                CpuStorage::F32(select_values(m, (x, al), (y, bl))?)
            }
            (CpuStorage::F16(x), CpuStorage::F16(y)) => {
                CpuStorage::F16(select_values(m, (x, al), (y, bl))?)
            }
            (CpuStorage::BF16(x), CpuStorage::BF16(y)) => {
                CpuStorage::BF16(select_values(m, (x, al), (y, bl))?)
            }
            (CpuStorage::I32(x), CpuStorage::I32(y)) => {
                CpuStorage::I32(select_values(m, (x, al), (y, bl))?)
            }
            (CpuStorage::U8(x), CpuStorage::U8(y)) => {
                CpuStorage::U8(select_values(m, (x, al), (y, bl))?)
            }
            _ => {
                return Err(Error::DTypeMismatch {
                    op,
                    expected: a.dtype(),
                    got: b.dtype(),
                })
            }
        })
    }
}
