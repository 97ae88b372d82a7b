//! The query-lane AVX-512 kernel of the f32 CPU attention: 32 queries of a head side by side
//! in the 16 lanes of two vectors, keys and value columns broadcast.
//!
//! Why (beside the row kernel `super::avx512`, which keeps 6 query rows in registers and
//! broadcasts the queries): with queries in lanes, the softmax's maxima and sums are per-lane
//! vector operations with no horizontal reduction, the rescale factors are vectors, and `P · V`
//! runs on whole vectors whatever the value width (SD's head dim 40 is 2.5 vectors of a row,
//! but 40 broadcast columns here). Measured on a Sapphire Rapids with AMX:
//! SD 1.5's f32 self-attention 2×8×4096²×40 at ~55% of the FMA peak on the
//! row kernel and ~70% here. The row kernel keeps short query sequences (below [`MIN_QUERIES`]
//! a 32-query tile is mostly padding).
//!
//! Per tile of [`QL`] queries and block of `KB` keys: `Sᵀ = K · Qᵀ` (8 keys × 2 query
//! vectors of accumulators over the head dim, reading the same transposed K blocks as the row
//! kernel), plus the mask, into a `KB × QL` scratch with the running per-lane maxima; the
//! online softmax on the scratch (`exp2`, per-lane sums); then `Oᵀ = Oᵀ·α + V · P` in blocks
//! of [`CW`] value columns × 2 query vectors. The output is `Oᵀ / l` transposed back.
//!
//! Invariants: as `super`'s (no `Lq × Lk` buffer, one task per output row, results independent
//! of the thread count, rows whose keys are all masked give zeros); only keys below a block's
//! `valid` enter the maxima, sums and `P · V` (padding keys are zero in the packs and never
//! read past the block); every pointer access is inside slices whose lengths [`LaneTile::fits`]
//! checked.

use super::avx512::exp2;
use super::{Ctx, OutRows, KB};
use crate::cpu::alloc::resize;
use crate::cpu::attention::operands::{
    fill_bias, head_base, inverse_weight_sum, load_row, mat_strides,
};
use crate::cpu::elem::FloatElem;
use crate::Result;
use std::arch::x86_64::*;

/// The op named when the host will not allocate a task's scratch.
const OP: &str = "scaled_dot_product_attention";

/// Queries per tile (two 16-lane vectors).
pub(super) const QL: usize = 32;
/// Value columns per `P · V` register block (20 accumulators).
const CW: usize = 10;
/// Query rows from which the f32 attention takes this kernel.
pub(super) const MIN_QUERIES: usize = 32;
/// Query tiles per task at most (256 queries: Qᵀ, Oᵀ and one K/V block stay near L2).
pub(super) const MAX_TILES_PER_TASK: usize = 8;

/// One tile step's read-only operands.
struct LaneTile<'a> {
    /// `d × QL` queries, pre-scaled by `scale·log2 e`, transposed.
    qt: &'a [f32],
    /// `d × KB` keys of the block (transposed).
    kt: &'a [f32],
    /// `KB × dvp` values of the block.
    v: &'a [f32],
    /// `KB × QL` additive mask in log2 units, if any.
    bias: Option<&'a [f32]>,
    d: usize,
    dv: usize,
    dvp: usize,
    /// Valid keys in this block (`1..=KB`).
    valid: usize,
    /// First key block: the running output is overwritten.
    first: bool,
}

/// The running state of one tile.
struct LaneState<'a> {
    /// Running per-query maxima (log2 units).
    m: &'a mut [f32; QL],
    /// Running per-query sums.
    l: &'a mut [f32; QL],
    /// `dv × QL` unnormalised output, transposed.
    o: &'a mut [f32],
    /// `KB × QL` scores, then probabilities.
    s: &'a mut [f32],
}

impl LaneTile<'_> {
    fn fits(&self, st: &LaneState) -> bool {
        self.qt.len() >= self.d * QL
            && self.kt.len() >= self.d * KB
            && self.v.len() >= KB * self.dvp
            && self.dv <= self.dvp
            && self.bias.is_none_or(|b| b.len() >= KB * QL)
            && (1..=KB).contains(&self.valid)
            && st.o.len() >= self.dv * QL
            && st.s.len() >= KB * QL
    }
}

/// `Sᵀ` of keys `kc..kc + 8` (all inside the block) for the tile's 32 queries.
#[inline(never)]
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn scores8(t: &LaneTile, kc: usize) -> [[__m512; 2]; 8] {
    let (qt, kt) = (t.qt.as_ptr(), t.kt.as_ptr().add(kc));
    let mut acc = [[_mm512_setzero_ps(); 2]; 8];
    for d in 0..t.d {
        // SAFETY (loads): qt holds d × QL floats, kt d × KB with kc + 8 <= KB.
        let q0 = _mm512_loadu_ps(qt.add(d * QL));
        let q1 = _mm512_loadu_ps(qt.add(d * QL + 16));
        for (k, row) in acc.iter_mut().enumerate() {
            let b = _mm512_set1_ps(*kt.add(d * KB + k));
            row[0] = _mm512_fmadd_ps(b, q0, row[0]);
            row[1] = _mm512_fmadd_ps(b, q1, row[1]);
        }
    }
    acc
}

