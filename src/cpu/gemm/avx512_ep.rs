//! AVX-512 tile store with the fused epilogue, and the vector activations it needs.
//!
//! Invariants: only lanes inside the tile's `nr` valid columns are read or written (masked
//! loads/stores, which never fault on masked-off lanes); C is read only when accumulating a
//! later K block or when `beta != 0`; with a 16-bit output ([`Out16`]) the last K block's values
//! are rounded (bit for bit as the library's narrowing conversions) and written there, never to C. Activations: `exp` by range reduction and a degree-7
//! polynomial with `vscalefps` (rel. err. ~2e-7), GELU by the elementwise op's own exact form
//! (`simd::avx512_math::gelu_erf`: relative accuracy in the negative tail, where a fused
//! GEGLU's gate can sit), reciprocals by `vrcp14ps` plus one Newton step.

use super::driver::{EpCtx, Tile};
use super::{Half, Out16, Residual};
use crate::desc::Activation;
use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx512f")]
fn splat(x: f32) -> __m512 {
    _mm512_set1_ps(x)
}

/// `e^x`, clamped to the normal f32 range.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn exp_ps(x: __m512) -> __m512 {
    let x = _mm512_min_ps(_mm512_max_ps(x, splat(-87.0)), splat(88.0));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, splat(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, splat(0.693_359_4), x);
    let r = _mm512_fnmadd_ps(n, splat(-2.121_944_4e-4), r);
    let mut p = splat(1.0 / 5040.0);
    for c in [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = _mm512_fmadd_ps(p, r, splat(c));
    }
    _mm512_scalef_ps(p, n)
}

/// `1 / d` for `d >= 1` (finite).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn recip_ps(d: __m512) -> __m512 {
    let r = _mm512_rcp14_ps(d);
    _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, splat(2.0)))
}

/// `x * sigmoid(s)` computed as `x / (1 + e^-s)`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn x_sigmoid(x: __m512, s: __m512) -> __m512 {
    let e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), s));
    _mm512_mul_ps(x, recip_ps(_mm512_add_ps(splat(1.0), e)))
}

/// Applies `act` to a vector.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn act_ps(act: Activation, x: __m512) -> __m512 {
    match act {
        Activation::None => x,
        Activation::Relu => _mm512_max_ps(x, _mm512_setzero_ps()),
        // SAFETY: the AVX-512 GEMM runs only where the CPU has AVX-512F/DQ and FMA, which
        // the library's exact GELU needs (the same function as the elementwise `gelu`).
        Activation::Gelu => crate::cpu::simd::avx512_math::gelu_erf(x),
        Activation::GeluTanh => {
            // 0.5 x (1 + tanh u) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
            let x2 = _mm512_mul_ps(x, x);
            let c = 0.797_884_6_f32;
            let two_u = _mm512_mul_ps(
                x,
                _mm512_fmadd_ps(x2, splat(2.0 * c * 0.044715), splat(2.0 * c)),
            );
            x_sigmoid(x, two_u)
        }
        Activation::Silu => x_sigmoid(x, x),
    }
}

#[inline(always)]
fn mask_of(cnt: usize) -> __mmask16 {
    if cnt >= 16 {
        0xffff
    } else {
        ((1u32 << cnt) - 1) as __mmask16
    }
}

/// Residual values for columns `col..col + cnt` of `row` (16-bit residuals widened exactly).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn residual(ep: &EpCtx, row: usize, col: usize, cnt: usize, mask: __mmask16) -> __m512 {
    match ep.residual {
        None => _mm512_setzero_ps(),
        Some(Residual::F32(res)) => {
            let base = res
                .data
                .as_ptr()
                .add(res.offset + row * res.row_stride + col * res.col_stride);
            if res.col_stride == 1 {
                _mm512_maskz_loadu_ps(mask, base)
            } else {
                let mut tmp = [0f32; 16];
                for (j, t) in tmp.iter_mut().enumerate().take(cnt) {
                    *t = *base.add(j * res.col_stride);
                }
                _mm512_loadu_ps(tmp.as_ptr())
            }
        }
        Some(Residual::Half(res, kind)) => {
            let base = res
                .data
                .as_ptr()
                .add(res.offset + row * res.row_stride + col * res.col_stride);
            let bits = if res.col_stride == 1 && cnt == 16 {
                _mm256_loadu_si256(base as *const __m256i)
            } else {
                // Edge or strided: only the valid elements are read.
                let mut tmp = [0u16; 16];
                for (j, t) in tmp.iter_mut().enumerate().take(cnt) {
                    *t = *base.add(j * res.col_stride);
                }
                _mm256_loadu_si256(tmp.as_ptr() as *const __m256i)
            };
            match kind {
                Half::Bf16 => {
                    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits)))
                }
                Half::F16 => _mm512_cvtph_ps(bits),
            }
        }
    }
}

