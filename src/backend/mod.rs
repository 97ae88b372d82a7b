//! The one place that matches on the device: every op is forwarded to the CPU or the Xpu
//! backend here, after the Tensor layer has checked shapes, dtypes and devices.
//!
//! Invariant: both operands of a binary op live on the same device (checked by the caller, so
//! the mixed arms below are unreachable in practice and still return an error, never panic).

mod attention;
mod budget;
pub(crate) mod conv;
pub(crate) mod conv_gpu;
mod conv_gpu_winograd;
pub(crate) use attention::attention_max_value_dim;
mod host;
mod index;
mod matmul;
mod norm;
mod pool;
pub(crate) mod prepared;
mod product_tuning;
mod reduce;
pub(crate) mod tuning;

/// The one fallible path for host memory sized by data (see `cpu::alloc`), for the layers
/// above that build host buffers themselves.
pub(crate) use crate::cpu::alloc;
pub(crate) use crate::desc::NormSpec;
pub(crate) use budget::ensure_buffer;
pub use budget::{memory_budget, MemoryBudget};
pub(crate) use host::{affine_in_place_f32, ensure_host_bytes, ensure_host_memory};
pub(crate) use matmul::FusedArgs;

use crate::cpu::CpuStorage;
use crate::desc::kinds::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::gpu::XpuStorage;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};

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
            (Storage::Cpu(s), Device::Cpu) => Storage::Cpu(s.contiguous(layout)?),
            (Storage::Cpu(s), Device::Xpu) => {
                if layout.is_contiguous() && layout.offset() == 0 && layout.numel() == s.len() {
                    Storage::Xpu(host::upload(s)?)
                } else {
                    Storage::Xpu(host::upload(&s.contiguous(layout)?)?)
                }
            }
            (Storage::Xpu(s), Device::Cpu) => Storage::Cpu(host::download(s, layout)?),
            (Storage::Xpu(s), Device::Xpu) => Storage::Xpu(s.duplicate(layout)?),
        })
    }

    pub(crate) fn cast(&self, layout: &Layout, dtype: DType) -> Result<Storage> {
        Ok(match self {
            Storage::Cpu(s) => {
                host_output("to_dtype", layout.numel(), dtype)?;
                Storage::Cpu(s.cast(layout, dtype)?)
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
}

/// Errors when the host will not allocate a Cpu output of `numel` elements of `dtype` (see
/// [`crate::cpu::ensure_host_memory`]): checked before every Cpu op allocates its output.
fn host_output(op: &'static str, numel: usize, dtype: DType) -> Result<()> {
    crate::cpu::ensure_host_memory(op, numel, dtype)
}

/// Submits all queued GPU work and waits for it to finish.
pub(crate) fn synchronize() -> Result<()> {
    crate::gpu::synchronize()
}
