//! AMX tile kernels of the bf16 CPU attention (driven by [`super::amx`]): one tile step of
//! 32 query rows against one key block: `S = Q · Kᵀ` on `tdpbf16ps` tiles (f32 accumulators
//! stored with `tilestored`), the online softmax on the stored scores in f32 AVX-512 (one pass
//! per row against a lazily moved reference max, see [`softmax`]), `P`
//! rounded to bf16, `O += P · V` with the running output loaded into and stored from the
//! accumulator tiles (rescaled by AVX-512 only when a row's max moved).
//!
//! Invariants:
//! - [`step`] checks every slice length its kernels rely on; the kernels only run between
//!   [`begin`] and [`end`] on the same thread, with AMX granted, AVX-512F/DQ, FMA and
//!   AVX512-BF16 present (guaranteed by `super::amx::usable`, the only way to reach them).
//! - All tile data stays inside one `asm!` block; the eight tiles are 16 rows × 64 bytes.
//! - Layouts (u32 = a pair of bf16, low half first): Q `[32 rows][dp]` bf16 (`dp` = D rounded
//!   up to 32); K per block `[KB/16 key chunks][dp/32 steps][16 pairs][16 keys]`; V per block
//!   `[dvp/16 column chunks][KB/32 steps][16 key pairs][16 columns]`; scores `[32][KB]` f32;
//!   P `[32][KB]` bf16; O `[32][dvp]` f32.
//! - Keys past `valid` get probability exactly 0 (masked by lane), whatever their scores.

use std::arch::asm;
use std::arch::x86_64::*;

use super::avx512::valid_lanes;
use super::MIN_EXP2;

const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

/// `2^x` for `x <= 0` on the lanes of `keep` (the others 0), exactly 0 below `MIN_EXP2`:
/// `x = n + f` with `|f| <= 1/2`, degree-5 Taylor series of `2^f` (relative error < 3e-6, far
/// below the bf16 rounding of `P`), `vscalefps` for `2^n` (the argument clamped at `MIN_EXP2`
/// so it never underflows into a microcode assist). NaN stays NaN.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn exp2(x: __m512, keep: __mmask16) -> __m512 {
    const C: [f32; 6] = [
        1.0,
        std::f32::consts::LN_2,
        0.240_226_5,
        0.055_504_11,
        0.009_618_129,
        0.001_333_355_8,
    ];
    let lo = _mm512_set1_ps(MIN_EXP2);
    let keep = _mm512_mask_cmp_ps_mask::<_CMP_NLT_UQ>(keep, x, lo);
    let x = _mm512_max_ps(lo, x);
    let n = _mm512_roundscale_ps::<RNE>(x);
    let f = _mm512_sub_ps(x, n);
    let mut p = _mm512_set1_ps(C[5]);
    for &c in C[..5].iter().rev() {
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c));
    }
    _mm512_maskz_scalef_ps(keep, p, n)
}

/// Query rows per tile (two A tiles of 16 rows).
pub(super) const MR: usize = 32;
/// Keys per block (a multiple of 32: whole pair steps of the `P · V` product).
pub(super) const KB: usize = 128;
/// u32 per B tile (16 rows × 16 pairs).
pub(super) const TILE: usize = 256;

