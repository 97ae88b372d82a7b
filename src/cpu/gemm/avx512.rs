//! AVX-512 microkernels: 14×32 f32 FMA (`vfmadd231ps`) and 14×32 bf16 dot-product (`vdpbf16ps`).
//!
//! Invariants: 28 zmm accumulators (14 rows × 2 vectors of 16 columns) live in registers for
//! the whole K block; per unit the kernel loads two B vectors and broadcasts 14 A values. The
//! kernels are only constructed through `new`, which checks the CPU features at run time, so
//! calling their `#[target_feature]` functions is sound. The f32 kernel prefetches B
//! [`B_PREFETCH`] values ahead; on L1-resident panels it runs at the FMA peak (~150 GFLOP per
//! CPU-second on one core), so what it loses inside a GEMM is memory latency, not arithmetic.

use super::avx512_ep::store;
use super::avx512_pack::{pack_panel, Src};
use super::driver::{EpCtx, Kernel, Tile};
use super::layout::NR;
use super::pack::{pack_a_bf16, pack_a_f32, SrcKind, ToF32};
use super::MatRef;
use half::bf16;
use std::arch::x86_64::*;

/// Rows per AVX-512 micro-panel.
pub(crate) const MR: usize = 14;

/// True when the f32 (and f16-via-widening) AVX-512 kernel can run.
pub(crate) fn has_avx512() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("f16c")
}

/// True when the bf16 `vdpbf16ps` kernel can run.
pub(crate) fn has_avx512_bf16() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16")
}

/// AVX-512 f32 kernel with A widened from `S`.
pub(crate) struct AvxF32<'a, S> {
    a: MatRef<'a, S>,
}

impl<'a, S> AvxF32<'a, S> {
    /// The kernel, if this CPU has AVX-512F.
    pub(crate) fn new(a: MatRef<'a, S>) -> Option<Self> {
        has_avx512().then_some(AvxF32 { a })
    }
}

/// AVX-512 BF16 kernel.
pub(crate) struct AvxBf16<'a> {
    a: MatRef<'a, bf16>,
}

impl<'a> AvxBf16<'a> {
    /// The kernel, if this CPU has AVX512_BF16.
    pub(crate) fn new(a: MatRef<'a, bf16>) -> Option<Self> {
        has_avx512_bf16().then_some(AvxBf16 { a })
    }
}

/// How the AVX-512 loads widen values of `S`.
fn src_kind<S: ToF32>() -> Src {
    match S::KIND {
        SrcKind::F32 => Src::F32,
        SrcKind::F16 => Src::F16,
        SrcKind::Bf16 => Src::Bf16,
    }
}

impl<S: ToF32> Kernel for AvxF32<'_, S> {
    type PA = f32;
    type PB = f32;
    const MR: usize = MR;
    fn pack_a(&self, row0: usize, rows: usize, u0: usize, u1: usize, dst: &mut [f32]) {
        let a = &self.a;
        let chunks = if rows == MR && a.col_stride == 1 {
            (u1 - u0) / 16
        } else {
            0
        };
        if chunks > 0 {
            let src = src_kind::<S>();
            let es = std::mem::size_of::<S>();
            let rp: [*const u8; MR] = std::array::from_fn(|r| {
                a.data[a.offset + (row0 + r) * a.row_stride + u0..].as_ptr() as *const u8
            });
            // SAFETY: full panel of a validated row-major view: each row holds u1 - u0 >= 16 *
            // chunks units from u0; dst holds MR * (u1 - u0) values; AVX-512F was detected.
            unsafe { pack_panel(src, &rp, es, chunks, dst.as_mut_ptr()) };
        }
        let done = chunks * 16;
        pack_a_f32(
            &self.a,
            MR,
            row0,
            rows,
            u0 + done,
            u1,
            &mut dst[done * MR..],
        );
    }
    unsafe fn tile(&self, kcu: usize, a: *const f32, b: *const f32, t: &Tile, ep: &EpCtx) {
        tile_f32(kcu, a, b, t, ep);
    }
    const FILLS_B: bool = true;
    unsafe fn tile_filling_b(
        &self,
        kcu: usize,
        a: *const f32,
        (src, ld): (*const u8, usize),
        dst: *mut f32,
        t: &Tile,
        ep: &EpCtx,
    ) {
        // The run hands this kernel rows of its own element type (`runner::direct_rows`).
        super::avx512_fill::tile_wide_filling(kcu, a, (src, ld, src_kind::<S>()), dst, t, ep);
    }
}

