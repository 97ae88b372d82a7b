//! Reductions along one dim: [`CpuStorage::reduce`].
//!
//! Invariants: the input is viewed as `[outer, R, inner]`; the output is contiguous with `dim`
//! removed. Rows (`inner == 1`, or any non-contiguous input, which is first gathered with `dim`
//! moved last) use the per-row SIMD reductions; contiguous inputs with `inner > 1` accumulate
//! whole rows of `inner` elements. Sums accumulate in `f64` and round once; max/min propagate
//! NaN; arg-reductions return the first extreme (the first NaN if any) as `i32`. `R == 0`: sum
//! gives 0, mean NaN, the others an error.

use super::elem::FloatElem;
use super::parallel;
use super::simd::Kernels;
use super::storage::CpuStorage;
use super::strided::{check_dim, check_layout, contiguous_cow, gather};
use crate::desc::kinds::ReduceOp;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};
use std::borrow::Cow;

/// Output of a reduction: values in the input dtype, or indices.
enum Reduced<T> {
    Values(Vec<T>),
    Indices(Vec<i32>),
}

/// Columns accumulated at once in the `inner > 1` path.
const COLS: usize = 1024;

/// `(outer, R, inner)` of a reduction over `dim`.
fn split(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    let outer = shape[..dim].iter().product();
    let inner = shape[dim + 1..].iter().product();
    (outer, shape[dim], inner)
}

/// The input as contiguous rows of `R` elements (dim moved last), borrowed when possible.
fn rows_of<'a, T>(src: &'a [T], layout: &Layout, dim: usize, inner: usize) -> Result<Cow<'a, [T]>>
where
    T: Copy + Send + Sync + bytemuck::Zeroable,
{
    if inner == 1 {
        return contiguous_cow("reduce", src, layout);
    }
    let mut perm: Vec<usize> = (0..layout.rank()).filter(|&d| d != dim).collect();
    perm.push(dim);
    Ok(Cow::Owned(gather("reduce", src, &layout.permute(&perm)?)?))
}

fn reduce_row<T: FloatElem>(k: Kernels, op: ReduceOp, row: &[T]) -> (f64, i32) {
    let mut acc = 0f64;
    let mut best: Option<(usize, f32)> = None;
    let mut done = false;
    T::for_each_f32_block(k, row, |start, b| match op {
        ReduceOp::Sum | ReduceOp::Mean => acc += k.sum_f32(b),
        ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax | ReduceOp::ArgMin => {
            if done {
                return;
            }
            let is_max = matches!(op, ReduceOp::Max | ReduceOp::ArgMax);
            let m = if is_max { k.max_f32(b) } else { k.min_f32(b) };
            let better = match best {
                None => true,
                Some((_, v)) => m.is_nan() || (is_max && m > v) || (!is_max && m < v),
            };
            if better {
                let idx = if op.returns_index() {
                    let i = if is_max {
                        k.argmax_f32(b)
                    } else {
                        k.argmin_f32(b)
                    };
                    start + i.unwrap_or(0)
                } else {
                    0
                };
                best = Some((idx, m));
                done = m.is_nan();
            }
        }
    });
    match op {
        ReduceOp::Sum => (acc, 0),
        ReduceOp::Mean => (acc / row.len() as f64, 0),
        _ => best.map_or((f64::NAN, 0), |(i, v)| (f64::from(v), i as i32)),
    }
}

fn write<T: FloatElem>(op: ReduceOp, v: (f64, i32), value: &mut T, index: &mut i32) {
    if op.returns_index() {
        *index = v.1;
    } else {
        *value = T::from_f64_rne(v.0);
    }
}

