//! Batched matrix product: [`CpuStorage::matmul`] on the BLIS-style engine of
//! [`super::gemm`], and the f32 entry point [`matmul_f32_strided`].
//!
//! Invariants: `lhs` is `[..batch, M, K]`, `rhs` `[..batch, K, N]` with identical batch dims
//! (already broadcast by the caller; any strides, including 0 and transposed: the engine packs
//! from strided views, so no operand is copied first); the output is a new contiguous
//! `[..batch, M, N]`. Products accumulate in `f32` (16-bit inputs are widened exactly while
//! packing and the result is rounded once, by the GEMM store). Large products are threaded
//! inside the engine; many small batches run in parallel over the batch instead.

use super::elem::FloatElem;
use super::gemm::{self, Epilogue, MatRef, Out16};
use super::parallel;
use super::pool::Recycle;
use super::simd::Kernels;
use super::storage::CpuStorage;
use super::strided::check_layout;
use crate::layout::Layout;
use crate::{Device, Error, Result};
use rayon::prelude::*;

/// `(batch dims, M, K, N)` of a matmul, validated.
pub(super) fn dims(a: &Layout, b: &Layout) -> Result<(Vec<usize>, usize, usize, usize)> {
    let (sa, sb) = (a.shape(), b.shape());
    let r = sa.len();
    if r < 2 || sb.len() != r || sa[..r - 2] != sb[..r - 2] || sa[r - 1] != sb[r - 2] {
        return Err(Error::ShapeMismatch {
            op: "matmul",
            expected: format!(
                "[..batch, M, K] x [..batch, K, N] with equal batch dims; lhs is {sa:?}"
            ),
            got: format!("{sb:?}"),
        });
    }
    Ok((sa[..r - 2].to_vec(), sa[r - 2], sa[r - 1], sb[r - 1]))
}

pub(super) fn batch_offset(
    index: usize,
    shape: &[usize],
    strides: &[usize],
    offset: usize,
) -> usize {
    let mut i = index;
    let mut off = offset;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        off += (i % d) * s;
        i /= d;
    }
    off
}

/// Element types the engine multiplies, with their plain and GLU entry points.
pub(super) trait GemmElem: FloatElem {
    /// `C = epilogue(A @ B)`.
    fn gemm(
        a: MatRef<Self>,
        b: MatRef<Self>,
        c: &mut [f32],
        ldc: usize,
        ep: &Epilogue,
    ) -> Result<()>;
    /// `C = h * act(g)` over the column halves of `A @ B`.
    fn glu(
        a: MatRef<Self>,
        b: MatRef<Self>,
        c: &mut [f32],
        ldc: usize,
        ep: &Epilogue,
    ) -> Result<()>;
}

macro_rules! gemm_elem {
    ($t:ty, $plain:ident, $glu:ident) => {
        impl GemmElem for $t {
            fn gemm(
                a: MatRef<Self>,
                b: MatRef<Self>,
                c: &mut [f32],
                ldc: usize,
                ep: &Epilogue,
            ) -> Result<()> {
                gemm::$plain(a, b, c, ldc, ep)
            }
            fn glu(
                a: MatRef<Self>,
                b: MatRef<Self>,
                c: &mut [f32],
                ldc: usize,
                ep: &Epilogue,
            ) -> Result<()> {
                gemm::$glu(a, b, c, ldc, ep)
            }
        }
    };
}

gemm_elem!(f32, gemm_f32, gemm_geglu_f32);
gemm_elem!(half::f16, gemm_f16, gemm_geglu_f16);
gemm_elem!(half::bf16, gemm_bf16, gemm_geglu_bf16);

/// Elements of the `[..batch, M, N]` product, its K and its N.
fn out_size(al: &Layout, bl: &Layout) -> Result<(usize, usize, usize)> {
    let (batch_shape, m, k, n) = dims(al, bl)?;
    let batch: usize = batch_shape.iter().product();
    let mn = m
        .checked_mul(n)
        .and_then(|x| x.checked_mul(batch))
        .ok_or_else(|| Error::invalid("matmul", "output size overflows usize"))?;
    Ok((mn, k, n))
}

/// The f32 product of strided batched operands, contiguous `[..batch, M, N]`.
fn matmul_to_f32<T: GemmElem>(a: &[T], al: &Layout, b: &[T], bl: &Layout) -> Result<Vec<f32>> {
    matmul_into(a, al, b, bl, None)
}

/// The product rounded to 16 bits by the GEMM store (`make` builds the [`Out16`] of the output
/// rows), contiguous `[..batch, M, N]`; the f32 buffer of K-block partial sums is recycled.
fn matmul_to_16<T: GemmElem, H: Recycle>(
    a: &[T],
    al: &Layout,
    b: &[T],
    bl: &Layout,
    make: impl for<'o> Fn(&'o mut [H], usize) -> Out16<'o>,
) -> Result<Vec<H>> {
    let (mn, k, n) = out_size(al, bl)?;
    // K = 0: the product is zeros and the engine writes nothing.
    let mut out = if k == 0 {
        super::alloc::zeroed::<H>("matmul", mn)?
    } else {
        super::pool::take::<H>("matmul", mn)?
    };
    let partial = matmul_into(a, al, b, bl, Some(make(&mut out, n)))?;
    super::pool::give(partial);
    Ok(out)
}

