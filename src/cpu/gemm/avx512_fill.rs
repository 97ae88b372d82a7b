//! AVX-512 tiles that fill a B micro-panel while they multiply it (see
//! [`super::panels::Fill`]): B's rows are read from the source, converted to the packed layout
//! in registers (f16 and bf16 rows widened to f32 for the f32 kernel, bf16 rows interleaved
//! into pairs for the `vdpbf16ps` kernel), stored into the panel for the tiles after this one,
//! and multiplied at once, so a per-call product has no separate packing pass over B.
//!
//! Invariants: the multiply-adds are those of [`super::avx512`]'s tiles, in the same order,
//! on the same values the packers write, so a filled tile and every later tile over the panel
//! are bit-identical to tiles over a B packed beforehand (tested in
//! `tests::misc::b_packed_on_first_use_matches_prepacked_bits`). Callers guarantee the CPU
//! features of each function (the kernels exist only where they were detected, and the bf16
//! fill is offered only where AVX512BW was too).
//!
//! Measured on Zen 4 (ten-group loops, old and new binaries alternating): f32 512³ 196–200 →
//! 198–206 GFLOP/s per call (a prepacked B: 200–208), 154×768×320 166 → 176–178 (best), 1024³
//! 201–205 → 207–210; bf16 (pair layout) 512³ 376–381 → 380–387 (prepacked 398), 1024³ 413–423
//! → 428–432, 154×768×320 280–289 → 316–322 (medians, `Tensor::matmul`).

use super::avx512::MR;
use super::avx512_ep::{prefetch_c, store};
use super::avx512_pack::{load16, Src};
use super::driver::{EpCtx, Tile};
use super::layout::NR;
use std::arch::x86_64::*;

/// Source rows [`accumulate_wide_filling`] prefetches ahead of the one it multiplies.
const SRC_PREFETCH_ROWS: usize = 12;

/// The f32 kernel's tile over a panel filled from row-major rows of `kind` (f32, or f16/bf16
/// widened exactly, as the packer widens them): `src` is the panel's first source value,
/// rows `ld` values apart.
///
/// # Safety
/// As [`super::driver::Kernel::tile_filling_b`]; AVX512F available; `kind` is not `U32`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn tile_wide_filling(
    kcu: usize,
    a: *const f32,
    (src, ld, kind): (*const u8, usize, Src),
    dst: *mut f32,
    t: &Tile,
    ep: &EpCtx,
) {
    prefetch_c(t, ep);
    let acc = match kind {
        Src::F16 => accumulate_wide_filling::<F16_ROWS>(kcu, a, (src, ld), dst),
        Src::Bf16 => accumulate_wide_filling::<BF16_ROWS>(kcu, a, (src, ld), dst),
        Src::F32 | Src::U32 => accumulate_wide_filling::<F32_ROWS>(kcu, a, (src, ld), dst),
    };
    store::<MR>(&acc, t, ep);
}

/// Source row kinds of [`accumulate_wide_filling`] (a const parameter, so each loop is
/// compiled for one kind).
const F32_ROWS: u8 = 0;
const F16_ROWS: u8 = 1;
const BF16_ROWS: u8 = 2;

/// The f32 tile's accumulation (`accumulate_f32` in `avx512.rs`) with B read from its
/// row-major source (`ld` values between units, of the kind `ROWS`), each unit's 32 values,
/// widened to f32, also stored to `dst` in the packed layout: the same multiply-adds in the
/// same order on the same values, so the tile equals one over the packed panel bit for bit.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn accumulate_wide_filling<const ROWS: u8>(
    kcu: usize,
    mut a: *const f32,
    (mut src, ld): (*const u8, usize),
    mut dst: *mut f32,
) -> [[__m512; 2]; MR] {
    let (kind, bytes) = match ROWS {
        F16_ROWS => (Src::F16, 2),
        BF16_ROWS => (Src::Bf16, 2),
        _ => (Src::F32, 4),
    };
    let row_bytes = ld * bytes;
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for _ in 0..kcu {
        // The source rows are strided (hardware prefetch trails them): fetch the first and
        // last byte of a row a dozen units ahead. Prefetches never fault, whatever the address.
        let ahead = src.wrapping_add(SRC_PREFETCH_ROWS * row_bytes);
        _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(NR * bytes - 1) as *const i8);
        let b0 = load16(kind, src);
        let b1 = load16(kind, src.add(16 * bytes));
        _mm512_storeu_ps(dst, b0);
        _mm512_storeu_ps(dst.add(16), b1);
        for (r, accr) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*a.add(r));
            accr[0] = _mm512_fmadd_ps(av, b0, accr[0]);
            accr[1] = _mm512_fmadd_ps(av, b1, accr[1]);
        }
        a = a.add(MR);
        src = src.wrapping_add(row_bytes);
        dst = dst.add(NR);
    }
    acc
}

