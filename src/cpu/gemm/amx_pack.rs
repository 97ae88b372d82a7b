//! The AMX operand layouts (portable packing code) and bf16 dispatch over an AMX-packed B.
//!
//! Invariants:
//! - B ([`PackKind::Amx`]): the VNNI pair layout of [`super::layout`] (one `u32` per k-pair and
//!   column, panels of 32 columns, unit-major) with the pair count padded to a multiple of
//!   [`STEP`] = 16 and every K block a whole number of steps, so an AMX B tile (16 pairs × 16
//!   columns, row stride 128 bytes) is always complete. Pairs past K and columns past N are zero.
//! - A (packed per call): `[kcu / 16][32 rows][16 pairs]` per micro-panel, i.e. two 16×64-byte A
//!   tiles per step; rows past M and pairs past K are zero, so padding never contributes.
//! - An AMX-packed B works under every path: without AMX (or on the forced portable path) the
//!   `vdpbf16ps` or portable pair kernels run over the same panels through [`Padded`], which
//!   stops their A packing at the real K and zero-fills the padded pairs.
//! - Packing is portable Rust except one AVX-512 routine for contiguous B rows, which is never
//!   used under `XPU_CPU_SIMD=fallback`.

use super::driver::{self, EpCtx, Kernel, Tile};
use super::layout::{BLayout, PackKind, PackedView, NR};
use super::portable::PortBf16;
use super::{GemmPath, MatRef};
use half::bf16;
use rayon::prelude::*;

