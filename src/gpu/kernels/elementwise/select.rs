//! Comparisons and selection on Xpu (`compare` and `select_where` in `elementwise.wgsl`).
//!
//! Invariants: both kernels are exact (compare values, copy bits) and read their operands in
//! place through strides (broadcast operands have stride 0, nothing is materialised); the
//! output is contiguous, one 32-bit word per invocation (four u8 results, or one to four
//! selected values). Comparisons take any dtype (integers compare as integers, floats as exact
//! f32 values, NaN tested on its bits); selection takes a u8 mask and two operands of one dtype.

use super::workgroups;
use crate::desc::kinds::CmpOp;
use crate::gpu::kernels::params::{Params, EXTRA, OFFSET0, OFFSET1};
use crate::gpu::kernels::{key, launch};
use crate::gpu::pipelines::ShaderId;
use crate::gpu::XpuStorage;
use crate::layout::Layout;
use crate::{DType, Error, Result};

/// Word of the mask's storage offset (after its eight strides at EXTRA).
const MASK_OFFSET: usize = EXTRA + 8;

impl XpuStorage {
    /// `op(self, rhs)` as u8 0/1; both layouts already have one (broadcast) shape.
    pub(crate) fn cmp(
        &self,
        l: &Layout,
        rhs: &XpuStorage,
        r: &Layout,
        op: CmpOp,
    ) -> Result<XpuStorage> {
        self.check_same_context(rhs, op.name())?;
        if rhs.dtype != self.dtype {
            return Err(Error::DTypeMismatch {
                op: op.name(),
                expected: self.dtype,
                got: rhs.dtype,
            });
        }
        if l.shape() != r.shape() {
            return Err(Error::shape(
                op.name(),
                format!("both operands broadcast to {:?}", l.shape()),
                r.shape(),
            ));
        }
        let out = XpuStorage::alloc(&self.ctx, DType::U8, l.numel())?;
        if out.len == 0 {
            return Ok(out);
        }
        let mut p = Params::new(out.len, op.name())?;
        p.shape(op.name(), l.shape(), &[l.strides(), r.strides()])?
            .set(OFFSET0, l.offset(), op.name())?
            .set(OFFSET1, r.offset(), op.name())?;
        let k = key(
            ShaderId::Elementwise,
            "compare",
            self.dtype,
            DType::U8,
            op.code(),
        );
        launch(&out, k, p, &[self, rhs], workgroups(&out))?;
        Ok(out)
    }

    /// `self ? a : b` for a u8 mask `self` (nonzero picks `a`); the three layouts already have
    /// one (broadcast) shape and `a`, `b` one dtype.
    pub(crate) fn select(
        &self,
        ml: &Layout,
        (a, al): (&XpuStorage, &Layout),
        (b, bl): (&XpuStorage, &Layout),
    ) -> Result<XpuStorage> {
        let op = "where_cond";
        self.check_same_context(a, op)?;
        self.check_same_context(b, op)?;
        if self.dtype != DType::U8 {
            return Err(Error::DTypeMismatch {
                op,
                expected: DType::U8,
                got: self.dtype,
            });
        }
        if b.dtype != a.dtype {
            return Err(Error::DTypeMismatch {
                op,
                expected: a.dtype,
                got: b.dtype,
            });
        }
        if al.shape() != ml.shape() || bl.shape() != ml.shape() {
            return Err(Error::ShapeMismatch {
                op,
                expected: format!("mask and values broadcast to {:?}", ml.shape()),
                got: format!("{:?} and {:?}", al.shape(), bl.shape()),
            });
        }
        let out = XpuStorage::alloc(&self.ctx, a.dtype, ml.numel())?;
        if out.len == 0 {
            return Ok(out);
        }
        let mut p = Params::new(out.len, op)?;
        p.shape(op, ml.shape(), &[al.strides(), bl.strides(), ml.strides()])?
            .set(OFFSET0, al.offset(), op)?
            .set(OFFSET1, bl.offset(), op)?
            .set(MASK_OFFSET, ml.offset(), op)?;
        let k = key(ShaderId::Elementwise, "select_where", a.dtype, a.dtype, 0);
        launch(&out, k, p, &[a, b, self], workgroups(&out))?;
        Ok(out)
    }
}
