//! Portable microkernels (any target): plain Rust over the same packed layouts as the SIMD path.
//!
//! Invariants: numerics are f32 multiply-add in k order per tile; the epilogue is computed
//! per element with the f64 activations of [`super::act`]; nothing here needs a CPU feature, so
//! this is both the non-x86 path and the forced fallback (`XPU_CPU_SIMD=fallback`).

use super::act;
use super::driver::{EpCtx, Kernel, Tile};
use super::layout::NR;
use super::pack::{pack_a_bf16, pack_a_f32, ToF32};
use super::MatRef;
use half::bf16;

/// Rows per portable micro-panel.
pub(crate) const PMR: usize = 4;

/// Portable kernel over the f32 layout, A widened from `S`.
pub(crate) struct PortF32<'a, S> {
    pub a: MatRef<'a, S>,
}

/// Portable kernel over the bf16-pair layout.
pub(crate) struct PortBf16<'a> {
    pub a: MatRef<'a, bf16>,
}

impl<S: ToF32> Kernel for PortF32<'_, S> {
    type PA = f32;
    type PB = f32;
    const MR: usize = PMR;
    fn pack_a(&self, row0: usize, rows: usize, u0: usize, u1: usize, dst: &mut [f32]) {
        pack_a_f32(&self.a, PMR, row0, rows, u0, u1, dst);
    }
    unsafe fn tile(&self, kcu: usize, a: *const f32, b: *const f32, t: &Tile, ep: &EpCtx) {
        let a = std::slice::from_raw_parts(a, kcu * PMR);
        let b = std::slice::from_raw_parts(b, kcu * NR);
        let mut acc = [[0f32; NR]; PMR];
        for (ak, bk) in a.chunks_exact(PMR).zip(b.chunks_exact(NR)) {
            for (accr, &av) in acc.iter_mut().zip(ak) {
                for (c, &bv) in accr.iter_mut().zip(bk) {
                    *c += av * bv;
                }
            }
        }
        store(&acc, t, ep);
    }
}

#[inline(always)]
fn lo(x: u32) -> f32 {
    f32::from_bits(x << 16)
}
#[inline(always)]
fn hi(x: u32) -> f32 {
    f32::from_bits(x & 0xffff_0000)
}

impl Kernel for PortBf16<'_> {
    type PA = u32;
    type PB = u32;
    const MR: usize = PMR;
    fn pack_a(&self, row0: usize, rows: usize, u0: usize, u1: usize, dst: &mut [u32]) {
        pack_a_bf16(&self.a, PMR, row0, rows, u0, u1, dst);
    }
    unsafe fn tile(&self, kcu: usize, a: *const u32, b: *const u32, t: &Tile, ep: &EpCtx) {
        let a = std::slice::from_raw_parts(a, kcu * PMR);
        let b = std::slice::from_raw_parts(b, kcu * NR);
        let mut acc = [[0f32; NR]; PMR];
        for (ak, bk) in a.chunks_exact(PMR).zip(b.chunks_exact(NR)) {
            for (accr, &av) in acc.iter_mut().zip(ak) {
                let (a0, a1) = (lo(av), hi(av));
                for (c, &bv) in accr.iter_mut().zip(bk) {
                    *c += a0 * lo(bv) + a1 * hi(bv);
                }
            }
        }
        store(&acc, t, ep);
    }
}

/// Stores a tile of `M` accumulator rows with the epilogue, one element at a time (also the
/// AVX2 kernel's store: the epilogue is a small part of a tile's time there).
///
/// # Safety
/// As [`Kernel::tile`].
pub(crate) unsafe fn store<const M: usize>(acc: &[[f32; NR]; M], t: &Tile, ep: &EpCtx) {
    for (r, accr) in acc.iter().enumerate().take(t.mr) {
        let row = t.row0 + r;
        for j in 0..t.nr {
            let col = t.col0 + j;
            let cp = t.c.add(r * t.ldc + j);
            let bias = |c: usize| ep.bias.map_or(0.0, |b| b[c]);
            let v = if ep.glu {
                let h = ep.alpha * accr[j] + bias(col);
                let g = ep.alpha * accr[16 + j] + bias(ep.n + col);
                h * act::apply(ep.act, g as f64) as f32
            } else {
                let mut v = ep.alpha * accr[j];
                if !t.first {
                    v += *cp;
                } else if ep.beta != 0.0 {
                    v += ep.beta * *cp;
                }
                if !t.last {
                    *cp = v;
                    continue;
                }
                act::apply(ep.act, (v + bias(col)) as f64) as f32
            };
            let res = ep.residual.map_or(0.0, |m| m.at(row, col));
            match &ep.out16 {
                Some(o) => o.put(row, col, v + res),
                None => *cp = v + res,
            }
        }
    }
}