/// `C (+)= A · B` on 32 rows × 32 columns: A two 16-row tiles at `a` (row stride `lda` bytes,
/// 64 bytes per step), B the 1 KiB tiles of two 16-column chunks from `b0` / `b1` (one per
/// step), C f32 at `c` (row stride `ldc` bytes), accumulated onto when `load != 0`.
///
/// # Safety
/// Tile configuration loaded; every operand holds `steps` steps and C 32 × 32 floats.
#[inline(always)]
unsafe fn mm2(
    a: *const u8,
    lda: usize,
    b: (*const u32, *const u32),
    n: usize,
    c: *mut f32,
    ldc: usize,
    load: usize,
) {
    asm!(
        "test {ld}, {ld}",
        "jz 5f",
        "tileloadd tmm0, [{c} + {ldc}*1]",
        "tileloadd tmm1, [{c} + {ldc}*1 + 64]",
        "tileloadd tmm2, [{c2} + {ldc}*1]",
        "tileloadd tmm3, [{c2} + {ldc}*1 + 64]",
        "jmp 2f",
        "5:",
        "tilezero tmm0",
        "tilezero tmm1",
        "tilezero tmm2",
        "tilezero tmm3",
        "2:",
        "tileloadd tmm4, [{a} + {lda}*1]",
        "tileloadd tmm6, [{b0} + {s64}*1]",
        "tileloadd tmm5, [{a2} + {lda}*1]",
        "tdpbf16ps tmm0, tmm4, tmm6",
        "tileloadd tmm7, [{b1} + {s64}*1]",
        "tdpbf16ps tmm2, tmm5, tmm6",
        "tdpbf16ps tmm1, tmm4, tmm7",
        "tdpbf16ps tmm3, tmm5, tmm7",
        "add {a}, 64",
        "add {a2}, 64",
        "add {b0}, 1024",
        "add {b1}, 1024",
        "dec {n}",
        "jnz 2b",
        "tilestored [{c} + {ldc}*1], tmm0",
        "tilestored [{c} + {ldc}*1 + 64], tmm1",
        "tilestored [{c2} + {ldc}*1], tmm2",
        "tilestored [{c2} + {ldc}*1 + 64], tmm3",
        ld = in(reg) load,
        a = inout(reg) a => _,
        a2 = inout(reg) a.wrapping_add(16 * lda) => _,
        lda = in(reg) lda,
        b0 = inout(reg) b.0 => _,
        b1 = inout(reg) b.1 => _,
        n = inout(reg) n => _,
        c = in(reg) c,
        c2 = in(reg) c.wrapping_add(4 * ldc),
        ldc = in(reg) ldc,
        s64 = in(reg) 64usize,
        out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
        out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _,
        options(nostack),
    );
}

/// [`mm2`] on one 16-column chunk (`b`).
///
/// # Safety
/// As [`mm2`], C holding 32 × 16 floats.
#[inline(always)]
unsafe fn mm1(
    a: *const u8,
    lda: usize,
    b: *const u32,
    n: usize,
    c: *mut f32,
    ldc: usize,
    load: usize,
) {
    asm!(
        "test {ld}, {ld}",
        "jz 5f",
        "tileloadd tmm0, [{c} + {ldc}*1]",
        "tileloadd tmm2, [{c2} + {ldc}*1]",
        "jmp 2f",
        "5:",
        "tilezero tmm0",
        "tilezero tmm2",
        "2:",
        "tileloadd tmm4, [{a} + {lda}*1]",
        "tileloadd tmm6, [{b} + {s64}*1]",
        "tileloadd tmm5, [{a2} + {lda}*1]",
        "tdpbf16ps tmm0, tmm4, tmm6",
        "tdpbf16ps tmm2, tmm5, tmm6",
        "add {a}, 64",
        "add {a2}, 64",
        "add {b}, 1024",
        "dec {n}",
        "jnz 2b",
        "tilestored [{c} + {ldc}*1], tmm0",
        "tilestored [{c2} + {ldc}*1], tmm2",
        ld = in(reg) load,
        a = inout(reg) a => _,
        a2 = inout(reg) a.wrapping_add(16 * lda) => _,
        lda = in(reg) lda,
        b = inout(reg) b => _,
        n = inout(reg) n => _,
        c = in(reg) c,
        c2 = in(reg) c.wrapping_add(4 * ldc),
        ldc = in(reg) ldc,
        s64 = in(reg) 64usize,
        out("tmm0") _, out("tmm2") _, out("tmm4") _, out("tmm5") _, out("tmm6") _,
        options(nostack),
    );
}

