//! Indexing dispatch: `index_select`, `where`-style selection and concatenation.

use super::*;

impl Storage {
    /// `torch.gather` along `dim` with the `(index, layout)` operand (i32 indices, checked by
    /// the Tensor layer); the result has the index's shape, contiguous.
    pub(crate) fn gather(
        &self,
        layout: &Layout,
        dim: usize,
        index: (&Storage, &Layout),
    ) -> Result<Storage> {
        let op = "gather";
        match (self, index.0) {
            (Storage::Cpu(s), Storage::Cpu(i)) => {
                host_output(op, index.1.numel(), s.dtype())?;
                Ok(Storage::Cpu(s.gather(layout, dim, (i, index.1))?))
            }
            (Storage::Xpu(s), Storage::Xpu(i)) => {
                Ok(Storage::Xpu(s.gather(layout, dim, (i, index.1))?))
            }
            (a, b) => Err(mismatch(op, a, b)),
        }
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
