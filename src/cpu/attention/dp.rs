//! The bf16 CPU attention on AVX512_BF16 dot products (`vdpbf16ps`), for CPUs with AVX-512 and
//! AVX512_BF16 but no usable AMX (AMD Zen 4, Intel Cooper Lake): the driver of
//! [`super::dp_kernel`] and the packing of Q, K and V into bf16 pair layouts.
//!
//! Same blocking as `super::attention_float` (tasks of one head × up to 8 tiles of [`MR`] query
//! rows, key blocks of [`KB`], heads packed a group at a time), but both products run on bf16
//! pairs at twice the f32 FMA's flop rate, with f32 accumulation, the softmax in f32 and `P`
//! rounded to bf16 before `P · V`, as PyTorch's bf16 flash attention and the AMX path do.
//!
//! Design choices:
//! - Q is packed exact (not pre-scaled as in the FMA kernel: a scaled bf16 Q would be rounded
//!   twice); the kernel multiplies the f32 scores by `scale·log2 e`, fused with the mask add.
//! - The head dim is padded only to whole pairs (D = 40 is 20 pair steps), not to 32 as AMX
//!   tiles need; V columns only to a multiple of 8, the last 8 on half (`ymm`) vectors.
//! - Scores stay in registers (6 × 64 keys in 24 accumulators), so the softmax is the FMA
//!   kernel's ([`super::avx512::softmax`], exact row max per block); only `P` goes through
//!   memory, as bf16. The AMX kernel's lazily moved max exists to skip a pass over stored
//!   scores; on registers the block max is needed for the test anyway, so it would save only
//!   the output rescale (6 × Dv/16 multiplies per tile step, ~1%).
//! - `P` takes the AMX kernel's degree-3 `exp2` (7 operations a vector instead of 13): the
//!   softmax is about a quarter of the kernel's time at head dim 40.
//! - Measured on a 2-core Zen 4 (bf16, 2 × 8 heads, FMA kernel = `XPU_AUTOTUNE_FORCE=cpu_attention=fma_lanes` in the same
//!   process): SD 1.5 self-attention 4096² × 40: 135 against 253 ms (~318 GFLOP/s, ~73% of the
//!   measured `vdpbf16ps` peak); cross-attention (77 keys) 4.0 against 6.3 ms; 1024² × 80: 18
//!   against 30 ms; 256² × 160: 3.9 against 5.0 ms. The ymm half vector measured faster than
//!   padding Dv = 40 to 48 (three full vectors).
//!
//! Invariants:
//! - Only runs when [`available`]: the SIMD level is AVX-512 (F/DQ, FMA) and the CPU has
//!   AVX512_BF16 and AVX-512VL. The static rule takes it where the bf16 GEMM's calibration
//!   chose dot products ([`usable`]: `vdpbf16ps` measured faster than the FMA path, and AMX not
//!   in use); the autotuner may take it elsewhere.
//! - Packed layouts (u32 = two bf16, low half the even index), zero-padded, on cache lines: Q
//!   per tile `[MR][dpairs]` (`dpairs` = ⌈max(D, 1)/2⌉); K per block `[dpairs][KB keys]`; V per
//!   block `[dvp/16 chunks][KB/2 key pairs][16 columns]`, then `[KB/2][8]` for a last half
//!   chunk (`dvp` = Dv rounded up to 8), u32 `(v[2j][c], v[2j+1][c])`: every vector load of
//!   the kernel is aligned and each column pass streams one contiguous chunk.
//! - Each row is computed by one task in key order: results do not depend on the thread count.
//! - Memory beyond inputs and output: the packed K/V of a group of heads (O(Lk·(D + Dv)) each)
//!   and per-task tiles; no `Lq × Lk` buffer.

use half::bf16;
use rayon::prelude::*;

use super::amx::read_row;
use super::dp_kernel::{tile, State, Tile};
use super::operands::OP;
use super::operands::{fill_bias, head_base, mat_strides, store_normalised, MaskData, View};
use super::{OutRows, KB, MAX_TILES_PER_TASK, MR};
use crate::cpu::alloc::resize;
use crate::cpu::gemm::{bf16_method, AlignedBuf, Bf16Method};
use crate::cpu::simd::{Kernels, SimdLevel};
use crate::desc::AttnShape;
use crate::layout::Layout;
use crate::Result;

/// Whether the dot-product attention can run with kernels `k` in this process.
pub(super) fn usable(k: Kernels) -> bool {
    available(k) && bf16_method() == Bf16Method::DotProduct
}

/// Whether the dot-product attention can run with kernels `k` in this process (AVX-512 with
/// AVX512_BF16 and VL), whatever the bf16 product method.
pub(super) fn available(k: Kernels) -> bool {
    k.level() == SimdLevel::Avx512
        && is_x86_feature_detected!("avx512bf16")
        && is_x86_feature_detected!("avx512vl")
}

