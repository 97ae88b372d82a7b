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
use crate::desc::kinds::CmpOp;
use crate::layout::Layout;
use crate::{Error, Result};

/// `op(a, b)` as 0/1 over joint rows.
fn cmp_values<T: Copy + PartialOrd + Send + Sync>(
    op: CmpOp,
    a: (&[T], &Layout),
    b: (&[T], &Layout),
) -> Result<Vec<u8>> {
    // One loop per comparison: matching `op` per element kept the loop scalar (4x slower).
    fn run<T: Copy + Send + Sync>(
        op: CmpOp,
        a: (&[T], &Layout),
        b: (&[T], &Layout),
        f: impl Fn(T, T) -> bool + Sync,
    ) -> Result<Vec<u8>> {
        drive(op.name(), a, b, 8, |x, y, dst: &mut [u8]| {
            zip_piece(x, y, dst, |p, q| u8::from(f(p, q)))
        })
    }
    match op {
        CmpOp::Eq => run(op, a, b, |p, q| p == q),
        CmpOp::Ne => run(op, a, b, |p, q| p != q),
        CmpOp::Lt => run(op, a, b, |p, q| p < q),
        CmpOp::Le => run(op, a, b, |p, q| p <= q),
        CmpOp::Gt => run(op, a, b, |p, q| p > q),
        CmpOp::Ge => run(op, a, b, |p, q| p >= q),
    }
}

/// Bit patterns selected without branches: `(a & s) | (b & !s)` with `s` all ones where the
/// mask is set. A branch per element mispredicts on random masks (where_cond ran at a quarter
/// of the memory bandwidth); this form vectorises.
trait Bits:
    bytemuck::Pod
    + std::ops::BitAnd<Output = Self>
    + std::ops::BitOr<Output = Self>
    + std::ops::Not<Output = Self>
{
    /// All ones for `true`, zero for `false`.
    fn splat(keep: bool) -> Self;
}

macro_rules! bits {
    ($($t:ty),*) => {$(
        impl Bits for $t {
            fn splat(keep: bool) -> Self {
                <$t>::from(keep).wrapping_neg()
            }
        }
    )*};
}

bits!(u8, u16, u32);

/// `dst[i] = mask[i] != 0 ? a[i] : b[i]` over equal-length slices of one width.
fn pick_bits<B: Bits>(mask: &[u8], a: &[B], b: &[B], dst: &mut [B]) {
    let n = dst.len().min(mask.len()).min(a.len()).min(b.len());
    let (mask, a, b, dst) = (&mask[..n], &a[..n], &b[..n], &mut dst[..n]);
    for i in 0..n {
        let s = B::splat(mask[i] != 0);
        dst[i] = (a[i] & s) | (b[i] & !s);
    }
}

/// [`pick_bits`] for any 1-, 2- or 4-byte element, through its bits (a branch per element for
/// any other width, which no storage dtype has).
fn pick<T: bytemuck::Pod>(mask: &[u8], a: &[T], b: &[T], dst: &mut [T]) {
    fn as_bits<T: bytemuck::Pod, B: Bits>(mask: &[u8], a: &[T], b: &[T], dst: &mut [T]) -> bool {
        use bytemuck::{try_cast_slice, try_cast_slice_mut};
        match (
            try_cast_slice::<T, B>(a),
            try_cast_slice::<T, B>(b),
            try_cast_slice_mut::<T, B>(dst),
        ) {
            (Ok(a), Ok(b), Ok(dst)) => {
                pick_bits(mask, a, b, dst);
                true
            }
            _ => false,
        }
    }
    let done = match std::mem::size_of::<T>() {
        4 => as_bits::<T, u32>(mask, a, b, dst),
        2 => as_bits::<T, u16>(mask, a, b, dst),
        1 => as_bits::<T, u8>(mask, a, b, dst),
        _ => false,
    };
    if !done {
        for (((d, &keep), &p), &q) in dst.iter_mut().zip(mask).zip(a).zip(b) {
            *d = if keep != 0 { p } else { q };
        }
    }
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
    let m: Cow<[u8]> = contiguous_cow::<u8>("where_cond", mask, ml)?;
    let x: Cow<[T]> = contiguous_cow::<T>("where_cond", a, al)?;
    let y: Cow<[T]> = contiguous_cow::<T>("where_cond", b, bl)?;
    // Every element is written below, so a recycled buffer is fine.
    let mut out = super::pool::take::<T>("where_cond", n)?;
    parallel::for_each_flat(&mut out, |start, chunk| {
        let end = start + chunk.len();
        if let (Some(m), Some(x), Some(y)) =
            (m.get(start..end), x.get(start..end), y.get(start..end))
        {
            pick(m, x, y, chunk);
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
