//! The one place that matches on the device: every op is forwarded to the CPU or the Xpu
//! backend here, after the Tensor layer has checked shapes, dtypes and devices.
//!
//! Invariant: both operands of a binary op live on the same device (checked by the caller, so
//! the mixed arms below are unreachable in practice and still return an error, never panic).

use crate::cpu::CpuStorage;
use crate::desc::kinds::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::gpu::XpuStorage;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};

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

/// Geometry of a normalisation (`ops::norm`): a contiguous input viewed as
/// `[batch, channels, inner]`, normalised over each of `groups` channel groups per batch item
/// (so a row is `channels / groups * inner` contiguous elements). Layer norm is
/// `groups == 1, inner == 1` with `channels` the last dim. Invariant: `groups` divides
/// `channels` and `groups > 0` (checked by the Tensor layer).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NormSpec {
    pub batch: usize,
    pub channels: usize,
    pub groups: usize,
    pub inner: usize,
    pub eps: f32,
    pub silu: bool,
}

impl NormSpec {
    /// Number of normalised rows (`batch * groups`).
    pub(crate) fn rows(&self) -> usize {
        self.batch * self.groups
    }

    /// Channels per group.
    pub(crate) fn cpg(&self) -> usize {
        self.channels / self.groups.max(1)
    }

    /// Elements per normalised row.
    pub(crate) fn row_len(&self) -> usize {
        self.cpg() * self.inner
    }
}

/// Tensor data on one device.
pub(crate) enum Storage {
    Cpu(CpuStorage),
    Xpu(XpuStorage),
}

fn mismatch(op: &'static str, a: &Storage, b: &Storage) -> Error {
    Error::DeviceMismatch {
        op,
        lhs: a.device(),
        rhs: b.device(),
    }
}

impl Storage {
    pub(crate) fn device(&self) -> Device {
        match self {
            Storage::Cpu(_) => Device::Cpu,
            Storage::Xpu(_) => Device::Xpu,
        }
    }

    /// Number of elements held.
    pub(crate) fn len(&self) -> usize {
        match self {
            Storage::Cpu(s) => s.len(),
            Storage::Xpu(s) => s.len,
        }
    }

