//! Host data in and out of a device: building a storage from values made on the host, clearing
//! one on its device, and reading one back.
//!
//! Invariant: values are made on the host and uploaded once, so a seeded tensor holds the same
//! bits on every device; every host buffer is checked against the host's memory first.

use super::Storage;
use crate::cpu::CpuStorage;
use crate::gpu::XpuStorage;
use crate::layout::Layout;
use crate::{DType, Device, Result, WithDType};

/// Errors when the host will not allocate `numel` elements of `dtype` for `op` (checked before a
/// Cpu op or a host-side builder allocates its buffer).
pub(crate) fn ensure_host_memory(op: &'static str, numel: usize, dtype: DType) -> Result<()> {
    crate::cpu::ensure_host_memory(op, numel, dtype)
}

/// Errors when the host will not give `bytes` in all for `op`'s buffers (several taken one
/// after another), checked before the op starts its work.
pub(crate) fn ensure_host_bytes(op: &'static str, bytes: u64) -> Result<()> {
    crate::cpu::ensure_host_bytes(op, bytes)
}

fn place(cpu: CpuStorage, device: Device) -> Result<Storage> {
    Ok(match device {
        Device::Cpu => Storage::Cpu(cpu),
        Device::Xpu => Storage::Xpu(upload(&cpu)?),
    })
}

impl Storage {
    /// A storage of `data` on `device` (moved on the Cpu, uploaded once on the Xpu).
    pub(crate) fn from_vec<T: WithDType>(data: Vec<T>, device: Device) -> Result<Storage> {
        place(CpuStorage::from_vec(data)?, device)
    }

    /// `values` made on the host as f32, in `dtype` on `device`: moved as they are for f32 (no
    /// copy: SD 1.5's random weights are 3.4 GB), converted once otherwise.
    pub(crate) fn from_f32_as(values: Vec<f32>, dtype: DType, device: Device) -> Result<Storage> {
        place(CpuStorage::from_vec(values)?.into_dtype(dtype)?, device)
    }

    /// `n` zeros of `dtype` on `device` (cleared on the device itself).
    pub(crate) fn zeros(
        op: &'static str,
        dtype: DType,
        n: usize,
        device: Device,
    ) -> Result<Storage> {
        Ok(match device {
            Device::Cpu => Storage::Cpu(CpuStorage::try_zeros(op, dtype, n)?),
            Device::Xpu => Storage::Xpu(XpuStorage::zeros(&crate::gpu::ctx()?, dtype, n)?),
        })
    }

    /// An empty Cpu storage of `dtype` (a stand-in no layout with elements fits: ops on it
    /// report a bad layout instead of reading memory).
    pub(crate) fn empty(dtype: DType) -> Storage {
        Storage::Cpu(CpuStorage::empty(dtype))
    }

    /// The elements `layout` addresses, in its logical (row-major) order, as `T` (the caller
    /// checks that `T` is the storage's dtype). Waits for the device.
    pub(crate) fn to_vec<T: WithDType>(&self, layout: &Layout) -> Result<Vec<T>> {
        match self {
            Storage::Cpu(s) => s.to_vec::<T>(layout),
            Storage::Xpu(s) => {
                download(s, layout)?.to_vec::<T>(&Layout::contiguous(layout.shape()))
            }
        }
    }
}

/// `v[i] = v[i] * mul + add` for every element, in place, by the CPU's elementwise kernel (the
/// in-place random initialisation of `nn` models).
pub(crate) fn affine_in_place_f32(v: &mut [f32], mul: f32, add: f32) {
    use rayon::prelude::*;
    const CHUNK: usize = 4096;
    let op = crate::desc::kinds::UnaryOp::Affine { mul, add };
    let k = crate::cpu::simd::Kernels::current();
    v.par_chunks_mut(CHUNK).for_each(|chunk| {
        // The elementwise kernel `affine` runs on a copy of the chunk (it reads and writes
        // distinct slices).
        let mut src = [0f32; CHUNK];
        let src = &mut src[..chunk.len()];
        src.copy_from_slice(chunk);
        k.unary_f32(op, src, chunk);
    });
}

/// Uploads contiguous Cpu data to the Xpu.
pub(crate) fn upload(cpu: &CpuStorage) -> Result<XpuStorage> {
    XpuStorage::upload(&crate::gpu::ctx()?, cpu.dtype(), cpu.len(), cpu.as_bytes())
}

/// Reads the elements of `layout` of an Xpu storage back into a contiguous Cpu storage.
pub(crate) fn download(s: &XpuStorage, layout: &Layout) -> Result<CpuStorage> {
    CpuStorage::from_bytes(s.dtype, &s.download(layout)?)
}
