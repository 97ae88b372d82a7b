//! Dtype casts and concatenation.
//!
//! Invariants: casts read every element exactly (through `f64`, or the exact SIMD widenings)
//! and round once: to `f32` by `as`, to 16-bit floats to nearest even, to integers by Rust `as`
//! (floats truncate toward zero and saturate, NaN gives 0; `i32 -> u8` wraps). `cat` output is
//! contiguous; parts are validated (dtype, rank, sizes off `dim`, bounds) before any copy, and
//! its output rows (one per index of the dims before `dim`) are copied in parallel.

use super::elem::FloatElem;
use super::parallel;
use super::simd::Kernels;
use super::storage::{with_storage, CpuStorage};
use super::strided::{check_dim, check_layout, contiguous_cow};
use crate::layout::Layout;
use crate::{DType, Error, Result, WithDType};
use half::{bf16, f16};

fn par_convert<S: Sync, D: Send + Clone + bytemuck::Zeroable>(
    src: &[S],
    f: impl Fn(&[S], &mut [D]) + Sync,
) -> Result<Vec<D>> {
    let mut out = super::alloc::zeroed("to_dtype", src.len())?;
    parallel::for_each_flat(&mut out, |start, chunk| {
        if let Some(s) = src.get(start..start + chunk.len()) {
            f(s, chunk);
        }
    });
    Ok(out)
}

fn map_elems<S: WithDType, D: Send + Clone + bytemuck::Zeroable>(
    src: &[S],
    f: impl Fn(S) -> D + Sync,
) -> Result<Vec<D>> {
    par_convert(src, |s, d: &mut [D]| {
        for (o, &x) in d.iter_mut().zip(s) {
            *o = f(x);
        }
    })
}

fn to_dtype<S: WithDType>(src: &[S], dtype: DType) -> Result<CpuStorage> {
    Ok(match dtype {
        DType::F32 => CpuStorage::F32(map_elems(src, |x| x.to_f64() as f32)?),
        DType::F16 => CpuStorage::F16(map_elems(src, |x| f16::from_f64_rne(x.to_f64()))?),
        DType::BF16 => CpuStorage::BF16(map_elems(src, |x| bf16::from_f64_rne(x.to_f64()))?),
        DType::I32 => CpuStorage::I32(map_elems(src, |x| x.to_f64() as i32)?),
        DType::U8 if S::DTYPE == DType::I32 => {
            CpuStorage::U8(map_elems(src, |x| x.to_f64() as i32 as u8)?)
        }
        DType::U8 => CpuStorage::U8(map_elems(src, |x| x.to_f64() as u8)?),
    })
}

/// Casts a contiguous storage (all of it) to `dtype` (an error when the host will not
/// allocate the converted copy).
pub(crate) fn cast_contiguous(src: CpuStorage, dtype: DType) -> Result<CpuStorage> {
    if src.dtype() == dtype {
        return Ok(src);
    }
    let k = Kernels::current();
    Ok(match (&src, dtype) {
        (CpuStorage::F16(v), DType::F32) => {
            CpuStorage::F32(par_convert(v, |s, d| k.f16_to_f32(s, d))?)
        }
        (CpuStorage::BF16(v), DType::F32) => {
            CpuStorage::F32(par_convert(v, |s, d| k.bf16_to_f32(s, d))?)
        }
        (CpuStorage::F32(v), DType::F16) => {
            CpuStorage::F16(par_convert(v, |s, d| k.f32_to_f16(s, d))?)
        }
        (CpuStorage::F32(v), DType::BF16) => {
            CpuStorage::BF16(par_convert(v, |s, d| k.f32_to_bf16(s, d))?)
        }
        _ => with_storage!(&src, v => to_dtype(v, dtype)?),
    })
}

fn cat_typed<T: Copy + Send + Sync + super::pool::Recycle>(
    parts: &[(&[T], &Layout)],
    dim: usize,
    total: usize,
) -> Result<Vec<T>> {
    let Some(first) = parts.first() else {
        return Ok(Vec::new());
    };
    let shape = first.1.shape();
    let outer: usize = shape[..dim].iter().product();
    let inner: usize = shape[dim + 1..].iter().product();
    let data = parts
        .iter()
        .map(|(s, l)| Ok((contiguous_cow("cat", s, l)?, l.shape()[dim] * inner)))
        .collect::<Result<Vec<_>>>()?;
    // One output row per outer index: the parts' blocks side by side; rows copy in parallel.
    let row: usize = data.iter().map(|(_, block)| block).sum();
    if row == 0 || outer == 0 || outer.checked_mul(row) != Some(total) {
        return super::alloc::zeroed("cat", total);
    }
    // Every element is written below: `outer` rows of `row` elements (validated parts).
    let mut out = super::pool::take::<T>("cat", total)?;
    parallel::for_each_chunk(&mut out, row, row, |start, chunk| {
        for (i, orow) in chunk.chunks_mut(row).enumerate() {
            let o = start / row + i;
            let mut at = 0;
            for (d, block) in &data {
                if let (Some(dst), Some(src)) = (
                    orow.get_mut(at..at + block),
                    d.get(o * block..(o + 1) * block),
                ) {
                    dst.copy_from_slice(src);
                }
                at += block;
            }
        }
    });
    Ok(out)
}

/// Concatenation along `dim`; see [`CpuStorage::cat`].
pub(crate) fn cat(parts: &[(&CpuStorage, &Layout)], dim: usize) -> Result<CpuStorage> {
    let Some(&(first, first_layout)) = parts.first() else {
        return Err(Error::invalid("cat", "needs at least one part"));
    };
    let rank = first_layout.rank();
    check_dim("cat", dim, rank)?;
    let mut total = 0usize;
    for &(s, l) in parts {
        if s.dtype() != first.dtype() {
            return Err(Error::DTypeMismatch {
                op: "cat",
                expected: first.dtype(),
                got: s.dtype(),
            });
        }
        let same = l.rank() == rank
            && l.shape()
                .iter()
                .zip(first_layout.shape())
                .enumerate()
                .all(|(d, (a, b))| d == dim || a == b);
        if !same {
            let mut expected = first_layout.shape().to_vec();
            expected[dim] = 0;
            return Err(Error::shape(
                "cat",
                format!("shape {expected:?} with any size at dim {dim}"),
                l.shape(),
            ));
        }
        let n = check_layout("cat", l, s.len())?;
        total = total
            .checked_add(n)
            .ok_or_else(|| Error::invalid("cat", "total size overflows usize"))?;
    }
    macro_rules! typed {
        ($variant:ident) => {{
            let typed: Vec<_> = parts
                .iter()
                .filter_map(|&(s, l)| match s {
                    CpuStorage::$variant(v) => Some((v.as_slice(), l)),
                    _ => None,
                })
                .collect();
            CpuStorage::$variant(cat_typed(&typed, dim, total)?)
        }};
    }
    Ok(match first.dtype() {
        DType::F32 => typed!(F32),
        DType::F16 => typed!(F16),
        DType::BF16 => typed!(BF16),
        DType::I32 => typed!(I32),
        DType::U8 => typed!(U8),
    })
}
