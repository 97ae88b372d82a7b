//! AVX-512 tile kernels of the CPU attention: a 6 × (16·NV) score tile held in registers
//! (`vfmadd231ps` over the head dim with broadcast queries), the online softmax on those
//! registers (row max, `exp2` by polynomial + `vscalefps`, row sums), and the `P · V` update of
//! the running output in register blocks of 6 rows × up to 64 columns.
//!
//! The softmax step is [`softmax`], shared with the bf16 dot-product kernel
//! (`super::dp_kernel`), which keeps its scores in registers the same way.
//!
//! Invariants: only called when the CPU has AVX-512F/DQ and FMA (`Kernels::level()` is
//! `Avx512`, see the caller); every pointer access stays inside the slices of the `Tile` and
//! `State`, whose lengths `super::tile` checks before calling in.

use super::{State, Tile, KB, MIN_EXP2, MR};
use std::arch::x86_64::*;

const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

/// `2^x` for `x <= 0`, exactly 0 below `MIN_EXP2`: `x = n + f` with `|f| <= 1/2`, degree-7
/// Taylor series of `2^f` (relative error < 1e-8 before rounding), `vscalefps` for `2^n`. The
/// argument is clamped at `MIN_EXP2` (whose power of two is a normal float) and the lanes below
/// it are zeroed by mask: an underflowing `vscalefps` would take a slow microcode assist.
/// NaN stays NaN.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn exp2(x: __m512) -> __m512 {
    const C: [f32; 8] = super::EXP2_SERIES;
    let lo = _mm512_set1_ps(MIN_EXP2);
    // Not-less-than, unordered: NaN lanes are kept (and stay NaN through max_ps's 2nd operand).
    let keep = _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(x, lo);
    let x = _mm512_max_ps(lo, x);
    let n = _mm512_roundscale_ps::<RNE>(x);
    let f = _mm512_sub_ps(x, n);
    let mut p = _mm512_set1_ps(C[7]);
    for &c in C[..7].iter().rev() {
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c));
    }
    _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(p, n))
}

/// Mask of the lanes of vector `v` (columns `16v..16v+16`) that are valid keys.
#[inline]
pub(super) fn valid_lanes(v: usize, valid: usize) -> __mmask16 {
    let n = valid.saturating_sub(16 * v).min(16);
    ((1u32 << n) - 1) as __mmask16
}

/// The `MR × 16·NV` scores `Q · Kᵀ` of the block. Not inlined: returned by value, the
/// accumulators stay in registers through the loop (inlined into the softmax, whose row loop
/// indexes them, LLVM stored every accumulator to the stack on every step).
#[inline(never)]
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn qk<const NV: usize>(t: &Tile) -> [[__m512; NV]; MR] {
    let (q, kt) = (t.q.as_ptr(), t.kt.as_ptr());
    let step = |d: usize, acc: &mut [[__m512; NV]; MR]| {
        let mut b = [_mm512_setzero_ps(); NV];
        for (v, bv) in b.iter_mut().enumerate() {
            // SAFETY: kt holds d * KB floats and 16 * v + 16 <= KB.
            *bv = _mm512_loadu_ps(kt.add(d * KB + 16 * v));
        }
        for (r, row) in acc.iter_mut().enumerate() {
            // SAFETY: q holds MR * t.d floats.
            let a = _mm512_set1_ps(*q.add(r * t.d + d));
            for (av, bv) in row.iter_mut().zip(&b) {
                *av = _mm512_fmadd_ps(a, *bv, *av);
            }
        }
    };
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    let mut d = 0;
    if NV <= 2 {
        // Under 8 accumulators the FMA latency would bound the loop: two interleaved sets.
        let mut acc2 = [[_mm512_setzero_ps(); NV]; MR];
        while d + 2 <= t.d {
            step(d, &mut acc);
            step(d + 1, &mut acc2);
            d += 2;
        }
        for (row, row2) in acc.iter_mut().zip(&acc2) {
            for (a, a2) in row.iter_mut().zip(row2) {
                *a = _mm512_add_ps(*a, *a2);
            }
        }
    }
    while d < t.d {
        step(d, &mut acc);
        d += 1;
    }
    acc
}

