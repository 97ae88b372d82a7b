//! Product dispatch: plain and fused matrix products on either device.
//!
//! On the Xpu the product's kernel is the autotuner's pick (family `gpu_matmul`) among those
//! `gpu::kernels::matmul` lists for it, and on kernels that can cut K into f32 partial products
//! so is the number of splits (family `gpu_split_k`).
//!
//! Invariant: every candidate computes the same product and epilogue into the same contiguous
//! output; candidates differ only in speed and summation order.

use super::*;
use crate::gpu::kernels::matmul::Epilogue;

/// The autotuner's family of the Xpu product kernels.
pub(crate) const GPU_MATMUL: &str = "gpu_matmul";

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
            (Storage::Xpu(a), Storage::Xpu(b)) => {
                let ep = Epilogue::identity("matmul", crate::desc::MatmulKernel::Auto, a.dtype);
                Storage::Xpu(xpu_product(a, l, b, r, &ep)?)
            }
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
                let ep = Epilogue {
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
                Ok(Storage::Xpu(xpu_product(a, l, b, r, &ep)?))
            }
            _ => Err(mismatch("matmul_fused", self, rhs)),
        }
    }
}

/// The autotuner's problem text of an Xpu product: dtypes, the batch and M, N, K bucketed, B's
/// layout, GEGLU, and the kernel the caller forced (its candidates differ from `Auto`'s).
fn product_problem(plan: &crate::gpu::kernels::matmul::ProductPlan, ep: &Epilogue) -> String {
    use crate::autotune::bucket;
    use crate::desc::MatmulKernel;
    let [m, n, k] = plan.shape.mnk;
    let kernel = match ep.kernel {
        MatmulKernel::Auto => String::new(),
        MatmulKernel::Simple => " simple".into(),
        MatmulKernel::Tiled(t) => format!(" tiled {t:?}"),
        MatmulKernel::CoopMatrix => " coop".into(),
    };
    format!(
        "{}->{} batch {} m {} n {} k {}{}{}{kernel}",
        plan.shape.dtype,
        ep.out_dtype,
        bucket(plan.batch),
        bucket(m),
        bucket(n),
        bucket(k),
        if plan.shape.b_col_major { " bt" } else { "" },
        if plan.geglu { " geglu" } else { "" },
    )
}

/// An Xpu product on the kernel the autotuner picks (family [`GPU_MATMUL`]), K split as it
/// picks on kernels that split (family `gpu_split_k`).
fn xpu_product(
    a: &XpuStorage,
    l: &Layout,
    b: &XpuStorage,
    r: &Layout,
    ep: &Epilogue,
) -> Result<XpuStorage> {
    let plan = a.matmul_plan(l, b, r, ep)?;
    if plan.is_empty() {
        return a.matmul_on(l, b, r, ep, plan.engines[plan.rule], 1);
    }
    let names: Vec<&'static str> = plan.engines.iter().map(|e| e.name()).collect();
    let key = tuning::gpu_key(GPU_MATMUL, &product_problem(&plan, ep))?;
    let tol = tuning::gpu_tolerance(plan.shape.dtype);
    tuning::run_tuned_gpu(
        &key,
        &names,
        plan.rule,
        &mut |i| {
            let engine = plan.engines[i];
            if !engine.splits_k() {
                return a.matmul_on(l, b, r, ep, engine, 1);
            }
            let split = tuning::SplitProblem {
                kernel: engine.name(),
                dtype: plan.shape.dtype,
                tiles: plan.tiles(engine),
                k: plan.shape.mnk[2],
                plans: engine.plans_splits(),
            };
            tuning::tuned_splits(&split, &mut |s| a.matmul_on(l, b, r, ep, engine, s), tol)
        },
        tol,
    )
}