/// Head geometry.
#[derive(Clone, Copy)]
struct Geo {
    /// Head-dim pairs, at least 1 (a zero head dim is one zero pair: scores 0).
    dpairs: usize,
    /// Value columns rounded up to a multiple of 8 (at least 8).
    dvp: usize,
    /// `scale · log2 e`.
    qmul: f32,
}

/// Index of value column `c` of key pair `jp` in a packed V block (see the module docs).
fn v_index(dvp: usize, jp: usize, c: usize) -> usize {
    let chunk = c / 16;
    let width = if 16 * chunk + 16 <= dvp { 16 } else { 8 };
    chunk * 16 * (KB / 2) + jp * width + c % 16
}

/// K and V of a group of heads in the pair layouts.
struct Packed {
    k: AlignedBuf,
    v: AlignedBuf,
    /// u32 per head in `k` / `v`.
    k_head: usize,
    v_head: usize,
    h0: usize,
}

fn pack(
    kv: (&View<bf16>, &View<bf16>),
    s: &AttnShape,
    g: Geo,
    heads: std::ops::Range<usize>,
) -> Result<Packed> {
    let (dpairs, dvp, lk) = (g.dpairs, g.dvp, s.lk);
    let blocks = lk.div_ceil(KB);
    let (k_blk, v_blk) = (dpairs * KB, KB / 2 * dvp);
    let (k_head, v_head) = (blocks * k_blk, blocks * v_blk);
    let (mut k, mut v) = (AlignedBuf::default(), AlignedBuf::default());
    // Fresh buffers: zero-filled, as the padding and the V pairs' `|=` need.
    let (k_all, v_all) = (
        k.slice_mut::<u32>(OP, heads.len().saturating_mul(k_head))?,
        v.slice_mut::<u32>(OP, heads.len().saturating_mul(v_head))?,
    );
    let ((krs, kcs), (vrs, vcs)) = (mat_strides(kv.0.layout), mat_strides(kv.1.layout));
    k_all
        .par_chunks_mut(k_head.max(1))
        .zip(v_all.par_chunks_mut(v_head.max(1)))
        .enumerate()
        .try_for_each(|(i, (kh, vh))| -> Result<()> {
            let h = heads.start + i;
            let (kb0, vb0) = (head_base(kv.0.layout, h), head_base(kv.1.layout, h));
            let mut row = crate::cpu::alloc::zeroed::<u16>(OP, (2 * dpairs).max(s.dv))?;
            for j in 0..lk {
                let (blk, jj) = (j / KB, j % KB);
                row.fill(0);
                read_row(kv.0.data, kb0 + j * krs, kcs, &mut row[..s.d]);
                let kblk = &mut kh[blk * k_blk..][..k_blk];
                for (q, pair) in row[..2 * dpairs].chunks_exact(2).enumerate() {
                    kblk[q * KB + jj] = u32::from(pair[0]) | u32::from(pair[1]) << 16;
                }
                read_row(kv.1.data, vb0 + j * vrs, vcs, &mut row[..s.dv]);
                let vblk = &mut vh[blk * v_blk..][..v_blk];
                let (jp, sh) = (jj / 2, 16 * (jj % 2));
                for (c, &x) in row[..s.dv].iter().enumerate() {
                    if let Some(dst) = vblk.get_mut(v_index(dvp, jp, c)) {
                        *dst |= u32::from(x) << sh;
                    }
                }
            }
            Ok(())
        })?;
    Ok(Packed {
        k,
        v,
        k_head,
        v_head,
        h0: heads.start,
    })
}

/// Everything a task reads.
struct Ctx<'a> {
    k: Kernels,
    q: View<'a, bf16>,
    kv: Packed,
    mask: Option<(MaskData<'a>, &'a Layout)>,
    s: &'a AttnShape,
    g: Geo,
}

/// Per-thread task scratch, reused (every element a task reads it has written first).
#[derive(Default)]
struct Scratch {
    q: AlignedBuf,
    o: AlignedBuf,
    p: AlignedBuf,
    m: Vec<[f32; MR]>,
    l: Vec<[[f32; 16]; MR]>,
    bias: Vec<f32>,
    qrow: Vec<u16>,
    row: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

fn task(c: &Ctx, h: usize, q0: usize, out: &mut OutRows<bf16>) -> Result<()> {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => task_in(c, (h, q0), out, &mut s),
        Err(_) => task_in(c, (h, q0), out, &mut Scratch::default()),
    })
}

