//! The bf16 CPU attention on Intel AMX: the driver of [`super::amx_kernel`] (same blocking as
//! `super::attention_float`, with 32-row query tiles), and the packing of K/V into the AMX
//! layouts once per head.
//!
//! Per 32-row query tile and key block of `KB` keys: `S = Q · Kᵀ` (Q as two 16-row A tiles of
//! bf16 pairs, K in the B pair layout, f32 accumulators), the softmax on the stored scores
//! (times `scale·log2 e`, plus the mask; `exp2` against a row max that is only moved when a
//! block rises more than `2^8` above it, per-lane row sums, all f32), `P`
//! rounded to bf16 in the A layout, and `O += P · V` with the running f32 output, as PyTorch's
//! bf16 flash attention.
//!
//! Invariants:
//! - Only runs when [`available`]: AMX is granted to this process, AVX-512 is the SIMD level
//!   and AVX512-BF16 converts `P`. The static rule takes it where the bf16 GEMMs use AMX
//!   ([`usable`]); the autotuner may take it elsewhere.
//! - Each task loads the tile configuration before its first tile instruction and releases it
//!   after its last one; all tile data stays inside one `asm!` block.
//! - Packed layouts (u32 = a pair of bf16, low half first), all zero-padded: Q per tile
//!   `[32 rows][dp]` bf16 (`dp` = D rounded up to 32); K per block `[KB/16 key chunks][dp/32
//!   steps][16 pairs][16 keys]`; V per block `[dvp/16 column chunks][KB/32 steps][16 key
//!   pairs][16 columns]`; each 16×16 u32 group is one 1 KiB B tile.
//! - Padding keys get probability 0 (masked by lane), padding rows and columns are computed and
//!   discarded; each row's result depends only on its own inputs (thread-count independent).
//! - Every pointer access is inside slices whose lengths `step` checks before the kernels run.
//! - Memory beyond inputs and output: the packed K/V of a group of heads (O(Lk·(D + Dv)) each)
//!   and per-task tiles; no `Lq × Lk` buffer.

use half::bf16;
use rayon::prelude::*;

use super::amx_kernel::{begin, end, step, Block, Geo, Phase, TileState, KB, MR, TILE};
use super::amx_kv;
use super::operands::OP;
use super::operands::{head_base, mat_strides, store_normalised, MaskData, View};
use super::OutRows;
use crate::cpu::alloc::resize;
use crate::cpu::gemm::{bf16_method, AlignedBuf, Bf16Method};
use crate::cpu::simd::{Kernels, SimdLevel};
use crate::desc::AttnShape;
use crate::layout::Layout;
use crate::Result;
/// Query tiles per task at most.
const MAX_TILES_PER_TASK: usize = 4;

/// Whether the static rule takes the AMX attention with kernels `k` in this process (AMX is
/// the bf16 product method).
pub(super) fn usable(k: Kernels) -> bool {
    available(k) && bf16_method() == Bf16Method::Amx
}

/// Whether the AMX attention can run with kernels `k` in this process (AVX-512, AVX512_BF16
/// and AMX granted), whatever the bf16 product method.
pub(super) fn available(k: Kernels) -> bool {
    k.level() == SimdLevel::Avx512
        && is_x86_feature_detected!("avx512bf16")
        && crate::cpu::gemm::amx_unavailable_reason().is_none()
}

/// Row `at..` of `cols` bf16 values (column stride `cs`) as bits into `dst[..cols]`; misses
/// read as 0.
pub(super) fn read_row(data: &[bf16], at: usize, cs: usize, dst: &mut [u16]) {
    let cols = dst.len();
    match data.get(at..at + cols) {
        Some(src) if cs == 1 => dst.iter_mut().zip(src).for_each(|(o, x)| *o = x.to_bits()),
        _ => {
            for (c, o) in dst.iter_mut().enumerate() {
                *o = data.get(at + c * cs).map_or(0, |x| x.to_bits());
            }
        }
    }
}

