//! Implicit GEMM: A rows produced on demand by a [`RowSource`] (e.g. a convolution's NHWC input,
//! where row `m` is an output pixel and column `k` a (tap, channel) pair) and packed straight
//! into the f32 microkernels' panels, so no im2col matrix is ever written.
//!
//! Invariants:
//! - A source describes A as runs: for a panel of rows and a column `k`, one pointer per row to
//!   `len` contiguous elements holding `A[row, k..k + len]` (zeros for padding and for rows past
//!   M). Runs are cut at K-block ends by the packer, never read past `len`.
//! - Full 16-unit chunks of a run go through the AVX-512 16×16 transpose (16-bit sources widened
//!   on load), the rest element by element; the portable path packs element by element.
//! - B must be packed in the f32 layout ([`PackedB<f32>`], ideally with K blocks of
//!   [`GATHER_KCU`]); the tile kernels and fused epilogue are the plain GEMM's, with the loop
//!   order that keeps each B micro-panel in L1 ([`Kernel::B_STATIONARY`]), so results match a
//!   GEMM on the materialised A with the same K blocking bit for bit.

use super::driver::{self, Kernel, Tile};
use super::layout::PackedView;
use super::pack::ToF32;
use super::portable::{PortF32, PMR};
use super::{check_out, Epilogue, GemmPath, MatRef, PackedB};
use crate::Result;

/// K block (units) for B packed for [`gemm_gather`] ([`PackedB::new_f32_blocked`]): a 32-column
/// B micro-panel of 192 units is 24 KiB and stays in L1 while the A block streams past it.
pub(crate) const GATHER_KCU: usize = 192;

/// Rows of A on demand; see the module docs.
///
/// # Safety
/// Implementors guarantee that after `runs` returns `len`, every one of the `ptrs.len()`
/// pointers it wrote is valid for reading `len` elements, for as long as `self` is borrowed.
pub(crate) unsafe trait RowSource: Sync {
    /// Element type of the source.
    type Elem: ToF32;
    /// Fills `ptrs[r]` with a pointer to `A[row0 + r, k]` for `r < rows` and to zeros for
    /// `rows <= r < ptrs.len()`; returns the run length `len >= 1` (columns `k..k + len` are
    /// contiguous behind every pointer; `k + len <= K`).
    fn runs(&self, row0: usize, rows: usize, k: usize, ptrs: &mut [*const Self::Elem]) -> usize;
}

/// The f32 kernel of `path` over a gathered A.
struct Gather<'a, R: RowSource, T> {
    src: &'a R,
    tile: T,
}

/// Packs `MR` rows (`rows` valid) of units `u0..u1` from `src` into `dst`, using the AVX-512
/// transpose for whole 16-unit chunks when `simd` is true.
fn pack_gathered<R: RowSource, const MR: usize>(
    src: &R,
    row0: usize,
    rows: usize,
    (u0, u1): (usize, usize),
    dst: &mut [f32],
    simd: bool,
) {
    if u0 >= u1 {
        return;
    }
    let mut ptrs = [std::ptr::null::<R::Elem>(); MR];
    let mut next = [std::ptr::null::<R::Elem>(); MR];
    let mut k = u0;
    let mut len = src.runs(row0, rows, k, &mut ptrs).clamp(1, u1 - k);
    while k < u1 {
        // Look up the next run first and start pulling its first lines in.
        let knext = k + len;
        let next_len = if knext < u1 {
            let l = src.runs(row0, rows, knext, &mut next).clamp(1, u1 - knext);
            prefetch_rows(&next);
            l
        } else {
            0
        };
        let out = &mut dst[(k - u0) * MR..(k - u0 + len) * MR];
        // Only the x86 kernels below advance `done`.
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if simd && MR == super::avx512::MR && len >= 16 {
            let mut rp = [std::ptr::null::<R::Elem>(); super::avx512::MR];
            rp.copy_from_slice(&ptrs[..super::avx512::MR]);
            done = len / 16 * 16;
            // SAFETY: each pointer is readable for `len >= done` elements (RowSource contract);
            // `out` holds MR * len >= MR * done values; AVX-512F was detected by the caller.
            unsafe { pack_run_avx(&rp, len / 16, out.as_mut_ptr()) };
        }
        #[cfg(target_arch = "x86_64")]
        if simd && MR == super::avx2::MR && len >= 8 {
            let mut rp = [std::ptr::null::<R::Elem>(); super::avx2::MR];
            rp.copy_from_slice(&ptrs[..super::avx2::MR]);
            done = len / 8 * 8;
            // SAFETY: as above; `out` holds MR * len >= MR * done values; the AVX2 kernel
            // (whose packing passes `simd`) is only built where AVX2 and F16C were detected.
            unsafe { pack_run_avx2(&rp, len / 8, out.as_mut_ptr()) };
        }
        let _ = simd;
        for u in done..len {
            for (r, p) in ptrs.iter().enumerate() {
                // SAFETY: u < len (RowSource contract).
                out[u * MR + r] = unsafe { *p.add(u) }.to_f32();
            }
        }
        k = knext;
        len = next_len;
        std::mem::swap(&mut ptrs, &mut next);
    }
}

