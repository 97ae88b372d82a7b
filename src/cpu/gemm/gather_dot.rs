//! Implicit GEMM on `vdpbf16ps`: bf16 A rows from a [`RowSource`] (a convolution's NHWC input)
//! packed straight into the dot-product kernel's pair micro-panels, so bf16 convolutions that
//! are not Winograd layers (strided, 1×1, few channels) run at the bf16 rate on CPUs where
//! `vdpbf16ps` is the bf16 method (AMD Zen 4), instead of being widened onto the FMA kernel.
//!
//! Invariants:
//! - B is in the bf16 pair layout ([`PackKind::Bf16`]); the tiles and the fused epilogue are
//!   the plain `vdpbf16ps` GEMM's, so a gathered product equals that GEMM on the materialised
//!   A bit for bit.
//! - A micro-panels are `[units][MR rows]` of u32 pairs (`A[r, 2u]` in the low half), zeros
//!   past K and for rows past M (the source's zero runs). Run chunks that start on a pair and
//!   hold 16 whole pairs go through the AVX-512 16×16 transpose; everything else is copied
//!   element by element (as bf16 halves); the halves past K are zeroed, so every value of a
//!   panel is written exactly once and no panel is cleared first. Nothing is read past a
//!   run's length.
//! - [`gemm_gather_dot`] never touches C unless it runs: it answers `Ok(false)` when the path
//!   is not AVX-512, the CPU lacks AVX512_BF16 or `b` is not in the pair layout.

use super::avx512::{self, MR};
use super::avx512_pack::{pack_panel, Src};
use super::driver::{self, EpCtx, Kernel, Tile};
use super::gather::RowSource;
use super::layout::{PackKind, PackedView};
use super::{check_out, Epilogue, GemmPath, PackedB};
use crate::Result;
use half::bf16;

/// The `vdpbf16ps` kernel over a gathered A (only built where AVX512_BF16 was detected).
struct GatherDot<'a, R> {
    src: &'a R,
    /// The real K (elements).
    k: usize,
}

impl<R: RowSource<Elem = bf16>> Kernel for GatherDot<'_, R> {
    type PA = u32;
    type PB = u32;
    const MR: usize = MR;
    fn pack_a(&self, row0: usize, rows: usize, u0: usize, u1: usize, dst: &mut [u32]) {
        pack_gathered_pairs(self.src, self.k, (row0, rows), (u0, u1), dst);
    }
    unsafe fn tile(&self, kcu: usize, a: *const u32, b: *const u32, t: &Tile, ep: &EpCtx) {
        avx512::tile_bf16(kcu, a, b, t, ep);
    }
}

/// Packs rows `row0..row0 + rows` and pairs `u0..u1` of the gathered A into one micro-panel
/// `dst` (`MR * (u1 - u0)` values).
fn pack_gathered_pairs<R: RowSource<Elem = bf16>>(
    src: &R,
    k: usize,
    (row0, rows): (usize, usize),
    (u0, u1): (usize, usize),
    dst: &mut [u32],
) {
    let panel = &mut dst[..MR * (u1 - u0)];
    let (k0, k1) = ((2 * u0).min(k), (2 * u1).min(k));
    let mut ptrs = [std::ptr::null::<bf16>(); MR];
    let mut kk = k0;
    while kk < k1 {
        let len = src.runs(row0, rows, kk, &mut ptrs).clamp(1, k1 - kk);
        let mut done = 0;
        // Whole 16-pair chunks of a run that starts on a pair: one transpose each.
        let chunks = if kk.is_multiple_of(2) { len / 32 } else { 0 };
        if chunks > 0 {
            let rp: [*const u8; MR] = std::array::from_fn(|r| ptrs[r] as *const u8);
            let at = (kk / 2 - u0) * MR;
            // SAFETY: every pointer is readable for `len >= 32 * chunks` bf16 = 16 * chunks
            // u32 (RowSource contract); `panel[at..]` holds `MR * 16 * chunks` values (the run
            // ends inside this block's pairs); AVX512_BF16 (so AVX-512F) was detected before
            // this kernel was built.
            unsafe {
                pack_panel(
                    Src::U32,
                    &rp,
                    4,
                    chunks,
                    panel[at..].as_mut_ptr() as *mut f32,
                )
            };
            done = 32 * chunks;
        }
        let halves: &mut [u16] = bytemuck::cast_slice_mut(&mut *panel);
        for e in done..len {
            let at = ((kk + e) / 2 - u0) * MR * 2 + (kk + e) % 2;
            for (r, p) in ptrs.iter().enumerate() {
                // SAFETY: e < len (RowSource contract).
                halves[at + 2 * r] = unsafe { *p.add(e) }.to_bits();
            }
        }
        kk += len;
    }
    // Every element of k0..k1 was written exactly once above; the pairs past K are zeros.
    let halves: &mut [u16] = bytemuck::cast_slice_mut(panel);
    for e in k1.max(2 * u0)..2 * u1 {
        let at = (e / 2 - u0) * MR * 2 + e % 2;
        for r in 0..MR {
            halves[at + 2 * r] = 0;
        }
    }
}

/// `C (m × N) = epilogue(A @ B)` with bf16 A (`m × K`) gathered from `src` and B prepacked in
/// the bf16 pair layout, on the `vdpbf16ps` kernel; `Ok(false)` (C untouched) when that
/// kernel cannot run here (see the module docs). Validates C, the bias and the residual.
pub(crate) fn gemm_gather_dot<R: RowSource<Elem = bf16>>(
    path: GemmPath,
    src: &R,
    m: usize,
    b: &PackedB<bf16>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue,
) -> Result<bool> {
    let l = b.layout;
    if path != GemmPath::Avx512 || l.kind != PackKind::Bf16 || !avx512::has_avx512_bf16() {
        return Ok(false);
    }
    let ctx = check_out("gemm_gather_dot", m, (l.n, l.glu), c, ldc, ep)?;
    let view = PackedView {
        data: b.buf.slice::<u32>(l.len()),
        layout: l,
    };
    driver::run(&GatherDot { src, k: l.k }, m, view, c, ldc, &ctx)?;
    Ok(true)
}