    pub(crate) fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(s) => s.dtype(),
            Storage::Xpu(s) => s.dtype,
        }
    }

    /// Contiguous copy of `layout` on `device`.
    pub(crate) fn to_device(&self, layout: &Layout, device: Device) -> Result<Storage> {
        if device == Device::Cpu || matches!(self, Storage::Cpu(_)) && !layout.is_contiguous() {
            host_output("copy", layout.numel(), self.dtype())?;
        }
        Ok(match (self, device) {
            (Storage::Cpu(s), Device::Cpu) => Storage::Cpu(s.contiguous(layout)),
            (Storage::Cpu(s), Device::Xpu) => {
                let ctx = crate::gpu::ctx()?;
                if layout.is_contiguous() && layout.offset() == 0 && layout.numel() == s.len() {
                    Storage::Xpu(XpuStorage::upload(&ctx, s)?)
                } else {
                    Storage::Xpu(XpuStorage::upload(&ctx, &s.contiguous(layout))?)
                }
            }
            (Storage::Xpu(s), Device::Cpu) => Storage::Cpu(s.download(layout)?),
            (Storage::Xpu(s), Device::Xpu) => Storage::Xpu(s.duplicate(layout)?),
        })
    }

    pub(crate) fn cast(&self, layout: &Layout, dtype: DType) -> Result<Storage> {
        Ok(match self {
            Storage::Cpu(s) => {
                host_output("to_dtype", layout.numel(), dtype)?;
                Storage::Cpu(s.cast(layout, dtype))
            }
            Storage::Xpu(s) => Storage::Xpu(s.copy_cast(layout, dtype)?),
        })
    }

    pub(crate) fn unary(&self, layout: &Layout, op: UnaryOp) -> Result<Storage> {
        Ok(match self {
            Storage::Cpu(s) => {
                host_output("unary op", layout.numel(), s.dtype())?;
                Storage::Cpu(s.unary(layout, op)?)
            }
            Storage::Xpu(s) => Storage::Xpu(s.unary(layout, op)?),
        })
    }

    pub(crate) fn binary(
        &self,
        l: &Layout,
        rhs: &Storage,
        r: &Layout,
        op: BinaryOp,
    ) -> Result<Storage> {
        Ok(match (self, rhs) {
            (Storage::Cpu(a), Storage::Cpu(b)) => {
                host_output(op.name(), l.numel().max(r.numel()), a.dtype())?;
                Storage::Cpu(a.binary(l, b, r, op)?)
            }
            (Storage::Xpu(a), Storage::Xpu(b)) => Storage::Xpu(a.binary(l, b, r, op)?),
            _ => return Err(mismatch(op.name(), self, rhs)),
        })
    }

    pub(crate) fn cmp(&self, l: &Layout, rhs: &Storage, r: &Layout, op: CmpOp) -> Result<Storage> {
        Ok(match (self, rhs) {
            (Storage::Cpu(a), Storage::Cpu(b)) => {
                host_output(op.name(), l.numel(), DType::U8)?;
                Storage::Cpu(a.cmp(l, b, r, op)?)
            }
            (Storage::Xpu(a), Storage::Xpu(b)) => Storage::Xpu(a.cmp(l, b, r, op)?),
            _ => return Err(mismatch(op.name(), self, rhs)),
        })
    }

    /// The slices of `self` along `dim` at the (checked) `i32` indices `(ix, il)`.
    pub(crate) fn index_select(
        &self,
        l: &Layout,
        dim: usize,
        (ix, il): (&Storage, &Layout),
    ) -> Result<Storage> {
        let op = "index_select";
        Ok(match (self, ix) {
            (Storage::Cpu(s), Storage::Cpu(i)) => {
                let rest: usize = l.shape().iter().skip(dim + 1).product();
                let outer: usize = l.shape().iter().take(dim).product();
                let numel = outer.saturating_mul(il.numel()).saturating_mul(rest);
                host_output(op, numel, s.dtype())?;
                Storage::Cpu(s.index_select(l, dim, (i, il))?)
            }
            (Storage::Xpu(s), Storage::Xpu(i)) => Storage::Xpu(s.index_select(l, dim, (i, il))?),
            _ => return Err(mismatch(op, self, ix)),
        })
    }

    /// `self ? a : b` for a u8 mask `self`; all three layouts have one shape.
    pub(crate) fn select(
        &self,
        ml: &Layout,
        (a, al): (&Storage, &Layout),
        (b, bl): (&Storage, &Layout),
    ) -> Result<Storage> {
        let op = "where_cond";
        Ok(match (self, a, b) {
            (Storage::Cpu(m), Storage::Cpu(x), Storage::Cpu(y)) => {
                host_output(op, ml.numel(), x.dtype())?;
                Storage::Cpu(m.select(ml, (x, al), (y, bl))?)
            }
            (Storage::Xpu(m), Storage::Xpu(x), Storage::Xpu(y)) => {
                Storage::Xpu(m.select(ml, (x, al), (y, bl))?)
            }
            (Storage::Xpu(_), Storage::Cpu(_), _) | (Storage::Cpu(_), Storage::Xpu(_), _) => {
                return Err(mismatch(op, self, a))
            }
            _ => return Err(mismatch(op, self, b)),
        })
    }

    pub(crate) fn reduce(&self, layout: &Layout, dim: usize, op: ReduceOp) -> Result<Storage> {
        Ok(match self {
            Storage::Cpu(s) => {
                let mut out = layout.shape().to_vec();
                if let Some(d) = out.get_mut(dim) {
                    *d = 1;
                }
                // Every reduction's output element takes at most 4 bytes.
                host_output("reduce", crate::layout::numel(&out), DType::F32)?;
                Storage::Cpu(s.reduce(layout, dim, op)?)
            }
            Storage::Xpu(s) => Storage::Xpu(s.reduce(layout, dim, op)?),
        })
    }

    /// Softmax along `dim`, contiguous in the input's dim order on every device.
    pub(crate) fn softmax(&self, layout: &Layout, dim: usize) -> Result<Storage> {
        Ok(match self {
            Storage::Cpu(s) => {
                host_output("softmax", layout.numel(), s.dtype())?;
                Storage::Cpu(s.softmax(layout, dim)?)
            }
            Storage::Xpu(s) => Storage::Xpu(s.softmax(layout, dim)?),
        })
    }

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
            (Storage::Xpu(a), Storage::Xpu(b)) => Ok(Storage::Xpu(a.matmul_fused(l, b, r, args)?)),
            _ => Err(mismatch("matmul_fused", self, rhs)),
        }
    }

    /// Layer norm over the last dim of `layout` (weight/bias: `[C]` views on this device).
    pub(crate) fn layer_norm(
        &self,
        layout: &Layout,
        weight: Option<(&Storage, &Layout)>,
        bias: Option<(&Storage, &Layout)>,
        eps: f32,
    ) -> Result<Storage> {
        let shape = layout.shape();
        let channels = shape.last().copied().unwrap_or(1);
        let spec = NormSpec {
            batch: shape[..shape.len().saturating_sub(1)].iter().product(),
            channels,
            groups: 1,
            inner: 1,
            eps,
            silu: false,
        };
        self.norm("layer_norm", layout, weight, bias, &spec)
    }

    /// Group norm of an `[N, C, *spatial]` view with `groups` dividing `C`, optionally followed
    /// by SiLU (weight/bias: `[C]` views on this device).
    pub(crate) fn group_norm(
        &self,
        layout: &Layout,
        groups: usize,
        weight: Option<(&Storage, &Layout)>,
        bias: Option<(&Storage, &Layout)>,
        eps: f32,
        silu: bool,
    ) -> Result<Storage> {
        let shape = layout.shape();
        let spec = NormSpec {
            batch: shape.first().copied().unwrap_or(1),
            channels: shape.get(1).copied().unwrap_or(1),
            groups,
            inner: shape.get(2..).map_or(1, |s| s.iter().product()),
            eps,
            silu,
        };
        let op = if silu {
            "group_norm_silu"
        } else {
            "group_norm"
        };
        self.norm(op, layout, weight, bias, &spec)
    }

    fn norm(
        &self,
        op: &'static str,
        layout: &Layout,
        weight: Option<(&Storage, &Layout)>,
        bias: Option<(&Storage, &Layout)>,
        spec: &NormSpec,
    ) -> Result<Storage> {
        type Operand<'a> = Option<(&'a Storage, &'a Layout)>;
        fn cpu<'a>(
            op: &'static str,
            x: Operand<'a>,
        ) -> Result<Option<(&'a CpuStorage, &'a Layout)>> {
            match x {
                None => Ok(None),
                Some((Storage::Cpu(c), l)) => Ok(Some((c, l))),
                Some((other, _)) => Err(Error::DeviceMismatch {
                    op,
                    lhs: Device::Cpu,
                    rhs: other.device(),
                }),
            }
        }
        fn xpu<'a>(
            op: &'static str,
            x: Operand<'a>,
        ) -> Result<Option<(&'a XpuStorage, &'a Layout)>> {
            match x {
                None => Ok(None),
                Some((Storage::Xpu(c), l)) => Ok(Some((c, l))),
                Some((other, _)) => Err(Error::DeviceMismatch {
                    op,
                    lhs: Device::Xpu,
                    rhs: other.device(),
                }),
            }
        }
        Ok(match self {
            Storage::Cpu(s) => {
                host_output(op, layout.numel(), s.dtype())?;
                Storage::Cpu(s.norm(op, layout, cpu(op, weight)?, cpu(op, bias)?, spec)?)
            }
            Storage::Xpu(s) => {
                Storage::Xpu(s.norm(op, layout, xpu(op, weight)?, xpu(op, bias)?, spec, false)?)
            }
        })
    }

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
                Ok(Storage::Cpu(qs.attention(
                    q,
                    (ks, k.1),
                    (vs, v.1),
                    m,
                    shape,
                    out,
                )?))
            }
            (Storage::Xpu(qs), Storage::Xpu(ks), Storage::Xpu(vs), m) => {
                let m = match m {
                    None => None,
                    Some((Storage::Xpu(ms), ml)) => Some((ms, ml)),
                    Some((other, _)) => return Err(mismatch(op, self, other)),
                };
                Ok(Storage::Xpu(qs.attention(
                    q,
                    (ks, k.1),
                    (vs, v.1),
                    m,
                    shape,
                    out,
                )?))
            }
            (_, ks, vs, _) => Err(mismatch(
                op,
                self,
                if ks.device() != self.device() { ks } else { vs },
            )),
        }
    }

    pub(crate) fn cat(
        parts: &[(&Storage, &Layout)],
        dim: usize,
        out_shape: &[usize],
    ) -> Result<Storage> {
        let Some((first, _)) = parts.first() else {
            return Err(Error::invalid("cat", "expected at least one tensor"));
        };
        match first {
            Storage::Cpu(c) => {
                host_output("cat", crate::layout::numel(out_shape), c.dtype())?;
                let mut cpu = Vec::with_capacity(parts.len());
                for (s, l) in parts {
                    match s {
                        Storage::Cpu(c) => cpu.push((c, *l)),
                        other => return Err(mismatch("cat", first, other)),
                    }
                }
                Ok(Storage::Cpu(CpuStorage::cat(&cpu, dim)?))
            }
            Storage::Xpu(_) => {
                let mut xpu = Vec::with_capacity(parts.len());
                for (s, l) in parts {
                    match s {
                        Storage::Xpu(x) => xpu.push((x, *l)),
                        other => return Err(mismatch("cat", first, other)),
                    }
                }
                Ok(Storage::Xpu(XpuStorage::cat(&xpu, dim, out_shape)?))
            }
        }
    }
}

/// Errors when the host will not allocate a Cpu output of `numel` elements of `dtype` (see
/// [`crate::cpu::ensure_host_memory`]): checked before every Cpu op allocates its output.
fn host_output(op: &'static str, numel: usize, dtype: DType) -> Result<()> {
    crate::cpu::ensure_host_memory(op, numel, dtype)
}

/// Elements of the product of broadcast `[.., M, K]` and `[.., K, N]` layouts (saturating).
fn matmul_numel(l: &Layout, r: &Layout) -> usize {
    let (ls, rs) = (l.shape(), r.shape());
    let lead = &ls[..ls.len().saturating_sub(1)];
    let n = rs.last().copied().unwrap_or(1);
    crate::layout::numel(lead).saturating_mul(n)
}
