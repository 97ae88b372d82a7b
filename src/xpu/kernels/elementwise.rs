//! Copy/cast, unary, binary and concatenation on Xpu (`shaders/elementwise.wgsl`; comparisons and
//! selection, in the same shader, are launched by `select.rs`).
//!
//! Every launcher reads strided inputs (any view) and writes a fresh contiguous output, one
//! 32-bit word per invocation. Unary ops run on float dtypes; binary ops on floats and I32;
//! copies, casts and concatenation on every dtype, bit-exact when the dtype is unchanged.

use super::params::{grid, Params, EXTRA, OFFSET0, OFFSET1};
use super::{key, launch};
use crate::layout::Layout;
use crate::ops::kinds::{BinaryOp, UnaryOp};
use crate::xpu::pipelines::ShaderId;
use crate::xpu::XpuStorage;
use crate::{DType, Device, Error, Result};

pub(super) fn words(len: usize, dtype: DType) -> usize {
    let per_word = 4 / dtype.size_in_bytes();
    len.div_ceil(per_word)
}

pub(super) fn workgroups(out: &XpuStorage) -> [u32; 3] {
    grid(
        words(out.len, out.dtype).div_ceil(256),
        out.ctx.limits.max_compute_workgroups_per_dimension,
    )
}

impl XpuStorage {
    /// Gathers `layout` into a new contiguous storage of `dtype`.
    pub(crate) fn copy_cast(&self, layout: &Layout, dtype: DType) -> Result<XpuStorage> {
        let out = XpuStorage::alloc(&self.ctx, dtype, layout.numel())?;
        if out.len == 0 {
            return Ok(out);
        }
        let mut p = Params::new(out.len, "copy")?;
        p.shape("copy", layout.shape(), &[layout.strides()])?.set(
            OFFSET0,
            layout.offset(),
            "copy",
        )?;
        let k = key(ShaderId::Elementwise, "copy_cast", self.dtype, dtype, 0);
        launch(&out, k, p, &[self], workgroups(&out))?;
        Ok(out)
    }

    /// A contiguous copy: a plain buffer copy when the view is contiguous and word-aligned,
    /// else the copy kernel.
    pub(crate) fn duplicate(&self, layout: &Layout) -> Result<XpuStorage> {
        let size = self.dtype.size_in_bytes();
        let bytes = crate::layout::alloc_bytes("copy", layout.numel(), self.dtype)?;
        let offset = layout.offset() * size;
        if !layout.is_contiguous() || !offset.is_multiple_of(4) || bytes == 0 {
            return self.copy_cast(layout, self.dtype);
        }
        let out = XpuStorage::alloc(&self.ctx, self.dtype, layout.numel())?;
        let mut stream = self.ctx.stream.lock().map_err(|_| crate::xpu::poisoned())?;
        stream.copy(
            &self.ctx,
            &self.buffer,
            offset as u64,
            &out.buffer,
            0,
            (bytes as u64).div_ceil(4) * 4,
        );
        Ok(out)
    }

    /// Applies a unary op to a float tensor.
    pub(crate) fn unary(&self, layout: &Layout, op: UnaryOp) -> Result<XpuStorage> {
        if !self.dtype.is_float() {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: self.dtype,
                device: Device::Xpu,
                hint: "; cast with to_dtype(DType::F32) first".into(),
            });
        }
        let out = XpuStorage::alloc(&self.ctx, self.dtype, layout.numel())?;
        if out.len == 0 {
            return Ok(out);
        }
        let [a, b] = op.params();
        let mut p = Params::new(out.len, op.name())?;
        p.shape(op.name(), layout.shape(), &[layout.strides()])?
            .set(OFFSET0, layout.offset(), op.name())?
            .scalars(a, b);
        let k = key(
            ShaderId::Elementwise,
            "unary",
            self.dtype,
            self.dtype,
            op.code(),
        );
        launch(&out, k, p, &[self], workgroups(&out))?;
        Ok(out)
    }

    /// Applies a binary op; both layouts are already broadcast to the output shape.
    pub(crate) fn binary(
        &self,
        lhs: &Layout,
        rhs: &XpuStorage,
        rhs_layout: &Layout,
        op: BinaryOp,
    ) -> Result<XpuStorage> {
        self.check_same_context(rhs, op.name())?;
        if !(self.dtype.is_float() || self.dtype == DType::I32) {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: self.dtype,
                device: Device::Xpu,
                hint: "; binary ops take f32, f16, bf16 or i32".into(),
            });
        }
        let out = XpuStorage::alloc(&self.ctx, self.dtype, lhs.numel())?;
        if out.len == 0 {
            return Ok(out);
        }
        let mut p = Params::new(out.len, op.name())?;
        p.shape(
            op.name(),
            lhs.shape(),
            &[lhs.strides(), rhs_layout.strides()],
        )?
        .set(OFFSET0, lhs.offset(), op.name())?
        .set(OFFSET1, rhs_layout.offset(), op.name())?;
        let k = key(
            ShaderId::Elementwise,
            "binary",
            self.dtype,
            self.dtype,
            op.code(),
        );
        launch(&out, k, p, &[self, rhs], workgroups(&out))?;
        Ok(out)
    }

    /// Concatenates parts (same dtype, shapes equal but along `dim`) into a contiguous tensor.
    pub(crate) fn cat(
        parts: &[(&XpuStorage, &Layout)],
        dim: usize,
        out_shape: &[usize],
    ) -> Result<XpuStorage> {
        let Some((first, _)) = parts.first() else {
            return Err(Error::invalid("cat", "expected at least one tensor"));
        };
        let numel: usize = out_shape.iter().product();
        let out = XpuStorage::alloc(&first.ctx, first.dtype, numel)?;
        if numel == 0 {
            return Ok(out);
        }
        let inner: usize = out_shape[dim + 1..].iter().product();
        let mut start = 0;
        for (storage, layout) in parts {
            first.check_same_context(storage, "cat")?;
            let len = layout.shape()[dim];
            if layout.numel() > 0 {
                let mut p = Params::new(numel, "cat")?;
                // The part's own shape is not coalesced across the cat dim: index math needs it
                // only to map a logical index of the part to storage.
                p.shape("cat", layout.shape(), &[layout.strides()])?
                    .set(OFFSET0, layout.offset(), "cat")?
                    .set(EXTRA, inner, "cat")?
                    .set(EXTRA + 1, out_shape[dim], "cat")?
                    .set(EXTRA + 2, start, "cat")?
                    .set(EXTRA + 3, len, "cat")?;
                let k = key(
                    ShaderId::Elementwise,
                    "cat_part",
                    first.dtype,
                    first.dtype,
                    0,
                );
                launch(&out, k, p, &[storage], workgroups(&out))?;
            }
            start += len;
        }
        Ok(out)
    }
}