/// Scores and online softmax for `NV` vectors (16·NV keys) of the block; see the portable
/// `scores` for the semantics.
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn scores<const NV: usize>(t: &Tile, st: &mut State) -> [f32; MR] {
    let mut acc = qk::<NV>(t);
    let p = st.p.as_mut_ptr();
    let store = |r: usize, row: &[__m512; NV]| {
        for (v, e) in row.iter().enumerate() {
            // SAFETY: p holds MR * KB floats and 16 * v + 16 <= KB.
            _mm512_storeu_ps(p.add(r * KB + 16 * v), *e);
        }
    };
    let sm = Rows {
        bias: t.bias,
        valid: t.valid,
        m: st.m,
        l: st.l,
    };
    softmax(&mut acc, None, sm, |x| exp2(x), store)
}

/// A block's softmax operands besides the scores (see [`softmax`]).
pub(super) struct Rows<'a> {
    /// `MR × KB` additive mask in log2 units, if any.
    pub(super) bias: Option<&'a [f32]>,
    /// Valid keys of the block.
    pub(super) valid: usize,
    /// Running row maxima.
    pub(super) m: &'a mut [f32; MR],
    /// Running per-lane row sums.
    pub(super) l: &'a mut [[f32; 16]; MR],
}

/// The online softmax of one key block on a register tile of scores, shared by this kernel and
/// the bf16 dot-product kernel (`super::dp_kernel`): each score times `qmul` (when given) plus
/// the mask `bias`, keys from `valid` on set to `-inf`; the rows' new maxima into `m`; each
/// row's probabilities `exp(s - m)` (`exp` is `2^x`, exactly 0 for a `-inf` argument) handed
/// to `store` with the row index; the per-lane running sums `l` rescaled and increased by them.
/// Returns each row's rescale factor `2^(m_old - m_new)` for the running output (all rows' in
/// one vector `exp2`). A row with every key masked so far keeps `m = -inf`, probabilities 0
/// and factor 0.
///
/// # Safety
/// AVX-512F/DQ and FMA; `bias`, when given, holds at least `MR * KB` floats and `NV <= KB / 16`.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn softmax<const NV: usize>(
    acc: &mut [[__m512; NV]; MR],
    qmul: Option<f32>,
    Rows { bias, valid, m, l }: Rows,
    exp: impl Fn(__m512) -> __m512,
    mut store: impl FnMut(usize, &[__m512; NV]),
) -> [f32; MR] {
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    // Row maxima first, so all rows' rescale factors take one vector exp2.
    let mut m_use = [0f32; 16];
    let mut shift = [f32::NEG_INFINITY; 16];
    for (r, row) in acc.iter_mut().enumerate() {
        let mut mx = ninf;
        for (v, s) in row.iter_mut().enumerate() {
            // SAFETY: bias holds MR * KB floats and 16 * v + 16 <= KB.
            let b = bias.map(|b| _mm512_loadu_ps(b.as_ptr().add(r * KB + 16 * v)));
            *s = match (qmul, b) {
                (None, None) => *s,
                (None, Some(b)) => _mm512_add_ps(*s, b),
                (Some(q), None) => _mm512_mul_ps(*s, _mm512_set1_ps(q)),
                (Some(q), Some(b)) => _mm512_fmadd_ps(*s, _mm512_set1_ps(q), b),
            };
            *s = _mm512_mask_blend_ps(valid_lanes(v, valid), ninf, *s);
            mx = _mm512_max_ps(mx, *s);
        }
        let m_old = m[r];
        let m_new = m_old.max(_mm512_reduce_max_ps(mx));
        m_use[r] = if m_new == f32::NEG_INFINITY {
            0.0
        } else {
            m_new
        };
        shift[r] = m_old - m_use[r];
        m[r] = m_new;
    }
    let mut alpha = [0f32; 16];
    _mm512_storeu_ps(alpha.as_mut_ptr(), exp2(_mm512_loadu_ps(shift.as_ptr())));
    for (r, row) in acc.iter().enumerate() {
        let mu = _mm512_set1_ps(m_use[r]);
        let mut sum = _mm512_setzero_ps();
        let mut e = [_mm512_setzero_ps(); NV];
        for (ev, s) in e.iter_mut().zip(row.iter()) {
            *ev = exp(_mm512_sub_ps(*s, mu));
            sum = _mm512_add_ps(sum, *ev);
        }
        store(r, &e);
        // Row sums stay per lane (summed once at the end).
        let lr = l[r].as_mut_ptr();
        _mm512_storeu_ps(
            lr,
            _mm512_fmadd_ps(_mm512_loadu_ps(lr), _mm512_set1_ps(alpha[r]), sum),
        );
    }
    let mut out = [0f32; MR];
    out.copy_from_slice(&alpha[..MR]);
    out
}