/// Lane indices of `vpermt2w` that interleave two rows of 32 bf16 (`a` = row 2u, `b` = row
/// 2u + 1) into the pair layout's 16 low columns (`lo`) and 16 high columns (`hi`): lane 2j
/// takes column j of row 2u, lane 2j + 1 column j of row 2u + 1 (lower half of each u32 first,
/// as `pack::pair` builds it).
const PAIR_LO: [u16; 32] = pair_indices(0);
const PAIR_HI: [u16; 32] = pair_indices(16);

const fn pair_indices(first: u16) -> [u16; 32] {
    let mut idx = [0u16; 32];
    let mut j = 0;
    while j < 16 {
        idx[2 * j] = first + j as u16;
        idx[2 * j + 1] = 32 + first + j as u16;
        j += 1;
    }
    idx
}

/// [`super::avx512::tile_bf16`] over a panel filled from row-major bf16 rows (`src`, `ld`
/// values apart; two rows per unit).
///
/// # Safety
/// As [`super::driver::Kernel::tile_filling_b`]; AVX512F, AVX512_BF16 and AVX512BW available.
#[target_feature(enable = "avx512f,avx512bf16,avx512bw")]
pub(super) unsafe fn tile_bf16_filling(
    kcu: usize,
    a: *const u32,
    src: (*const u16, usize),
    dst: *mut u32,
    t: &Tile,
    ep: &EpCtx,
) {
    prefetch_c(t, ep);
    let acc = accumulate_bf16_filling(kcu, a, src, dst);
    store::<MR>(&acc, t, ep);
}

/// The pair loop of [`tile_bf16_filling`]: per unit, two source rows interleaved into the pair
/// layout (two `vpermt2w`), stored, and multiplied as the packed kernel multiplies them.
#[target_feature(enable = "avx512f,avx512bf16,avx512bw")]
#[inline]
unsafe fn accumulate_bf16_filling(
    kcu: usize,
    mut a: *const u32,
    (mut src, ld): (*const u16, usize),
    mut dst: *mut u32,
) -> [[__m512; 2]; MR] {
    let lo_idx = _mm512_loadu_si512(PAIR_LO.as_ptr() as *const _);
    let hi_idx = _mm512_loadu_si512(PAIR_HI.as_ptr() as *const _);
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for _ in 0..kcu {
        // Both rows of the unit six units ahead (each row's 64 bytes may straddle two lines).
        let ahead = src.wrapping_add(SRC_PREFETCH_ROWS * ld);
        for row in [ahead, ahead.wrapping_add(ld)] {
            _mm_prefetch::<_MM_HINT_T0>(row as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(NR - 1) as *const i8);
        }
        let r0 = _mm512_loadu_si512(src as *const _);
        let r1 = _mm512_loadu_si512(src.add(ld) as *const _);
        let lo = _mm512_permutex2var_epi16(r0, lo_idx, r1);
        let hi = _mm512_permutex2var_epi16(r0, hi_idx, r1);
        _mm512_storeu_si512(dst as *mut _, lo);
        _mm512_storeu_si512(dst.add(16) as *mut _, hi);
        let b0: __m512bh = std::mem::transmute(lo);
        let b1: __m512bh = std::mem::transmute(hi);
        for (r, accr) in acc.iter_mut().enumerate() {
            let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(r) as i32));
            accr[0] = _mm512_dpbf16_ps(accr[0], av, b0);
            accr[1] = _mm512_dpbf16_ps(accr[1], av, b1);
        }
        a = a.add(MR);
        src = src.wrapping_add(2 * ld);
        dst = dst.add(NR);
    }
    acc
}
