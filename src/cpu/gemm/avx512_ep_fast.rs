//! Fast paths of the AVX-512 tile store ([`super::avx512_ep::store`]) for full-width tiles
//! (32 columns) without alpha or beta: the partial sums of a K block, and the last block's
//! bias, activation and residual (rows of contiguous values) into C or rounded into a 16-bit
//! output. Each decides the C read, bias, activation and residual once per tile and runs one
//! tight loop over the rows.
//!
//! Why: the general store decides all of that per row through a closure that re-reads the
//! epilogue's fields (`perf annotate`): ~600 cycles per 32×32 AMX tile, a third of a K = 320
//! product's time (`speed_amx_tile_calls`), and about a fifth of an f32 14×32 tile's time at
//! 256-deep K blocks on an Intel core (`speed_kernel_f32`).
//!
//! Invariants: every path computes bit for bit what the general path computes for the same
//! tile: `acc (+ C unless first)`, then on the last block `act(· + bias)`, rounded where the
//! output is 16-bit, then `+ residual`; anything else (alpha ≠ 1, beta on a first block, a
//! residual with strided columns, GLU tiles, narrower tiles) goes to the general path.

use super::avx512::has_avx512_bf16;
use super::avx512_ep::{act_ps, bias, store16_row};
use super::driver::{EpCtx, Tile};
use super::{Half, Out16, Residual};
use crate::desc::Activation;
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
    if t.nr != 32 || ep.glu || ep.alpha != 1.0 || (t.first && ep.beta != 0.0) {
        return false;
    }
    let res = match (&ep.residual, t.last) {
        (Some(r), true) => match ResRows::of(r, t) {
            Some(rows) => Some(rows),
            None => return false,
        },
        _ => None,
    };
    match (&ep.out16, t.last) {
        (Some(o), true) => store_last_rows16(acc, t, ep, o, res),
        (_, true) => {
            let b = (bias(ep, t.col0, 0xffff), bias(ep, t.col0 + 16, 0xffff));
            let r = res;
            match (t.first, ep.act) {
                (true, Activation::None) => {
                    rows_f32::<MR, false, true, false>(acc, t, ep.act, b, r)
                }
                (false, Activation::None) => {
                    rows_f32::<MR, true, true, false>(acc, t, ep.act, b, r)
                }
                (true, _) => rows_f32::<MR, false, true, true>(acc, t, ep.act, b, r),
                (false, _) => rows_f32::<MR, true, true, true>(acc, t, ep.act, b, r),
            }
        }
        (_, false) => {
            let z = (_mm512_setzero_ps(), _mm512_setzero_ps());
            if t.first {
                rows_f32::<MR, false, false, false>(acc, t, ep.act, z, None);
            } else {
                rows_f32::<MR, true, false, false>(acc, t, ep.act, z, None);
            }
        }
    }
    true
}

/// A residual whose rows hold contiguous values, resolved for one tile: row `r`'s 32 values
/// start at `first + r · stride` elements.
#[derive(Clone, Copy)]
struct ResRows {
    first: *const u8,
    /// Row stride in elements.
    stride: usize,
    kind: ResKind,
}

#[derive(Clone, Copy)]
enum ResKind {
    F32,
    Bf16,
    F16,
}

impl ResRows {
    /// The tile's residual rows, or `None` when its columns are strided (general path).
    fn of(r: &Residual, t: &Tile) -> Option<ResRows> {
        let (first, stride, kind) = match r {
            Residual::F32(m) if m.col_stride == 1 => {
                let at = m.offset + t.row0 * m.row_stride + t.col0;
                (
                    m.data.as_ptr().wrapping_add(at).cast(),
                    m.row_stride,
                    ResKind::F32,
                )
            }
            Residual::Half(m, half) if m.col_stride == 1 => {
                let at = m.offset + t.row0 * m.row_stride + t.col0;
                let kind = match half {
                    Half::Bf16 => ResKind::Bf16,
                    Half::F16 => ResKind::F16,
                };
                (m.data.as_ptr().wrapping_add(at).cast(), m.row_stride, kind)
            }
            _ => return None,
        };
        Some(ResRows {
            first,
            stride,
            kind,
        })
    }