/// `o[:, c0..c0 + 16·NV (+ 8 with HALF)] = o * alpha + p · v` over the block's valid keys.
/// The 8-column half vector serves value widths that end in one (SD's head dim 40 is 2.5
/// vectors): a `ymm` FMA costs half a `zmm` one on CPUs whose 512-bit instructions run on
/// 256-bit pipes (AMD Zen 4), and no more than one elsewhere.
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn update<const NV: usize, const HALF: bool>(
    t: &Tile,
    st: &mut State,
    alpha: &[f32; MR],
    c0: usize,
) {
    let (o, p, v) = (st.o.as_mut_ptr(), st.p.as_ptr(), t.v.as_ptr());
    let dvp = t.dvp;
    let ch = c0 + 16 * NV;
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    let mut half = [_mm256_setzero_ps(); MR];
    if !t.first {
        for (r, (row, h)) in acc.iter_mut().zip(&mut half).enumerate() {
            let a = _mm512_set1_ps(alpha[r]);
            for (c, av) in row.iter_mut().enumerate() {
                // SAFETY: o holds MR * dvp floats and c0 + 16 * NV (+ 8 with HALF) <= dvp.
                *av = _mm512_mul_ps(a, _mm512_loadu_ps(o.add(r * dvp + c0 + 16 * c)));
            }
            if HALF {
                // SAFETY: as above.
                let x = _mm256_loadu_ps(o.add(r * dvp + ch));
                *h = _mm256_mul_ps(_mm512_castps512_ps256(a), x);
            }
        }
    }
    for j in 0..t.valid {
        let mut b = [_mm512_setzero_ps(); NV];
        for (c, bv) in b.iter_mut().enumerate() {
            // SAFETY: v holds KB * dvp floats and j < valid <= KB.
            *bv = _mm512_loadu_ps(v.add(j * dvp + c0 + 16 * c));
        }
        // SAFETY: as above (the half vector is only read with HALF).
        let bh = if HALF {
            _mm256_loadu_ps(v.add(j * dvp + ch))
        } else {
            _mm256_setzero_ps()
        };
        for (r, (row, h)) in acc.iter_mut().zip(&mut half).enumerate() {
            // SAFETY: p holds MR * KB floats.
            let pv = *p.add(r * KB + j);
            let a = _mm512_set1_ps(pv);
            for (av, bv) in row.iter_mut().zip(&b) {
                *av = _mm512_fmadd_ps(a, *bv, *av);
            }
            if HALF {
                *h = _mm256_fmadd_ps(_mm256_set1_ps(pv), bh, *h);
            }
        }
    }
    for (r, (row, h)) in acc.iter().zip(&half).enumerate() {
        for (c, av) in row.iter().enumerate() {
            _mm512_storeu_ps(o.add(r * dvp + c0 + 16 * c), *av);
        }
        if HALF {
            _mm256_storeu_ps(o.add(r * dvp + ch), *h);
        }
    }
}

/// One tile step (see `super::Tile`).
///
/// # Safety
/// The CPU must have AVX-512F/DQ and FMA; `t` and `st` must satisfy `super::Tile::fits`
/// (value columns `dvp` a multiple of 8).
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn tile(t: &Tile, st: &mut State) {
    let alpha = match t.valid.div_ceil(16) {
        0 | 1 => scores::<1>(t, st),
        2 => scores::<2>(t, st),
        3 => scores::<3>(t, st),
        _ => scores::<4>(t, st),
    };
    let vecs = t.dvp / 16;
    let mut c = 0;
    while c + 4 <= vecs {
        update::<4, false>(t, st, &alpha, 16 * c);
        c += 4;
    }
    let c0 = 16 * c;
    match (vecs - c, t.dvp % 16 == 8) {
        (0, true) => update::<0, true>(t, st, &alpha, c0),
        (1, false) => update::<1, false>(t, st, &alpha, c0),
        (1, true) => update::<1, true>(t, st, &alpha, c0),
        (2, false) => update::<2, false>(t, st, &alpha, c0),
        (2, true) => update::<2, true>(t, st, &alpha, c0),
        (3, false) => update::<3, false>(t, st, &alpha, c0),
        (3, true) => update::<3, true>(t, st, &alpha, c0),
        _ => {}
    }
}
