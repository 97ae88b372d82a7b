//! Layer norm and group norm on the CPU: [`CpuStorage::norm`].
//!
//! Invariants: the input is read as contiguous `[batch, channels, inner]` (gathered first if it
//! is a strided view) and split into `batch * groups` rows of `channels / groups * inner`
//! elements; rows are independent and run in parallel (rayon), so results do not depend on the
//! thread count. Statistics are two-pass per row and shifted by the row's first element, which
//! keeps inputs with a large offset and a small spread accurate: the mean of `x - x0` is summed
//! in `f64` by the SIMD kernels, the deviations `x - mean` are formed in `f32` and their squares
//! summed in `f64`; the variance is biased (divides by the row length, as PyTorch). The output
//! is `(x - mean) / sqrt(var + eps) * w[c] + b[c]` (optionally SiLU'd), computed in `f32` and
//! rounded once to the input dtype; it is contiguous in the input's shape. Dense channels-last
//! group norm inputs take [`CpuStorage::group_norm_channels_last`] instead (module `nhwc`:
//! NHWC in, NHWC out, the same formula with block-wise two-pass statistics).

mod nhwc;

use super::elem::FloatElem;
use super::parallel;
use super::simd::Kernels;
use super::storage::CpuStorage;
use super::strided::{check_layout, contiguous_cow};
use crate::desc::kinds::{BinaryOp, UnaryOp};
use crate::desc::NormSpec;
use crate::layout::Layout;
use crate::{Device, Error, Result};

/// Per-chunk scratch rows (`f32`), allocated once per parallel chunk.
struct Scratch {
    wide: Vec<f32>,
    dev: Vec<f32>,
    tmp: Vec<f32>,
    act: Vec<f32>,
}

/// Normalises one row into `s.tmp`: `x` widened to `f32`, `params` the `(weight, bias)` of
/// this row's channels.
fn norm_row(
    k: Kernels,
    x: &[f32],
    params: (Option<&[f32]>, Option<&[f32]>),
    spec: &NormSpec,
    s: &mut Scratch,
) {
    let len = x.len();
    let Some(&x0) = x.first() else { return };
    let dev = &mut s.dev[..len];
    k.binary_f32_scalar_rhs(BinaryOp::Sub, x, x0, dev);
    let shifted_mean = (k.sum_f32(dev) / len as f64) as f32;
    s.tmp[..len].copy_from_slice(dev);
    k.binary_f32_scalar_rhs(BinaryOp::Sub, &s.tmp[..len], shifted_mean, dev);
    k.binary_f32(BinaryOp::Mul, dev, dev, &mut s.tmp[..len]);
    let var = k.sum_f32(&s.tmp[..len]) / len as f64;
    let rstd = (1.0 / (var + f64::from(spec.eps)).sqrt()) as f32;
    let y = &mut s.tmp[..len];
    let (w, b) = params;
    if spec.inner == 1 {
        // One channel per element (layer norm): vectorisable zipped loops.
        for (o, &d) in y.iter_mut().zip(dev.iter()) {
            *o = d * rstd;
        }
        if let Some(w) = w {
            y.iter_mut().zip(w).for_each(|(o, &w)| *o *= w);
        }
        if let Some(b) = b {
            y.iter_mut().zip(b).for_each(|(o, &b)| *o += b);
        }
    } else {
        let segments = y.chunks_mut(spec.inner).zip(dev.chunks(spec.inner));
        for (c, (ys, ds)) in segments.enumerate() {
            let scale = rstd * w.and_then(|w| w.get(c)).copied().unwrap_or(1.0);
            let shift = b.and_then(|b| b.get(c)).copied().unwrap_or(0.0);
            for (o, &d) in ys.iter_mut().zip(ds) {
                *o = d * scale + shift;
            }
        }
    }
}

/// Widens a contiguous `[C]` parameter to `f32`.
fn widen<T: FloatElem>(op: &'static str, k: Kernels, p: Option<&[T]>) -> Result<Option<Vec<f32>>> {
    p.map(|p| {
        let mut v = super::alloc::zeroed(op, p.len())?;
        T::load(k, p, &mut v);
        Ok(v)
    })
    .transpose()
}

