//! Packing routines: strided A/B views into the contiguous micro-panels the kernels stream.
//!
//! Invariants: packing reads only elements inside a validated [`MatRef`] and writes every
//! element of its destination (zero padding included), so kernels never see stale data.
//! A is packed per call into `MR`-row micro-panels (unit-major, row-minor; rows past M are zero);
//! B follows [`super::layout::BLayout`]. 16-bit sources are widened with F16C/AVX-512 slice
//! conversions where runs are contiguous.

use super::layout::{BLayout, NR};
use super::MatRef;
use half::{bf16, f16};
use rayon::prelude::*;

/// Which element type a [`ToF32`] is (lets SIMD packers pick their load).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) enum SrcKind {
    F32,
    F16,
    Bf16,
}

/// Source elements that widen to f32.
pub(crate) trait ToF32: Copy + Send + Sync + 'static {
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    const KIND: SrcKind;
    fn to_f32(self) -> f32;
    /// Widens `src` into `dst` (equal lengths).
    fn convert(src: &[Self], dst: &mut [f32]);
}

impl ToF32 for f32 {
    const KIND: SrcKind = SrcKind::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn convert(src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
}
impl ToF32 for f16 {
    const KIND: SrcKind = SrcKind::F16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    /// Through the SIMD level's own widening (`vcvtph2ps` on 16 lanes with AVX-512): `half`'s
    /// slice conversion detects F16C and calls out per 8 values, a fifth of a per-call f16
    /// product's time on the packers' 16- and 32-value runs.
    #[inline]
    fn convert(src: &[f16], dst: &mut [f32]) {
        crate::cpu::simd::f16_to_f32(src, dst);
    }
}
impl ToF32 for bf16 {
    const KIND: SrcKind = SrcKind::Bf16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits((self.to_bits() as u32) << 16)
    }
    #[inline]
    fn convert(src: &[bf16], dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = f32::from_bits((s.to_bits() as u32) << 16);
        }
    }
}

/// Packs below this many elements run on the calling thread.
const PAR_PACK_MIN: usize = 1 << 16;

/// Runs `f(panel, chunk)` for every panel of every K block of `dst`.
fn for_each_panel<P: Send>(
    l: &BLayout,
    dst: &mut [P],
    f: impl Fn(usize, usize, usize, &mut [P]) + Sync,
) {
    let parallel = l.len() >= PAR_PACK_MIN;
    for bi in 0..l.nblk {
        let (u0, u1) = l.block(bi);
        let w = (u1 - u0) * NR;
        if w == 0 {
            continue;
        }
        let seg = &mut dst[u0 * l.npanels * NR..u1 * l.npanels * NR];
        if parallel {
            seg.par_chunks_mut(w)
                .enumerate()
                .for_each(|(p, ch)| f(u0, u1, p, ch));
        } else {
            for (p, ch) in seg.chunks_mut(w).enumerate() {
                f(u0, u1, p, ch);
            }
        }
    }
}

/// Packs B into the f32 layout. `b` must be validated and `dst.len() == l.len()`.
pub(crate) fn pack_b_f32<S: ToF32>(b: &MatRef<S>, l: &BLayout, dst: &mut [f32]) {
    for_each_panel(l, dst, |u0, u1, p, ch| {
        pack_b_f32_panel(b, l, (u0, u1), p, ch)
    });
}

/// Packs panel `p` over units `u0..u1` of B into the f32 layout (`ch`: the panel's
/// `(u1 - u0) * NR` elements, all written). `b` must be validated.
pub(crate) fn pack_b_f32_panel<S: ToF32>(
    b: &MatRef<S>,
    l: &BLayout,
    (u0, u1): (usize, usize),
    p: usize,
    ch: &mut [f32],
) {
    // Row-major B and a full panel of consecutive columns (the per-call `matmul` case): one
    // 32-value run per unit, so each source row's two cache lines are read together.
    let c0 = l.src_col(p, 0).unwrap_or(0);
    if b.col_stride == 1 && (0..NR).all(|i| l.src_col(p, i) == Some(c0 + i)) {
        for (u, d) in (u0..u1).zip(ch.chunks_exact_mut(NR)) {
            let start = b.offset + u * b.row_stride + c0;
            S::convert(&b.data[start..start + NR], d);
        }
        return;
    }
    let transposes = b.row_stride == 1 && b.col_stride != 1 && b.rows >= 16 && avx512_packing();
    // Each half (16 lanes) is one contiguous source run per unit, or (columns contiguous
    // along K) 16 columns transposed 16 units at a time, or handled per element.
    for half in 0..2 {
        let cols: [Option<usize>; 16] = std::array::from_fn(|i| l.src_col(p, half * 16 + i));
        let contiguous = b.col_stride == 1
            && cols.iter().all(Option::is_some)
            && cols.windows(2).all(|w| w[0].map(|c| c + 1) == w[1]);
        let mut first = u0;
        if transposes {
            first += pack_half_transposed(b, &cols, (u0, u1), &mut ch[half * 16..]);
        }
        for u in first..u1 {
            let d = &mut ch[(u - u0) * NR + half * 16..][..16];
            match (contiguous, cols[0]) {
                (true, Some(c0)) => {
                    let start = b.offset + u * b.row_stride + c0;
                    S::convert(&b.data[start..start + 16], d);
                }
                _ => {
                    for (x, c) in d.iter_mut().zip(&cols) {
                        // SAFETY: validated view, u < K, c < B's columns.
                        *x = c.map_or(0.0, |c| unsafe { b.at(u, c) }.to_f32());
                    }
                }
            }
        }
    }
}

