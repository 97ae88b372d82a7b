//! Fast paths of the AVX-512 tile store ([`super::avx512_ep::store`]) for full-width tiles
//! (32 columns) without alpha, beta or residual: the partial sums of a K block, and the last
//! block's bias and activation into C or rounded into a 16-bit output. Each decides the C
//! read, bias and activation once per tile and runs one tight loop over the rows.
//!
//! Why: the general store decides all of that per row through a closure that re-reads the
//! epilogue's fields (`perf annotate`): ~600 cycles per 32×32 AMX tile, a third of a K = 320
//! product's time (`speed_amx_tile_calls`), and about a fifth of an f32 14×32 tile's time at
//! 256-deep K blocks on an Intel core (`speed_kernel_f32`).
//!
//! Invariants: every path computes bit for bit what the general path computes for the same
//! tile: `acc (+ C unless first)`, then on the last block `act(· + bias)`, rounded where the
//! output is 16-bit; anything else (alpha ≠ 1, beta on a first block, a residual, GLU tiles,
//! narrower tiles) goes to the general path.

use super::avx512_ep::{act_ps, bias, store16_row};
use super::driver::{EpCtx, Tile};
use super::{Activation, Out16};
use std::arch::x86_64::*;

/// Stores `acc` through a fast path when the tile is one of the module's cases; returns false
/// (nothing written) otherwise.
///
/// # Safety
/// As [`super::avx512_ep::store`].
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn store_full_width<const MR: usize>(
    acc: &[[__m512; 2]; MR],
    t: &Tile,
    ep: &EpCtx,
) -> bool {
    if t.nr != 32
        || ep.glu
        || ep.alpha != 1.0
        || ep.residual.is_some()
        || (t.first && ep.beta != 0.0)
    {
        return false;
    }
    match (&ep.out16, t.last) {
        (Some(o), true) => store_last_rows16(acc, t, ep, o),
        (_, true) => {
            let b = (bias(ep, t.col0, 0xffff), bias(ep, t.col0 + 16, 0xffff));
            match (t.first, ep.act) {
                (true, Activation::None) => rows_f32::<MR, false, true, false>(acc, t, ep.act, b),
                (false, Activation::None) => rows_f32::<MR, true, true, false>(acc, t, ep.act, b),
                (true, _) => rows_f32::<MR, false, true, true>(acc, t, ep.act, b),
                (false, _) => rows_f32::<MR, true, true, true>(acc, t, ep.act, b),
            }
        }
        (_, false) => {
            let z = (_mm512_setzero_ps(), _mm512_setzero_ps());
            if t.first {
                rows_f32::<MR, false, false, false>(acc, t, ep.act, z);
            } else {
                rows_f32::<MR, true, false, false>(acc, t, ep.act, z);
            }
        }
    }
    true
}

/// Rows into C: `acc (+ C)`, and on the last block `act(· + bias)`.
///
/// # Safety
/// As [`store_full_width`]; C holds partial sums when `ADD_C`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn rows_f32<const MR: usize, const ADD_C: bool, const LAST: bool, const ACT: bool>(
    acc: &[[__m512; 2]; MR],
    t: &Tile,
    act: Activation,
    (b0, b1): (__m512, __m512),
) {
    for (r, a) in acc.iter().enumerate().take(t.mr) {
        let cp = t.c.add(r * t.ldc);
        let (mut lo, mut hi) = (a[0], a[1]);
        if ADD_C {
            lo = _mm512_add_ps(lo, _mm512_loadu_ps(cp));
            hi = _mm512_add_ps(hi, _mm512_loadu_ps(cp.add(16)));
        }
        if LAST {
            lo = _mm512_add_ps(lo, b0);
            hi = _mm512_add_ps(hi, b1);
            if ACT {
                lo = act_ps(act, lo);
                hi = act_ps(act, hi);
            }
        }
        _mm512_storeu_ps(cp, lo);
        _mm512_storeu_ps(cp.add(16), hi);
    }
}
/// The last block of a full-width tile rounded into a 16-bit output: `act((acc + C) + bias)`.
///
/// # Safety
/// As [`store_full_width`], for a tile with `t.last`, and C holding partial sums unless
/// `t.first`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn store_last_rows16<const MR: usize>(
    acc: &[[__m512; 2]; MR],
    t: &Tile,
    ep: &EpCtx,
    o: &Out16,
) {
    let b = (bias(ep, t.col0, 0xffff), bias(ep, t.col0 + 16, 0xffff));
    match (t.first, ep.act) {
        (true, Activation::None) => rows16::<MR, false, false>(acc, t, ep.act, o, b),
        (false, Activation::None) => rows16::<MR, true, false>(acc, t, ep.act, o, b),
        (true, _) => rows16::<MR, false, true>(acc, t, ep.act, o, b),
        (false, _) => rows16::<MR, true, true>(acc, t, ep.act, o, b),
    }
}

/// [`store_last_rows16`]'s loop, one instance per case.
///
/// # Safety
/// As [`store_last_rows16`].
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn rows16<const MR: usize, const ADD_C: bool, const ACT: bool>(
    acc: &[[__m512; 2]; MR],
    t: &Tile,
    act: Activation,
    o: &Out16,
    (b0, b1): (__m512, __m512),
) {
    for (r, a) in acc.iter().enumerate().take(t.mr) {
        let (mut lo, mut hi) = (a[0], a[1]);
        if ADD_C {
            let cp = t.c.add(r * t.ldc);
            lo = _mm512_add_ps(lo, _mm512_loadu_ps(cp));
            hi = _mm512_add_ps(hi, _mm512_loadu_ps(cp.add(16)));
        }
        lo = _mm512_add_ps(lo, b0);
        hi = _mm512_add_ps(hi, b1);
        if ACT {
            lo = act_ps(act, lo);
            hi = act_ps(act, hi);
        }
        store16_row(o, t.row0 + r, t.col0, lo, hi);
    }
}
