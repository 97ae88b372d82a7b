//! Attention dispatch: the fused scaled dot-product attention on either device, on the kernel
//! the autotuner picks (families `cpu_attention` and `gpu_attention`).
//!
//! Invariant: every candidate of a family computes the same attention into the output layout
//! the caller asked for; candidates differ only in speed and rounding.

use super::*;

/// The autotuner's family of the Xpu attention kernels: `coop16` (flash attention on f16
/// tensor cores, where it can serve the call) and `fma`.
pub(crate) const GPU_ATTENTION: &str = "gpu_attention";

/// The largest value head dim the fused attention kernels of `device` take (`None`: any);
/// larger calls run the materialised path.
pub(crate) fn attention_max_value_dim(device: Device) -> Option<usize> {
    match device {
        Device::Cpu => None,
        Device::Xpu => Some(crate::gpu::kernels::attention::MAX_DV),
    }
}

/// The autotuner's problem text of an attention: dtype, heads and lengths bucketed, head dims
/// exact, whether a mask is read.
fn attention_problem(dtype: DType, s: &crate::desc::AttnShape, masked: bool) -> String {
    use crate::autotune::bucket;
    format!(
        "{dtype} heads {} lq {} lk {} d {} dv {}{}",
        bucket(s.heads()),
        bucket(s.lq),
        bucket(s.lk),
        s.d,
        s.dv,
        if masked { " masked" } else { "" }
    )
}

impl Storage {
    /// Fused scaled dot-product attention of `self = q` with `k`, `v` and an optional mask
    /// whose layout is broadcast to the scores `[..., Lq, Lk]` (see `ops::attention`), its
    /// output laid out by `out` (a dense layout of the output's shape at offset 0).
    pub(crate) fn attention(
        &self,
        q: &Layout,
        k: (&Storage, &Layout),
        v: (&Storage, &Layout),
        mask: Option<(&Storage, &Layout)>,
        shape: &crate::desc::AttnShape,
        out: &Layout,
    ) -> Result<Storage> {
        let op = "scaled_dot_product_attention";
        match (self, k.0, v.0, mask) {
            (Storage::Cpu(qs), Storage::Cpu(ks), Storage::Cpu(vs), m) => {
                let m = match m {
                    None => None,
                    Some((Storage::Cpu(ms), ml)) => Some((ms, ml)),
                    Some((other, _)) => return Err(mismatch(op, self, other)),
                };
                host_output(op, q.numel(), qs.dtype())?;
                let (kernels, rule) = crate::cpu::attention_kernels(qs.dtype(), shape.lq);
                let names: Vec<&'static str> = kernels.iter().map(|k| k.name()).collect();
                let key = tuning::cpu_key(
                    "cpu_attention",
                    &attention_problem(qs.dtype(), shape, m.is_some()),
                );
                let tol = if qs.dtype() == DType::F32 { 1e-4 } else { 3e-2 };
                Ok(Storage::Cpu(tuning::run_tuned(
                    &key,
                    &names,
                    rule,
                    &mut |i| qs.attention(q, (ks, k.1), (vs, v.1), m, shape, out, kernels[i]),
                    &|| Ok(()),
                    &|a, b| tuning::cpu_agree(a, b, tol),
                )?))
            }
            (Storage::Xpu(qs), Storage::Xpu(ks), Storage::Xpu(vs), m) => {
                let m = match m {
                    None => None,
                    Some((Storage::Xpu(ms), ml)) => Some((ms, ml)),
                    Some((other, _)) => return Err(mismatch(op, self, other)),
                };
                let coop = qs.attention_coop_serves(q, k.1, v.1, m.is_some(), shape);
                let names: &[&'static str] = if coop { &["coop16", "fma"] } else { &["fma"] };
                let mut exec = |i: usize| {
                    let coop = names[i] == "coop16";
                    qs.attention(q, (ks, k.1), (vs, v.1), m, shape, out, coop)
                };
                if out.numel() == 0 {
                    // No output element: nothing to choose.
                    return Ok(Storage::Xpu(exec(0)?));
                }
                let problem = format!(
                    "{}{}",
                    attention_problem(qs.dtype, shape, m.is_some()),
                    if coop { " tensor-core-fit" } else { "" }
                );
                let key = tuning::gpu_key(GPU_ATTENTION, &problem)?;
                let tol = tuning::gpu_tolerance(qs.dtype);
                Ok(Storage::Xpu(tuning::run_tuned_gpu(
                    &key, names, 0, &mut exec, tol,
                )?))
            }
            (_, ks, vs, _) => Err(mismatch(
                op,
                self,
                if ks.device() != self.device() { ks } else { vs },
            )),
        }
    }
}
