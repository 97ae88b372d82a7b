//! Product dispatch: plain and fused matrix products on either device.

use super::*;

/// Epilogue operands of a fused product (see `ops::fused`), views broadcast to the output.
pub(crate) struct FusedArgs<'a> {
    pub alpha: f32,
    pub beta: f32,
    pub c: Option<(&'a Storage, Layout)>,
    pub bias: Option<(&'a Storage, Layout)>,
    pub activation: crate::desc::Activation,
    pub residual: Option<(&'a Storage, Layout)>,
    pub geglu: bool,
    pub kernel: crate::desc::MatmulKernel,
    pub out_dtype: DType,
}

/// Elements of the product of broadcast `[.., M, K]` and `[.., K, N]` layouts (saturating).
fn matmul_numel(l: &Layout, r: &Layout) -> usize {
    let (ls, rs) = (l.shape(), r.shape());
    let lead = &ls[..ls.len().saturating_sub(1)];
    let n = rs.last().copied().unwrap_or(1);
    crate::layout::numel(lead).saturating_mul(n)
}

impl Storage {
    pub(crate) fn matmul(&self, l: &Layout, rhs: &Storage, r: &Layout) -> Result<Storage> {
        Ok(match (self, rhs) {
            (Storage::Cpu(a), Storage::Cpu(b)) => {
                host_output("matmul", matmul_numel(l, r), a.dtype())?;
                Storage::Cpu(a.matmul(l, b, r)?)
            }
            (Storage::Xpu(a), Storage::Xpu(b)) => Storage::Xpu(a.matmul(l, b, r)?),
            _ => return Err(mismatch("matmul", self, rhs)),
        })
    }

    pub(crate) fn matmul_fused(
        &self,
        l: &Layout,
        rhs: &Storage,
        r: &Layout,
        args: &FusedArgs,
    ) -> Result<Storage> {
        fn cpu<'a>(
            op: &'static str,
            x: Option<&(&'a Storage, Layout)>,
        ) -> Result<Option<(&'a CpuStorage, Layout)>> {
            match x {
                None => Ok(None),
                Some((Storage::Cpu(s), l)) => Ok(Some((s, l.clone()))),
                Some((other, _)) => Err(Error::DeviceMismatch {
                    op,
                    lhs: Device::Cpu,
                    rhs: other.device(),
                }),
            }
        }
        fn xpu<'a>(
            op: &'static str,
            x: Option<&'a (&'a Storage, Layout)>,
        ) -> Result<Option<(&'a XpuStorage, &'a Layout)>> {
            match x {
                None => Ok(None),
                Some((Storage::Xpu(s), l)) => Ok(Some((s, l))),
                Some((other, _)) => Err(Error::DeviceMismatch {
                    op,
                    lhs: Device::Xpu,
                    rhs: other.device(),
                }),
            }
        }
        match (self, rhs) {
            (Storage::Cpu(a), Storage::Cpu(b)) => {
                host_output("matmul_fused", matmul_numel(l, r), DType::F32)?;
                let f = crate::cpu::fused::CpuFused {
                    alpha: args.alpha,
                    beta: args.beta,
                    c: cpu("matmul_fused", args.c.as_ref())?,
                    bias: cpu("matmul_fused", args.bias.as_ref())?,
                    activation: args.activation,
                    residual: cpu("matmul_fused", args.residual.as_ref())?,
                    geglu: args.geglu,
                    out_dtype: args.out_dtype,
                };
                Ok(Storage::Cpu(a.matmul_fused(l, b, r, &f)?))
            }
            (Storage::Xpu(a), Storage::Xpu(b)) => {
                let op = "matmul_fused";
                let ep = crate::gpu::kernels::matmul::Epilogue {
                    op,
                    alpha: args.alpha,
                    beta: args.beta,
                    c: xpu(op, args.c.as_ref())?,
                    bias: xpu(op, args.bias.as_ref())?,
                    residual: xpu(op, args.residual.as_ref())?,
                    activation: args.activation,
                    geglu: args.geglu,
                    kernel: args.kernel,
                    out_dtype: args.out_dtype,
                };
                Ok(Storage::Xpu(a.matmul_fused(l, b, r, &ep)?))
            }
            _ => Err(mismatch("matmul_fused", self, rhs)),
        }
    }
}
