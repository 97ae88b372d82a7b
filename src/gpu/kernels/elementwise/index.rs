//! `index_select` and `gather` on Xpu (the `index_select` entry of `elementwise.wgsl`).
//!
//! Invariants: the caller has checked every index against the indexed dim (the kernel trusts
//! them: [`crate::Tensor::index_select`] and [`crate::Tensor::gather`] read them back first);
//! the source and the indices are read in place through their strides; values are copied as
//! bits into a contiguous output, one 32-bit word per invocation. Both ops are one launch:
//! `index_select` is a gather whose index tensor is the 1-D indices broadcast over every other
//! dim of the output (stride 0 there).

use super::workgroups;
use crate::gpu::kernels::params::{Params, EXTRA, OFFSET0, OFFSET1};
use crate::gpu::kernels::{key, launch};
use crate::gpu::pipelines::ShaderId;
use crate::gpu::XpuStorage;
use crate::layout::Layout;
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
        let mut shape = l.shape().to_vec();
        shape[dim] = il.shape()[0];
        let mut index_strides = vec![0; shape.len()];
        index_strides[dim] = il.strides()[0];
        let index = Layout::from_parts(shape, index_strides, il.offset());
        self.gather_launch(op, l, dim, (ix, &index))
    }

    /// `out[i] = self[i with coordinate dim replaced by index[i]]` over the index's shape
    /// (`torch.gather`); the caller has checked the shapes and every index.
    pub(crate) fn gather(
        &self,
        l: &Layout,
        dim: usize,
        (ix, il): (&XpuStorage, &Layout),
    ) -> Result<XpuStorage> {
        let op = "gather";
        let fits = il.rank() == l.rank()
            && (0..l.rank()).all(|d| d == dim || il.shape()[d] <= l.shape()[d]);
        if ix.dtype != DType::I32 || dim >= l.rank() || !fits {
            return Err(Error::invalid(
                op,
                format!(
                    "i32 indices into dim {dim} no larger than the source {:?} elsewhere, got {} \
                     indices of shape {:?}",
                    l.shape(),
                    ix.dtype,
                    il.shape()
                ),
            ));
        }
        self.gather_launch(op, l, dim, (ix, il))
    }

    /// Output shape `il.shape()`: source coordinates are the output's, the indexed dim's taken
    /// from the index tensor.
    fn gather_launch(
        &self,
        op: &'static str,
        l: &Layout,
        dim: usize,
        (ix, il): (&XpuStorage, &Layout),
    ) -> Result<XpuStorage> {
        self.check_same_context(ix, op)?;
        let out = XpuStorage::alloc(&self.ctx, self.dtype, il.numel())?;
        if out.len == 0 {
            return Ok(out);
        }
        let mut strides = l.strides().to_vec();
        strides[dim] = 0;
        let mut p = Params::new(out.len, op)?;
        p.shape(op, il.shape(), &[&strides, il.strides()])?
            .set(OFFSET0, l.offset(), op)?
            .set(OFFSET1, il.offset(), op)?
            .set(EXTRA + 2, l.strides()[dim], op)?;
        let k = key(
            ShaderId::Elementwise,
            "index_select",
            self.dtype,
            self.dtype,
            0,
        );
        launch(&out, k, p, &[self, ix], workgroups(&out))?;
        Ok(out)
    }
}
