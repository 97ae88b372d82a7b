//! AVX2 + FMA tile kernels of the CPU attention, for CPUs without AVX-512 (AMD Zen 1–3,
//! Intel before Ice Lake).
//!
//! Why a different shape from the AVX-512 kernel: with 16 ymm registers a 6-row score tile
//! holds only 16 keys (12 accumulators, 2 key vectors, 1 query broadcast), so the scores of a
//! key block are computed 16 keys at a time straight into the probability scratch `st.p`
//! (L1 resident: 6 × 64 floats), and the online softmax then runs over that scratch. `P · V`
//! runs in register blocks of 6 rows × 16 value columns (a last block of 8 when the head dim
//! is an odd multiple of 8, e.g. 40: value columns are padded to 8 lanes at this level).
//!
//! Invariants: only called when the CPU has AVX2 and FMA (`Kernels::level()` is `Avx2`, see the
//! caller); every pointer access stays inside the slices of the `Tile` and `State`, whose
//! lengths `super::tile` checks before calling in. Semantics are the portable kernel's:
//! invalid keys score `-inf`, `2^x` is exactly 0 below `MIN_EXP2`, rows whose scores are all
//! `-inf` keep `m = -inf` and add nothing.

use super::{State, Tile, KB, MIN_EXP2, MR};
use std::arch::x86_64::*;

const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// Every row's rescale factor takes one lane of one 8-lane `exp2` (see `scores`).
const _: () = assert!(MR <= 8);

/// `2^x` for `x <= 0`, exactly 0 below `MIN_EXP2`: `x = n + f` with `|f| <= 1/2`, the
/// AVX-512 kernel's degree-7 series for `2^f`, and `2^n` built in the exponent field (`n >=
/// -125` after the clamp, so it is a normal float). NaN stays NaN.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp2(x: __m256) -> __m256 {
    const C: [f32; 8] = super::EXP2_SERIES;
    let lo = _mm256_set1_ps(MIN_EXP2);
    // Not-less-than, unordered: NaN lanes are kept (max_ps returns its NaN 2nd operand).
    let keep = _mm256_cmp_ps::<_CMP_NLT_UQ>(x, lo);
    let x = _mm256_max_ps(lo, x);
    let n = _mm256_round_ps::<RNE>(x);
    let f = _mm256_sub_ps(x, n);
    let mut p = _mm256_set1_ps(C[7]);
    for &c in C[..7].iter().rev() {
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(c));
    }
    let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    _mm256_and_ps(keep, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)))
}

/// All-ones lanes of vector `v` (keys `8v..8v+8`) that are valid keys.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn valid_lanes(v: usize, valid: usize) -> __m256 {
    let n = valid.saturating_sub(8 * v).min(8) as i32;
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes))
}

/// Raw scores (plus mask bias, `-inf` past the valid keys) of keys `k0..k0 + 16` into `st.p`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn score_block(t: &Tile, p: *mut f32, k0: usize) {
    let (q, kt) = (t.q.as_ptr(), t.kt.as_ptr());
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    for d in 0..t.d {
        // SAFETY: kt holds d * KB floats and k0 + 16 <= KB.
        let b0 = _mm256_loadu_ps(kt.add(d * KB + k0));
        let b1 = _mm256_loadu_ps(kt.add(d * KB + k0 + 8));
        for (r, row) in acc.iter_mut().enumerate() {
            // SAFETY: q holds MR * t.d floats.
            let a = _mm256_broadcast_ss(&*q.add(r * t.d + d));
            row[0] = _mm256_fmadd_ps(a, b0, row[0]);
            row[1] = _mm256_fmadd_ps(a, b1, row[1]);
        }
    }
    let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
    // Only a block that reaches past the valid keys needs the `-inf` lanes.
    let partial = k0 + 16 > t.valid;
    for (r, row) in acc.iter().enumerate() {
        for (h, s) in row.iter().enumerate() {
            let at = r * KB + k0 + 8 * h;
            let mut s = *s;
            if let Some(bias) = t.bias {
                // SAFETY: bias holds MR * KB floats.
                s = _mm256_add_ps(s, _mm256_loadu_ps(bias.as_ptr().add(at)));
            }
            if partial {
                s = _mm256_blendv_ps(ninf, s, valid_lanes((k0 / 8) + h, t.valid));
            }
            // SAFETY: p holds MR * KB floats.
            _mm256_storeu_ps(p.add(at), s);
        }
    }
}

/// Horizontal maximum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn reduce_max(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
    _mm_cvtss_f32(m)
}