/// One task's row scratch (16-bit rows widened, deviations, results, SiLU), or an error
/// naming `op` when the host will not allocate it.
fn scratch(op: &'static str, wide_len: usize, row_len: usize, silu: bool) -> Result<Scratch> {
    let z = |n| super::alloc::zeroed::<f32>(op, n);
    Ok(Scratch {
        wide: z(wide_len)?,
        dev: z(row_len)?,
        tmp: z(row_len)?,
        act: z(if silu { row_len } else { 0 })?,
    })
}

fn norm_float<T: FloatElem>(
    op: &'static str,
    k: Kernels,
    x: &[T],
    (w, b): (Option<&[T]>, Option<&[T]>),
    spec: &NormSpec,
) -> Result<Vec<T>> {
    let row_len = spec.row_len();
    let n = spec.rows() * row_len;
    if n == 0 {
        return Ok(Vec::new());
    }
    // Every row is written below.
    let mut out = super::pool::take::<T>(op, n)?;
    let (w, b) = (widen(op, k, w)?, widen(op, k, b)?);
    let cpg = spec.cpg();
    let failed = super::alloc::FirstError::default();
    parallel::for_each_chunk(&mut out, row_len, row_len * 4, |start, chunk| {
        let wide_len = if T::as_f32(chunk).is_some() {
            0
        } else {
            row_len
        };
        let mut s = match scratch(op, wide_len, row_len, spec.silu) {
            Ok(s) => s,
            Err(e) => return failed.record(Err(e)),
        };
        for (i, orow) in chunk.chunks_mut(row_len).enumerate() {
            let r = start / row_len + i;
            let Some(row) = x.get(r * row_len..(r + 1) * row_len) else {
                continue;
            };
            let g = r % spec.groups.max(1);
            let chan = g * cpg..(g + 1) * cpg;
            let params = (
                w.as_deref().and_then(|w| w.get(chan.clone())),
                b.as_deref().and_then(|b| b.get(chan)),
            );
            let mut wide = std::mem::take(&mut s.wide);
            let xr: &[f32] = match T::as_f32(row) {
                Some(r) => r,
                None => {
                    T::load(k, row, &mut wide);
                    &wide
                }
            };
            norm_row(k, xr, params, spec, &mut s);
            s.wide = wide;
            let y: &[f32] = if spec.silu {
                k.unary_f32(UnaryOp::Silu, &s.tmp, &mut s.act);
                &s.act
            } else {
                &s.tmp
            };
            T::store(k, y, orow);
        }
    });
    failed.into_result()?;
    Ok(out)
}

/// A checked contiguous view of a `[C]` parameter.
fn param<'a, T>(
    op: &'static str,
    p: Option<(&'a [T], &Layout)>,
) -> Result<Option<std::borrow::Cow<'a, [T]>>>
where
    T: Copy + Send + Sync + bytemuck::Zeroable,
    [T]: ToOwned<Owned = Vec<T>>,
{
    match p {
        None => Ok(None),
        Some((v, l)) => {
            check_layout(op, l, v.len())?;
            Ok(Some(contiguous_cow(op, v, l)?))
        }
    }
}

/// A parameter's slice when it has `dtype` (through `get`), else a dtype error.
fn typed<'a, T: crate::WithDType>(
    op: &'static str,
    dtype: crate::DType,
    p: Option<(&'a CpuStorage, &'a Layout)>,
    get: fn(&'a CpuStorage) -> Option<&'a [T]>,
) -> Result<Option<(&'a [T], &'a Layout)>> {
    match p {
        None => Ok(None),
        Some((s, l)) => match get(s) {
            Some(v) => Ok(Some((v, l))),
            None => Err(Error::DTypeMismatch {
                op,
                expected: dtype,
                got: s.dtype(),
            }),
        },
    }
}

/// Weight and bias of a norm widened to `f32` (checked views of this storage's dtype).
type WidenedParams = (Option<Vec<f32>>, Option<Vec<f32>>);