impl Kernel for AvxBf16<'_> {
    type PA = u32;
    type PB = u32;
    const MR: usize = MR;
    fn pack_a(&self, row0: usize, rows: usize, u0: usize, u1: usize, dst: &mut [u32]) {
        let a = &self.a;
        // Only complete pairs (2u + 1 < K) go through the transpose.
        let full = (a.cols / 2).min(u1).saturating_sub(u0);
        let chunks = if rows == MR && a.col_stride == 1 {
            full / 16
        } else {
            0
        };
        if chunks > 0 {
            let rp: [*const u8; MR] = std::array::from_fn(|r| {
                a.data[a.offset + (row0 + r) * a.row_stride + 2 * u0..].as_ptr() as *const u8
            });
            // SAFETY: as in the f32 kernel, with 4-byte pair units inside each row's K columns.
            unsafe { pack_panel(Src::U32, &rp, 4, chunks, dst.as_mut_ptr() as *mut f32) };
        }
        let done = chunks * 16;
        pack_a_bf16(
            &self.a,
            MR,
            row0,
            rows,
            u0 + done,
            u1,
            &mut dst[done * MR..],
        );
    }
    unsafe fn tile(&self, kcu: usize, a: *const u32, b: *const u32, t: &Tile, ep: &EpCtx) {
        tile_bf16(kcu, a, b, t, ep);
    }
    const FILLS_B: bool = true;
    unsafe fn tile_filling_b(
        &self,
        kcu: usize,
        a: *const u32,
        (src, ld): (*const u8, usize),
        dst: *mut u32,
        t: &Tile,
        ep: &EpCtx,
    ) {
        // The run gives this kernel bf16 sources only, and only where AVX512BW was detected
        // (`super::direct_bf16`).
        super::avx512_fill::tile_bf16_filling(kcu, a, (src as *const u16, ld), dst, t, ep);
    }
}

/// How far ahead (in f32 values: 32 k steps, 4 KiB) the f32 kernel prefetches B. Measured on
/// a Sapphire Rapids VM, interleaved best-of runs with prepacked B on 2 threads:
/// 2048³ 63–71% → 74–82% of the FMA peak, 8192×320×320 58–64% → 68–74%, 512³ 63–65% → 70–72%;
/// the B-stationary convolution (B already in L1) unchanged.
const B_PREFETCH: usize = 1024;

#[target_feature(enable = "avx512f")]
unsafe fn tile_f32(kcu: usize, a: *const f32, b: *const f32, t: &Tile, ep: &EpCtx) {
    super::avx512_ep::prefetch_c(t, ep);
    let acc = accumulate_f32(kcu, a, b);
    store::<MR>(&acc, t, ep);
}

/// The register loop of [`tile_f32`]: `acc` zeroed, then `kcu` rank-1 updates. A function of
/// its own so that the accumulators live in registers until they are returned: written inline,
/// with `&acc` passed to the store, the compiler also zeroed a 1.8 KiB stack copy of them with a
/// `memset` on every tile (~1% of the samples of a K = 320 product).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn accumulate_f32(kcu: usize, mut a: *const f32, mut b: *const f32) -> [[__m512; 2]; MR] {
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for _ in 0..kcu {
        // B streams from L2 in the A-stationary order (hardware prefetch alone left the loads
        // stalling); past the panel's end this runs into the next panel, which the next tile
        // reads. Prefetches never fault.
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(B_PREFETCH) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(B_PREFETCH + 16) as *const i8);
        let b0 = _mm512_loadu_ps(b);
        let b1 = _mm512_loadu_ps(b.add(16));
        for (r, accr) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*a.add(r));
            accr[0] = _mm512_fmadd_ps(av, b0, accr[0]);
            accr[1] = _mm512_fmadd_ps(av, b1, accr[1]);
        }
        a = a.add(MR);
        b = b.add(NR);
    }
    acc
}

#[target_feature(enable = "avx512f,avx512bf16")]
pub(super) unsafe fn tile_bf16(kcu: usize, a: *const u32, b: *const u32, t: &Tile, ep: &EpCtx) {
    super::avx512_ep::prefetch_c(t, ep);
    let acc = accumulate_bf16(kcu, a, b);
    store::<MR>(&acc, t, ep);
}

/// The bf16-pair loop of [`tile_bf16`] (separate for the reason given at [`accumulate_f32`]).
#[target_feature(enable = "avx512f,avx512bf16")]
#[inline]
unsafe fn accumulate_bf16(kcu: usize, mut a: *const u32, mut b: *const u32) -> [[__m512; 2]; MR] {
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for _ in 0..kcu {
        // As in `tile_f32`: a unit of the pair layout is 32 u32 (128 bytes), like an f32 unit.
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(B_PREFETCH) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(B_PREFETCH + 16) as *const i8);
        let b0: __m512bh = std::mem::transmute(_mm512_loadu_epi32(b as *const i32));
        let b1: __m512bh = std::mem::transmute(_mm512_loadu_epi32(b.add(16) as *const i32));
        for (r, accr) in acc.iter_mut().enumerate() {
            let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(r) as i32));
            accr[0] = _mm512_dpbf16_ps(accr[0], av, b0);
            accr[1] = _mm512_dpbf16_ps(accr[1], av, b1);
        }
        a = a.add(MR);
        b = b.add(NR);
    }
    acc
}