    /// `(lo, hi) + row r`'s 32 residual values (16-bit ones widened exactly), as the general
    /// store adds them.
    ///
    /// # Safety
    /// AVX-512F; the residual was validated for the whole output (every row of the tile holds
    /// 32 values from `first + r · stride`).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn add(&self, r: usize, (lo, hi): (__m512, __m512)) -> (__m512, __m512) {
        let (a, b) = match self.kind {
            ResKind::F32 => {
                let p = (self.first as *const f32).add(r * self.stride);
                (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)))
            }
            ResKind::Bf16 | ResKind::F16 => {
                let p = (self.first as *const u16).add(r * self.stride);
                let bits = |q: *const u16| _mm256_loadu_si256(q as *const __m256i);
                let (x, y) = (bits(p), bits(p.add(16)));
                if matches!(self.kind, ResKind::Bf16) {
                    let w =
                        |v| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(v)));
                    (w(x), w(y))
                } else {
                    (_mm512_cvtph_ps(x), _mm512_cvtph_ps(y))
                }
            }
        };
        (_mm512_add_ps(lo, a), _mm512_add_ps(hi, b))
    }
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
    res: Option<ResRows>,
) {
    for (r, a) in acc.iter().enumerate().take(t.mr) {
        let cp = t.c.add(r * t.ldc);
        let (mut lo, mut hi) = (a[0], a[1]);
        if ADD_C {
            lo = _mm512_add_ps(lo, _mm512_loadu_ps(cp));
            hi = _mm512_add_ps(hi, _mm512_loadu_ps(cp.add(16)));
        }
        if LAST {
            (lo, hi) = last_values::<ACT>((lo, hi), (b0, b1), act, res.as_ref(), r);
        }
        _mm512_storeu_ps(cp, lo);
        _mm512_storeu_ps(cp.add(16), hi);
    }
}
/// A last block's row `r` after the epilogue: `act(· + bias)`, then `+ residual` where given.
///
/// # Safety
/// AVX-512F; as [`ResRows::add`] for the residual.
#[inline(always)]
unsafe fn last_values<const ACT: bool>(
    (lo, hi): (__m512, __m512),
    (b0, b1): (__m512, __m512),
    act: Activation,
    res: Option<&ResRows>,
    r: usize,
) -> (__m512, __m512) {
    let (mut lo, mut hi) = (_mm512_add_ps(lo, b0), _mm512_add_ps(hi, b1));
    if ACT {
        lo = act_ps(act, lo);
        hi = act_ps(act, hi);
    }
    match res {
        Some(res) => res.add(r, (lo, hi)),
        None => (lo, hi),
    }
}

/// The last block of a full-width tile rounded into a 16-bit output: `act((acc + C) + bias)`
/// (`+ residual` when given).
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
    res: Option<ResRows>,
) {
    let b = (bias(ep, t.col0, 0xffff), bias(ep, t.col0 + 16, 0xffff));
    let (act, r) = (ep.act, res);
    if o.kind == Half::Bf16 && has_avx512_bf16() {
        match (t.first, act) {
            (true, Activation::None) => rows16_bf16::<MR, false, false>(acc, t, act, o, b, r),
            (false, Activation::None) => rows16_bf16::<MR, true, false>(acc, t, act, o, b, r),
            (true, _) => rows16_bf16::<MR, false, true>(acc, t, act, o, b, r),
            (false, _) => rows16_bf16::<MR, true, true>(acc, t, act, o, b, r),
        }
        return;
    }
    match (t.first, act) {
        (true, Activation::None) => rows16::<MR, false, false>(acc, t, act, o, b, r),
        (false, Activation::None) => rows16::<MR, true, false>(acc, t, act, o, b, r),
        (true, _) => rows16::<MR, false, true>(acc, t, act, o, b, r),
        (false, _) => rows16::<MR, true, true>(acc, t, act, o, b, r),
    }
}

/// Defines a [`store_last_rows16`] loop, one instance per case, that writes each row with
/// `$write` under the target features `$features`.
macro_rules! rows16_fn {
    ($name:ident, $features:literal, $write:path) => {
        /// [`store_last_rows16`]'s loop, one instance per case.
        ///
        /// # Safety
        /// As [`store_last_rows16`], with the target features this instance enables.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn $name<const MR: usize, const ADD_C: bool, const ACT: bool>(
            acc: &[[__m512; 2]; MR],
            t: &Tile,
            act: Activation,
            o: &Out16,
            (b0, b1): (__m512, __m512),
            res: Option<ResRows>,
        ) {
            for (r, a) in acc.iter().enumerate().take(t.mr) {
                let (mut lo, mut hi) = (a[0], a[1]);
                if ADD_C {
                    let cp = t.c.add(r * t.ldc);
                    lo = _mm512_add_ps(lo, _mm512_loadu_ps(cp));
                    hi = _mm512_add_ps(hi, _mm512_loadu_ps(cp.add(16)));
                }
                (lo, hi) = last_values::<ACT>((lo, hi), (b0, b1), act, res.as_ref(), r);
                $write(o, t.row0 + r, t.col0, lo, hi);
            }
        }
    };
}

