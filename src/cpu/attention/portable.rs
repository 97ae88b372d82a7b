//! Portable tile kernels of the CPU attention (the `XPU_CPU_SIMD=fallback` path and the
//! reference the AVX-512 kernels mirror): plain loops over the packed f32 operands.

use super::{State, Tile, KB, MIN_EXP2, MR};

/// `2^x`, exactly 0 below `MIN_EXP2` (as the AVX-512 kernel).
fn exp2(x: f32) -> f32 {
    if x < MIN_EXP2 {
        0.0
    } else {
        x.exp2()
    }
}

/// Scores of one tile against one key block, the online-softmax update of `m`/`l`, the
/// probabilities into `st.p`; returns each row's rescale factor for the running output.
fn scores(t: &Tile, st: &mut State) -> [f32; MR] {
    let mut alpha = [0f32; MR];
    let mut s = [0f32; KB];
    for (r, a) in alpha.iter_mut().enumerate() {
        let q = &t.q[r * t.d..(r + 1) * t.d];
        s.fill(0.0);
        for (d, &qd) in q.iter().enumerate() {
            let krow = &t.kt[d * KB..(d + 1) * KB];
            for (sj, &kj) in s.iter_mut().zip(krow) {
                *sj += qd * kj;
            }
        }
        if let Some(b) = t.bias {
            for (sj, &bj) in s.iter_mut().zip(&b[r * KB..(r + 1) * KB]) {
                *sj += bj;
            }
        }
        for sj in s.iter_mut().skip(t.valid) {
            *sj = f32::NEG_INFINITY;
        }
        let m_old = st.m[r];
        let m_new = s.iter().fold(m_old, |a, &b| a.max(b));
        let m_use = if m_new == f32::NEG_INFINITY {
            0.0
        } else {
            m_new
        };
        let p = &mut st.p[r * KB..(r + 1) * KB];
        let mut sum = 0f32;
        for (pj, &sj) in p.iter_mut().zip(&s) {
            *pj = exp2(sj - m_use);
            sum += *pj;
        }
        *a = exp2(m_old - m_use);
        // Lane 0 of the per-lane row sum (the AVX-512 kernels use all 16 lanes).
        st.l[r][0] = st.l[r][0] * *a + sum;
        st.m[r] = m_new;
    }
    alpha
}

/// `o = o * alpha + p · v` over the block's valid keys.
fn update(t: &Tile, st: &mut State, alpha: &[f32; MR]) {
    let dvp = t.dvp;
    for (r, &a) in alpha.iter().enumerate() {
        let o = &mut st.o[r * dvp..(r + 1) * dvp];
        if t.first {
            o.fill(0.0);
        } else {
            o.iter_mut().for_each(|x| *x *= a);
        }
        for j in 0..t.valid {
            let pj = st.p[r * KB + j];
            for (oc, &vc) in o.iter_mut().zip(&t.v[j * dvp..(j + 1) * dvp]) {
                *oc += pj * vc;
            }
        }
    }
}

/// One tile step (see `super::Tile`).
pub(super) fn tile(t: &Tile, st: &mut State) {
    let alpha = scores(t, st);
    update(t, st, &alpha);
}
