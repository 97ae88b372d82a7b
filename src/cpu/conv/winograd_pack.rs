//! The Winograd filter transform written straight into the GEMM engine's packed B layouts.
//!
//! Each point's `C × O` matrix `U[point]` is what [`PackedB::new`] would pack from a row-major
//! `[C][O]` source: in the f32 layout row `ci` of panel `p` holds columns `32p..32p + 32`, zeros
//! past `O`; in the bf16 pair layout unit `ci / 2` holds rows `ci & !1` (low half) and `ci | 1`
//! (high half, zero past C) as bf16 rounded to nearest even (`half`'s rounding, which the
//! SIMD conversion of the intermediate path matches bit for bit). Writing the transform's values there directly skips a `points·C·O`
//! intermediate that was written, read back and copied by the packer (with its page faults):
//! a per-call 1280-channel F(2,3) transform spent about 60% of its time on that round trip.
//!
//! Invariants: the values are the transform's f32 roundings, the same as the packer would have
//! copied, and every element of every point's buffer is written (padding lanes zero), so the
//! packs equal `PackedB::new` over the intermediate bit for bit (tested in
//! `winograd_tests`); tasks own disjoint input-channel rows of every buffer.

use super::winograd::CI_BLOCK;
use super::winograd_math::{transform_filters, Tile};
use crate::cpu::gemm::{bf16_kind, AlignedBuf, BLayout, PackKind, PackedB, ToF32, NR};
use crate::cpu::simd::SimdLevel;
use half::bf16;
use rayon::prelude::*;

/// A point's packed buffer, shared by the transform's tasks, which write disjoint elements.
#[derive(Clone, Copy)]
struct Dst<T>(*mut T);
// SAFETY: the tasks holding copies write disjoint elements (their own input-channel rows) of a
// buffer whose heap storage outlives the parallel loop (moving its `AlignedBuf` afterwards does
// not move that storage).
unsafe impl<T> Send for Dst<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Dst<T> {}

/// Index of unit `u`, column `col` in the packed layout `l` (f32: a unit is a row of B; bf16
/// pairs: two rows).
fn packed_index(l: &BLayout, u: usize, col: usize) -> usize {
    let bi = u / l.kcu;
    let (u0, _) = l.block(bi);
    l.panel_offset(bi, col / NR) + (u - u0) * NR + col % NR
}

/// One fresh-or-recycled buffer per point, grown to `len` elements of `T`, and their pointers.
fn point_buffers<T: bytemuck::Pod>(points: usize, len: usize) -> (Vec<AlignedBuf>, Vec<Dst<T>>) {
    let mut bufs: Vec<AlignedBuf> = (0..points)
        .map(|_| AlignedBuf::recycled::<T>(len))
        .collect();
    let dsts = bufs
        .iter_mut()
        .map(|b| Dst(b.slice_mut::<T>(len).as_mut_ptr()))
        .collect();
    (bufs, dsts)
}

/// Transforms an `[O, C, 3, 3]` bank `w` for `tile` into one packed f32 B per point.
pub(super) fn transform_packed_f32<S: ToF32>(
    w: &[S],
    (o, c): (usize, usize),
    tile: Tile,
    level: SimdLevel,
) -> Vec<PackedB<f32>> {
    let layout = BLayout::new(PackKind::F32, c, o, false);
    let len = layout.len();
    let (bufs, dsts) = point_buffers::<f32>(tile.points(), len);
    let pad = (o % NR != 0).then(|| (o / NR * NR, o % NR));
    (0..c.div_ceil(CI_BLOCK)).into_par_iter().for_each(|cb| {
        let cis = cb * CI_BLOCK..((cb + 1) * CI_BLOCK).min(c);
        if let Some((last, used)) = pad {
            for ci in cis.clone() {
                let at = packed_index(&layout, ci, last);
                for d in &dsts {
                    // SAFETY: lanes `used..NR` of row `ci` of the last panel lie inside the
                    // buffer (`layout.len()` elements) and belong to this task's rows.
                    unsafe { std::slice::from_raw_parts_mut(d.0.add(at + used), NR - used) }
                        .fill(0.0);
                }
            }
        }
        transform_filters(level, w, tile, (c, o), cis, |ci, point, o0, v| {
            let lanes = (o - o0).min(v.len());
            let at = packed_index(&layout, ci, o0);
            // SAFETY: `o0` is a multiple of 16, so its `lanes <= 16` columns sit in one panel
            // row at `at..at + lanes`, inside the buffer and in this task's row `ci`.
            let dst = unsafe { std::slice::from_raw_parts_mut(dsts[point].0.add(at), lanes) };
            for (d, &x) in dst.iter_mut().zip(v) {
                *d = x as f32;
            }
        });
    });
    bufs.into_iter()
        .map(|buf| PackedB::from_packed(layout, buf))
        .collect()
}

/// Transforms an `[O, C, 3, 3]` bank `w` for `tile` into one packed bf16 B per point, in the
/// pair layout; `None` where new bf16 packs take another layout (see `bf16_kind`).
pub(super) fn transform_packed_bf16<S: ToF32>(
    w: &[S],
    (o, c): (usize, usize),
    tile: Tile,
    level: SimdLevel,
) -> Option<Vec<PackedB<bf16>>> {
    if bf16_kind() != PackKind::Bf16 {
        return None;
    }
    let layout = BLayout::new(PackKind::Bf16, c, o, false);
    let len = layout.len();
    let (bufs, dsts) = point_buffers::<u32>(tile.points(), len);
    let pad = (o % NR != 0).then(|| (o / NR * NR, o % NR));
    (0..c.div_ceil(CI_BLOCK)).into_par_iter().for_each(|cb| {
        let cis = cb * CI_BLOCK..((cb + 1) * CI_BLOCK).min(c);
        // CI_BLOCK is even: the task owns whole units (both rows of each pair).
        let units = cis.start / 2..cis.end.div_ceil(2);
        if let Some((last, used)) = pad {
            for u in units {
                let at = packed_index(&layout, u, last);
                for d in &dsts {
                    // SAFETY: words `used..NR` of unit `u` in the last panel lie inside the
                    // buffer and belong to this task's units.
                    unsafe { std::slice::from_raw_parts_mut(d.0.add(at + used), NR - used) }
                        .fill(0);
                }
            }
        }
        transform_filters(level, w, tile, (c, o), cis, |ci, point, o0, v| {
            let lanes = (o - o0).min(v.len());
            // `half`'s rounding (nearest even, NaN kept quiet) is the SIMD kernels' bit for bit.
            let h: [bf16; 16] = std::array::from_fn(|l| bf16::from_f32(v[l] as f32));
            let at = packed_index(&layout, ci / 2, o0);
            // SAFETY: `o0` is a multiple of 16, so its `lanes <= 16` columns sit in one panel
            // row of unit `ci / 2` at `at..at + lanes`, inside the buffer and in this task's
            // units.
            let dst = unsafe { std::slice::from_raw_parts_mut(dsts[point].0.add(at), lanes) };
            // Rows arrive in order (`transform_filters` runs input channels ascending within
            // each block of output channels): the even row sets the word, the odd row adds its
            // high half; a last even row past C leaves the high half zero.
            for (d, x) in dst.iter_mut().zip(h) {
                let bits = x.to_bits() as u32;
                *d = if ci % 2 == 0 { bits } else { *d | bits << 16 };
            }
        });
    });
    Some(
        bufs.into_iter()
            .map(|buf| PackedB::from_packed(layout, buf))
            .collect(),
    )
}
