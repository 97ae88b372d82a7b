//! Reductions along one dim and softmax on Xpu (`shaders/reduce.wgsl`).
//!
//! One workgroup reduces one output row, accumulating in f32 (float inputs) or exactly in i32
//! (i32 inputs: wrapping sum, integer max/min/argmax/argmin, as the Cpu kernels; no mean). The
//! kernels write 32-bit results (f32 or i32 values, or i32 indices for argmax/argmin); 16-bit
//! outputs are produced by one extra cast, so no two workgroups ever write the same 32-bit word.

use super::params::{grid, Params, EXTRA, OFFSET0};
use super::{key, launch};
use crate::layout::Layout;
use crate::ops::kinds::ReduceOp;
use crate::xpu::pipelines::ShaderId;
use crate::xpu::XpuStorage;
use crate::{DType, Device, Error, Result};

/// The outer layout (dim removed), the reduced length and its stride.
fn split(layout: &Layout, dim: usize) -> (Layout, usize, usize) {
    let mut shape = layout.shape().to_vec();
    let mut strides = layout.strides().to_vec();
    let len = shape.remove(dim);
    let stride = strides.remove(dim);
    (
        Layout::from_parts(shape, strides, layout.offset()),
        len,
        stride,
    )
}

fn check_float(s: &XpuStorage, op: &'static str) -> Result<()> {
    if s.dtype.is_float() {
        Ok(())
    } else {
        Err(Error::UnsupportedDType {
            op,
            dtype: s.dtype,
            device: Device::Xpu,
            hint: "; Xpu reductions take f32, f16 or bf16".into(),
        })
    }
}

impl XpuStorage {
    fn row_params(
        &self,
        layout: &Layout,
        dim: usize,
        op: &'static str,
    ) -> Result<(Params, usize, usize)> {
        let (outer, len, stride) = split(layout, dim);
        let rows = outer.numel();
        let mut p = Params::new(rows, op)?;
        p.shape(op, outer.shape(), &[outer.strides()])?
            .set(OFFSET0, outer.offset(), op)?
            .set(EXTRA, len, op)?
            .set(EXTRA + 1, stride, op)?;
        Ok((p, rows, len))
    }

    /// Reduces `dim` away; output contiguous over the remaining dims.
    pub(crate) fn reduce(&self, layout: &Layout, dim: usize, op: ReduceOp) -> Result<XpuStorage> {
        let int = self.dtype == DType::I32;
        if int && op == ReduceOp::Mean {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: self.dtype,
                device: Device::Xpu,
                hint: "; mean needs a float tensor (i32 takes sum, max, min, argmax, argmin)"
                    .into(),
            });
        }
        if !int {
            check_float(self, op.name())?;
        }
        let (p, rows, len) = self.row_params(layout, dim, op.name())?;
        if len == 0 && op != ReduceOp::Sum && op != ReduceOp::Mean {
            return Err(Error::invalid(
                op.name(),
                format!("cannot take {} over an empty dim {dim}", op.name()),
            ));
        }
        let word_dtype = if op.returns_index() || int {
            DType::I32
        } else {
            DType::F32
        };
        let out = XpuStorage::alloc(&self.ctx, word_dtype, rows)?;
        if rows == 0 {
            return self.finish(out, op);
        }
        let entry = if int { "reduce_i32" } else { "reduce" };
        let k = key(ShaderId::Reduce, entry, self.dtype, word_dtype, op.code());
        launch(
            &out,
            k,
            p,
            &[self],
            grid(rows, self.ctx.limits.max_compute_workgroups_per_dimension),
        )?;
        self.finish(out, op)
    }

    fn finish(&self, out: XpuStorage, op: ReduceOp) -> Result<XpuStorage> {
        if op.returns_index() || self.dtype == DType::F32 || self.dtype == DType::I32 {
            return Ok(out);
        }
        let n = out.len;
        out.copy_cast(&Layout::contiguous(&[n]), self.dtype)
    }

    /// Softmax along `dim`; the result is contiguous in the order of `layout` with `dim` moved
    /// last, returned with the layout that views it in the original dim order.
    pub(crate) fn softmax(&self, layout: &Layout, dim: usize) -> Result<(XpuStorage, Layout)> {
        check_float(self, "softmax")?;
        let (p, rows, len) = self.row_params(layout, dim, "softmax")?;
        let mut moved_shape = layout.shape().to_vec();
        let d = moved_shape.remove(dim);
        moved_shape.push(d);
        let rank = moved_shape.len();
        // perm[i] is the position of original dim i in the dim-last order.
        let perm: Vec<usize> = (0..rank)
            .map(|i| match i.cmp(&dim) {
                std::cmp::Ordering::Less => i,
                std::cmp::Ordering::Equal => rank - 1,
                std::cmp::Ordering::Greater => i - 1,
            })
            .collect();
        let view = Layout::contiguous(&moved_shape).permute(&perm)?;
        let out = XpuStorage::alloc(&self.ctx, DType::F32, rows * len)?;
        if rows * len > 0 {
            let k = key(ShaderId::Reduce, "softmax", self.dtype, DType::F32, 0);
            launch(
                &out,
                k,
                p,
                &[self],
                grid(rows, self.ctx.limits.max_compute_workgroups_per_dimension),
            )?;
        }
        if self.dtype == DType::F32 {
            return Ok((out, view));
        }
        let n = out.len;
        Ok((out.copy_cast(&Layout::contiguous(&[n]), self.dtype)?, view))
    }
}