/// Bias values for columns `col..` (masked).
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn bias(ep: &EpCtx, col: usize, mask: __mmask16) -> __m512 {
    match ep.bias {
        None => _mm512_setzero_ps(),
        Some(b) => _mm512_maskz_loadu_ps(mask, b.as_ptr().add(col)),
    }
}

/// The 16-bit patterns of `v` rounded to nearest even (bf16: NaN made quiet, as the library's
/// narrowing conversions), one per 32-bit lane.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn round16(kind: Half, v: __m512) -> __m512i {
    match kind {
        Half::Bf16 => {
            let b = _mm512_castps_si512(v);
            let lsb = _mm512_and_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(1));
            let bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb);
            let r = _mm512_srli_epi32::<16>(_mm512_add_epi32(b, bias));
            let q = _mm512_or_si512(_mm512_srli_epi32::<16>(b), _mm512_set1_epi32(0x40));
            _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v), q)
        }
        Half::F16 => _mm512_cvtepu16_epi32(_mm512_cvtps_ph::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(v)),
    }
}

/// Rounds 16 final values to the 16-bit output at (`row`, `col..`), lanes in `mask` only.
///
/// # Safety
/// The entry points validated `o` for every element of the tile.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn store16(o: &Out16, row: usize, col: usize, mask: __mmask16, v: __m512) {
    let h = round16(o.kind, v);
    _mm512_mask_cvtepi32_storeu_epi16(o.ptr.add(row * o.ld + col) as *mut _, mask, h);
}

/// Starts pulling the tile's C lines (and on the last K block its 16-bit output lines) towards
/// L1 so the store at the end does not stall. Plain prefetch instructions (SSE), shared by the
/// AVX-512 and AVX2 kernels.
#[inline(always)]
pub(crate) fn prefetch_c(t: &Tile, ep: &EpCtx) {
    if t.last {
        if let Some(o) = &ep.out16 {
            prefetch_out16(o, t);
        }
        prefetch_residual(ep, t);
    }
    if t.first && t.last && ep.beta == 0.0 && ep.out16.is_some() {
        return; // C is neither read nor written: the values go to the 16-bit output
    }
    for r in 0..t.mr {
        let p = t.c.wrapping_add(r * t.ldc) as *const i8;
        // SAFETY: prefetches never fault.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(127));
        }
    }
}

/// Asks for the residual lines the tile's store will read (row-contiguous residuals only), as
/// [`prefetch_out16`] does for the output. Interleaved probe, prepacked bf16 with a bf16
/// residual on AMX, 2 threads: 8192×1280×320 851 → 890, 8192×320×320 530 → 569, 2048×640×640
/// 941 → 1044 GFLOP/s.
#[inline]
pub(crate) fn prefetch_residual(ep: &EpCtx, t: &Tile) {
    let (base, rs, bytes) = match &ep.residual {
        Some(Residual::F32(m)) if m.col_stride == 1 => (
            m.data.as_ptr().wrapping_add(m.offset + t.col0) as *const i8,
            4 * m.row_stride,
            4 * t.nr.max(1),
        ),
        Some(Residual::Half(m, _)) if m.col_stride == 1 => (
            m.data.as_ptr().wrapping_add(m.offset + t.col0) as *const i8,
            2 * m.row_stride,
            2 * t.nr.max(1),
        ),
        _ => return,
    };
    for r in 0..t.mr {
        let p = base.wrapping_add((t.row0 + r) * rs);
        // SAFETY: prefetches never fault.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(bytes - 1));
        }
    }
}

/// Asks for the tile's 16-bit output lines, for writing, before its products run: the store
/// at the end of the tile then finds them in cache instead of stalling on their fetch (output
/// buffers are usually cold). Interleaved probe `speed_amx_profile_shape`, prepacked bf16 on
/// AMX: 8192×320×1280 443 → 493 (1 thread), 667 → 742 GFLOP/s (2 threads); 8192×320×320
/// 376 → 434, 551 → 585.
#[inline]
pub(crate) fn prefetch_out16(o: &Out16, t: &Tile) {
    let bytes = 2 * t.nr.max(1);
    for r in 0..t.mr {
        let p = o.ptr.wrapping_add((t.row0 + r) * o.ld + t.col0) as *const i8;
        // SAFETY: prefetches never fault.
        unsafe {
            _mm_prefetch::<_MM_HINT_ET0>(p);
            _mm_prefetch::<_MM_HINT_ET0>(p.wrapping_add(bytes - 1));
        }
    }
}

