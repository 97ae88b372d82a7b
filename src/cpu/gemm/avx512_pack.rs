//! AVX-512 packing of row-major A panels, and of B panels whose columns run along K (B the
//! transpose of a row-major `[N, K]` weight, as in `x @ w.t()` and the convolutions' weights):
//! 16×16 in-register transposes instead of scalar strided gathers (packing A was ~15% of a
//! GEMM's time with the scalar path; a per-call 512³ product with a transposed B took 35%
//! longer than with a row-major one).
//!
//! Invariants: only full 14-row A panels of row-major (`col_stride == 1`) views, and full
//! 16-column B half panels of `row_stride == 1` views, take this path; chunks of 16 units are
//! loaded from each row (16-bit sources widened on load), transposed, and written as 16
//! consecutive unit rows; the tail of fewer than 16 units is written by the caller's scalar
//! code.

use super::avx512::MR;
use super::layout::NR;
use std::arch::x86_64::*;

/// How a source row is loaded as 16 lanes of 32 bits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Src {
    /// 16 f32.
    F32,
    /// 16 f16 widened to f32.
    F16,
    /// 16 bf16 widened to f32.
    Bf16,
    /// 16 raw u32 (bf16 pairs for the dot-product kernel).
    U32,
}

#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn load16(src: Src, p: *const u8) -> __m512 {
    match src {
        Src::F32 | Src::U32 => _mm512_loadu_ps(p as *const f32),
        Src::F16 => _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)),
        Src::Bf16 => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
            _mm256_loadu_si256(p as *const __m256i),
        ))),
    }
}

/// Transposes 16 rows of 16 lanes in place (row i lane j -> row j lane i).
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn transpose16(r: &mut [__m512; 16]) {
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for i in 0..4 {
        let (a, b, c, d) = (t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(c)));
        r[4 * i + 1] =
            _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(c)));
        r[4 * i + 2] =
            _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(b), _mm512_castps_pd(d)));
        r[4 * i + 3] =
            _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(b), _mm512_castps_pd(d)));
    }
    // r[4i + q] now holds, for rows 4i..4i+4, columns {q, q+4, q+8, q+12} in its four 128-bit lanes.
    for q in 0..4 {
        let (a, b, c, d) = (r[q], r[4 + q], r[8 + q], r[12 + q]);
        let ab_lo = _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b);
        let ab_hi = _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b);
        let cd_lo = _mm512_shuffle_f32x4::<0b10_00_10_00>(c, d);
        let cd_hi = _mm512_shuffle_f32x4::<0b11_01_11_01>(c, d);
        t[q] = _mm512_shuffle_f32x4::<0b10_00_10_00>(ab_lo, cd_lo);
        t[q + 8] = _mm512_shuffle_f32x4::<0b11_01_11_01>(ab_lo, cd_lo);
        t[q + 4] = _mm512_shuffle_f32x4::<0b10_00_10_00>(ab_hi, cd_hi);
        t[q + 12] = _mm512_shuffle_f32x4::<0b11_01_11_01>(ab_hi, cd_hi);
    }
    *r = t;
}

/// Units `16·ch .. 16·ch + 16` of each of `rows` (at most 16; `esize` bytes per unit),
/// transposed: entry `j` holds unit `j` of row `i` in lane `i` (lanes past the rows are 0).
///
/// # Safety
/// Every row must hold those 16 readable units; avx512f must be available.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load_transposed(src: Src, rows: &[*const u8], esize: usize, ch: usize) -> [__m512; 16] {
    let mut r = [_mm512_setzero_ps(); 16];
    for (ri, row) in r.iter_mut().zip(rows) {
        *ri = load16(src, row.add(ch * 16 * esize));
    }
    transpose16(&mut r);
    r
}

/// Packs `chunks * 16` units of a full 14-row panel. `rows[r]` points at unit `u0` of row `r`
/// (`esize` bytes per unit); `dst` receives `chunks * 16 * MR` 32-bit values.
///
/// # Safety
/// Every row must hold `chunks * 16` readable units; `dst` must be writable for
/// `chunks * 16 * MR` 32-bit values; avx512f must be available.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn pack_panel(
    src: Src,
    rows: &[*const u8; MR],
    esize: usize,
    chunks: usize,
    dst: *mut f32,
) {
    for ch in 0..chunks {
        let r = load_transposed(src, rows, esize, ch);
        let out = dst.add(ch * 16 * MR);
        for (j, v) in r.iter().enumerate() {
            _mm512_mask_storeu_ps(out.add(j * MR), (1 << MR) - 1, *v);
        }
    }
}

/// Packs `chunks * 16` units of one 16-column half of a B panel whose columns are contiguous
/// along K: `cols[i]` points at unit `u0` of column `i` (`esize` bytes per unit); unit `j`'s 16
/// values go to `dst + j * NR` (the half's lanes of that unit's 32-wide panel row).
///
/// # Safety
/// Every column must hold `chunks * 16` readable units; `dst` must be writable at
/// `j * NR .. j * NR + 16` for every `j < chunks * 16`; avx512f must be available.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn pack_b_half_t(
    src: Src,
    cols: &[*const u8; 16],
    esize: usize,
    chunks: usize,
    dst: *mut f32,
) {
    for ch in 0..chunks {
        let r = load_transposed(src, cols, esize, ch);
        let out = dst.add(ch * 16 * NR);
        for (j, v) in r.iter().enumerate() {
            _mm512_storeu_ps(out.add(j * NR), *v);
        }
    }
}