/// K pairs per AMX step (rows of a B tile; an A tile row holds 16 pairs = 32 bf16).
pub(crate) const STEP: usize = 16;
/// Rows per AMX A micro-panel (two A tiles).
#[cfg(target_arch = "x86_64")]
pub(crate) const MR: usize = 32;
/// Target pairs per K block: a 32-row A micro-panel of 32 KiB stays in L1 while 32 KiB B panels
/// stream from L2.
pub(crate) const KCU_AMX: usize = 256;
/// Pairs up to which K stays one block even past [`KCU_AMX`] (K ≤ 768): a second block costs
/// every tile a load of its C tiles and a store of them, whose latency the tile loop cannot
/// hide; one 384-pair block was 20–45% faster than two for K of 640 and 768 (interleaved
/// best runs of `speed_amx_kcu`), while longer K keeps 256-pair blocks (4 × 360 pairs was
/// 10–20% slower than 6 × 240 at K = 2880).
pub(crate) const ONE_BLOCK_AMX: usize = 384;
#[cfg(test)]
thread_local! {
    /// Test hook: overrides [`KCU_AMX`] on this thread.
    pub(crate) static KCU_TEST: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Packs below this many elements run on the calling thread.
const PAR_PACK_MIN: usize = 1 << 16;

/// The tests' override of the K-block depth ([`KCU_TEST`]).
#[cfg(test)]
fn forced_kcu() -> Option<usize> {
    KCU_TEST.with(|c| c.get())
}

/// No override outside the tests.
#[cfg(not(test))]
fn forced_kcu() -> Option<usize> {
    None
}

/// Geometry of an AMX-packed B (`glu`: `K × 2N`, one K block, halves interleaved per panel).
pub(crate) fn layout(k: usize, n: usize, glu: bool) -> BLayout {
    let forced = forced_kcu();
    let kcu_max = forced.unwrap_or(KCU_AMX);
    let units = k.div_ceil(2).next_multiple_of(STEP);
    let kcu = if glu || units == 0 || forced.is_none() && units <= ONE_BLOCK_AMX {
        units
    } else {
        units
            .div_ceil(units.div_ceil(kcu_max))
            .next_multiple_of(STEP)
    };
    BLayout {
        k,
        n,
        units,
        kcu,
        nblk: if units == 0 { 1 } else { units.div_ceil(kcu) },
        npanels: if glu { n.div_ceil(16) } else { n.div_ceil(NR) },
        glu,
        kind: PackKind::Amx,
    }
}

#[inline(always)]
fn pair(lo: bf16, hi: bf16) -> u32 {
    u32::from(lo.to_bits()) | (u32::from(hi.to_bits()) << 16)
}

/// Packs B into the AMX layout. `b` must be validated and `dst.len() == l.len()`.
pub(crate) fn pack_b_amx(b: &MatRef<bf16>, l: &BLayout, dst: &mut [u32]) {
    let parallel = l.len() >= PAR_PACK_MIN;
    for bi in 0..l.nblk {
        let (u0, u1) = l.block(bi);
        let w = (u1 - u0) * NR;
        if w == 0 {
            continue;
        }
        let seg = &mut dst[u0 * l.npanels * NR..u1 * l.npanels * NR];
        let f = |(p, ch): (usize, &mut [u32])| pack_b_panel(b, l, p, (u0, u1), ch);
        if parallel {
            seg.par_chunks_mut(w).enumerate().for_each(f);
        } else {
            seg.chunks_mut(w).enumerate().for_each(f);
        }
    }
}

/// One B panel `p`, pairs `u0..u1`, into `ch` (`(u1 - u0) * 32` values).
fn pack_b_panel(b: &MatRef<bf16>, l: &BLayout, p: usize, (u0, u1): (usize, usize), ch: &mut [u32]) {
    let k = l.k;
    // Pairs holding at least one real k.
    let ureal = k.div_ceil(2).clamp(u0, u1);
    let (rs, cs, off) = (b.row_stride, b.col_stride, b.offset);
    for half in 0..2 {
        let cols: [Option<usize>; 16] = std::array::from_fn(|i| l.src_col(p, half * 16 + i));
        // Valid lanes form a prefix (columns past N come last).
        let nv = cols.iter().take_while(|c| c.is_some()).count();
        let c0 = cols[0].unwrap_or(0);
        let run = cols[..nv]
            .iter()
            .enumerate()
            .all(|(i, c)| *c == Some(c0 + i));
        #[cfg(target_arch = "x86_64")]
        if run && cs == 1 && nv == 16 && simd_pack() {
            let src: &[u16] = bytemuck::cast_slice(b.data.get(off + c0..).unwrap_or(&[]));
            // The last row read (2 * ureal - 1, or k - 1) holds columns c0..c0 + 16 of the
            // validated view, and the last write ends inside this panel: checked, not assumed.
            let fits = ureal == u0
                || ((2 * ureal - 1).min(k - 1) * rs + 15 < src.len()
                    && (ureal - u0 - 1) * NR + half * 16 + 16 <= ch.len());
            if fits {
                if ureal > u0 {
                    // SAFETY: AVX-512F checked by simd_pack(); bounds checked just above.
                    unsafe {
                        super::amx::pack_b_half(
                            src.as_ptr(),
                            rs,
                            k,
                            (u0, ureal),
                            ch[half * 16..].as_mut_ptr(),
                        )
                    };
                }
                for u in ureal..u1 {
                    ch[(u - u0) * NR + half * 16..][..16].fill(0);
                }
                continue;
            }
        }
        for u in u0..u1 {
            let d = &mut ch[(u - u0) * NR + half * 16..][..16];
            d[nv..].fill(0);
            let (k0, k1) = (2 * u, 2 * u + 1);
            if u >= ureal || nv == 0 {
                d.fill(0);
            } else if run && cs == 1 {
                // Row-major B: two contiguous source rows, interleaved.
                let lo = &b.data[off + k0 * rs + c0..][..nv];
                if k1 < k {
                    let hi = &b.data[off + k1 * rs + c0..][..nv];
                    for ((x, &l), &h) in d.iter_mut().zip(lo).zip(hi) {
                        *x = pair(l, h);
                    }
                } else {
                    for (x, &l) in d.iter_mut().zip(lo) {
                        *x = pair(l, bf16::ZERO);
                    }
                }
            } else {
                for (x, c) in d.iter_mut().zip(&cols[..nv]) {
                    let c = c.unwrap_or(0);
                    let base = off + c * cs;
                    let hi = if k1 < k {
                        b.data[base + k1 * rs]
                    } else {
                        bf16::ZERO
                    };
                    *x = pair(b.data[base + k0 * rs], hi);
                }
            }
        }
    }
}

/// Whether B packing may use AVX-512 (never under a portable-code cap).
#[cfg(target_arch = "x86_64")]
fn simd_pack() -> bool {
    !super::configured_portable() && super::avx512::has_avx512()
}

/// Packs rows `row0..row0 + rows` (`rows <= 32`) and pairs `u0..u1` (a multiple of [`STEP`]) of A
/// into one AMX micro-panel `dst` (`32 * (u1 - u0)` values). `a` must be validated.
#[cfg(target_arch = "x86_64")]
pub(crate) fn pack_a_amx(
    a: &MatRef<bf16>,
    row0: usize,
    rows: usize,
    u0: usize,
    u1: usize,
    dst: &mut [u32],
) {
    let k = a.cols;
    let (lo, hi) = ((2 * u0).min(k), (2 * u1).min(k));
    if rows < MR || hi - lo < 2 * (u1 - u0) {
        dst.fill(0);
    }
    if lo == hi {
        return;
    }
    if a.col_stride == 1 {
        // Row-major A: each step of a row is one contiguous run of 32 bf16 (64 bytes).
        let d16: &mut [u16] = bytemuck::cast_slice_mut(dst);
        for r in 0..rows {
            let start = a.offset + (row0 + r) * a.row_stride;
            let src: &[u16] = bytemuck::cast_slice(&a.data[start + lo..start + hi]);
            // Whole steps as fixed 64-byte copies (inlined, no memmove call per step).
            let (full, tail) = src.as_chunks::<{ 2 * STEP }>();
            for (s, chunk) in full.iter().enumerate() {
                let o = (s * MR + r) * 2 * STEP;
                d16[o..o + 2 * STEP].copy_from_slice(chunk);
            }
            if !tail.is_empty() {
                let o = (full.len() * MR + r) * 2 * STEP;
                d16[o..o + tail.len()].copy_from_slice(tail);
            }
        }
        return;
    }
    let ureal = k.div_ceil(2).clamp(u0, u1);
    for u in u0..ureal {
        let (s, j) = ((u - u0) / STEP, (u - u0) % STEP);
        let (k0, k1) = (2 * u, 2 * u + 1);
        for r in 0..rows {
            let m = row0 + r;
            // SAFETY: validated view, m < M, k0 < K (k1 checked).
            let v = unsafe {
                let h = if k1 < k { a.at(m, k1) } else { bf16::ZERO };
                pair(a.at(m, k0), h)
            };
            dst[(s * MR + r) * STEP + j] = v;
        }
    }
}

/// A pair kernel (`vdpbf16ps` or portable) running over an AMX-packed B: packs A only up to the
/// real K and zero-fills the padded pairs of each micro-panel.
pub(crate) struct Padded<K> {
    pub inner: K,
    /// The real K (columns of A).
    pub k: usize,
}

impl<K: Kernel<PA = u32, PB = u32>> Kernel for Padded<K> {
    type PA = u32;
    type PB = u32;
    const MR: usize = K::MR;
    fn begin(&self) {
        self.inner.begin();
    }
    fn end(&self) {
        self.inner.end();
    }
    fn pack_a(&self, row0: usize, rows: usize, u0: usize, u1: usize, dst: &mut [u32]) {
        let e = u1.min(self.k.div_ceil(2)).max(u0);
        let n = K::MR * (e - u0);
        self.inner.pack_a(row0, rows, u0, e, &mut dst[..n]);
        dst[n..].fill(0);
    }
    unsafe fn tile(&self, kcu: usize, a: *const u32, b: *const u32, t: &Tile, ep: &EpCtx) {
        self.inner.tile(kcu, a, b, t, ep);
    }
}

/// How the CPU engine multiplies bf16 matrices (see [`bf16_method`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bf16Method {
    /// Intel AMX tiles (`tdpbf16ps`), f32 accumulation.
    Amx,
    /// AVX512_BF16 dot products (`vdpbf16ps`).
    DotProduct,
    /// bf16 widened to f32 while packing, the f32 FMA kernel (AVX-512 or AVX2).
    Widen,
    /// Portable Rust kernels (forced fallback, or no AVX-512 nor AVX2).
    Portable,
}