/// `Oᵀ[c0..c0 + W] = Oᵀ·α + V[.., c0..c0 + W]ᵀ · P` over the block's valid keys.
#[inline(never)]
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn pv<const W: usize>(t: &LaneTile, st: &mut LaneState, alpha: [__m512; 2], c0: usize) {
    let (o, s, v) = (st.o.as_mut_ptr(), st.s.as_ptr(), t.v.as_ptr().add(c0));
    let mut acc = [[_mm512_setzero_ps(); 2]; W];
    if !t.first {
        for (c, row) in acc.iter_mut().enumerate() {
            // SAFETY: o holds dv × QL floats and c0 + W <= dv.
            let at = o.add((c0 + c) * QL);
            row[0] = _mm512_mul_ps(_mm512_loadu_ps(at), alpha[0]);
            row[1] = _mm512_mul_ps(_mm512_loadu_ps(at.add(16)), alpha[1]);
        }
    }
    for k in 0..t.valid {
        // SAFETY: s holds KB × QL floats, v KB × dvp with c0 + W <= dv <= dvp, k < KB.
        let p0 = _mm512_loadu_ps(s.add(k * QL));
        let p1 = _mm512_loadu_ps(s.add(k * QL + 16));
        for (c, row) in acc.iter_mut().enumerate() {
            let b = _mm512_set1_ps(*v.add(k * t.dvp + c));
            row[0] = _mm512_fmadd_ps(b, p0, row[0]);
            row[1] = _mm512_fmadd_ps(b, p1, row[1]);
        }
    }
    for (c, row) in acc.iter().enumerate() {
        // SAFETY: as above.
        let at = o.add((c0 + c) * QL);
        _mm512_storeu_ps(at, row[0]);
        _mm512_storeu_ps(at.add(16), row[1]);
    }
}

/// One tile step.
///
/// # Safety
/// AVX-512F/DQ and FMA; `t.fits(st)`.
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn step(t: &LaneTile, st: &mut LaneState) {
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let s = st.s.as_mut_ptr();
    let mut mx = [ninf; 2];
    let mut kc = 0;
    while kc < t.valid {
        let acc = scores8(t, kc);
        for (k, row) in acc.iter().enumerate().take(t.valid - kc) {
            for (j, &x) in row.iter().enumerate() {
                let at = (kc + k) * QL + 16 * j;
                let x = match t.bias {
                    // SAFETY: bias holds KB × QL floats.
                    Some(b) => _mm512_add_ps(x, _mm512_loadu_ps(b.as_ptr().add(at))),
                    None => x,
                };
                // SAFETY: s holds KB × QL floats.
                _mm512_storeu_ps(s.add(at), x);
                mx[j] = _mm512_max_ps(mx[j], x);
            }
        }
        kc += 8;
    }
    let (m, l) = (st.m.as_mut_ptr(), st.l.as_mut_ptr());
    let mut alpha = [_mm512_setzero_ps(); 2];
    let mut m_use = [_mm512_setzero_ps(); 2];
    for j in 0..2 {
        let m_old = _mm512_loadu_ps(m.add(16 * j));
        let m_new = _mm512_max_ps(m_old, mx[j]);
        _mm512_storeu_ps(m.add(16 * j), m_new);
        // Lanes with every key masked so far keep m = -inf: shift by 0 (probabilities 0).
        let none = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(m_new, ninf);
        m_use[j] = _mm512_mask_blend_ps(none, m_new, _mm512_setzero_ps());
        alpha[j] = exp2(_mm512_sub_ps(m_old, m_use[j]));
    }
    let mut sum = [_mm512_setzero_ps(); 2];
    for k in 0..t.valid {
        for j in 0..2 {
            let at = s.add(k * QL + 16 * j);
            let p = exp2(_mm512_sub_ps(_mm512_loadu_ps(at), m_use[j]));
            _mm512_storeu_ps(at, p);
            sum[j] = _mm512_add_ps(sum[j], p);
        }
    }
    for j in 0..2 {
        let lj = l.add(16 * j);
        _mm512_storeu_ps(lj, _mm512_fmadd_ps(_mm512_loadu_ps(lj), alpha[j], sum[j]));
    }
    let mut c0 = 0;
    while c0 + CW <= t.dv {
        pv::<CW>(t, st, alpha, c0);
        c0 += CW;
    }
    match t.dv - c0 {
        1 => pv::<1>(t, st, alpha, c0),
        2 => pv::<2>(t, st, alpha, c0),
        3 => pv::<3>(t, st, alpha, c0),
        4 => pv::<4>(t, st, alpha, c0),
        5 => pv::<5>(t, st, alpha, c0),
        6 => pv::<6>(t, st, alpha, c0),
        7 => pv::<7>(t, st, alpha, c0),
        8 => pv::<8>(t, st, alpha, c0),
        9 => pv::<9>(t, st, alpha, c0),
        _ => {}
    }
}

