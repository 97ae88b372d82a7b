//! [`CpuStorage::cumsum_f32`]: inclusive prefix sums along one dim of an f32 tensor.
//!
//! Invariants: each line along `dim` is summed in order, accumulating in `f64` and rounding
//! every prefix once to f32 (PyTorch's CPU `cumsum` accumulates float in double too); the
//! source is read through its layout (a contiguous copy only for views); the output is
//! contiguous in the input's shape. Other dtypes are widened to f32 by the caller.

use super::parallel;
use super::storage::CpuStorage;
use super::strided::{check_dim, check_layout, contiguous_cow};
use crate::layout::Layout;
use crate::{Device, Error, Result};

impl CpuStorage {
    /// Inclusive prefix sums of an f32 storage (layout `l`) along `dim`.
    pub fn cumsum_f32(&self, l: &Layout, dim: usize) -> Result<CpuStorage> {
        let op = "cumsum";
        let CpuStorage::F32(src) = self else {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype(),
                device: Device::Cpu,
                hint: "; the storage-level scan takes f32 (Tensor::cumsum widens 16-bit floats)"
                    .into(),
            });
        };
        check_dim(op, dim, l.rank())?;
        let n = check_layout(op, l, src.len())?;
        let x = contiguous_cow(op, src, l)?;
        let shape = l.shape();
        let len = shape[dim];
        let inner: usize = shape[dim + 1..].iter().product();
        // Every element is written below, so a recycled buffer is fine.
        let mut out = super::pool::take::<f32>(op, n)?;
        if n == 0 {
            return Ok(CpuStorage::F32(out));
        }
        // Blocks of whole [len, inner] slabs: each slab's lines are independent.
        let slab = len * inner;
        let failed = super::alloc::FirstError::default();
        parallel::for_each_chunk(&mut out, slab, slab, |start, chunk| {
            // One accumulator row per chunk (not per slab: a last-dim scan has a slab per row).
            let mut acc = match super::alloc::zeroed::<f64>(op, inner) {
                Ok(acc) => acc,
                Err(e) => return failed.record(Err(e)),
            };
            for (s, dst) in chunk.chunks_exact_mut(slab).enumerate() {
                let base = start + s * slab;
                let Some(src) = x.get(base..base + slab) else {
                    continue;
                };
                acc.fill(0.0);
                for r in 0..len {
                    let row = r * inner..(r + 1) * inner;
                    for ((a, &v), o) in acc.iter_mut().zip(&src[row.clone()]).zip(&mut dst[row]) {
                        *a += f64::from(v);
                        *o = *a as f32;
                    }
                }
            }
        });
        failed.into_result()?;
        Ok(CpuStorage::F32(out))
    }
}