/// K and V of a group of heads in the AMX layouts, on cache lines (a tile row that straddled
/// two lines would cost two loads: measured at three to five times the tile-load time).
pub(super) struct Packed {
    pub(super) k: AlignedBuf,
    pub(super) v: AlignedBuf,
    /// u32 per head in `k` / `v`.
    pub(super) k_head: usize,
    pub(super) v_head: usize,
    h0: usize,
}

#[cfg(test)]
thread_local! {
    /// Test hook: pack K/V with the scalar loops even where the vectorised packer could run.
    pub(crate) static SCALAR_PACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn scalar_pack() -> bool {
    #[cfg(test)]
    return SCALAR_PACK.with(|c| c.get());
    #[cfg(not(test))]
    false
}

pub(super) fn pack<'d>(
    kv: (&View<'d, bf16>, &View<'d, bf16>),
    s: &AttnShape,
    g: Geo,
    heads: std::ops::Range<usize>,
) -> Result<Packed> {
    let (dp, dvp, lk) = (g.dp, g.dvp, s.lk);
    let blocks = lk.div_ceil(KB);
    let (k_head, v_head) = (blocks * KB * dp / 2, blocks * KB * dvp / 2);
    let (mut k, mut v) = (AlignedBuf::default(), AlignedBuf::default());
    // Fresh buffers: zero-filled, as the padding and the V pairs' `|=` need.
    let (k_all, v_all) = (
        k.slice_mut::<u32>(OP, heads.len().saturating_mul(k_head))?,
        v.slice_mut::<u32>(OP, heads.len().saturating_mul(v_head))?,
    );
    let ((krs, kcs), (vrs, vcs)) = (mat_strides(kv.0.layout), mat_strides(kv.1.layout));
    let (sd, sk) = (dp / 32, KB / 32);
    let scalar = scalar_pack();
    k_all
        .par_chunks_mut(k_head.max(1))
        .zip(v_all.par_chunks_mut(v_head.max(1)))
        .enumerate()
        .try_for_each(|(i, (kh, vh))| -> Result<()> {
            let h = heads.start + i;
            let (kb0, vb0) = (head_base(kv.0.layout, h), head_base(kv.1.layout, h));
            if kcs == 1 && vcs == 1 && !scalar {
                let rows = |data: &'d [bf16], at: usize, n: usize| {
                    data.get(at..at + n).map(bytemuck::cast_slice::<bf16, u16>)
                };
                let fast = amx_kv::pack_head(amx_kv::HeadRows {
                    k: |j| rows(kv.0.data, kb0 + j * krs, s.d),
                    v: |j| rows(kv.1.data, vb0 + j * vrs, s.dv),
                    lk,
                    d: s.d,
                    dv: s.dv,
                    dp,
                    dvp,
                    kh: &mut *kh,
                    vh: &mut *vh,
                });
                if fast {
                    return Ok(());
                }
            }
            let mut row = crate::cpu::alloc::zeroed::<u16>(OP, dp.max(dvp))?;
            for j in 0..lk {
                let (blk, jj) = (j / KB, j % KB);
                row.fill(0);
                read_row(kv.0.data, kb0 + j * krs, kcs, &mut row[..s.d]);
                let kblk = &mut kh[blk * KB * dp / 2..][..KB * dp / 2];
                let base = (jj / 16) * sd * TILE + jj % 16;
                for (q, pair) in row[..dp].chunks_exact(2).enumerate() {
                    let x = u32::from(pair[0]) | u32::from(pair[1]) << 16;
                    kblk[base + (q / 16) * TILE + (q % 16) * 16] = x;
                }
                read_row(kv.1.data, vb0 + j * vrs, vcs, &mut row[..s.dv]);
                let vblk = &mut vh[blk * KB * dvp / 2..][..KB * dvp / 2];
                let (base, sh) = ((jj / 32) * TILE + ((jj % 32) / 2) * 16, 16 * (jj % 2));
                for (c, &x) in row[..s.dv].iter().enumerate() {
                    vblk[(c / 16) * sk * TILE + base + c % 16] |= u32::from(x) << sh;
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

/// Per-thread task scratch, reused (every element a task reads it has written first); the
/// buffers tiles load from or store to start on cache lines.
#[derive(Default)]
struct Scratch {
    q: AlignedBuf,
    o: AlignedBuf,
    m: Vec<[f32; MR]>,
    l: Vec<[[f32; 16]; MR]>,
    s: AlignedBuf,
    p: AlignedBuf,
    bias: Vec<f32>,
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
    let sq = sc.q.slice_mut::<u16>(OP, tiles * MR * g.dp)?;
    let so = sc.o.slice_mut::<f32>(OP, tiles * MR * g.dvp)?;
    let ss = sc.s.slice_mut::<f32>(OP, tiles * MR * KB)?;
    let sp = sc.p.slice_mut::<u16>(OP, tiles * MR * KB)?;
    resize(OP, &mut sc.bias, MR * KB, 0.0)?;
    resize(OP, &mut sc.row, dv, 0.0)?;
    sc.m.clear();
    resize(OP, &mut sc.m, tiles, [f32::NEG_INFINITY; MR])?;
    sc.l.clear();
    resize(OP, &mut sc.l, tiles, [[0.0; 16]; MR])?;
    let (qrs, qcs) = mat_strides(c.q.layout);
    let qb = head_base(c.q.layout, h);
    for (r, qr) in sq.chunks_mut(g.dp).enumerate() {
        qr.fill(0);
        if r < rows {
            read_row(c.q.data, qb + (q0 + r) * qrs, qcs, &mut qr[..d]);
        }
    }
    let hk = h - c.kv.h0;
    let k_all = &c.kv.k.slice::<u32>((hk + 1) * c.kv.k_head)[hk * c.kv.k_head..];
    let v_all = &c.kv.v.slice::<u32>((hk + 1) * c.kv.v_head)[hk * c.kv.v_head..];
    // SAFETY: tasks exist only when `available()` held, so AMX is granted to this process.
    unsafe { begin() };
    for (b, (kb, vb)) in k_all
        .chunks(KB * g.dp / 2)
        .zip(v_all.chunks(KB * g.dvp / 2))
        .enumerate()
    {
        let k0 = b * KB;
        let valid = (lk - k0).min(KB);
        for phase in [Phase::Scores, Phase::Probs, Phase::Values] {
            for t in 0..tiles {
                if let (Some((data, mv)), Phase::Probs) = (&c.mask, phase) {
                    let (rs, cs) = mat_strides(mv);
                    let base = head_base(mv, h);
                    for (r, row) in sc.bias.chunks_mut(KB).enumerate() {
                        let qi = q0 + t * MR + r;
                        if t * MR + r >= rows {
                            row.fill(0.0);
                            continue;
                        }
                        for (j, x) in row.iter_mut().take(valid).enumerate() {
                            *x = data.get(base + qi * rs + (k0 + j) * cs);
                        }
                    }
                }
                let blk = Block {
                    k: kb,
                    v: vb,
                    bias: c.mask.is_some().then_some(&sc.bias[..]),
                    valid,
                    first: b == 0,
                };
                let tile = MR * KB * t..MR * KB * (t + 1);
                let mut st = TileState {
                    q: &sq[t * MR * g.dp..(t + 1) * MR * g.dp],
                    o: &mut so[t * MR * g.dvp..(t + 1) * MR * g.dvp],
                    m: &mut sc.m[t],
                    l: &mut sc.l[t],
                    s: &mut ss[tile.clone()],
                    p: &mut sp[tile],
                };
                step(g, &blk, &mut st, phase);
            }
        }
    }
    // SAFETY: as the ldtilecfg above.
    unsafe { end() };
    store_normalised(c.k, (so, g.dvp), (&sc.m, &sc.l), out, &mut sc.row[..dv]);
    Ok(())
}

/// The bf16 attention on AMX (see [`super::attention_float`] for the contract), or `None`
/// when [`available`] does not hold.
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
        dp: s.d.max(1).div_ceil(32) * 32,
        dvp: s.dv.div_ceil(16).max(1) * 16,
        qmul: s.scale * std::f32::consts::LOG2_E,
    };
    let heads = s.heads();
    let (rows_per_task, group) =
        super::plan_tasks(heads, s.lq.div_ceil(MR), MAX_TILES_PER_TASK, MR);
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