rows16_fn!(rows16, "avx512f", store16_row);
rows16_fn!(rows16_bf16, "avx512f,avx512bf16", store_bf16_row);

/// Rounds 32 values to bf16 with `vcvtne2ps2bf16` (round to nearest even, NaN made quiet, as
/// the software rounding) and writes them as one 64-byte row. The instruction flushes f32
/// denormals to zero where the software rounding keeps them, so a row holding one takes the
/// software rounding ([`store16_row`]): the bits are the same either way.
///
/// # Safety
/// As [`store16_row`], for a bf16 output; AVX512_BF16 available.
#[inline]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn store_bf16_row(o: &Out16, row: usize, col: usize, lo: __m512, hi: __m512) {
    let denormal = |v: __m512| {
        let b = _mm512_castps_si512(v);
        _mm512_testn_epi32_mask(b, _mm512_set1_epi32(0x7f80_0000))
            & _mm512_test_epi32_mask(b, _mm512_set1_epi32(0x007f_ffff))
    };
    if denormal(lo) | denormal(hi) != 0 {
        store16_row(o, row, col, lo, hi);
        return;
    }
    let packed: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
    _mm512_storeu_si512(o.ptr.add(row * o.ld + col) as *mut _, packed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::gemm::avx512::has_avx512;
    use crate::cpu::gemm::tests::util::plain_ep;
    use half::bf16;

    /// The last store into bf16 gives the software rounding's bits for every kind of value:
    /// normal values at rounding ties, f32 denormals (which `vcvtne2ps2bf16` alone would flush),
    /// ±0, ±inf, NaN, values that round to inf; rows with and without a denormal.
    #[test]
    fn bf16_last_rows_round_like_the_software_conversion() {
        if !has_avx512() {
            eprintln!("no AVX-512 on this CPU: the store under test never runs here");
            return;
        }
        let specials = [
            1.0f32 + f32::EPSILON * 32768.0, // a tie below the bf16 step: to even
            1.0 + f32::EPSILON * 98304.0,    // a tie above an odd step: up
            -2.718_3e3,
            0.0,
            -0.0,
            f32::from_bits(1),            // smallest denormal
            -f32::from_bits(0x0040_8000), // a denormal at a tie
            f32::from_bits(0x007f_ffff),  // largest denormal
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0x7f80_0001), // signalling NaN
            f32::MAX,                    // rounds to inf
            1e-38,
            65504.0,
            -7.0e30,
        ];
        // 32 rows of 32: row r holds specials only when r % 4 == 0, else ordinary values.
        let value = |r: usize, j: usize| {
            if r.is_multiple_of(4) {
                specials[(r / 4 + j) % specials.len()]
            } else {
                (r * 32 + j) as f32 * 0.013_7 - 5.0
            }
        };
        let mut acc = [[unsafe { _mm512_setzero_ps() }; 2]; 32];
        for (r, row) in acc.iter_mut().enumerate() {
            let v: Vec<f32> = (0..32).map(|j| value(r, j)).collect();
            // SAFETY: AVX-512F checked above; 16 values each.
            unsafe {
                row[0] = _mm512_loadu_ps(v.as_ptr());
                row[1] = _mm512_loadu_ps(v.as_ptr().add(16));
            }
        }
        let mut out = vec![bf16::ZERO; 32 * 32];
        let mut c = vec![0f32; 32 * 32];
        let t = Tile {
            c: c.as_mut_ptr(),
            ldc: 32,
            row0: 0,
            col0: 0,
            mr: 32,
            nr: 32,
            first: true,
            last: true,
        };
        {
            let ep = EpCtx {
                out16: Some(Out16::bf16(&mut out, 32)),
                ..plain_ep(32)
            };
            // SAFETY: AVX-512F checked; the tile and output hold 32 x 32 values.
            assert!(unsafe { store_full_width(&acc, &t, &ep) });
        }
        for r in 0..32 {
            for j in 0..32 {
                // (+ 0.0: the store adds the zero bias, which makes -0 into +0)
                let want = bf16::from_f32(value(r, j) + 0.0).to_bits();
                let got = out[r * 32 + j].to_bits();
                assert_eq!(got, want, "row {r} col {j}: {:e}", value(r, j));
            }
        }
    }
}