/// True when B panels may be packed with the AVX-512 transposes (the kernels' level is
/// AVX-512: a forced lower level keeps its own instructions everywhere).
fn avx512_packing() -> bool {
    crate::cpu::simd::Kernels::current().level() == crate::cpu::simd::SimdLevel::Avx512
}

/// Packs the whole 16-unit chunks of one B half panel whose 16 columns `cols` run along K
/// (`b.row_stride == 1`), from unit `u0`, into `dst` (unit `j` at `dst[j * NR..][..16]`);
/// returns the units written (0 when a column is missing or the CPU lacks AVX-512).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn pack_half_transposed<S: ToF32>(
    b: &MatRef<S>,
    cols: &[Option<usize>; 16],
    (u0, u1): (usize, usize),
    dst: &mut [f32],
) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use super::avx512_pack::{pack_b_half_t, Src};
        let chunks = (u1 - u0) / 16;
        if chunks == 0 || !super::avx512::has_avx512() {
            return 0;
        }
        // Column starts at unit u0, all inside the validated view's storage.
        let mut ptrs = [std::ptr::null::<u8>(); 16];
        for (ptr, col) in ptrs.iter_mut().zip(cols) {
            let Some(c) = col else { return 0 };
            let start = b.offset + u0 * b.row_stride + c * b.col_stride;
            match b.data.get(start..start + chunks * 16) {
                Some(run) => *ptr = run.as_ptr() as *const u8,
                None => return 0,
            }
        }
        if dst.len() < (chunks * 16 - 1) * NR + 16 {
            return 0;
        }
        let src = match S::KIND {
            SrcKind::F32 => Src::F32,
            SrcKind::F16 => Src::F16,
            SrcKind::Bf16 => Src::Bf16,
        };
        // SAFETY: every column run holds chunks·16 units (checked above, row stride 1), dst
        // holds every written position (checked above), AVX-512F was detected.
        unsafe {
            pack_b_half_t(
                src,
                &ptrs,
                std::mem::size_of::<S>(),
                chunks,
                dst.as_mut_ptr(),
            )
        };
        chunks * 16
    }
    #[cfg(not(target_arch = "x86_64"))]
    0
}

#[inline(always)]
fn pair(lo: bf16, hi: bf16) -> u32 {
    lo.to_bits() as u32 | ((hi.to_bits() as u32) << 16)
}

/// Packs B into the bf16-pair (VNNI) layout. `b` must be validated and `dst.len() == l.len()`.
pub(crate) fn pack_b_bf16(b: &MatRef<bf16>, l: &BLayout, dst: &mut [u32]) {
    for_each_panel(l, dst, |u0, u1, p, ch| {
        pack_b_bf16_panel(b, l, (u0, u1), p, ch)
    });
}

