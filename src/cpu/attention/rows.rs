//! The task of the row kernels (`super::tile`: AVX-512, AVX2 or portable): a block of query
//! rows of one head packed (pre-scaled by `scale·log2 e`), run against every key block in
//! tiles of [`MR`] rows, and normalised into the output rows in place.
//!
//! Invariants: as `super`'s; the per-thread scratch is reused across tasks and calls, and
//! every element a task reads it has written first.

use super::operands::{fill_bias, head_base, inverse_weight_sum, load_row, mat_strides};
use super::{tile, Ctx, OutRows, State, Tile, KB, MR};
use crate::cpu::alloc::resize;
use crate::cpu::elem::FloatElem;
use crate::desc::kinds::BinaryOp;
use crate::Result;

/// The op named when the host will not allocate a task's scratch.
const OP: &str = "scaled_dot_product_attention";

/// Per-thread scratch of the tasks, reused across tasks and calls (no allocation or zeroing
/// per task; every element a task reads it has written first).
#[derive(Default)]
struct Scratch {
    q: Vec<f32>,
    o: Vec<f32>,
    m: Vec<[f32; MR]>,
    l: Vec<[[f32; 16]; MR]>,
    p: Vec<f32>,
    bias: Vec<f32>,
    row: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// Computes query rows `q0..q0 + out.rows()` of head `h` into `out`.
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
    let tiles = rows.div_ceil(MR);
    resize(OP, &mut sc.q, tiles * MR * dk, 0.0)?;
    resize(OP, &mut sc.o, tiles * MR * dvp, 0.0)?;
    resize(OP, &mut sc.p, MR * KB, 0.0)?;
    resize(OP, &mut sc.bias, MR * KB, 0.0)?;
    resize(OP, &mut sc.row, dk.max(dv), 0.0)?;
    sc.m.clear();
    resize(OP, &mut sc.m, tiles, [f32::NEG_INFINITY; MR])?;
    sc.l.clear();
    resize(OP, &mut sc.l, tiles, [[0.0; 16]; MR])?;
    let q = &mut sc.q[..tiles * MR * dk];
    let (qrs, qcs) = mat_strides(c.q.layout);
    let qb = head_base(c.q.layout, h);
    for (r, qr) in q.chunks_mut(dk).enumerate() {
        if r >= rows || d < dk {
            qr.fill(0.0); // padding rows (and the zero column of D = 0)
        }
        if r >= rows {
            continue;
        }
        let at = qb + (q0 + r) * qrs;
        match c.q.data.get(at..at + d) {
            Some(src) if qcs == 1 => match T::as_f32(src) {
                Some(src) => c.k.binary_f32_scalar_rhs(BinaryOp::Mul, src, c.qmul, qr),
                None => {
                    T::load(c.k, src, &mut sc.row[..d]);
                    c.k.binary_f32_scalar_rhs(BinaryOp::Mul, &sc.row[..d], c.qmul, qr);
                }
            },
            _ => load_row(c.k, &c.q, (at, d), c.qmul, qr),
        }
    }
    let hk = h - c.kv.h0;
    let kt_all = &c.kv.kt[hk * c.kv.kt_head..][..c.kv.kt_head];
    let v_all = &c.kv.v[hk * c.kv.v_head..][..c.kv.v_head];
    let level = c.k.level();
    for (b, (kt, v)) in kt_all
        .chunks(dk * KB)
        .zip(v_all.chunks(KB * dvp))
        .enumerate()
    {
        let k0 = b * KB;
        let valid = (lk - k0).min(KB);
        for t in 0..tiles {
            if let Some(mask) = c.mask {
                let live = (rows - t * MR).min(MR);
                fill_bias(mask, h, (q0 + t * MR, live), (k0, valid), KB, &mut sc.bias);
            }
            let tl = Tile {
                q: &sc.q[t * MR * dk..(t + 1) * MR * dk],
                kt,
                v,
                bias: c.mask.is_some().then_some(&sc.bias[..]),
                d: dk,
                dvp,
                valid,
                first: b == 0,
            };
            let mut st = State {
                m: &mut sc.m[t],
                l: &mut sc.l[t],
                o: &mut sc.o[t * MR * dvp..(t + 1) * MR * dvp],
                p: &mut sc.p,
            };
            tile(level, &tl, &mut st);
        }
    }
    for r in 0..rows {
        let orow = out.row(r);
        let (t, i) = (r / MR, r % MR);
        let acc = &sc.o[(t * MR + i) * dvp..][..dv];
        let (mi, li) = (sc.m[t][i], sc.l[t][i].iter().sum::<f32>());
        let inv = inverse_weight_sum(mi, li);
        match T::as_f32_mut(orow) {
            Some(dst) => c.k.binary_f32_scalar_rhs(BinaryOp::Mul, acc, inv, dst),
            None => {
                let tmp = &mut sc.row[..dv];
                c.k.binary_f32_scalar_rhs(BinaryOp::Mul, acc, inv, tmp);
                T::store(c.k, tmp, orow);
            }
        }
    }
    Ok(())
}