/// Per-thread scratch of the tasks (every element a task reads it has written first).
#[derive(Default)]
struct Scratch {
    qt: Vec<f32>,
    o: Vec<f32>,
    m: Vec<[f32; QL]>,
    l: Vec<[f32; QL]>,
    s: Vec<f32>,
    bias_rows: Vec<f32>,
    bias: Vec<f32>,
    row: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// Computes query rows `q0..q0 + out.rows()` of head `h` into `out` (the caller checked
/// that the kernels' level is AVX-512).
pub(super) fn task<T: FloatElem>(
    c: &Ctx<T>,
    h: usize,
    q0: usize,
    out: &mut OutRows<T>,
) -> Result<()> {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => task_in(c, (h, q0), out, &mut s),
        Err(_) => task_in(c, (h, q0), out, &mut Scratch::default()),
    })
}

fn task_in<T: FloatElem>(
    c: &Ctx<T>,
    (h, q0): (usize, usize),
    out: &mut OutRows<T>,
    sc: &mut Scratch,
) -> Result<()> {
    // A zero head dim is packed as one zero column (scores 0, uniform weights).
    let (d, dk, dv, dvp, lk) = (c.s.d, c.s.d.max(1), c.s.dv, c.dvp, c.s.lk);
    let rows = out.rows();
    let tiles = rows.div_ceil(QL);
    sc.qt.clear();
    resize(OP, &mut sc.qt, tiles * dk * QL, 0.0)?;
    resize(OP, &mut sc.o, tiles * dv * QL, 0.0)?;
    resize(OP, &mut sc.s, KB * QL, 0.0)?;
    resize(OP, &mut sc.bias_rows, QL * KB, 0.0)?;
    resize(OP, &mut sc.bias, KB * QL, 0.0)?;
    resize(OP, &mut sc.row, dk.max(dv), 0.0)?;
    sc.m.clear();
    resize(OP, &mut sc.m, tiles, [f32::NEG_INFINITY; QL])?;
    sc.l.clear();
    resize(OP, &mut sc.l, tiles, [0.0; QL])?;
    let qb = head_base(c.q.layout, h);
    let (qrs, _) = mat_strides(c.q.layout);
    for r in 0..rows {
        let row = &mut sc.row[..d];
        load_row(c.k, &c.q, (qb + (q0 + r) * qrs, d), c.qmul, row);
        let (t, i) = (r / QL, r % QL);
        let qt = &mut sc.qt[t * dk * QL..][..dk * QL];
        for (x, dst) in row.iter().zip(qt.chunks_exact_mut(QL)) {
            dst[i] = *x;
        }
    }
    let hk = h - c.kv.h0;
    let kt_all = &c.kv.kt[hk * c.kv.kt_head..][..c.kv.kt_head];
    let v_all = &c.kv.v[hk * c.kv.v_head..][..c.kv.v_head];
    for (b, (kt, v)) in kt_all
        .chunks(dk * KB)
        .zip(v_all.chunks(KB * dvp))
        .enumerate()
    {
        let k0 = b * KB;
        let valid = (lk - k0).min(KB);
        for t in 0..tiles {
            if let Some(mask) = c.mask {
                let live = (rows - t * QL).min(QL);
                fill_bias(
                    mask,
                    h,
                    (q0 + t * QL, live),
                    (k0, valid),
                    KB,
                    &mut sc.bias_rows,
                );
                for (r, br) in sc.bias_rows.chunks_exact(KB).enumerate() {
                    for (k, x) in br.iter().enumerate() {
                        sc.bias[k * QL + r] = *x;
                    }
                }
            }
            let tl = LaneTile {
                qt: &sc.qt[t * dk * QL..][..dk * QL],
                kt,
                v,
                bias: c.mask.is_some().then_some(&sc.bias[..]),
                d: dk,
                dv,
                dvp,
                valid,
                first: b == 0,
            };
            let mut st = LaneState {
                m: &mut sc.m[t],
                l: &mut sc.l[t],
                o: &mut sc.o[t * dv * QL..][..dv * QL],
                s: &mut sc.s,
            };
            if tl.fits(&st) {
                // SAFETY: the caller runs this task only at the AVX-512 level (AVX-512F/DQ
                // and FMA present); `fits` checked every slice the kernels read or write.
                unsafe { step(&tl, &mut st) };
            }
        }
    }
    for r in 0..rows {
        let orow = out.row(r);
        let (t, i) = (r / QL, r % QL);
        let (mi, li) = (sc.m[t][i], sc.l[t][i]);
        let inv = inverse_weight_sum(mi, li);
        let o = &sc.o[t * dv * QL..][..dv * QL];
        let acc = &mut sc.row[..dv];
        for (x, col) in acc.iter_mut().zip(o.chunks_exact(QL)) {
            *x = col[i] * inv;
        }
        T::store(c.k, acc, orow);
    }
    Ok(())
}