/// Prefetches the first two cache lines behind each pointer.
#[inline(always)]
fn prefetch_rows<S>(ptrs: &[*const S]) {
    #[cfg(target_arch = "x86_64")]
    for &p in ptrs {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = p as *const i8;
        // SAFETY: prefetches never fault.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptrs;
}

/// Packs `chunks` 8-unit chunks of 6 rows (one run per row) through 8×8 transposes (two zero
/// rows), for the AVX2 kernel.
///
/// # Safety
/// Every pointer is readable for `8 * chunks` elements; `dst` is writable for `8 * chunks * 6`
/// values; AVX2 and F16C are available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn pack_run_avx2<S: ToF32>(
    ptrs: &[*const S; super::avx2::MR],
    chunks: usize,
    dst: *mut f32,
) {
    use super::avx2_pack::{load8, transpose6x8};
    use std::arch::x86_64::*;
    const MR: usize = super::avx2::MR;
    let es = std::mem::size_of::<S>();
    for ch in 0..chunks {
        let mut r = [_mm256_setzero_ps(); MR];
        for (v, &p) in r.iter_mut().zip(ptrs) {
            _mm_prefetch::<_MM_HINT_T0>(
                (p as *const u8).wrapping_add((ch + 8) * 8 * es) as *const i8
            );
            *v = load8(p.add(ch * 8));
        }
        // Column j of the chunk: rows 0..6 of unit j (lanes 6, 7 zero).
        let cols = transpose6x8(&r);
        let out = dst.add(ch * 8 * MR);
        // Each 8-wide store spills two zeros into the next unit's slots, which that unit's
        // store (or the next chunk's) overwrites; the very last unit is stored as 4 + 2.
        let last = ch + 1 == chunks;
        for (j, c) in cols.iter().enumerate() {
            if last && j == 7 {
                _mm_storeu_ps(out.add(j * MR), _mm256_castps256_ps128(*c));
                let hi = _mm256_extractf128_ps::<1>(*c);
                _mm_storel_pd(out.add(j * MR + 4) as *mut f64, _mm_castps_pd(hi));
            } else {
                _mm256_storeu_ps(out.add(j * MR), *c);
            }
        }
    }
}

/// Packs `chunks` 16-unit chunks of 14 rows (one run per row) through 16×16 transposes,
/// prefetching four chunks ahead in every row.
///
/// # Safety
/// Every pointer is readable for `16 * chunks` elements; `dst` is writable for
/// `16 * chunks * 14` values; AVX-512F is available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pack_run_avx<S: ToF32>(
    ptrs: &[*const S; super::avx512::MR],
    chunks: usize,
    dst: *mut f32,
) {
    use super::avx512_pack::{load16, transpose16, Src};
    use super::pack::SrcKind;
    use std::arch::x86_64::*;
    const MR: usize = super::avx512::MR;
    let kind = match S::KIND {
        SrcKind::F32 => Src::F32,
        SrcKind::F16 => Src::F16,
        SrcKind::Bf16 => Src::Bf16,
    };
    let es = std::mem::size_of::<S>();
    for ch in 0..chunks {
        let mut r = [_mm512_setzero_ps(); 16];
        for (v, &p) in r.iter_mut().zip(ptrs) {
            let p = p as *const u8;
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add((ch + 4) * 16 * es) as *const i8);
            *v = load16(kind, p.add(ch * 16 * es));
        }
        transpose16(&mut r);
        let out = dst.add(ch * 16 * MR);
        for (j, v) in r.iter().enumerate() {
            _mm512_mask_storeu_ps(out.add(j * MR), (1 << MR) - 1, *v);
        }
    }
}