/// One key block's operands for a tile.
pub(super) struct Block<'a> {
    /// Packed K (`KB · dp / 2` u32) and V (`KB · dvp / 2` u32).
    pub(super) k: &'a [u32],
    pub(super) v: &'a [u32],
    /// `MR × KB` additive mask in log2 units, if any.
    pub(super) bias: Option<&'a [f32]>,
    /// Valid keys (`1..=KB`).
    pub(super) valid: usize,
    pub(super) first: bool,
}

/// A tile's running state and scratch.
pub(super) struct TileState<'a> {
    /// `MR × dp` bf16 queries.
    pub(super) q: &'a [u16],
    /// `MR × dvp` unnormalised output.
    pub(super) o: &'a mut [f32],
    pub(super) m: &'a mut [f32; MR],
    pub(super) l: &'a mut [[f32; 16]; MR],
    /// `MR × KB` scores and bf16 probabilities.
    pub(super) s: &'a mut [f32],
    pub(super) p: &'a mut [u16],
}

/// Head geometry: padded head dims and `scale · log2 e`.
#[derive(Clone, Copy)]
pub(super) struct Geo {
    pub(super) dp: usize,
    pub(super) dvp: usize,
    pub(super) qmul: f32,
}

/// The three phases of a tile step. A task runs each phase over all its tiles before the next,
/// so the stores of one phase (scores, probabilities, rescaled output) have drained by the time
/// the next phase loads them into tiles or vectors (they cannot be forwarded).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// `S = Q · Kᵀ` into `s`.
    Scores,
    /// The online softmax: `m`, `l`, `P` into `p`, `O` rescaled.
    Probs,
    /// `O += P · V`.
    Values,
}

/// One phase of a tile step, after checking every length the kernels rely on.
pub(super) fn step(g: Geo, b: &Block, t: &mut TileState, phase: Phase) {
    let ok = g.dp.is_multiple_of(32)
        && g.dp > 0
        && g.dvp.is_multiple_of(16)
        && g.dvp > 0
        && (1..=KB).contains(&b.valid)
        && b.k.len() >= KB * g.dp / 2
        && b.v.len() >= KB * g.dvp / 2
        && b.bias.is_none_or(|x| x.len() >= MR * KB)
        && t.q.len() >= MR * g.dp
        && t.o.len() >= MR * g.dvp
        && t.s.len() >= MR * KB
        && t.p.len() >= MR * KB;
    if ok {
        // SAFETY: `attention` runs tasks only when `usable` (AMX granted, AVX-512F/BF16), the
        // task loaded the tile configuration, and the lengths were checked above.
        unsafe {
            match phase {
                Phase::Scores => scores(g, b, t),
                Phase::Probs => probs(g, b, t),
                Phase::Values => values(g, b, t),
            }
        }
    }
}

/// # Safety
/// As in [`step`].
#[target_feature(enable = "avx512f,avx512dq,fma,avx512bf16")]
unsafe fn scores(g: Geo, b: &Block, t: &mut TileState) {
    let (sd, kchunks) = (g.dp / 32, b.valid.div_ceil(32) * 2);
    for j in (0..kchunks).step_by(2) {
        let kb = b.k.as_ptr().add(j * sd * TILE);
        let c = t.s.as_mut_ptr().add(16 * j);
        mm2(
            t.q.as_ptr().cast(),
            2 * g.dp,
            (kb, kb.add(sd * TILE)),
            sd,
            c,
            4 * KB,
            0,
        );
    }
}

/// # Safety
/// As in [`step`].
#[target_feature(enable = "avx512f,avx512dq,fma,avx512bf16")]
unsafe fn probs(g: Geo, b: &Block, t: &mut TileState) {
    let alpha = softmax(g.qmul, b, t);
    if !b.first && alpha.iter().any(|&a| a != 1.0) {
        for (r, &a) in alpha.iter().enumerate() {
            if a != 1.0 {
                let av = _mm512_set1_ps(a);
                let o = t.o.as_mut_ptr().add(r * g.dvp);
                for c in 0..g.dvp / 16 {
                    let x = o.add(16 * c);
                    _mm512_storeu_ps(x, _mm512_mul_ps(av, _mm512_loadu_ps(x)));
                }
            }
        }
    }
}