/// The product into f32 `[..batch, M, N]`, or, with `out16`, rounded into those 16-bit rows (the
/// returned f32 buffer then holds only partial sums).
fn matmul_into<T: GemmElem>(
    a: &[T],
    al: &Layout,
    b: &[T],
    bl: &Layout,
    out16: Option<Out16>,
) -> Result<Vec<f32>> {
    let (batch_shape, m, k, n) = dims(al, bl)?;
    check_layout("matmul", al, a.len())?;
    check_layout("matmul", bl, b.len())?;
    let (mn, _, _) = out_size(al, bl)?;
    let batch: usize = batch_shape.iter().product();
    if mn == 0 || k == 0 {
        return super::alloc::zeroed("matmul", mn);
    }
    // The engine writes every element (beta = 0 never reads C), so a recycled buffer is fine.
    let mut out = super::pool::take::<f32>("matmul", mn)?;
    let r = al.rank();
    let (sam, sak) = (al.strides()[r - 2], al.strides()[r - 1]);
    let (sbk, sbn) = (bl.strides()[r - 2], bl.strides()[r - 1]);
    let one = |bi: usize, c: &mut [f32]| -> Result<()> {
        let a_off = batch_offset(bi, &batch_shape, &al.strides()[..r - 2], al.offset());
        let b_off = batch_offset(bi, &batch_shape, &bl.strides()[..r - 2], bl.offset());
        let av = MatRef::new(a, a_off, m, k, sam, sak);
        let bv = MatRef::new(b, b_off, k, n, sbk, sbn);
        let mut ep = Epilogue::default();
        if let Some(o) = out16 {
            ep = ep.with_out16(o.offset(bi * m * n));
        }
        T::gemm(av, bv, c, n, &ep)
    };
    let small = m * n * k < (1 << 22);
    if batch > 1 && small {
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

/// `lhs @ rhs` for `f32` operands with arbitrary (checked) strided layouts; returns the
/// contiguous `[..batch, M, N]` result.
pub fn matmul_f32_strided(
    lhs: &[f32],
    lhs_layout: &Layout,
    rhs: &[f32],
    rhs_layout: &Layout,
) -> Result<Vec<f32>> {
    matmul_to_f32(lhs, lhs_layout, rhs, rhs_layout)
}

/// Rounds an f32 product to a 16-bit dtype (an error naming `op` when the host will not
/// allocate the output).
pub(super) fn narrow<T: FloatElem>(op: &'static str, c: Vec<f32>) -> Result<Vec<T>> {
    let k = Kernels::current();
    let mut out = super::pool::take::<T>(op, c.len())?;
    parallel::for_each_flat(&mut out, |start, chunk| {
        if let Some(s) = c.get(start..start + chunk.len()) {
            T::store(k, s, chunk);
        }
    });
    // The f32 product is as large as the output: recycle it (a fresh one costs a page fault
    // per 4 KiB on the next call).
    super::pool::give(c);
    Ok(out)
}

impl CpuStorage {
    /// Batched matrix product `[..batch, M, K] x [..batch, K, N] -> [..batch, M, N]` (batch dims
    /// already broadcast by the caller; any strides). Float dtypes only; 16-bit inputs
    /// accumulate in `f32` and round once.
    pub fn matmul(
        &self,
        lhs: &Layout,
        rhs: &CpuStorage,
        rhs_layout: &Layout,
    ) -> Result<CpuStorage> {
        if self.dtype() != rhs.dtype() {
            return Err(Error::DTypeMismatch {
                op: "matmul",
                expected: self.dtype(),
                got: rhs.dtype(),
            });
        }
        Ok(match (self, rhs) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => {
                CpuStorage::F32(matmul_to_f32(a, lhs, b, rhs_layout)?)
            }
            (CpuStorage::F16(a), CpuStorage::F16(b)) => {
                CpuStorage::F16(matmul_to_16(a, lhs, b, rhs_layout, |o, n| {
                    Out16::f16(o, n)
                })?)
            }
            (CpuStorage::BF16(a), CpuStorage::BF16(b)) => {
                CpuStorage::BF16(matmul_to_16(a, lhs, b, rhs_layout, |o, n| {
                    Out16::bf16(o, n)
                })?)
            }
            _ => {
                return Err(Error::UnsupportedDType {
                    op: "matmul",
                    dtype: self.dtype(),
                    device: Device::Cpu,
                    hint: ": matmul needs float operands; cast to f32 first".to_string(),
                })
            }
        })
    }
}
