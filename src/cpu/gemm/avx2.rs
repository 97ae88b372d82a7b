//! AVX2 + FMA microkernel for CPUs without AVX-512 (AMD Zen 1–3, Intel Haswell–Alder Lake):
//! 6×32 f32 tiles over the same packed layouts as every other path.
//!
//! Why 6 rows: AVX2 has 16 ymm registers. A 6×16 block (12 accumulators, 2 B vectors, 1 A
//! broadcast) is the largest that stays in registers; the 32-column B panel is covered in two
//! passes over the L1-resident A micro-panel, the accumulators parked in a 6×32 stack tile in
//! between. Per k step a pass does 12 FMAs for 2 B loads and 6 broadcasts, within the two
//! load ports' reach, so the loop is FMA-bound.
//!
//! Measured on a Zen 3 VM (probes `speed_kernel_f32_avx2`, `speed_avx2_b_layouts`, GFLOP per
//! CPU-second of one core, ~93 nominal peak): the bare 6×16 k loop runs at 90–99 on
//! L1/L2-resident panels whether B's two 16-lane halves are interleaved (the shared layout) or
//! stored one after the other, except when B micro-panels stream from L2 past one A panel
//! (interleaved 77–90, split 91–96): a gain too small and too noisy to give up the one-layout
//! invariant of [`super::layout`] for. The B-stationary loop order (the convolution's) was
//! slower for plain products in interleaved bench runs (4096³: 104–116 against 125–152
//! GFLOP/s), so this kernel keeps the A-stationary order. The tile writes its stack
//! accumulators without clearing them first and prefetches C, the residual and 16-bit output
//! lines before the k loop (the store's share of an SD 1.5 f32 step fell from 5.8% to 3.5% in
//! `perf`).
//!
//! Invariants: numerics are f32 FMA in k order per output (the same as the AVX-512 kernel, so
//! results agree with it to the last bit only where no FMA contraction differs: tests compare
//! against an f64 reference). The kernel is only built through [`Avx2F32::new`], which checks
//! AVX2, FMA and F16C at run time, so calling its `#[target_feature]` functions is sound. Full
//! tiles are stored with the vector epilogue of [`super::avx2_ep`]; edge tiles go through the
//! portable per-element epilogue ([`super::portable::store`]), whose semantics it mirrors.

use super::driver::{EpCtx, Kernel, Tile};
use super::layout::NR;
use super::pack::{pack_a_f32, ToF32};
use super::MatRef;
use std::arch::x86_64::*;

/// Rows per AVX2 micro-panel.
pub(crate) const MR: usize = 6;

/// How far ahead (in f32 values: 32 k steps) the kernel prefetches B, as the AVX-512 kernel.
const B_PREFETCH: usize = 1024;

/// True when the AVX2 kernel can run (F16C too: f16 operands are widened while packing).
pub(crate) fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

/// AVX2 f32 kernel with A widened from `S` while packing.
pub(crate) struct Avx2F32<'a, S> {
    a: MatRef<'a, S>,
}

impl<'a, S> Avx2F32<'a, S> {
    /// The kernel, if this CPU has AVX2, FMA and F16C.
    pub(crate) fn new(a: MatRef<'a, S>) -> Option<Self> {
        has_avx2().then_some(Avx2F32 { a })
    }
}

impl<S: ToF32> Kernel for Avx2F32<'_, S> {
    type PA = f32;
    type PB = f32;
    const MR: usize = MR;
    /// 384 KiB (8 micro-panels of 384 units, 6 of 512): the B sub-block stays inside the 512
    /// KiB L2 of the Zen 2/3 cores this path mostly serves (the AVX-512 default is sized for
    /// 1–2 MiB L2s).
    const B_BLOCK_BYTES: usize = 384 << 10;
    fn pack_a(&self, row0: usize, rows: usize, u0: usize, u1: usize, dst: &mut [f32]) {
        if self.a.col_stride == 1 && rows == MR && dst.len() >= MR * (u1 - u0) {
            // SAFETY: `Avx2F32` exists only where AVX2 was detected (`new`); the driver passes
            // rows and units inside the validated A.
            return unsafe { super::avx2_pack::pack_a6_rows(&self.a, row0, u0, u1, dst) };
        }
        pack_a_f32(&self.a, MR, row0, rows, u0, u1, dst);
    }
    unsafe fn tile(&self, kcu: usize, a: *const f32, b: *const f32, t: &Tile, ep: &EpCtx) {
        tile_f32(kcu, a, b, t, ep);
    }
}

/// The accumulators parked between the two passes, on cache lines: each 32-byte vector store
/// and the store's loads then stay inside one line (a plain array sat 16 bytes off a line, so
/// every second vector split two).
#[repr(C, align(64))]
struct StackTile([[f32; NR]; MR]);

/// Multiplies a 6-row A micro-panel by a 32-column B micro-panel and stores the tile.
///
/// # Safety
/// As [`Kernel::tile`]; AVX2, FMA and F16C available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn tile_f32(kcu: usize, a: *const f32, b: *const f32, t: &Tile, ep: &EpCtx) {
    // C (read on later K blocks, written on every one) and the last block's residual and
    // 16-bit output lines are usually cold: the store at the end would stall on them.
    super::avx512_ep::prefetch_c(t, ep);
    // Every lane is written below (by a pass, or zeroed when the second pass is skipped), so
    // the stack tile is not cleared first (a 768-byte memset per tile).
    let mut out = std::mem::MaybeUninit::<StackTile>::uninit();
    let rows = out.as_mut_ptr() as *mut f32;
    // Columns 16..32 hold nothing but padding when the tile is at most 16 wide (GLU tiles keep
    // their gate there, so they always need both halves).
    let halves = if ep.glu || t.nr > 16 { 2 } else { 1 };
    if halves == 1 {
        for r in 0..MR {
            _mm256_storeu_ps(rows.add(r * NR + 16), _mm256_setzero_ps());
            _mm256_storeu_ps(rows.add(r * NR + 24), _mm256_setzero_ps());
        }
    }
    for half in 0..halves {
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        let mut ap = a;
        let mut bp = b.add(16 * half);
        for _ in 0..kcu {
            // Prefetches never fault; past the panel's end they run into the next panel.
            _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(B_PREFETCH) as *const i8);
            let b0 = _mm256_loadu_ps(bp);
            let b1 = _mm256_loadu_ps(bp.add(8));
            for (r, accr) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*ap.add(r));
                accr[0] = _mm256_fmadd_ps(av, b0, accr[0]);
                accr[1] = _mm256_fmadd_ps(av, b1, accr[1]);
            }
            ap = ap.add(MR);
            bp = bp.add(NR);
        }
        for (r, accr) in acc.iter().enumerate() {
            _mm256_storeu_ps(rows.add(r * NR + 16 * half), accr[0]);
            _mm256_storeu_ps(rows.add(r * NR + 16 * half + 8), accr[1]);
        }
    }
    // SAFETY: all MR × NR lanes were written above.
    let out = &out.assume_init_ref().0;
    if !super::avx2_ep::store(out, t, ep) {
        super::portable::store::<MR>(out, t, ep);
    }
}
