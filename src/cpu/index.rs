//! [`CpuStorage::index_select`]: rows of a (possibly strided) source picked by indices;
//! [`CpuStorage::gather`]: one source element per index (`torch.gather`).
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
    let x = contiguous_cow("index_select", src, l)?;
    let shape = l.shape();
    let outer: usize = shape[..dim].iter().product();
    let size = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    // Every element is written below, so a recycled buffer is fine.
    let n = outer
        .checked_mul(idx.len())
        .and_then(|n| n.checked_mul(inner))
        .ok_or_else(|| Error::invalid("index_select", "the output size overflows usize"))?;
    let mut out = super::pool::take::<T>("index_select", n)?;
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

/// `out[i] = src[i with coordinate dim replaced by idx[i]]` over the index shape `ishape`
/// (`idx` row-major over it, already checked in `0..size of dim`), the source read through
/// its layout in place.
fn gather_elems<T>(
    src: &[T],
    l: &Layout,
    dim: usize,
    ishape: &[usize],
    idx: &[usize],
) -> Result<Vec<T>>
where
    T: Copy + Send + Sync + bytemuck::Zeroable + super::pool::Recycle,
{
    let strides = l.strides();
    let base = l.offset();
    // Every element is written below, so a recycled buffer is fine.
    let mut out = super::pool::take::<T>("gather", idx.len())?;
    let inner = ishape.last().copied().unwrap_or(1).max(1);
    parallel::for_each_chunk(&mut out, inner, inner, |start, chunk| {
        for (j, dst) in chunk.iter_mut().enumerate() {
            let mut rest = start + j;
            let mut at = base;
            for d in (0..ishape.len()).rev() {
                let c = rest % ishape[d];
                rest /= ishape[d];
                let c = if d == dim { idx[start + j] } else { c };
                at += c * strides[d];
            }
            if let Some(&v) = src.get(at) {
                *dst = v;
            }
        }
    });
    Ok(out)
}

/// The `i32` indices `(ix, il)` as positions, each checked to lie in `0..size`.
fn positions(
    op: &'static str,
    (ix, il): (&CpuStorage, &Layout),
    size: usize,
) -> Result<Vec<usize>> {
    let raw = ix.to_vec::<i32>(il)?;
    let mut idx = super::alloc::with_capacity(op, raw.len())?;
    for i in raw {
        match usize::try_from(i).ok().filter(|&i| i < size) {
            Some(i) => idx.push(i),
            None => {
                return Err(Error::invalid(
                    op,
                    format!("index {i} is outside 0..{size}"),
                ))
            }
        }
    }
    Ok(idx)
}

impl CpuStorage {
    /// `torch.gather(self, dim, index)` for a source of layout `l` and `i32` indices `(ix, il)`
    /// of the source's rank, no larger than it outside `dim`, each in `0..size of dim`.
    pub fn gather(
        &self,
        l: &Layout,
        dim: usize,
        (ix, il): (&CpuStorage, &Layout),
    ) -> Result<CpuStorage> {
        let op = "gather";
        let fits = il.rank() == l.rank()
            && dim < l.rank()
            && (0..l.rank()).all(|d| d == dim || il.shape()[d] <= l.shape()[d]);
        if !fits {
            return Err(Error::invalid(
                op,
                format!(
                    "indices into dim {dim} no larger than the source {:?} elsewhere, got shape {:?}",
                    l.shape(),
                    il.shape()
                ),
            ));
        }
        let size = l.shape()[dim];
        let idx = positions(op, (ix, il), size)?;
        check_layout(op, l, self.len())?;
        let shape = il.shape();
        Ok(match self {
            CpuStorage::F32(v) => CpuStorage::F32(gather_elems(v, l, dim, shape, &idx)?),
            CpuStorage::F16(v) => CpuStorage::F16(gather_elems(v, l, dim, shape, &idx)?),
            CpuStorage::BF16(v) => CpuStorage::BF16(gather_elems(v, l, dim, shape, &idx)?),
            CpuStorage::I32(v) => CpuStorage::I32(gather_elems(v, l, dim, shape, &idx)?),
            CpuStorage::U8(v) => CpuStorage::U8(gather_elems(v, l, dim, shape, &idx)?),
        })
    }

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
        let idx = positions("index_select", (ix, il), size)?;
        Ok(match self {
            CpuStorage::F32(v) => CpuStorage::F32(pick(v, l, dim, &idx)?),
            CpuStorage::F16(v) => CpuStorage::F16(pick(v, l, dim, &idx)?),
            CpuStorage::BF16(v) => CpuStorage::BF16(pick(v, l, dim, &idx)?),
            CpuStorage::I32(v) => CpuStorage::I32(pick(v, l, dim, &idx)?),
            CpuStorage::U8(v) => CpuStorage::U8(pick(v, l, dim, &idx)?),
        })
    }
}