/// # Safety
/// As in [`step`].
#[target_feature(enable = "avx512f,avx512dq,fma,avx512bf16")]
unsafe fn values(g: Geo, b: &Block, t: &mut TileState) {
    // Key steps that hold valid keys (P is zero beyond them, V's padding rows are zero).
    let (sk, all) = (b.valid.div_ceil(32), KB / 32);
    let (vcs, load) = (g.dvp / 16, usize::from(!b.first));
    let (p, o) = (t.p.as_ptr().cast::<u8>(), t.o.as_mut_ptr());
    let mut j = 0;
    while j + 2 <= vcs {
        let vb = b.v.as_ptr().add(j * all * TILE);
        mm2(
            p,
            2 * KB,
            (vb, vb.add(all * TILE)),
            sk,
            o.add(16 * j),
            4 * g.dvp,
            load,
        );
        j += 2;
    }
    if j < vcs {
        let vb = b.v.as_ptr().add(j * all * TILE);
        mm1(p, 2 * KB, vb, sk, o.add(16 * j), 4 * g.dvp, load);
    }
}

/// How far (in log2 units) a later block's scores may rise above a row's reference max before
/// the row is redone with a new one: probabilities stay below `2^LAZY_RISE`, which f32 sums
/// and bf16 `P` hold without loss, and most blocks need no max pass and no rescale.
const LAZY_RISE: f32 = 8.0;

/// `2^x` for `P` on the lanes of `keep` (the others 0): `x = n + f` with `n = floor(x)`, `f` in
/// `[0, 1)` from one `vreduceps`, a degree-3 minimax polynomial for `2^f` (relative error <
/// 7.5e-5, thirty times below the bf16 rounding of `P`), and `vscalefps`, which scales by
/// `2^floor(x)` itself. With `MASKED` the lanes below `MIN_EXP2` (a `-inf` mask) are exactly 0;
/// without it the clamp alone keeps the result normal (unmasked scores minus their max are
/// finite). NaN stays NaN.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(super) unsafe fn exp2_p<const MASKED: bool>(x: __m512, keep: __mmask16) -> __m512 {
    const C: [f32; 4] = [0.999_925_2, 0.695_833_74, 0.226_067_22, 0.078_024_19];
    // `vreduceps` imm8: no fraction bits kept, round down, precision exception suppressed.
    const FRACTION_BELOW: i32 = 0x09;
    let lo = _mm512_set1_ps(MIN_EXP2);
    let keep = if MASKED {
        _mm512_mask_cmp_ps_mask::<_CMP_NLT_UQ>(keep, x, lo)
    } else {
        keep
    };
    let x = _mm512_max_ps(lo, x);
    let f = _mm512_reduce_ps::<FRACTION_BELOW>(x);
    let mut p = _mm512_set1_ps(C[3]);
    for &c in C[..3].iter().rev() {
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c));
    }
    _mm512_maskz_scalef_ps(keep, p, x)
}

/// The online softmax on the stored scores: updates `m` and `l`, writes bf16 `P`, returns each
/// row's rescale factor for the running output.
///
/// `m[r]` is the reference max the row's probabilities are taken against, not always the true
/// max: a row with one keeps it while the block's scores stay within [`LAZY_RISE`] of it (one
/// pass, the block max tracked on the side); the first block of a row, or one that rises
/// further, is redone against its exact max and the row rescaled.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma,avx512bf16")]
unsafe fn softmax(qmul: f32, b: &Block, t: &mut TileState) -> [f32; MR] {
    match b.bias {
        Some(_) => softmax_rows::<true>(qmul, b, t),
        None => softmax_rows::<false>(qmul, b, t),
    }
}

