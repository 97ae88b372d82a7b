//! [`CpuStorage::softmax`] along one dim.
//!
//! Invariants: numerically stable (the row maximum is subtracted before `exp`, the sum is
//! accumulated in `f64`); the output is contiguous in the input's shape. When `dim` is the last
//! dim of a contiguous input the rows are processed in place of the output; otherwise the input
//! is gathered with `dim` moved last, processed row-wise, and permuted back. A row holding NaN or
//! `+inf` (or only `-inf`) gives NaN, as torch does.

use super::elem::{FloatElem, BLOCK};
use super::parallel;
use super::simd::Kernels;
use super::storage::CpuStorage;
use super::strided::{check_dim, check_layout, contiguous_cow, gather};
use crate::layout::Layout;
use crate::{Device, Error, Result};
use std::borrow::Cow;

fn softmax_float<T: FloatElem>(
    k: Kernels,
    src: &[T],
    layout: &Layout,
    dim: usize,
) -> Result<Vec<T>> {
    let n = check_layout("softmax", layout, src.len())?;
    let rank = layout.rank();
    let r = layout.shape()[dim];
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut perm: Vec<usize> = (0..rank).filter(|&d| d != dim).collect();
    perm.push(dim);
    let last = dim + 1 == rank;
    let data: Cow<'_, [T]> = if last {
        contiguous_cow("softmax", src, layout)?
    } else {
        Cow::Owned(gather("softmax", src, &layout.permute(&perm)?)?)
    };
    // Every row is written below, so a recycled buffer is fine.
    let mut out = super::pool::take::<T>("softmax", n)?;
    let failed = super::alloc::FirstError::default();
    parallel::for_each_chunk(&mut out, r, r * 8, |start, chunk| {
        // 16-bit rows go through two f32 rows per task.
        let wide = if T::as_f32(chunk).is_some() { 0 } else { r };
        let scratch = super::alloc::zeroed::<f32>("softmax", wide)
            .and_then(|a| Ok((a, super::alloc::zeroed::<f32>("softmax", wide)?)));
        let (mut a, mut b) = match scratch {
            Ok(ab) => ab,
            Err(e) => return failed.record(Err(e)),
        };
        for (i, orow) in chunk.chunks_mut(r).enumerate() {
            let Some(row) = data.get(start + i * r..start + (i + 1) * r) else {
                continue;
            };
            if let (Some(s), Some(d)) = (T::as_f32(row), T::as_f32_mut(orow)) {
                k.softmax_row_f32(s, d);
            } else {
                for (s, d) in row.chunks(BLOCK).zip(a.chunks_mut(BLOCK)) {
                    T::load(k, s, d);
                }
                k.softmax_row_f32(&a, &mut b);
                for (s, d) in b.chunks(BLOCK).zip(orow.chunks_mut(BLOCK)) {
                    T::store(k, s, d);
                }
            }
        }
    });
    failed.into_result()?;
    if last {
        return Ok(out);
    }
    let permuted: Vec<usize> = perm.iter().map(|&p| layout.shape()[p]).collect();
    let mut inverse = vec![0; rank];
    for (j, &p) in perm.iter().enumerate() {
        inverse[p] = j;
    }
    gather(
        "softmax",
        &out,
        &Layout::contiguous(&permuted).permute(&inverse)?,
    )
}

impl CpuStorage {
    /// Softmax along `dim` (float dtypes); the result is contiguous in `layout`'s shape.
    pub fn softmax(&self, layout: &Layout, dim: usize) -> Result<CpuStorage> {
        check_dim("softmax", dim, layout.rank())?;
        let k = Kernels::current();
        Ok(match self {
            CpuStorage::F32(v) => CpuStorage::F32(softmax_float(k, v, layout, dim)?),
            CpuStorage::F16(v) => CpuStorage::F16(softmax_float(k, v, layout, dim)?),
            CpuStorage::BF16(v) => CpuStorage::BF16(softmax_float(k, v, layout, dim)?),
            other => {
                return Err(Error::UnsupportedDType {
                    op: "softmax",
                    dtype: other.dtype(),
                    device: Device::Cpu,
                    hint: ": softmax needs a float tensor; cast first".to_string(),
                })
            }
        })
    }
}
