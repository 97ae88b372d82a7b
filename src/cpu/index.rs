//! [`CpuStorage::index_select`]: rows of a (possibly strided) source picked by indices.
//!
//! Invariants: the indices are checked here too (each in `0..size of dim`), so a storage-level
//! call can never read out of bounds; values are copied bit for bit; the output is contiguous.

use super::parallel;
use super::storage::CpuStorage;
use super::strided::{check_layout, contiguous_cow};
use crate::layout::Layout;
use crate::{Error, Result};

/// `[outer, size, inner]` -> `[outer, indices, inner]` over a contiguous copy of the source.
fn pick<T>(src: &[T], l: &Layout, dim: usize, idx: &[usize]) -> Result<Vec<T>>
where
    T: Copy + Send + Sync + bytemuck::Zeroable + super::pool::Recycle,
    [T]: ToOwned<Owned = Vec<T>>,
{
    check_layout("index_select", l, src.len())?;
    let x = contiguous_cow(src, l);
    let shape = l.shape();
    let outer: usize = shape[..dim].iter().product();
    let size = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    // Every element is written below, so a recycled buffer is fine.
    let mut out = super::pool::take::<T>(outer * idx.len() * inner);
    if inner == 0 {
        return Ok(out);
    }
    if x.len() != outer * size * inner || idx.iter().any(|&i| i >= size) {
        return Err(Error::invalid(
            "index_select",
            "an index outside the source",
        ));
    }
    // Chunks of whole rows, split over threads for large outputs.
    parallel::for_each_chunk(&mut out, inner, inner, |start, chunk| {
        for (j, dst) in chunk.chunks_exact_mut(inner).enumerate() {
            let row = start / inner + j;
            let (o, k) = (row / idx.len(), row % idx.len());
            let from = (o * size + idx[k]) * inner;
            if let Some(s) = x.get(from..from + inner) {
                dst.copy_from_slice(s);
            }
        }
    });
    Ok(out)
}

impl CpuStorage {
    /// The slices of `self` (layout `l`) along `dim` at the `i32` indices `(ix, il)`.
    pub fn index_select(
        &self,
        l: &Layout,
        dim: usize,
        (ix, il): (&CpuStorage, &Layout),
    ) -> Result<CpuStorage> {
        let size = l.shape().get(dim).copied().ok_or_else(|| {
            Error::invalid(
                "index_select",
                format!("dim {dim} of a rank-{} tensor", l.rank()),
            )
        })?;
        let idx = ix
            .to_vec::<i32>(il)?
            .into_iter()
            .map(|i| usize::try_from(i).ok().filter(|&i| i < size))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| Error::invalid("index_select", format!("an index outside 0..{size}")))?;
        Ok(match self {
            CpuStorage::F32(v) => CpuStorage::F32(pick(v, l, dim, &idx)?),
            CpuStorage::F16(v) => CpuStorage::F16(pick(v, l, dim, &idx)?),
            CpuStorage::BF16(v) => CpuStorage::BF16(pick(v, l, dim, &idx)?),
            CpuStorage::I32(v) => CpuStorage::I32(pick(v, l, dim, &idx)?),
            CpuStorage::U8(v) => CpuStorage::U8(pick(v, l, dim, &idx)?),
        })
    }
}
