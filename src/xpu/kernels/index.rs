//! `index_select` on Xpu (`index_select` in `shaders/elementwise.wgsl`).
//!
//! Invariants: the caller has checked every index against the indexed dim (the kernel trusts
//! them: [`crate::Tensor::index_select`] reads them back first); the source and the indices are
//! read in place through their strides; values are copied as bits into a contiguous output,
//! one 32-bit word per invocation.

use super::elementwise::workgroups;
use super::params::{Params, EXTRA, OFFSET0};
use super::{key, launch};
use crate::layout::Layout;
use crate::xpu::pipelines::ShaderId;
use crate::xpu::XpuStorage;
use crate::{DType, Error, Result};

impl XpuStorage {
    /// The slices of `self` (layout `l`) along `dim` at the `i32` indices `(ix, il)`, which
    /// the caller has checked to lie in `0..size of dim`.
    pub(crate) fn index_select(
        &self,
        l: &Layout,
        dim: usize,
        (ix, il): (&XpuStorage, &Layout),
    ) -> Result<XpuStorage> {
        let op = "index_select";
        self.check_same_context(ix, op)?;
        if ix.dtype != DType::I32 || il.rank() != 1 || dim >= l.rank() {
            return Err(Error::invalid(
                op,
                format!(
                    "1-D i32 indices into dim {dim} of a rank-{} tensor, got {} indices of rank {}",
                    l.rank(),
                    ix.dtype,
                    il.rank()
                ),
            ));
        }
        let nidx = il.shape()[0];
        let mut shape = l.shape().to_vec();
        shape[dim] = nidx;
        let inner: usize = shape[dim + 1..].iter().product();
        let out = XpuStorage::alloc(&self.ctx, self.dtype, shape.iter().product())?;
        if out.len == 0 {
            return Ok(out);
        }
        let mut strides = l.strides().to_vec();
        strides[dim] = 0;
        let mut p = Params::new(out.len, op)?;
        p.shape(op, &shape, &[&strides])?
            .set(OFFSET0, l.offset(), op)?
            .set(EXTRA, inner, op)?
            .set(EXTRA + 1, nidx, op)?
            .set(EXTRA + 2, l.strides()[dim], op)?
            .set(EXTRA + 3, il.strides()[0], op)?
            .set(EXTRA + 4, il.offset(), op)?;
        let k = key(ShaderId::Elementwise, op, self.dtype, self.dtype, 0);
        launch(&out, k, p, &[self, ix], workgroups(&out))?;
        Ok(out)
    }
}
