//! Reduction dispatch: reductions along a dim and softmax.

use super::*;

impl Storage {
    /// Inclusive cumulative sum of an f32 view along `dim`, contiguous.
    pub(crate) fn cumsum_f32(&self, layout: &Layout, dim: usize) -> Result<Storage> {
        Ok(match self {
            Storage::Cpu(s) => {
                host_output("cumsum", layout.numel(), DType::F32)?;
                Storage::Cpu(s.cumsum_f32(layout, dim)?)
            }
            Storage::Xpu(s) => Storage::Xpu(s.cumsum_f32(layout, dim)?),
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
}
