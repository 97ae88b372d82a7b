//! AVX512_BF16 tile kernel of the bf16 CPU attention (driven by [`super::dp`]): one tile step of
//! [`MR`] query rows against one block of [`KB`] keys, both products on `vdpbf16ps` (a pair of
//! bf16 products per f32 lane, twice the f32 FMA's flop rate) with f32 accumulation:
//!
//! - `S = Q · Kᵀ`: per head-dim pair, `NV` vectors of 16 keys are loaded and each row's query
//!   pair is broadcast, into `MR × NV` f32 accumulators (two interleaved sets when `NV <= 2`,
//!   as the FMA kernel, so the dot-product latency is hidden);
//! - the online softmax on those registers, shared with the FMA kernel
//!   ([`super::avx512::softmax`]): scores times `scale·log2 e` (Q is packed exact, not
//!   pre-scaled), plus the mask, row max, one vector `exp2` for all rescale factors, per-lane
//!   f32 row sums; the probabilities take the AMX kernel's cheaper `exp2`
//!   ([`super::amx_kernel::exp2_p`], relative error < 7.5e-5) since `P` is rounded to bf16
//!   (`vcvtne2ps2bf16`) before the second product, as PyTorch's bf16 flash attention does;
//! - `O = O·alpha + P · V` over the block's valid key pairs, in register blocks of `MR` rows ×
//!   up to 64 value columns, plus one 8-column half vector (`vdpbf16ps ymm`, half the cost of a
//!   zmm on Zen 4's 256-bit pipes) when the value columns end in one: SD's head dim 40 costs
//!   2.5 vectors per key pair rather than 3.
//!
//! Invariants:
//! - Only reached through [`tile`], whose caller ([`super::dp`]) runs only where the CPU has
//!   AVX-512F/DQ/VL, FMA and AVX512_BF16; [`Tile::fits`] is checked before any pointer access,
//!   which all stay inside the slices of [`Tile`] and [`State`].
//! - Layouts (u32 = two bf16, low half the even index), all zero-padded: Q `[MR][dpairs]`
//!   (`dpairs` = ⌈D/2⌉); K per block `[dpairs][KB keys]`; V per block `[dvp/16 chunks][KB/2
//!   key pairs][16 columns]` then `[KB/2][8]` for a last half chunk, u32 `(v[2j][c],
//!   v[2j+1][c])`, `dvp` = Dv rounded up to 8; P `[MR][KB/2]` (bf16 row-major, which is
//!   already the pair layout over keys); O `[MR][dvp]` f32.
//! - Keys past `valid` get probability exactly 0 (their scores are `-inf`), so the half pair of
//!   an odd `valid` and V's zero padding rows add nothing.

use std::arch::asm;
use std::arch::x86_64::*;

use super::amx_kernel::exp2_p;
use super::avx512::{softmax, Rows};
use super::{KB, MR};

/// One tile step's read-only operands (layouts in the module docs).
pub(super) struct Tile<'a> {
    /// `MR × dpairs` query pairs.
    pub(super) q: &'a [u32],
    /// `dpairs × KB` key pairs of the block.
    pub(super) k: &'a [u32],
    /// `KB/2 × dvp` value pairs of the block, in column chunks.
    pub(super) v: &'a [u32],
    /// `MR × KB` additive mask in log2 units (`-inf` drops), if any.
    pub(super) bias: Option<&'a [f32]>,
    /// Head-dim pairs (at least 1).
    pub(super) dpairs: usize,
    /// Value columns rounded up to a multiple of 8.
    pub(super) dvp: usize,
    /// Valid keys in this block (`1..=KB`); the rest are padding.
    pub(super) valid: usize,
    /// First key block: the running output is overwritten (its memory is not initialised).
    pub(super) first: bool,
    /// `scale · log2 e`, applied to the f32 scores.
    pub(super) qmul: f32,
}

/// The running state of one tile of `MR` query rows.
pub(super) struct State<'a> {
    /// Running row maxima (log2 units).
    pub(super) m: &'a mut [f32; MR],
    /// Running row sums, split over 16 lanes per row (their total is the sum).
    pub(super) l: &'a mut [[f32; 16]; MR],
    /// `MR × dvp` unnormalised output.
    pub(super) o: &'a mut [f32],
    /// `MR × KB/2` scratch for the block's bf16 probabilities.
    pub(super) p: &'a mut [u32],
}

impl Tile<'_> {
    /// True when every slice is long enough for the kernel's unchecked accesses.
    pub(super) fn fits(&self, st: &State) -> bool {
        self.dpairs > 0
            && self.dvp > 0
            && self.dvp.is_multiple_of(8)
            && (1..=KB).contains(&self.valid)
            && self.q.len() >= MR * self.dpairs
            && self.k.len() >= self.dpairs * KB
            && self.v.len() >= KB / 2 * self.dvp
            && self.bias.is_none_or(|b| b.len() >= MR * KB)
            && st.o.len() >= MR * self.dvp
            && st.p.len() >= MR * KB / 2
    }
}