impl std::fmt::Display for Bf16Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Bf16Method::Amx => "amx (tdpbf16ps tiles)",
            Bf16Method::DotProduct => "avx512 vdpbf16ps",
            Bf16Method::Widen => "f32 fma kernel (bf16 widened to f32)",
            Bf16Method::Portable => "portable",
        })
    }
}

/// Why the AMX kernel is not in use in this process, or `None` when it is available (the
/// CPU/OS checks and the Linux permission request run once, on first use).
pub fn amx_unavailable_reason() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        super::amx::amx_status().err()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Some("not an x86-64 CPU")
    }
}

/// The method bf16 GEMMs use in this process with the current settings (`XPU_CPU_SIMD`,
/// `XPU_CPU_BF16=amx|dot|widen`, [`super::set_gemm_override`]).
pub fn bf16_method() -> Bf16Method {
    if super::gemm_path(crate::DType::BF16) == GemmPath::Fallback {
        return Bf16Method::Portable;
    }
    match super::peak::bf16_kind() {
        PackKind::F32 => Bf16Method::Widen,
        PackKind::Bf16 => Bf16Method::DotProduct,
        PackKind::Amx if amx_unavailable_reason().is_none() => Bf16Method::Amx,
        PackKind::Amx => Bf16Method::DotProduct,
    }
}

#[cfg(test)]
thread_local! {
    /// Test hook: the kernel the last AMX-layout GEMM on this thread dispatched to.
    pub(crate) static LAST: std::cell::Cell<Option<Bf16Method>> = const { std::cell::Cell::new(None) };
}

#[inline(always)]
fn note(_m: Bf16Method) {
    #[cfg(test)]
    LAST.with(|c| c.set(Some(_m)));
}

/// Runs a bf16 GEMM over an AMX-packed B: AMX when usable on `path`, else the `vdpbf16ps`
/// kernel, else the portable pair kernel (both through [`Padded`]).
pub(crate) fn run(
    path: GemmPath,
    a: MatRef<bf16>,
    view: PackedView<u32>,
    c: &mut [f32],
    ldc: usize,
    ep: &EpCtx,
) -> crate::Result<()> {
    #[cfg(target_arch = "x86_64")]
    if path == GemmPath::Avx512 {
        if let Some(k) = super::amx::AmxBf16::new(a) {
            note(Bf16Method::Amx);
            return driver::run(&k, a.rows, view, c, ldc, ep);
        }
        if let Some(inner) = super::avx512::AvxBf16::new(a) {
            note(Bf16Method::DotProduct);
            let k = Padded { inner, k: a.cols };
            return driver::run(&k, a.rows, view, c, ldc, ep);
        }
    }
    let _ = path;
    note(Bf16Method::Portable);
    let k = Padded {
        inner: PortBf16 { a },
        k: a.cols,
    };
    driver::run(&k, a.rows, view, c, ldc, ep)
}
