//! The GPU device: wgpu context, caching allocator, typed pipeline cache, batched stream and
//! the WGSL kernels (`kernels/`, one folder per kernel family).
//!
//! Invariant: `XpuStorage` owns a pooled buffer holding `len` elements of `dtype`, packed
//! (two 16-bit or four 8-bit elements per 32-bit word, see `kernels/common.wgsl`); the buffer
//! is at least `len * size` bytes rounded up to 4. Storage is immutable once its producing
//! kernel is recorded.

pub(crate) mod allocator;
pub(crate) mod context;
pub(crate) mod kernels;
pub(crate) mod passthrough;
pub(crate) mod pipelines;
pub(crate) mod profile;
pub(crate) mod spirv_fold;
pub(crate) mod stream;
pub(crate) mod tuning;

use std::sync::Arc;

use allocator::{PoolKind, PooledBuffer};
use context::Context;

use crate::layout::Layout;
use crate::{DType, Device, Error, Result};

pub use allocator::MemoryStats;
pub use context::{AdapterSummary, XpuFeatures};
pub use profile::KernelTime;

/// Tensor data in GPU memory.
pub(crate) struct XpuStorage {
    pub(crate) buffer: Arc<PooledBuffer>,
    pub(crate) dtype: DType,
    pub(crate) len: usize,
    pub(crate) ctx: Arc<Context>,
}

impl XpuStorage {
    /// Uninitialised storage for `len` elements (every kernel writes all of it).
    pub(crate) fn alloc(ctx: &Arc<Context>, dtype: DType, len: usize) -> Result<XpuStorage> {
        let bytes = crate::layout::alloc_bytes("xpu alloc", len, dtype)?.max(4) as u64;
        let buffer = ctx.allocator.alloc(&ctx.device, PoolKind::Storage, bytes)?;
        Ok(XpuStorage {
            buffer,
            dtype,
            len,
            ctx: ctx.clone(),
        })
    }

    /// Zero-filled storage.
    pub(crate) fn zeros(ctx: &Arc<Context>, dtype: DType, len: usize) -> Result<XpuStorage> {
        let s = Self::alloc(ctx, dtype, len)?;
        ctx.stream
            .lock()
            .map_err(|_| poisoned())?
            .clear(ctx, &s.buffer);
        Ok(s)
    }

    /// Uploads `len` contiguous host elements of `dtype` given as their bytes.
    pub(crate) fn upload(
        ctx: &Arc<Context>,
        dtype: DType,
        len: usize,
        bytes: &[u8],
    ) -> Result<XpuStorage> {
        let want = len.checked_mul(dtype.size_in_bytes());
        if want != Some(bytes.len()) {
            return Err(Error::invalid(
                "upload",
                format!("{len} {dtype} elements, got {} bytes", bytes.len()),
            ));
        }
        let s = Self::alloc(ctx, dtype, len)?;
        if len > 0 {
            ctx.stream
                .lock()
                .map_err(|_| poisoned())?
                .upload(ctx, &s.buffer, bytes);
        }
        Ok(s)
    }

    /// Reads the elements of `layout` back to the host: their bytes, contiguous.
    pub(crate) fn download(&self, layout: &Layout) -> Result<Vec<u8>> {
        let size = self.dtype.size_in_bytes();
        let byte_off = layout.offset() * size;
        let direct = layout.is_contiguous() && byte_off.is_multiple_of(4);
        let (src, off) = if direct {
            (None, byte_off as u64)
        } else {
            (Some(self.copy_cast(layout, self.dtype)?), 0)
        };
        let buf = src.as_ref().map_or(&self.buffer, |s| &s.buffer);
        let bytes = crate::layout::alloc_bytes("download", layout.numel(), self.dtype)? as u64;
        let data = self
            .ctx
            .stream
            .lock()
            .map_err(|_| poisoned())?
            .read(&self.ctx, buf, off, bytes)?;
        Ok(data)
    }

    pub(crate) fn check_same_context(&self, other: &XpuStorage, op: &'static str) -> Result<()> {
        if Arc::ptr_eq(&self.ctx, &other.ctx) {
            Ok(())
        } else {
            Err(Error::DeviceMismatch {
                op,
                lhs: Device::Xpu,
                rhs: Device::Xpu,
            })
        }
    }
}

pub(crate) fn poisoned() -> Error {
    Error::Gpu("the Xpu stream lock was poisoned by a panic in another thread".into())
}

/// The shared context (creating it on first use).
pub(crate) fn ctx() -> Result<Arc<Context>> {
    context::context()
}

/// Submits all recorded work and waits for it.
pub(crate) fn synchronize() -> Result<()> {
    let ctx = ctx()?;
    let mut stream = ctx.stream.lock().map_err(|_| poisoned())?;
    stream.synchronize(&ctx)
}

/// The GPU profiler's per-pipeline times since the last call, longest first (`None` unless the
/// process runs with `XPU_PROFILE=1` on an adapter with timestamp queries).
pub(crate) fn take_profile() -> Result<Option<Vec<KernelTime>>> {
    let ctx = ctx()?;
    let mut stream = ctx.stream.lock().map_err(|_| poisoned())?;
    Ok(stream.take_profile(&ctx))
}

/// Whether f16 convolutions can run on the tensor-core kernel (see `kernels::conv::coop`).
pub(crate) fn conv_coop_active() -> bool {
    kernels::conv::coop::active()
}

/// Seconds the calling thread has spent creating GPU pipelines (see
/// `pipelines::creation_seconds`).
pub(crate) fn pipeline_creation_seconds() -> f64 {
    pipelines::creation_seconds()
}

/// The autotuner's device text for the Xpu adapter in use (see [`tuning::device_id`]).
pub(crate) fn tuning_device_id() -> Result<String> {
    tuning::device_id()
}