/// The `MR × 16·NV` scores `Q · Kᵀ` (unscaled) of the block. Not inlined, for the reason given
/// at `super::avx512::qk`: the accumulators stay in registers.
#[inline(never)]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,fma,avx512bf16")]
unsafe fn qk<const NV: usize>(t: &Tile) -> [[__m512; NV]; MR] {
    let (q, k, dp) = (t.q.as_ptr(), t.k.as_ptr(), t.dpairs);
    let step = |i: usize, acc: &mut [[__m512; NV]; MR]| {
        let mut b = [_mm512_setzero_si512(); NV];
        for (v, bv) in b.iter_mut().enumerate() {
            // SAFETY: k holds dpairs * KB u32, i < dpairs and 16 * v + 16 <= KB.
            *bv = _mm512_loadu_si512(k.add(i * KB + 16 * v).cast());
        }
        for (r, row) in acc.iter_mut().enumerate() {
            // SAFETY: q holds MR * dpairs u32 and i < dpairs.
            let a: __m512bh = std::mem::transmute(_mm512_set1_epi32(*q.add(r * dp + i) as i32));
            for (av, bv) in row.iter_mut().zip(&b) {
                *av = _mm512_dpbf16_ps(*av, a, std::mem::transmute::<__m512i, __m512bh>(*bv));
            }
        }
    };
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    let mut i = 0;
    if NV <= 2 {
        // Under 8 accumulators the dot-product latency would bound the loop: two sets.
        let mut acc2 = [[_mm512_setzero_ps(); NV]; MR];
        while i + 2 <= dp {
            step(i, &mut acc);
            step(i + 1, &mut acc2);
            i += 2;
        }
        for (row, row2) in acc.iter_mut().zip(&acc2) {
            for (a, a2) in row.iter_mut().zip(row2) {
                *a = _mm512_add_ps(*a, *a2);
            }
        }
    }
    while i < dp {
        step(i, &mut acc);
        i += 1;
    }
    acc
}

/// Scores, online softmax and bf16 `P` for `NV` vectors (16·NV keys) of the block; returns each
/// row's rescale factor for the running output.
#[target_feature(enable = "avx512f,avx512dq,avx512vl,fma,avx512bf16")]
unsafe fn scores<const NV: usize>(t: &Tile, st: &mut State) -> [f32; MR] {
    let mut acc = qk::<NV>(t);
    let p = st.p.as_mut_ptr();
    let store = |r: usize, row: &[__m512; NV]| {
        let mut v = 0;
        while v + 2 <= NV {
            let pk: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(row[v + 1], row[v]));
            // SAFETY: p holds MR * KB / 2 u32 and 8 * v + 16 <= KB / 2.
            _mm512_storeu_si512(p.add(r * KB / 2 + 8 * v).cast(), pk);
            v += 2;
        }
        if v < NV {
            let pk: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(row[v]));
            // SAFETY: as above, 8 * v + 8 <= KB / 2.
            _mm256_storeu_si256(p.add(r * KB / 2 + 8 * v).cast(), pk);
        }
    };
    let sm = Rows {
        bias: t.bias,
        valid: t.valid,
        m: st.m,
        l: st.l,
    };
    softmax(&mut acc, Some(t.qmul), sm, |x| exp2_p::<true>(x, !0), store)
}

