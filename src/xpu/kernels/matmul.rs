//! Batched matrix product on Xpu (`shaders/matmul.wgsl`): strided operands are read in place,
//! the product accumulates in f32, and 16-bit outputs get one cast at the end.

use super::launch;
use super::params::{Params, EXTRA, OFFSET0, OFFSET1, STRIDES0, STRIDES1};
use crate::layout::Layout;
use crate::xpu::pipelines::{PipelineKey, ShaderId};
use crate::xpu::XpuStorage;
use crate::{DType, Device, Error, Result};

impl XpuStorage {
    /// `lhs` is [..batch, M, K], `rhs` [..batch, K, N] with identical (broadcast) batch dims.
    pub(crate) fn matmul(
        &self,
        lhs: &Layout,
        rhs: &XpuStorage,
        rhs_layout: &Layout,
    ) -> Result<XpuStorage> {
        self.check_same_context(rhs, "matmul")?;
        if !self.dtype.is_float() {
            return Err(Error::UnsupportedDType {
                op: "matmul",
                dtype: self.dtype,
                device: Device::Xpu,
                hint: "; matmul takes f32, f16 or bf16".into(),
            });
        }
        let rank = lhs.rank();
        let (m, k, n) = (
            lhs.shape()[rank - 2],
            lhs.shape()[rank - 1],
            rhs_layout.shape()[rank - 1],
        );
        let batch_shape = &lhs.shape()[..rank - 2];
        let batch: usize = batch_shape.iter().product();
        let out = XpuStorage::alloc(&self.ctx, DType::F32, batch * m * n)?;
        if out.len == 0 {
            return Ok(out);
        }
        if k == 0 {
            let zeros = XpuStorage::zeros(&self.ctx, self.dtype, batch * m * n)?;
            return Ok(zeros);
        }
        let max = self.ctx.limits.max_compute_workgroups_per_dimension as usize;
        let mut first = 0;
        while first < batch {
            let count = (batch - first).min(max);
            let mut p = Params::new(batch, "matmul")?;
            // Batch dims are not coalesced: their strides must stay per-operand exact.
            p.0[super::params::RANK] = batch_shape.len() as u32;
            for (d, &s) in batch_shape.iter().enumerate() {
                p.set(super::params::SHAPE + d, s, "matmul")?;
                p.set(STRIDES0 + d, lhs.strides()[d], "matmul")?;
                p.set(STRIDES1 + d, rhs_layout.strides()[d], "matmul")?;
            }
            p.set(OFFSET0, lhs.offset(), "matmul")?
                .set(OFFSET1, rhs_layout.offset(), "matmul")?
                .set(EXTRA, m, "matmul")?
                .set(EXTRA + 1, n, "matmul")?
                .set(EXTRA + 2, k, "matmul")?
                .set(EXTRA + 3, lhs.strides()[rank - 2], "matmul")?
                .set(EXTRA + 4, lhs.strides()[rank - 1], "matmul")?
                .set(EXTRA + 5, rhs_layout.strides()[rank - 2], "matmul")?
                .set(EXTRA + 6, rhs_layout.strides()[rank - 1], "matmul")?
                .set(EXTRA + 7, first, "matmul")?;
            let key = PipelineKey {
                shader: ShaderId::Matmul,
                entry: "matmul",
                dt_in: self.dtype,
                dt_out: DType::F32,
                workgroup: 256,
                variant: 0,
            };
            let groups = [n.div_ceil(64) as u32, m.div_ceil(64) as u32, count as u32];
            launch(&out, key, p, &[self, rhs], groups)?;
            first += count;
        }
        if self.dtype == DType::F32 {
            return Ok(out);
        }
        let len = out.len;
        out.copy_cast(&Layout::contiguous(&[len]), self.dtype)
    }
}

impl XpuStorage {
    /// Fused product on Xpu. Until the fused WGSL epilogues land, the Tensor layer computes
    /// Xpu fused products with the unfused sequence; this entry point reports that.
    pub(crate) fn matmul_fused(
        &self,
        _lhs: &Layout,
        _rhs: &XpuStorage,
        _rhs_layout: &Layout,
        _args: &crate::storage::FusedArgs,
    ) -> Result<XpuStorage> {
        Err(Error::invalid(
            "matmul_fused",
            "fused epilogues are not implemented on Xpu yet",
        ))
    }
}