fn reduce_float<T: FloatElem>(
    k: Kernels,
    src: &[T],
    layout: &Layout,
    dim: usize,
    op: ReduceOp,
) -> Result<Reduced<T>> {
    let (outer, r, inner) = split(layout.shape(), dim);
    let n_out = outer * inner;
    let is_index = op.returns_index();
    let name = op.name();
    let mut values = super::alloc::zeroed::<T>(name, if is_index { 0 } else { n_out })?;
    let mut indices = super::alloc::zeroed::<i32>(name, if is_index { n_out } else { 0 })?;
    let columns = inner > 1 && layout.is_contiguous();
    let data: Cow<'_, [T]> = if columns {
        contiguous_cow(name, src, layout)?
    } else {
        rows_of(src, layout, dim, inner)?
    };
    // One closure for both output kinds: chunks of values or of indices. A task whose column
    // accumulators the host will not allocate ends the reduction with that error.
    let failed = super::alloc::FirstError::default();
    let run = |start: usize, vals: &mut [T], idxs: &mut [i32], len: usize| {
        if columns {
            failed.record(reduce_columns(
                k,
                op,
                &data,
                (r, inner),
                start,
                len,
                vals,
                idxs,
            ));
        } else {
            let (mut dv, mut di) = (T::zeroed(), 0i32);
            for j in 0..len {
                let row = data
                    .get((start + j) * r..(start + j + 1) * r)
                    .unwrap_or(&[]);
                let res = reduce_row(k, op, row);
                let (v, i) = (
                    vals.get_mut(j).unwrap_or(&mut dv),
                    idxs.get_mut(j).unwrap_or(&mut di),
                );
                write(op, res, v, i);
            }
        }
    };
    // Column sums read each of the R rows `unit` columns at a time: whole runs of up to
    // [`COLS`] (4 KiB of f32) per task, not the pool's default split of a few hundred bytes,
    // which touched a new page every read (`sum(0)` of [4096, 4096] f32: 12 GB/s).
    let unit = if columns { inner.min(COLS) } else { 1 };
    if is_index {
        parallel::for_each_chunk(&mut indices, unit, r * unit, |s, c| {
            run(s, &mut [], c, c.len())
        });
        failed.into_result()?;
        Ok(Reduced::Indices(indices))
    } else {
        parallel::for_each_chunk(&mut values, unit, r * unit, |s, c| {
            let len = c.len();
            run(s, c, &mut [], len)
        });
        failed.into_result()?;
        Ok(Reduced::Values(values))
    }
}

/// Rows ahead whose runs [`reduce_columns`] prefetches (rows are separate pages when `inner`
/// is large, and the hardware prefetchers stop at page edges).
const PREFETCH_ROWS: usize = 4;

