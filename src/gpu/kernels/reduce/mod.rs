//! Reductions along one dim and softmax on Xpu (`reduce.wgsl`).
//!
//! One workgroup reduces one output row, accumulating in f32 (float inputs) or exactly in i32
//! (i32 inputs: wrapping sum, integer max/min/argmax/argmin, as the Cpu kernels; no mean) —
//! except where [`per_output`] picks one invocation per row instead: short reduced dims, where
//! most of a workgroup would idle, and column reductions over many rows, where a workgroup per
//! row reads one element per cache line while neighbouring invocations of the per-output
//! kernels read neighbouring words. The
//! kernels write 32-bit results (f32 or i32 values, or i32 indices for argmax/argmin); 16-bit
//! outputs are produced by one extra cast, so no two workgroups ever write the same 32-bit word.

use crate::desc::kinds::ReduceOp;
use crate::gpu::kernels::params::{grid, Params, EXTRA, OFFSET0};
use crate::gpu::kernels::{key, launch};
use crate::gpu::pipelines::ShaderId;
use crate::gpu::XpuStorage;
use crate::layout::Layout;
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

/// Reduced lengths up to this take one invocation per output row whatever the stride.
const PER_OUTPUT_MAX_LEN: usize = 64;
/// Column reductions (reduced stride != 1) over at least this many rows take one invocation
/// per row: 32 workgroups of 256, enough to keep a GPU's memory system busy; with fewer rows
/// one workgroup per row keeps more invocations in flight.
const PER_OUTPUT_MIN_COLUMNS: usize = 8192;

/// Whether the one-invocation-per-row kernels (`*_each` in `reduce.wgsl`) take this reduction.
fn per_output(rows: usize, len: usize, stride: usize) -> bool {
    len <= PER_OUTPUT_MAX_LEN || (stride != 1 && rows >= PER_OUTPUT_MIN_COLUMNS)
}

/// Dispatch geometry for `rows` rows: one workgroup each, or one invocation each.
fn row_grid(ctx_max: u32, rows: usize, each: bool) -> [u32; 3] {
    let groups = if each { rows.div_ceil(256) } else { rows };
    grid(groups, ctx_max)
}

impl XpuStorage {
    fn row_params(
        &self,
        layout: &Layout,
        dim: usize,
        op: &'static str,
    ) -> Result<(Params, usize, usize, bool)> {
        let (outer, len, stride) = split(layout, dim);
        let rows = outer.numel();
        let inner: usize = layout.shape()[dim + 1..].iter().product();
        let mut p = Params::new(rows, op)?;
        p.shape(op, outer.shape(), &[outer.strides()])?
            .set(OFFSET0, outer.offset(), op)?
            .set(EXTRA, len, op)?
            .set(EXTRA + 1, stride, op)?
            .set(EXTRA + 2, inner.max(1), op)?;
        Ok((p, rows, len, per_output(rows, len, stride)))
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
        let (p, rows, len, each) = self.row_params(layout, dim, op.name())?;
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
        let entry = match (int, each) {
            (false, false) => "reduce",
            (true, false) => "reduce_i32",
            (false, true) => "reduce_each",
            (true, true) => "reduce_each_i32",
        };
        let k = key(ShaderId::Reduce, entry, self.dtype, word_dtype, op.code());
        let max = self.ctx.limits.max_compute_workgroups_per_dimension;
        launch(&out, k, p, &[self], row_grid(max, rows, each))?;
        self.finish(out, op)
    }

    fn finish(&self, out: XpuStorage, op: ReduceOp) -> Result<XpuStorage> {
        if op.returns_index() || self.dtype == DType::F32 || self.dtype == DType::I32 {
            return Ok(out);
        }
        let n = out.len;
        out.copy_cast(&Layout::contiguous(&[n]), self.dtype)
    }

    /// Inclusive prefix sums of an f32 storage along `dim`, contiguous in `layout`'s shape.
    pub(crate) fn cumsum_f32(&self, layout: &Layout, dim: usize) -> Result<XpuStorage> {
        let op = "cumsum";
        if self.dtype != DType::F32 {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype,
                device: Device::Xpu,
                hint: "; the storage-level scan takes f32 (Tensor::cumsum widens 16-bit floats)"
                    .into(),
            });
        }
        let (p, rows, len, each) = self.row_params(layout, dim, op)?;
        let out = XpuStorage::alloc(&self.ctx, DType::F32, rows * len)?;
        if rows * len > 0 {
            let entry = if each { "cumsum_each" } else { "cumsum" };
            let k = key(ShaderId::Reduce, entry, DType::F32, DType::F32, 0);
            let max = self.ctx.limits.max_compute_workgroups_per_dimension;
            launch(&out, k, p, &[self], row_grid(max, rows, each))?;
        }
        Ok(out)
    }

    /// Softmax along `dim`, contiguous in the input's dim order (both kernels write row
    /// `a * inner + b`, `inner` the product of the dims after `dim`, at `a * len * inner +
    /// r * inner + b`).
    pub(crate) fn softmax(&self, layout: &Layout, dim: usize) -> Result<XpuStorage> {
        check_float(self, "softmax")?;
        let (p, rows, len, each) = self.row_params(layout, dim, "softmax")?;
        let out = XpuStorage::alloc(&self.ctx, DType::F32, rows * len)?;
        if rows * len > 0 {
            let entry = if each { "softmax_each" } else { "softmax" };
            let k = key(ShaderId::Reduce, entry, self.dtype, DType::F32, 0);
            let max = self.ctx.limits.max_compute_workgroups_per_dimension;
            launch(&out, k, p, &[self], row_grid(max, rows, each))?;
        }
        if self.dtype == DType::F32 {
            return Ok(out);
        }
        let n = out.len;
        out.copy_cast(&Layout::contiguous(&[n]), self.dtype)
    }
}