/// `o[:, c0..c0 + 16·NV (+ 8 with HALF)] = o * alpha + p · v` over the block's valid key
/// pairs.
#[target_feature(enable = "avx512f,avx512dq,avx512vl,fma,avx512bf16")]
unsafe fn update<const NV: usize, const HALF: bool>(
    t: &Tile,
    st: &mut State,
    alpha: &[f32; MR],
    c0: usize,
) {
    let (o, p, v, dvp) = (st.o.as_mut_ptr(), st.p.as_ptr(), t.v.as_ptr(), t.dvp);
    let ch = c0 + 16 * NV;
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    let mut acch = [_mm256_setzero_ps(); MR];
    if !t.first {
        for (r, (row, h)) in acc.iter_mut().zip(&mut acch).enumerate() {
            let a = _mm512_set1_ps(alpha[r]);
            for (c, av) in row.iter_mut().enumerate() {
                // SAFETY: o holds MR * dvp floats and c0 + 16 * NV (+ 8) <= dvp.
                *av = _mm512_mul_ps(a, _mm512_loadu_ps(o.add(r * dvp + c0 + 16 * c)));
            }
            if HALF {
                // SAFETY: as above.
                let x = _mm256_loadu_ps(o.add(r * dvp + ch));
                *h = _mm256_mul_ps(_mm512_castps512_ps256(a), x);
            }
        }
    }
    for j in 0..t.valid.div_ceil(2) {
        let mut b = [_mm512_setzero_si512(); NV];
        for (c, bv) in b.iter_mut().enumerate() {
            // SAFETY: v holds KB / 2 * dvp u32: chunk (c0 + 16c) / 16 of 16 columns starts at
            // u32 (c0 + 16c) * KB / 2, and j < KB / 2.
            *bv = _mm512_loadu_si512(v.add((c0 + 16 * c) * (KB / 2) + 16 * j).cast());
        }
        // SAFETY: as above, the half chunk (8 columns, only read with HALF) being the last.
        let bh: __m256bh = std::mem::transmute(if HALF {
            _mm256_loadu_si256(v.add(ch * (KB / 2) + 8 * j).cast())
        } else {
            _mm256_setzero_si256()
        });
        for (r, (row, h)) in acc.iter_mut().zip(&mut acch).enumerate() {
            // SAFETY: p holds MR * KB / 2 u32 and j < KB / 2.
            // (As a float: a broadcast load, where an integer went through a general register.)
            let a = _mm512_set1_ps(*p.add(r * KB / 2 + j).cast::<f32>());
            let a: __m512bh = std::mem::transmute(a);
            for (av, bv) in row.iter_mut().zip(&b) {
                *av = _mm512_dpbf16_ps(*av, std::mem::transmute::<__m512i, __m512bh>(*bv), a);
            }
            if HALF {
                // The P pair as an embedded `{1to8}` broadcast load of the product: written
                // with intrinsics, LLVM reused the zmm broadcast through a shuffle per row.
                // SAFETY: as above; the CPU has AVX512_BF16 and AVX-512VL (caller).
                asm!(
                    "vdpbf16ps {h}, {b}, dword ptr [{p}]{{1to8}}",
                    h = inout(ymm_reg) *h,
                    b = in(ymm_reg) bh,
                    p = in(reg) p.add(r * KB / 2 + j),
                    options(pure, readonly, nostack, preserves_flags),
                );
            }
        }
    }
    for (r, (row, h)) in acc.iter().zip(&acch).enumerate() {
        for (c, av) in row.iter().enumerate() {
            // SAFETY: as the loads of o above.
            _mm512_storeu_ps(o.add(r * dvp + c0 + 16 * c), *av);
        }
        if HALF {
            // SAFETY: as above.
            _mm256_storeu_ps(o.add(r * dvp + ch), *h);
        }
    }
}

/// Runs `update` on `vecs` whole vectors of value columns from column `c0`, plus a half vector
/// after them when `half`.
#[target_feature(enable = "avx512f,avx512dq,avx512vl,fma,avx512bf16")]
unsafe fn update_cols(
    t: &Tile,
    st: &mut State,
    alpha: &[f32; MR],
    (c0, vecs, half): (usize, usize, bool),
) {
    match (vecs, half) {
        (0, true) => update::<0, true>(t, st, alpha, c0),
        (1, false) => update::<1, false>(t, st, alpha, c0),
        (1, true) => update::<1, true>(t, st, alpha, c0),
        (2, false) => update::<2, false>(t, st, alpha, c0),
        (2, true) => update::<2, true>(t, st, alpha, c0),
        (3, false) => update::<3, false>(t, st, alpha, c0),
        (3, true) => update::<3, true>(t, st, alpha, c0),
        (4, false) => update::<4, false>(t, st, alpha, c0),
        _ => {} // never asked for (see `tile`)
    }
}

/// One tile step (see [`Tile`]).
///
/// # Safety
/// The CPU must have AVX-512F/DQ/VL, FMA and AVX512_BF16.
pub(super) unsafe fn tile(t: &Tile, st: &mut State) {
    if !t.fits(st) {
        return; // unreachable by construction; never read out of bounds
    }
    // SAFETY: the caller guarantees the CPU features; `fits` checked every length.
    unsafe { tile_checked(t, st) }
}

/// [`tile`] after its checks: scores and softmax, then `P · V` in column passes.
#[target_feature(enable = "avx512f,avx512dq,avx512vl,fma,avx512bf16")]
unsafe fn tile_checked(t: &Tile, st: &mut State) {
    let alpha = match t.valid.div_ceil(16) {
        0 | 1 => scores::<1>(t, st),
        2 => scores::<2>(t, st),
        3 => scores::<3>(t, st),
        _ => scores::<4>(t, st),
    };
    // Value columns in passes of at most 4 vectors (the half vector rides on the last pass),
    // balanced so no pass is left with few accumulators: 5 vectors as 3 + 2, 10 as 4 + 3 + 3.
    let (mut left, half) = (t.dvp / 16, t.dvp % 16 == 8);
    let mut c0 = 0;
    while left > 0 || (half && c0 < t.dvp) {
        let mut take = left.div_ceil(left.div_ceil(4).max(1));
        let last = take == left;
        if last && half && take == 4 {
            take = 2; // 4 vectors + a half would not fit the registers
        }
        let with_half = half && take == left;
        update_cols(t, st, &alpha, (c0, take, with_half));
        c0 += 16 * take + if with_half { 8 } else { 0 };
        left -= take;
    }
}