/// Asks for `run`'s cache lines ahead of use (nothing on other architectures).
fn prefetch<T>(run: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let bytes = std::mem::size_of_val(run);
        let p = run.as_ptr() as *const i8;
        for off in (0..bytes).step_by(64) {
            // SAFETY: inside `run` (prefetches never fault anyway).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(off)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = run;
}

/// Output positions `start..start+len` of the `[outer, r, inner]` contiguous column case.
#[allow(clippy::too_many_arguments)]
fn reduce_columns<T: FloatElem>(
    k: Kernels,
    op: ReduceOp,
    data: &[T],
    (r, inner): (usize, usize),
    start: usize,
    len: usize,
    vals: &mut [T],
    idxs: &mut [i32],
) -> Result<()> {
    let cols = COLS.min(len);
    let mut sums = super::alloc::zeroed::<f64>(op.name(), cols)?;
    let mut ext = super::alloc::zeroed::<f32>(op.name(), cols)?;
    let mut arg =
        super::alloc::zeroed::<i32>(op.name(), if op.returns_index() { cols } else { 0 })?;
    let mut pos = start;
    while pos < start + len {
        let (o, j) = (pos / inner, pos % inner);
        let w = (inner - j).min(start + len - pos).min(COLS);
        let at = |rr: usize| {
            data.get((o * r + rr) * inner + j..(o * r + rr) * inner + j + w)
                .unwrap_or(&[])
        };
        match op {
            ReduceOp::Sum | ReduceOp::Mean => {
                sums[..w].fill(0.0);
                for rr in 0..r {
                    prefetch(at(rr + PREFETCH_ROWS));
                    T::for_each_f32_block(k, at(rr), |s, b| {
                        k.add_assign_f64_f32(&mut sums[s..s + b.len()], b)
                    });
                }
            }
            _ => {
                T::for_each_f32_block(k, at(0), |s, b| ext[s..s + b.len()].copy_from_slice(b));
                let m = arg.len().min(w);
                arg[..m].fill(0);
                for rr in 1..r {
                    T::for_each_f32_block(k, at(rr), |s, b| {
                        let acc = &mut ext[s..s + b.len()];
                        match op {
                            ReduceOp::Max => k.max_assign_f32(acc, b),
                            ReduceOp::Min => k.min_assign_f32(acc, b),
                            _ => {
                                let is_max = op == ReduceOp::ArgMax;
                                for (c, (a, &v)) in acc.iter_mut().zip(b).enumerate() {
                                    let better = (v.is_nan() && !a.is_nan())
                                        || (is_max && v > *a)
                                        || (!is_max && v < *a);
                                    if better {
                                        *a = v;
                                        arg[s + c] = rr as i32;
                                    }
                                }
                            }
                        }
                    });
                }
            }
        }
        let off = pos - start;
        for c in 0..w {
            match op {
                ReduceOp::Sum => vals[off + c] = T::from_f64_rne(sums[c]),
                ReduceOp::Mean => vals[off + c] = T::from_f64_rne(sums[c] / r as f64),
                ReduceOp::Max | ReduceOp::Min => vals[off + c] = T::from_f64_rne(f64::from(ext[c])),
                _ => idxs[off + c] = arg[c],
            }
        }
        pos += w;
    }
    Ok(())
}

fn reduce_i32(src: &[i32], layout: &Layout, dim: usize, op: ReduceOp) -> Result<Vec<i32>> {
    let (outer, r, inner) = split(layout.shape(), dim);
    let data = rows_of(src, layout, dim, inner)?;
    let mut out = super::alloc::zeroed::<i32>(op.name(), outer * inner)?;
    parallel::for_each_chunk(&mut out, 1, r, |start, chunk| {
        for (j, o) in chunk.iter_mut().enumerate() {
            let row = data
                .get((start + j) * r..(start + j + 1) * r)
                .unwrap_or(&[]);
            let first = row.first().copied().unwrap_or(0);
            *o = match op {
                ReduceOp::Sum => row.iter().fold(0i32, |a, &x| a.wrapping_add(x)),
                ReduceOp::Max => row.iter().copied().fold(first, i32::max),
                ReduceOp::Min => row.iter().copied().fold(first, i32::min),
                ReduceOp::ArgMax | ReduceOp::ArgMin => {
                    let mut best = (0usize, first);
                    for (i, &x) in row.iter().enumerate() {
                        if (op == ReduceOp::ArgMax && x > best.1)
                            || (op == ReduceOp::ArgMin && x < best.1)
                        {
                            best = (i, x);
                        }
                    }
                    best.0 as i32
                }
                ReduceOp::Mean => 0,
            };
        }
    });
    Ok(out)
}

impl CpuStorage {
    /// Reduces `layout` along `dim` (removed from the output shape). Sum/mean/max/min keep the
    /// dtype (mean: floats only); argmax/argmin give `i32` indices of the first extreme; NaN
    /// propagates through max/min and is picked first by argmax/argmin (as torch). Reducing an
    /// empty dim gives 0 (sum), NaN (mean) or an error (others).
    pub fn reduce(&self, layout: &Layout, dim: usize, op: ReduceOp) -> Result<CpuStorage> {
        check_dim(op.name(), dim, layout.rank())?;
        check_layout(op.name(), layout, self.len())?;
        let dtype = self.dtype();
        let ok = dtype.is_float() || (dtype == DType::I32 && op != ReduceOp::Mean);
        if !ok {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype,
                device: Device::Cpu,
                hint: ": reductions need a float tensor (or i32 for sum/max/min/argmax/argmin); cast first"
                    .to_string(),
            });
        }
        let (outer, r, inner) = split(layout.shape(), dim);
        if r == 0 {
            return match op {
                ReduceOp::Sum => CpuStorage::try_zeros(op.name(), dtype, outer * inner),
                ReduceOp::Mean => {
                    CpuStorage::F32(super::alloc::filled(op.name(), outer * inner, f32::NAN)?)
                        .cast(&Layout::contiguous(&[outer * inner]), dtype)
                }
                _ => Err(Error::invalid(
                    op.name(),
                    format!(
                        "cannot reduce dim {dim} of size 0 (shape {:?})",
                        layout.shape()
                    ),
                )),
            };
        }
        let k = Kernels::current();
        Ok(match self {
            CpuStorage::F32(v) => match reduce_float(k, v, layout, dim, op)? {
                Reduced::Values(v) => CpuStorage::F32(v),
                Reduced::Indices(i) => CpuStorage::I32(i),
            },
            CpuStorage::F16(v) => match reduce_float(k, v, layout, dim, op)? {
                Reduced::Values(v) => CpuStorage::F16(v),
                Reduced::Indices(i) => CpuStorage::I32(i),
            },
            CpuStorage::BF16(v) => match reduce_float(k, v, layout, dim, op)? {
                Reduced::Values(v) => CpuStorage::BF16(v),
                Reduced::Indices(i) => CpuStorage::I32(i),
            },
            CpuStorage::I32(v) => CpuStorage::I32(reduce_i32(v, layout, dim, op)?),
            CpuStorage::U8(_) => CpuStorage::empty(DType::I32),
        })
    }
}
