//! Operands of the CPU attention: typed mask reads, strided q/k/v views, and the packing of K
//! (transposed `[D][KB]` blocks) and V (`[KB][Dv rounded up to 8]` rows) into f32.
//!
//! Invariants: every read goes through `slice::get` (a layout checked by the caller never
//! misses; a miss reads as 0, or as "masked out" for a mask), padding is zero, and packed
//! buffers hold exactly `heads * blocks * ...` floats as `PackedKv` records.

use half::{bf16, f16};
use rayon::prelude::*;

use super::KB;
use crate::cpu::alloc;
use crate::cpu::elem::FloatElem;
use crate::cpu::simd::Kernels;
use crate::cpu::storage::CpuStorage;
use crate::desc::AttnShape;
use crate::layout::Layout;
use crate::{Error, Result};

/// A mask operand: element type, storage and its layout broadcast to `[..., Lq, Lk]`.
#[derive(Clone, Copy)]
pub(super) enum MaskData<'a> {
    Bool(&'a [u8]),
    F32(&'a [f32]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
}

impl MaskData<'_> {
    /// Element `i` as an additive mask in log2 units.
    pub(super) fn get(self, i: usize) -> f32 {
        let add = |x: f32| x * std::f32::consts::LOG2_E;
        match self {
            MaskData::Bool(m) => match m.get(i) {
                Some(0) | None => f32::NEG_INFINITY,
                Some(_) => 0.0,
            },
            MaskData::F32(m) => m.get(i).map_or(f32::NEG_INFINITY, |&x| add(x)),
            MaskData::F16(m) => m.get(i).map_or(f32::NEG_INFINITY, |&x| add(x.to_f32())),
            MaskData::Bf16(m) => m.get(i).map_or(f32::NEG_INFINITY, |&x| add(x.to_f32())),
        }
    }
}

/// The mask of one query tile against one key block, in log2 units, into `bias` (rows of `kb`
/// keys): row `r` holds query `qi0 + r`, keys `k0..k0 + valid`, of head `h`; rows from `live`
/// on (past the task's queries) are zeros. Keys past `valid` are left as they are (the kernels
/// drop them by lane).
pub(super) fn fill_bias(
    (data, layout): (MaskData, &Layout),
    h: usize,
    (qi0, live): (usize, usize),
    (k0, valid): (usize, usize),
    kb: usize,
    bias: &mut [f32],
) {
    let (rs, cs) = mat_strides(layout);
    let base = head_base(layout, h);
    for (r, row) in bias.chunks_mut(kb.max(1)).enumerate() {
        if r >= live {
            row.fill(0.0);
            continue;
        }
        for (j, x) in row.iter_mut().take(valid).enumerate() {
            *x = data.get(base + (qi0 + r) * rs + (k0 + j) * cs);
        }
    }
}

/// A strided `[..., rows, cols]` operand.
pub(super) struct View<'a, T> {
    pub(super) data: &'a [T],
    pub(super) layout: &'a Layout,
}

/// Storage offset of element `(0, 0)` of head `h` (row-major over the leading dims) of a
/// `[..., rows, cols]` layout.
pub(super) fn head_base(layout: &Layout, mut h: usize) -> usize {
    let r = layout.rank();
    let mut off = layout.offset();
    for (&d, &s) in layout.shape()[..r - 2]
        .iter()
        .zip(&layout.strides()[..r - 2])
        .rev()
    {
        off += (h % d.max(1)) * s;
        h /= d.max(1);
    }
    off
}

/// Row and column strides of a `[..., rows, cols]` layout.
pub(super) fn mat_strides(layout: &Layout) -> (usize, usize) {
    let st = layout.strides();
    (st[st.len() - 2], st[st.len() - 1])
}

/// Widens the `cols` elements of the row starting at storage offset `at` into `dst`, times `mul`.
pub(super) fn load_row<T: FloatElem>(
    k: Kernels,
    v: &View<T>,
    (at, cols): (usize, usize),
    mul: f32,
    dst: &mut [f32],
) {
    let (_, cs) = mat_strides(v.layout);
    let dst = &mut dst[..cols];
    match v.data.get(at..at + cols) {
        Some(src) if cs == 1 => match T::as_f32(src) {
            Some(src) => dst.iter_mut().zip(src).for_each(|(o, &x)| *o = x * mul),
            None => {
                T::load(k, src, dst);
                if mul != 1.0 {
                    dst.iter_mut().for_each(|o| *o *= mul);
                }
            }
        },
        _ => {
            for (c, o) in dst.iter_mut().enumerate() {
                *o = v.data.get(at + c * cs).map_or(0.0, |x| x.to_f32() * mul);
            }
        }
    }
}