/// Packs panel `p` over pair-units `u0..u1` of B into the bf16-pair layout (`ch`: the panel's
/// `(u1 - u0) * NR` words, all written). `b` must be validated.
pub(crate) fn pack_b_bf16_panel(
    b: &MatRef<bf16>,
    l: &BLayout,
    (u0, u1): (usize, usize),
    p: usize,
    ch: &mut [u32],
) {
    let k = l.k;
    let cols: [Option<usize>; NR] = std::array::from_fn(|ln| l.src_col(p, ln));
    // Row-major B and a full panel of consecutive columns (the per-call `matmul` case):
    // each unit interleaves two row runs of 32 values, which the compiler vectorises.
    let c0 = cols[0].unwrap_or(0);
    let run = b.col_stride == 1 && cols.iter().enumerate().all(|(i, c)| *c == Some(c0 + i));
    let mut u = u0;
    while run && u < u1 && 2 * u + 1 < k {
        let at = |kk: usize| b.offset + kk * b.row_stride + c0;
        // Validated view: rows 2u, 2u + 1 < K hold columns c0..c0 + 32 < N.
        let (r0, r1) = (&b.data[at(2 * u)..][..NR], &b.data[at(2 * u + 1)..][..NR]);
        let d = &mut ch[(u - u0) * NR..][..NR];
        for ((x, lo), hi) in d.iter_mut().zip(r0).zip(r1) {
            *x = pair(*lo, *hi);
        }
        u += 1;
    }
    for u in u..u1 {
        let (k0, k1) = (2 * u, 2 * u + 1);
        let d = &mut ch[(u - u0) * NR..][..NR];
        for (x, c) in d.iter_mut().zip(&cols) {
            *x = match *c {
                // SAFETY: validated view, k0 < K (and k1 checked), c < B's columns.
                Some(c) => unsafe {
                    let hi = if k1 < k { b.at(k1, c) } else { bf16::ZERO };
                    pair(b.at(k0, c), hi)
                },
                None => 0,
            };
        }
    }
}

/// Packs rows `row0..row0 + rows` (`rows <= mr`) and units `u0..u1` of A into one `mr`-row
/// f32 micro-panel `dst` (`mr * (u1 - u0)` elements). `a` must be validated.
pub(crate) fn pack_a_f32<S: ToF32>(
    a: &MatRef<S>,
    mr: usize,
    row0: usize,
    rows: usize,
    u0: usize,
    u1: usize,
    dst: &mut [f32],
) {
    let kc = u1 - u0;
    if kc == 0 {
        return;
    }
    if rows < mr {
        dst.fill(0.0);
    }
    if a.row_stride == 1 && rows == mr {
        // Column-major A: the mr rows of one k are contiguous.
        for (u, d) in (u0..u1).zip(dst.chunks_exact_mut(mr)) {
            let start = a.offset + u * a.col_stride + row0;
            S::convert(&a.data[start..start + mr], d);
        }
    } else if a.col_stride == 1 {
        // Row-major A: widen each row's run, then scatter with stride mr.
        let mut tmp = [0f32; 64];
        for r in 0..rows {
            let start = a.offset + (row0 + r) * a.row_stride + u0;
            let src = &a.data[start..start + kc];
            let mut out = dst[r..].iter_mut().step_by(mr);
            for chunk in src.chunks(64) {
                let t = &mut tmp[..chunk.len()];
                S::convert(chunk, t);
                for (&x, o) in t.iter().zip(&mut out) {
                    *o = x;
                }
            }
        }
    } else {
        for (u, d) in (u0..u1).zip(dst.chunks_exact_mut(mr)) {
            for (r, x) in d.iter_mut().enumerate().take(rows) {
                // SAFETY: validated view, row0 + r < M, u < K.
                *x = unsafe { a.at(row0 + r, u) }.to_f32();
            }
        }
    }
}

/// Packs rows `row0..row0 + rows` and pair-units `u0..u1` of a bf16 A into one `mr`-row micro-panel
/// of bf16 pairs (`(a[m, 2u], a[m, 2u + 1])`, zero past K). `a` must be validated.
pub(crate) fn pack_a_bf16(
    a: &MatRef<bf16>,
    mr: usize,
    row0: usize,
    rows: usize,
    u0: usize,
    u1: usize,
    dst: &mut [u32],
) {
    let k = a.cols;
    if u1 == u0 {
        return;
    }
    if rows < mr {
        dst.fill(0);
    }
    if a.col_stride == 1 {
        for r in 0..rows {
            let start = a.offset + (row0 + r) * a.row_stride;
            let row = &a.data[start + 2 * u0..start + k.min(2 * u1)];
            let mut out = dst[r..].iter_mut().step_by(mr);
            let mut it = row.chunks_exact(2);
            for (pr, o) in (&mut it).zip(&mut out) {
                *o = pair(pr[0], pr[1]);
            }
            if let (Some(o), [last]) = (out.next(), it.remainder()) {
                *o = pair(*last, bf16::ZERO);
            }
        }
    } else {
        for (u, d) in (u0..u1).zip(dst.chunks_exact_mut(mr)) {
            for (r, x) in d.iter_mut().enumerate().take(rows) {
                let m = row0 + r;
                // SAFETY: validated view, m < M, 2u < K (k1 checked).
                *x = unsafe {
                    let hi = if 2 * u + 1 < k {
                        a.at(m, 2 * u + 1)
                    } else {
                        bf16::ZERO
                    };
                    pair(a.at(m, 2 * u), hi)
                };
            }
        }
    }
}