/// Computes query rows `q0..q0 + out.rows()` of head `h` into `out`.
fn task_in(
    c: &Ctx,
    (h, q0): (usize, usize),
    out: &mut OutRows<bf16>,
    sc: &mut Scratch,
) -> Result<()> {
    let (g, d, dv, lk) = (c.g, c.s.d, c.s.dv, c.s.lk);
    let rows = out.rows();
    let tiles = rows.div_ceil(MR);
    let sq = sc.q.slice_mut::<u32>(OP, tiles * MR * g.dpairs)?;
    let so = sc.o.slice_mut::<f32>(OP, tiles * MR * g.dvp)?;
    let sp = sc.p.slice_mut::<u32>(OP, MR * KB / 2)?;
    resize(OP, &mut sc.bias, MR * KB, 0.0)?;
    resize(OP, &mut sc.qrow, 2 * g.dpairs, 0)?;
    resize(OP, &mut sc.row, dv, 0.0)?;
    sc.m.clear();
    resize(OP, &mut sc.m, tiles, [f32::NEG_INFINITY; MR])?;
    sc.l.clear();
    resize(OP, &mut sc.l, tiles, [[0.0; 16]; MR])?;
    let (qrs, qcs) = mat_strides(c.q.layout);
    let qb = head_base(c.q.layout, h);
    for (r, qr) in sq.chunks_mut(g.dpairs).enumerate() {
        sc.qrow.fill(0);
        if r < rows {
            read_row(c.q.data, qb + (q0 + r) * qrs, qcs, &mut sc.qrow[..d]);
        }
        for (x, pair) in qr.iter_mut().zip(sc.qrow.chunks_exact(2)) {
            *x = u32::from(pair[0]) | u32::from(pair[1]) << 16;
        }
    }
    let hk = h - c.kv.h0;
    let k_all = &c.kv.k.slice::<u32>((hk + 1) * c.kv.k_head)[hk * c.kv.k_head..];
    let v_all = &c.kv.v.slice::<u32>((hk + 1) * c.kv.v_head)[hk * c.kv.v_head..];
    for (b, (kb, vb)) in k_all
        .chunks(g.dpairs * KB)
        .zip(v_all.chunks(KB / 2 * g.dvp))
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
                q: &sq[t * MR * g.dpairs..(t + 1) * MR * g.dpairs],
                k: kb,
                v: vb,
                bias: c.mask.is_some().then_some(&sc.bias[..]),
                dpairs: g.dpairs,
                dvp: g.dvp,
                valid,
                first: b == 0,
                qmul: g.qmul,
            };
            let mut st = State {
                m: &mut sc.m[t],
                l: &mut sc.l[t],
                o: &mut so[t * MR * g.dvp..(t + 1) * MR * g.dvp],
                p: sp,
            };
            // SAFETY: tasks exist only when `available()` held: AVX-512F/DQ/VL, FMA and
            // AVX512_BF16 are present (`tile` checks the slice lengths itself).
            unsafe { tile(&tl, &mut st) };
        }
    }
    store_normalised(c.k, (so, g.dvp), (&sc.m, &sc.l), out, &mut sc.row[..dv]);
    Ok(())
}

/// The bf16 attention on AVX512_BF16 dot products (see `super::attention_float` for the
/// contract), or `None` when [`available`] does not hold.
pub(super) fn attention(
    k: Kernels,
    (q, ol): (View<bf16>, &Layout),
    kv: (View<bf16>, View<bf16>),
    mask: Option<(MaskData, &Layout)>,
    s: &AttnShape,
) -> Result<Option<Vec<bf16>>> {
    if !available(k) {
        return Ok(None);
    }
    let n = s.heads() * s.lq * s.dv;
    let mut out = crate::cpu::pool::take::<bf16>(OP, n)?;
    if n == 0 {
        return Ok(Some(out));
    }
    if s.lk == 0 {
        out.fill(bf16::ZERO);
        return Ok(Some(out));
    }
    let g = Geo {
        dpairs: s.d.max(1).div_ceil(2),
        dvp: s.dv.div_ceil(8).max(1) * 8,
        qmul: s.scale * std::f32::consts::LOG2_E,
    };
    // Short key sequences (cross-attention) keep little in cache: take bigger tasks.
    let max_tiles = if s.lk <= 2 * KB {
        4 * MAX_TILES_PER_TASK
    } else {
        MAX_TILES_PER_TASK
    };
    let heads = s.heads();
    let (rows_per_task, group) = super::plan_tasks(heads, s.lq.div_ceil(MR), max_tiles, MR);
    let group_ctx = |heads| -> Result<Ctx> {
        Ok(Ctx {
            k,
            q: View {
                data: q.data,
                layout: q.layout,
            },
            kv: pack((&kv.0, &kv.1), s, g, heads)?,
            mask,
            s,
            g,
        })
    };
    super::for_head_groups(&mut out, ol, s, (rows_per_task, group), group_ctx, task)?;
    Ok(Some(out))
}