/// Packed K and V of every head.
pub(super) struct PackedKv {
    pub(super) kt: Vec<f32>,
    pub(super) v: Vec<f32>,
    /// Floats per head in `kt` / `v`.
    pub(super) kt_head: usize,
    pub(super) v_head: usize,
    /// The first head packed (the buffers hold heads `h0..`).
    pub(super) h0: usize,
}

pub(super) fn pack_kv<T: FloatElem>(
    k: Kernels,
    kv: (&View<T>, &View<T>),
    s: &AttnShape,
    dvp: usize,
    heads: std::ops::Range<usize>,
) -> Result<PackedKv> {
    let (d, dk, dv, lk) = (s.d, s.d.max(1), s.dv, s.lk);
    let blocks = lk.div_ceil(KB);
    let (kt_head, v_head) = (blocks * dk * KB, blocks * KB * dvp);
    let h0 = heads.start;
    let n = heads.len();
    let mut kt = alloc::zeroed::<f32>(OP, n.saturating_mul(kt_head))?;
    let mut v = alloc::zeroed::<f32>(OP, n.saturating_mul(v_head))?;
    let (kview, vview) = kv;
    let (krs, _) = mat_strides(kview.layout);
    let (vrs, _) = mat_strides(vview.layout);
    kt.par_chunks_mut(kt_head.max(1))
        .zip(v.par_chunks_mut(v_head.max(1)))
        .enumerate()
        .try_for_each(|(i, (kt, vh))| -> Result<()> {
            let h = h0 + i;
            let (kb0, vb0) = (head_base(kview.layout, h), head_base(vview.layout, h));
            let mut row = alloc::zeroed::<f32>(OP, dk)?;
            for j in 0..lk {
                load_row(k, kview, (kb0 + j * krs, d), 1.0, &mut row);
                let blk = &mut kt[(j / KB) * dk * KB..][..dk * KB];
                for (di, &x) in row.iter().enumerate() {
                    blk[di * KB + j % KB] = x;
                }
                load_row(k, vview, (vb0 + j * vrs, dv), 1.0, &mut vh[j * dvp..]);
            }
            Ok(())
        })?;
    Ok(PackedKv {
        kt,
        v,
        kt_head,
        v_head,
        h0,
    })
}

/// The op named when the host will not allocate packed operands or scratch.
pub(super) const OP: &str = "scaled_dot_product_attention";

/// Typed views of the mask operand.
pub(super) fn mask_data(m: &CpuStorage) -> Result<MaskData<'_>> {
    Ok(match m {
        CpuStorage::U8(v) => MaskData::Bool(v),
        CpuStorage::F32(v) => MaskData::F32(v),
        CpuStorage::F16(v) => MaskData::F16(v),
        CpuStorage::BF16(v) => MaskData::Bf16(v),
        CpuStorage::I32(_) => {
            return Err(Error::invalid(
                "scaled_dot_product_attention",
                "mask must be u8 (boolean) or a float additive mask, got i32",
            ))
        }
    })
}

/// The factor a finished row's running output is multiplied by: `1 / l` for the row's sum of
/// weights `l`, or 0 when its keys were all masked out (its max `m` is still `-inf`) or its
/// weights sum to nothing, giving zeros as PyTorch does.
pub(super) fn inverse_weight_sum(m: f32, l: f32) -> f32 {
    if m == f32::NEG_INFINITY || l <= 0.0 {
        0.0
    } else {
        1.0 / l
    }
}

/// Writes the finished bf16 rows of a task: row `r` of `out` (`row.len()` = Dv values each,
/// rows in tiles of `MR`) is the running output `o` (`[tiles][MR][dvp]` f32) divided by the
/// row's sum of weights (`l`, split over 16 lanes), rounded once; a row whose keys were all
/// masked out (its max `m` still `-inf`) or whose weights sum to nothing is zeros, as in
/// PyTorch. `row` is scratch.
#[cfg(target_arch = "x86_64")]
pub(super) fn store_normalised<const MR: usize>(
    k: Kernels,
    (o, dvp): (&[f32], usize),
    (m, l): (&[[f32; MR]], &[[[f32; 16]; MR]]),
    out: &mut super::OutRows<bf16>,
    row: &mut [f32],
) {
    let dv = row.len();
    for r in 0..out.rows() {
        let orow = out.row(r);
        let (t, i) = (r / MR, r % MR);
        let acc = &o[(t * MR + i) * dvp..][..dv];
        let (mi, li) = (m[t][i], l[t][i].iter().sum::<f32>());
        let inv = inverse_weight_sum(mi, li);
        row.iter_mut().zip(acc).for_each(|(x, &a)| *x = a * inv);
        bf16::store(k, row, orow);
    }
}