/// Scores and online softmax of one key block; returns each row's rescale factor.
///
/// The softmax runs phase by phase over all `MR` rows (maxima, then one vector `exp2` for every
/// row's rescale factor, then the probabilities) rather than row after row: each phase is a set
/// of independent chains, so the FMA pipes stay busy instead of waiting on one row's reductions
/// (measured: the row-by-row loop spent about a fifth of the tile's time in `exp2` latency).
#[target_feature(enable = "avx2,fma")]
unsafe fn scores(t: &Tile, st: &mut State) -> [f32; MR] {
    let p = st.p.as_mut_ptr();
    let blocks = t.valid.div_ceil(16);
    for b in 0..blocks {
        score_block(t, p, 16 * b);
    }
    let vecs = 2 * blocks;
    let mut mx = [_mm256_set1_ps(f32::NEG_INFINITY); MR];
    for v in 0..vecs {
        for (r, m) in mx.iter_mut().enumerate() {
            // SAFETY: p holds MR * KB floats and 8 * vecs <= KB.
            *m = _mm256_max_ps(*m, _mm256_loadu_ps(p.add(r * KB + 8 * v)));
        }
    }
    let mut m_use = [0f32; MR];
    let mut shift = [f32::NEG_INFINITY; 8];
    for (r, m) in mx.iter().enumerate() {
        let m_old = st.m[r];
        let m_new = m_old.max(reduce_max(*m));
        m_use[r] = if m_new == f32::NEG_INFINITY {
            0.0
        } else {
            m_new
        };
        shift[r] = m_old - m_use[r];
        st.m[r] = m_new;
    }
    let mut factor = [0f32; 8];
    _mm256_storeu_ps(factor.as_mut_ptr(), exp2(_mm256_loadu_ps(shift.as_ptr())));
    for (r, &mu) in m_use.iter().enumerate() {
        let row = p.add(r * KB);
        let mu = _mm256_set1_ps(mu);
        // Two partial sums (`vecs` is even): the adds do not wait on each other.
        let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for v in (0..vecs).step_by(2) {
            let e0 = exp2(_mm256_sub_ps(_mm256_loadu_ps(row.add(8 * v)), mu));
            let e1 = exp2(_mm256_sub_ps(_mm256_loadu_ps(row.add(8 * v + 8)), mu));
            s0 = _mm256_add_ps(s0, e0);
            s1 = _mm256_add_ps(s1, e1);
            _mm256_storeu_ps(row.add(8 * v), e0);
            _mm256_storeu_ps(row.add(8 * v + 8), e1);
        }
        // Row sums stay per lane (summed once at the end): lanes 0..8 take this block's sums,
        // lanes 8..16 (unused by this kernel) are rescaled like the rest.
        let l = st.l[r].as_mut_ptr();
        let fa = _mm256_set1_ps(factor[r]);
        let sum = _mm256_add_ps(s0, s1);
        _mm256_storeu_ps(l, _mm256_fmadd_ps(_mm256_loadu_ps(l), fa, sum));
        _mm256_storeu_ps(l.add(8), _mm256_mul_ps(_mm256_loadu_ps(l.add(8)), fa));
    }
    let mut alpha = [0f32; MR];
    alpha.copy_from_slice(&factor[..MR]);
    alpha
}

/// `o[:, c0..c0 + 8 NV] = o * alpha + p · v` over the block's valid keys (`NV` vectors of 8
/// value columns: 2 for whole 16-column chunks, 1 for the last 8 columns of a head dim such as
/// 40).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn update<const NV: usize>(t: &Tile, st: &mut State, alpha: &[f32; MR], c0: usize) {
    let (o, p, v) = (st.o.as_mut_ptr(), st.p.as_ptr(), t.v.as_ptr());
    let dvp = t.dvp;
    let mut acc = [[_mm256_setzero_ps(); NV]; MR];
    if !t.first {
        for (r, row) in acc.iter_mut().enumerate() {
            let a = _mm256_set1_ps(alpha[r]);
            for (h, av) in row.iter_mut().enumerate() {
                // SAFETY: o holds MR * dvp floats and c0 + 8 * NV <= dvp.
                *av = _mm256_mul_ps(a, _mm256_loadu_ps(o.add(r * dvp + c0 + 8 * h)));
            }
        }
    }
    let step = |j: usize, acc: &mut [[__m256; NV]; MR]| {
        let mut b = [_mm256_setzero_ps(); NV];
        for (h, bv) in b.iter_mut().enumerate() {
            // SAFETY: v holds KB * dvp floats and j < valid <= KB.
            *bv = _mm256_loadu_ps(v.add(j * dvp + c0 + 8 * h));
        }
        for (r, row) in acc.iter_mut().enumerate() {
            // SAFETY: p holds MR * KB floats.
            let a = _mm256_broadcast_ss(&*p.add(r * KB + j));
            for (av, bv) in row.iter_mut().zip(&b) {
                *av = _mm256_fmadd_ps(a, *bv, *av);
            }
        }
    };
    let mut j = 0;
    if NV == 1 {
        // Six accumulators would leave the FMA latency exposed (it takes eight chains to fill
        // both pipes): even and odd keys go to two sets, added at the end.
        let mut acc2 = [[_mm256_setzero_ps(); NV]; MR];
        while j + 2 <= t.valid {
            step(j, &mut acc);
            step(j + 1, &mut acc2);
            j += 2;
        }
        for (row, row2) in acc.iter_mut().zip(&acc2) {
            for (a, a2) in row.iter_mut().zip(row2) {
                *a = _mm256_add_ps(*a, *a2);
            }
        }
    }
    while j < t.valid {
        step(j, &mut acc);
        j += 1;
    }
    for (r, row) in acc.iter().enumerate() {
        for (h, av) in row.iter().enumerate() {
            _mm256_storeu_ps(o.add(r * dvp + c0 + 8 * h), *av);
        }
    }
}

/// One tile step (see `super::Tile`).
///
/// # Safety
/// The CPU must have AVX2 and FMA; `t` and `st` must satisfy `super::Tile::fits`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn tile(t: &Tile, st: &mut State) {
    let alpha = scores(t, st);
    // `fits` guarantees whole 8-lane vectors: 16-column chunks, then at most one of 8.
    let mut c0 = 0;
    while c0 + 16 <= t.dvp {
        update::<2>(t, st, &alpha, c0);
        c0 += 16;
    }
    if c0 < t.dvp {
        update::<1>(t, st, &alpha, c0);
    }
}
