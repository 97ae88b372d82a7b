//! Fused matrix products on the CPU: the GEMM engine's epilogue (alpha, beta·C, bias,
//! activation, residual) and its GLU kernel, applied per batch as each tile is stored.
//!
//! Invariants: `c` and `residual` arrive broadcast to the output shape and are gathered once to
//! contiguous f32; `bias` is gathered to f32; a 16-bit output is rounded once, by the GEMM store
//! (or after the epilogue when K = 0).

use super::gemm::{Epilogue, MatRef, Out16, Residual};
use super::matmul::{batch_offset, dims, narrow, GemmElem};
use super::prepack::{residual_in_place, residual_of};
use super::storage::CpuStorage;
use super::strided::check_layout;
use crate::desc::Activation;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};
use rayon::prelude::*;

/// Epilogue operands of a fused product, already on the CPU.
pub(crate) struct CpuFused<'a> {
    pub alpha: f32,
    pub beta: f32,
    pub c: Option<(&'a CpuStorage, Layout)>,
    pub bias: Option<(&'a CpuStorage, Layout)>,
    pub activation: Activation,
    pub residual: Option<(&'a CpuStorage, Layout)>,
    pub geglu: bool,
    pub out_dtype: DType,
}

fn to_f32(s: &CpuStorage, l: &Layout) -> Result<Vec<f32>> {
    s.cast(l, DType::F32)?
        .into_f32()
        .ok_or_else(|| Error::invalid("matmul_fused", "internal: cast to f32 gave another dtype"))
}

/// The fused product into f32 rows, or, with `out16` (K > 0 only), rounded into those 16-bit
/// rows by the GEMM store; then the returned vector is empty unless it held `C` (partial sums
/// go to the engine's kept scratch, not to a fresh `batch·M·N` buffer per call).
///
/// Without `C` the f32 output is a recycled buffer: with `beta = 0` and K > 0 the store writes
/// every element. A residual in f32, bf16 or f16 is read in place at its (broadcast) strides,
/// as the prepacked layers do; other dtypes, and K = 0, gather it to f32 once.
fn fused_f32<T: GemmElem>(
    a: &[T],
    al: &Layout,
    b: &[T],
    bl: &Layout,
    f: &CpuFused,
    out16: Option<Out16>,
) -> Result<Vec<f32>> {
    let (batch_shape, m, k, n_prod) = dims(al, bl)?;
    check_layout("matmul_fused", al, a.len())?;
    check_layout("matmul_fused", bl, b.len())?;
    let n = if f.geglu { n_prod / 2 } else { n_prod };
    let batch: usize = batch_shape.iter().product();
    let size = batch * m * n;
    if size == 0 {
        return Ok(Vec::new());
    }
    let mut out = match &f.c {
        Some((s, l)) if f.beta != 0.0 => to_f32(s, l)?,
        _ if out16.is_some() && k > 0 => Vec::new(),
        _ if k > 0 => super::pool::take::<f32>("matmul_fused", size)?,
        _ => super::alloc::zeroed("matmul_fused", size)?,
    };
    let bias = f.bias.as_ref().map(|(s, l)| to_f32(s, l)).transpose()?;
    let r = al.rank();
    // In place only at exactly the output's shape (the caller broadcasts it there).
    let in_place = |l: &Layout| {
        k > 0
            && l.rank() == r
            && l.shape()[..r - 2] == batch_shape[..]
            && l.shape()[r - 2..] == [m, n]
    };
    let residual_f32 = match &f.residual {
        Some((s, l)) if !(in_place(l) && residual_in_place(s)) => Some(to_f32(s, l)?),
        _ => None,
    };
    let residual_at = |bi: usize| -> Option<Residual> {
        if let Some(v) = &residual_f32 {
            return Some(Residual::F32(MatRef::new(v, bi * m * n, m, n, n, 1)));
        }
        let (s, l) = f.residual.as_ref()?;
        let st = l.strides();
        let off = batch_offset(bi, &batch_shape, &st[..r - 2], l.offset());
        residual_of(s, (m, n), (off, st[r - 2], st[r - 1]))
    };
    let (sam, sak) = (al.strides()[r - 2], al.strides()[r - 1]);
    let (sbk, sbn) = (bl.strides()[r - 2], bl.strides()[r - 1]);
    let one = |bi: usize, c: &mut [f32]| -> Result<()> {
        let a_off = batch_offset(bi, &batch_shape, &al.strides()[..r - 2], al.offset());
        let b_off = batch_offset(bi, &batch_shape, &bl.strides()[..r - 2], bl.offset());
        let av = MatRef::new(a, a_off, m, k, sam, sak);
        let bv = MatRef::new(b, b_off, k, n_prod, sbk, sbn);
        let mut ep =
            Epilogue::default().with_scale(f.alpha, if f.c.is_some() { f.beta } else { 0.0 });
        ep = ep.with_activation(f.activation);
        if let Some(bias) = &bias {
            ep = ep.with_bias(bias);
        }
        if let Some(res) = residual_at(bi) {
            ep = ep.with_any_residual(res);
        }
        if let Some(o) = out16 {
            ep = ep.with_out16(o.offset(bi * m * n));
        }
        if k == 0 {
            return zero_k(c, n, &ep, f.geglu);
        }
        if f.geglu {
            T::glu(av, bv, c, n, &ep)
        } else {
            T::gemm(av, bv, c, n, &ep)
        }
    };
    let parallel = batch > 1 && m * n * k < (1 << 22);
    if out.is_empty() {
        // 16-bit output without C: each batch's partial sums live in the kept scratch.
        let run = |bi: usize| super::gemm::with_partial_sums("matmul_fused", m * n, |c| one(bi, c));
        if parallel {
            (0..batch).into_par_iter().try_for_each(run)?;
        } else {
            (0..batch).try_for_each(run)?;
        }
    } else if parallel {
        out.par_chunks_mut(m * n)
            .enumerate()
            .try_for_each(|(bi, c)| one(bi, c))?;
    } else {
        for (bi, c) in out.chunks_mut(m * n).enumerate() {
            one(bi, c)?;
        }
    }
    Ok(out)
}

/// The epilogue over an empty product (K = 0): the engine is not called with K = 0.
fn zero_k(c: &mut [f32], n: usize, ep: &Epilogue, geglu: bool) -> Result<()> {
    let act = |x: f32| -> f32 {
        let t = crate::cpu::CpuStorage::F32(vec![x]);
        let op = match ep.activation {
            Activation::None => return x,
            Activation::Relu => crate::UnaryOp::Relu,
            Activation::Gelu => crate::UnaryOp::GeluErf,
            Activation::GeluTanh => crate::UnaryOp::GeluTanh,
            Activation::Silu => crate::UnaryOp::Silu,
        };
        t.unary(&Layout::contiguous(&[1]), op)
            .ok()
            .and_then(CpuStorage::into_f32)
            .and_then(|v| v.first().copied())
            .unwrap_or(f32::NAN)
    };
    for (i, v) in c.iter_mut().enumerate() {
        let (row, col) = (i / n, i % n);
        let bias = |j: usize| ep.bias.map_or(0.0, |b| b[j]);
        let base = ep.beta * *v;
        let y = if geglu {
            bias(col) * act(bias(col + n))
        } else {
            act(base + bias(col))
        };
        *v = y + ep.residual.and_then(|r| r.get(row, col)).unwrap_or(0.0);
    }
    Ok(())
}

impl CpuStorage {
    /// Fused product; `lhs`/`rhs` batch dims already broadcast; see [`CpuFused`].
    pub(crate) fn matmul_fused(
        &self,
        lhs: &Layout,
        rhs: &CpuStorage,
        rhs_layout: &Layout,
        f: &CpuFused,
    ) -> Result<CpuStorage> {
        let run = |out16: Option<Out16>| match (self, rhs) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => fused_f32(a, lhs, b, rhs_layout, f, out16),
            (CpuStorage::F16(a), CpuStorage::F16(b)) => fused_f32(a, lhs, b, rhs_layout, f, out16),
            (CpuStorage::BF16(a), CpuStorage::BF16(b)) => {
                fused_f32(a, lhs, b, rhs_layout, f, out16)
            }
            _ => Err(Error::UnsupportedDType {
                op: "matmul_fused",
                dtype: self.dtype(),
                device: Device::Cpu,
                hint: ": needs matching float operands".into(),
            }),
        };
        let (batch_shape, m, k, n_prod) = dims(lhs, rhs_layout)?;
        let n = if f.geglu { n_prod / 2 } else { n_prod };
        let size = batch_shape.iter().product::<usize>() * m * n;
        // 16-bit outputs are rounded by the GEMM store, which writes every element when K > 0
        // (K = 0 runs the epilogue on f32 zeros and rounds after).
        if k > 0 {
            match f.out_dtype {
                DType::F16 => {
                    let mut out = super::pool::take::<half::f16>("matmul_fused", size)?;
                    super::pool::give(run(Some(Out16::f16(&mut out, n)))?);
                    return Ok(CpuStorage::F16(out));
                }
                DType::BF16 => {
                    let mut out = super::pool::take::<half::bf16>("matmul_fused", size)?;
                    super::pool::give(run(Some(Out16::bf16(&mut out, n)))?);
                    return Ok(CpuStorage::BF16(out));
                }
                _ => {}
            }
        }
        let out = run(None)?;
        Ok(match f.out_dtype {
            DType::F16 => CpuStorage::F16(narrow("matmul_fused", out)?),
            DType::BF16 => CpuStorage::BF16(narrow("matmul_fused", out)?),
            _ => CpuStorage::F32(out),
        })
    }
}