/// Rounds 32 final values (two vectors) and writes them as one 64-byte row at (`row`, `col..`).
///
/// # Safety
/// As [`store16`], for 32 columns.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn store16_row(o: &Out16, row: usize, col: usize, lo: __m512, hi: __m512) {
    let lo = _mm512_cvtepi32_epi16(round16(o.kind, lo));
    let hi = _mm512_cvtepi32_epi16(round16(o.kind, hi));
    let line = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
    _mm512_storeu_si512(o.ptr.add(row * o.ld + col) as *mut _, line);
}

/// Stores `MR` rows of two accumulator vectors into the tile, applying the epilogue.
///
/// # Safety
/// As [`super::driver::Kernel::tile`]; avx512f must be available.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn store<const MR: usize>(acc: &[[__m512; 2]; MR], t: &Tile, ep: &EpCtx) {
    let alpha = splat(ep.alpha);
    let scale = ep.alpha != 1.0;
    if ep.glu {
        let cnt = t.nr.min(16);
        let mask = mask_of(cnt);
        let bh = bias(ep, t.col0, mask);
        let bg = bias(ep, ep.n + t.col0, mask);
        for (r, a) in acc.iter().enumerate().take(t.mr) {
            let (mut h, mut g) = (a[0], a[1]);
            if scale {
                h = _mm512_mul_ps(h, alpha);
                g = _mm512_mul_ps(g, alpha);
            }
            let out = _mm512_mul_ps(_mm512_add_ps(h, bh), act_ps(ep.act, _mm512_add_ps(g, bg)));
            let out = _mm512_add_ps(out, residual(ep, t.row0 + r, t.col0, cnt, mask));
            match &ep.out16 {
                Some(o) => store16(o, t.row0 + r, t.col0, mask, out),
                None => _mm512_mask_storeu_ps(t.c.add(r * t.ldc), mask, out),
            }
        }
        return;
    }
    let beta = splat(ep.beta);
    // The value of accumulator row `r`, half `h` (columns `16h..`), after the whole epilogue.
    let last_value = |r: usize, a: &[__m512; 2], h: usize, bv: __m512| {
        let mut v = if scale {
            _mm512_mul_ps(a[h], alpha)
        } else {
            a[h]
        };
        let cp = t.c.add(r * t.ldc + 16 * h);
        if !t.first {
            v = _mm512_add_ps(v, _mm512_loadu_ps(cp));
        } else if ep.beta != 0.0 {
            v = _mm512_fmadd_ps(beta, _mm512_loadu_ps(cp), v);
        }
        v = act_ps(ep.act, _mm512_add_ps(v, bv));
        if ep.residual.is_some() {
            v = _mm512_add_ps(v, residual(ep, t.row0 + r, t.col0 + 16 * h, 16, 0xffff));
        }
        v
    };
    if super::avx512_ep_fast::store_full_width(acc, t, ep) {
        return;
    }
    if let (Some(o), true, 32) = (&ep.out16, t.last, t.nr) {
        // Full-width last tile into a 16-bit output: whole 64-byte rows, no masks.
        let (b0, b1) = (bias(ep, t.col0, 0xffff), bias(ep, t.col0 + 16, 0xffff));
        for (r, a) in acc.iter().enumerate().take(t.mr) {
            let (lo, hi) = (last_value(r, a, 0, b0), last_value(r, a, 1, b1));
            store16_row(o, t.row0 + r, t.col0, lo, hi);
        }
        return;
    }
    for h in 0..2 {
        let j0 = 16 * h;
        if j0 >= t.nr {
            break;
        }
        let cnt = (t.nr - j0).min(16);
        let mask = mask_of(cnt);
        let bv = if t.last {
            bias(ep, t.col0 + j0, mask)
        } else {
            _mm512_setzero_ps()
        };
        for (r, a) in acc.iter().enumerate().take(t.mr) {
            let cp = t.c.add(r * t.ldc + j0);
            let mut v = if scale {
                _mm512_mul_ps(a[h], alpha)
            } else {
                a[h]
            };
            if !t.first {
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, cp));
            } else if ep.beta != 0.0 {
                v = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(mask, cp), v);
            }
            if t.last {
                v = act_ps(ep.act, _mm512_add_ps(v, bv));
                if ep.residual.is_some() {
                    v = _mm512_add_ps(v, residual(ep, t.row0 + r, t.col0 + j0, cnt, mask));
                }
                if let Some(o) = &ep.out16 {
                    store16(o, t.row0 + r, t.col0 + j0, mask, v);
                    continue;
                }
            }
            _mm512_mask_storeu_ps(cp, mask, v);
        }
    }
}