impl<R: RowSource> Kernel for Gather<'_, R, PortF32<'_, f32>> {
    type PA = f32;
    type PB = f32;
    const MR: usize = PMR;
    const B_STATIONARY: bool = true;
    fn pack_a(&self, row0: usize, rows: usize, u0: usize, u1: usize, dst: &mut [f32]) {
        pack_gathered::<R, PMR>(self.src, row0, rows, (u0, u1), dst, false);
    }
    unsafe fn tile(&self, kcu: usize, a: *const f32, b: *const f32, t: &Tile, ep: &driver::EpCtx) {
        self.tile.tile(kcu, a, b, t, ep);
    }
}

#[cfg(target_arch = "x86_64")]
impl<R: RowSource> Kernel for Gather<'_, R, super::avx512::AvxF32<'_, f32>> {
    type PA = f32;
    type PB = f32;
    const MR: usize = super::avx512::MR;
    const B_STATIONARY: bool = true;
    fn pack_a(&self, row0: usize, rows: usize, u0: usize, u1: usize, dst: &mut [f32]) {
        pack_gathered::<R, { super::avx512::MR }>(self.src, row0, rows, (u0, u1), dst, true);
    }
    unsafe fn tile(&self, kcu: usize, a: *const f32, b: *const f32, t: &Tile, ep: &driver::EpCtx) {
        self.tile.tile(kcu, a, b, t, ep);
    }
}

#[cfg(target_arch = "x86_64")]
impl<R: RowSource> Kernel for Gather<'_, R, super::avx2::Avx2F32<'_, f32>> {
    type PA = f32;
    type PB = f32;
    const MR: usize = super::avx2::MR;
    const B_STATIONARY: bool = true;
    fn pack_a(&self, row0: usize, rows: usize, u0: usize, u1: usize, dst: &mut [f32]) {
        pack_gathered::<R, { super::avx2::MR }>(self.src, row0, rows, (u0, u1), dst, true);
    }
    unsafe fn tile(&self, kcu: usize, a: *const f32, b: *const f32, t: &Tile, ep: &driver::EpCtx) {
        self.tile.tile(kcu, a, b, t, ep);
    }
}

/// `C (m × N) = epilogue(A @ B)` with A (`m × K`) gathered from `src` and B prepacked (f32
/// layout), on `path` (callers pass [`super::gemm_path`]`(DType::F32)`; tests force either).
/// Validates C, the bias and the residual like the plain entry points.
pub(crate) fn gemm_gather<R: RowSource>(
    path: GemmPath,
    src: &R,
    m: usize,
    b: &PackedB<f32>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue,
) -> Result<()> {
    let l = b.layout;
    let ctx = check_out("gemm_gather", m, (l.n, l.glu), c, ldc, ep)?;
    let view = PackedView {
        data: b.buf.slice::<f32>(l.len()),
        layout: l,
    };
    let none: MatRef<f32> = MatRef::new(&[], 0, 0, 0, 0, 0);
    #[cfg(target_arch = "x86_64")]
    if path == GemmPath::Avx512 {
        if let Some(tile) = super::avx512::AvxF32::new(none) {
            driver::run(&Gather { src, tile }, m, view, c, ldc, &ctx)?;
            return Ok(());
        }
    }
    #[cfg(target_arch = "x86_64")]
    if path != GemmPath::Fallback {
        if let Some(tile) = super::avx2::Avx2F32::new(none) {
            driver::run(&Gather { src, tile }, m, view, c, ldc, &ctx)?;
            return Ok(());
        }
    }
    let _ = path;
    let tile = PortF32 { a: none };
    driver::run(&Gather { src, tile }, m, view, c, ldc, &ctx)?;
    Ok(())
}