impl CpuStorage {
    /// Group norm (+ SiLU when `spec.silu`) of a 4-D `layout` that is dense channels-last
    /// (NHWC in memory, see [`crate::MemoryFormat::ChannelsLast`]), with optional `[C]` weight
    /// and bias of this storage's dtype; float dtypes only. The output is dense NHWC data of
    /// `layout`'s shape (the caller gives it channels-last strides); see [`nhwc`].
    pub(crate) fn group_norm_channels_last(
        &self,
        op: &'static str,
        layout: &Layout,
        weight: Option<(&CpuStorage, &Layout)>,
        bias: Option<(&CpuStorage, &Layout)>,
        spec: &NormSpec,
    ) -> Result<CpuStorage> {
        let n = check_layout(op, layout, self.len())?;
        let dense = layout.rank() == 4
            && layout
                .permute(&[0, 2, 3, 1])
                .is_ok_and(|l| l.is_contiguous());
        if !dense || n != spec.rows() * spec.row_len() {
            return Err(Error::invalid(
                op,
                format!("internal: {layout:?} is not dense channels-last for {spec:?}"),
            ));
        }
        let k = Kernels::current();
        let s = nhwc::NhwcSpec {
            batch: spec.batch,
            pixels: spec.inner,
            channels: spec.channels,
            groups: spec.groups,
            eps: spec.eps,
            silu: spec.silu,
        };
        let off = layout.offset();
        macro_rules! run {
            ($variant:ident, $v:expr) => {{
                let get: for<'s> fn(&'s CpuStorage) -> Option<&'s [_]> = |s| match s {
                    CpuStorage::$variant(w) => Some(w.as_slice()),
                    _ => None,
                };
                let dt = self.dtype();
                let w = param(op, typed(op, dt, weight, get)?)?;
                let b = param(op, typed(op, dt, bias, get)?)?;
                let (w, b): WidenedParams =
                    (widen(op, k, w.as_deref())?, widen(op, k, b.as_deref())?);
                let x = $v.get(off..off + n).unwrap_or(&[]);
                let params = (w.as_deref(), b.as_deref());
                CpuStorage::$variant(nhwc::group_norm_nhwc(op, k, x, params, &s)?)
            }};
        }
        Ok(match self {
            CpuStorage::F32(v) => run!(F32, v),
            CpuStorage::F16(v) => run!(F16, v),
            CpuStorage::BF16(v) => run!(BF16, v),
            other => {
                return Err(Error::UnsupportedDType {
                    op,
                    dtype: other.dtype(),
                    device: Device::Cpu,
                    hint: ": normalisation needs f32, f16 or bf16; cast first".to_string(),
                })
            }
        })
    }

    /// Layer/group norm of `layout` per `spec`, with optional `[C]` weight and bias of this
    /// storage's dtype; float dtypes only. The output is contiguous in `layout`'s shape.
    pub(crate) fn norm(
        &self,
        op: &'static str,
        layout: &Layout,
        weight: Option<(&CpuStorage, &Layout)>,
        bias: Option<(&CpuStorage, &Layout)>,
        spec: &NormSpec,
    ) -> Result<CpuStorage> {
        let n = check_layout(op, layout, self.len())?;
        if n != spec.rows() * spec.row_len() {
            return Err(Error::invalid(
                op,
                format!("{n} elements do not match the norm geometry {spec:?}"),
            ));
        }
        let k = Kernels::current();
        macro_rules! run {
            ($variant:ident, $v:expr) => {{
                let get: for<'s> fn(&'s CpuStorage) -> Option<&'s [_]> = |s| match s {
                    CpuStorage::$variant(w) => Some(w.as_slice()),
                    _ => None,
                };
                let dt = self.dtype();
                let w = param(op, typed(op, dt, weight, get)?)?;
                let b = param(op, typed(op, dt, bias, get)?)?;
                let x = contiguous_cow(op, $v, layout)?;
                CpuStorage::$variant(norm_float(op, k, &x, (w.as_deref(), b.as_deref()), spec)?)
            }};
        }
        Ok(match self {
            CpuStorage::F32(v) => run!(F32, v),
            CpuStorage::F16(v) => run!(F16, v),
            CpuStorage::BF16(v) => run!(BF16, v),
            other => {
                return Err(Error::UnsupportedDType {
                    op,
                    dtype: other.dtype(),
                    device: Device::Cpu,
                    hint: ": normalisation needs f32, f16 or bf16; cast first".to_string(),
                })
            }
        })
    }
}