/// [`softmax`] with (`MASKED`) or without an additive mask.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma,avx512bf16")]
unsafe fn softmax_rows<const MASKED: bool>(qmul: f32, b: &Block, t: &mut TileState) -> [f32; MR] {
    let (s, p) = (t.s.as_ptr(), t.p.as_mut_ptr());
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let qv = _mm512_set1_ps(qmul);
    let bias = b.bias.map_or(std::ptr::null(), |x| x.as_ptr());
    // Scaled score vector `v` of row `r`, plus `add`.
    let score = |r: usize, v: usize, add: __m512| {
        let x = _mm512_loadu_ps(s.add(r * KB + 16 * v));
        if MASKED {
            let bv = _mm512_loadu_ps(bias.add(r * KB + 16 * v));
            _mm512_add_ps(_mm512_fmadd_ps(x, qv, bv), add)
        } else {
            _mm512_fmadd_ps(x, qv, add)
        }
    };
    // Probabilities of row `r` against `m` into `p`, their per-lane sum, and the max of the
    // exponents over the valid lanes (up to the last valid 32-key step: `P` beyond is unread).
    let row = |r: usize, m: f32| {
        let mu = _mm512_set1_ps(-m);
        let (mut sum, mut mx) = (_mm512_setzero_ps(), ninf);
        for v in (0..b.valid.div_ceil(32) * 2).step_by(2) {
            let (k0, k1) = (valid_lanes(v, b.valid), valid_lanes(v + 1, b.valid));
            let (x0, x1) = (score(r, v, mu), score(r, v + 1, mu));
            mx = _mm512_mask_max_ps(mx, k0, mx, x0);
            mx = _mm512_mask_max_ps(mx, k1, mx, x1);
            let (e0, e1) = (exp2_p::<MASKED>(x0, k0), exp2_p::<MASKED>(x1, k1));
            sum = _mm512_add_ps(sum, _mm512_add_ps(e0, e1));
            let pk: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(e1, e0));
            _mm512_storeu_si512(p.add(r * KB + 16 * v).cast(), pk);
        }
        (sum, _mm512_reduce_max_ps(mx))
    };
    let mut shift = [0f32; MR];
    let mut sums = [_mm512_setzero_ps(); MR];
    for r in 0..MR {
        let m_old = t.m[r];
        if m_old != f32::NEG_INFINITY {
            let (sum, rise) = row(r, m_old);
            // NaN scores keep the reference (the output is NaN anyway).
            if rise.is_nan() || rise <= LAZY_RISE {
                sums[r] = sum;
                continue;
            }
        }
        let mut mx = ninf;
        for v in 0..b.valid.div_ceil(16) {
            let x = score(r, v, _mm512_setzero_ps());
            mx = _mm512_mask_max_ps(mx, valid_lanes(v, b.valid), mx, x);
        }
        let m_new = m_old.max(_mm512_reduce_max_ps(mx));
        // A row masked out so far keeps -inf (its probabilities are 0 against any reference).
        let m_use = if m_new == f32::NEG_INFINITY {
            0.0
        } else {
            m_new
        };
        shift[r] = m_old - m_use;
        t.m[r] = m_new;
        sums[r] = row(r, m_use).0;
    }
    let mut alpha = [0f32; MR];
    for h in 0..MR / 16 {
        let a = exp2(_mm512_loadu_ps(shift.as_ptr().add(16 * h)), !0);
        _mm512_storeu_ps(alpha.as_mut_ptr().add(16 * h), a);
    }
    for (r, sum) in sums.iter().enumerate() {
        let l = t.l[r].as_mut_ptr();
        let old = _mm512_loadu_ps(l);
        _mm512_storeu_ps(l, _mm512_fmadd_ps(old, _mm512_set1_ps(alpha[r]), *sum));
    }
    alpha
}

/// Loads the tile configuration on this thread: the GEMM's (eight tiles of 16 rows × 64 bytes
/// serve A: 16 rows × 16 pairs, B: 16 pairs × 16 columns, C: 16 × 16 f32 here too).
///
/// # Safety
/// AMX must be granted to this process (`super::amx::usable`).
pub(super) unsafe fn begin() {
    crate::cpu::gemm::amx_load_config();
}

/// Releases this thread's tile state.
///
/// # Safety
/// As [`begin`].
pub(super) unsafe fn end() {
    crate::cpu::gemm::amx_release();
}
