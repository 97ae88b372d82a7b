//! The f32 Winograd filter transform written straight into the GEMM engine's packed B layout.
//!
//! Each point's `C × O` matrix `U[point]` is what [`PackedB::new`] would pack from a row-major
//! `[C][O]` source (f32 layout: row `ci` of panel `p` holds columns `32p..32p + 32`, zeros past
//! `O`). Writing the transform's values there directly skips a `points·C·O` intermediate that
//! was written, read back and copied by the packer (with its page faults): a per-call
//! 1280-channel F(2,3) transform spent about 60% of its time on that round trip.
//!
//! Invariants: the values are the transform's f32 roundings, the same as the packer would have
//! copied, and every element of every point's buffer is written (padding lanes zero), so the
//! packs equal `PackedB::new` over the intermediate bit for bit (tested in
//! `winograd_tests`); tasks own disjoint input-channel rows of every buffer.

use super::winograd::CI_BLOCK;
use super::winograd_math::{transform_filters, Tile};
use crate::cpu::gemm::{AlignedBuf, BLayout, PackKind, PackedB, ToF32, NR};
use crate::cpu::simd::SimdLevel;
use rayon::prelude::*;

/// A point's packed buffer, shared by the transform's tasks, which write disjoint elements.
#[derive(Clone, Copy)]
struct Dst(*mut f32);
// SAFETY: the tasks holding copies write disjoint elements (their own input-channel rows) of a
// buffer that outlives the parallel loop (see `transform_packed_f32`).
unsafe impl Send for Dst {}
// SAFETY: as above.
unsafe impl Sync for Dst {}

/// Index of `U[ci][col]` in the f32 packed layout `l` (K = C rows, N = O columns).
fn packed_index(l: &BLayout, ci: usize, col: usize) -> usize {
    let bi = ci / l.kcu;
    let (u0, _) = l.block(bi);
    l.panel_offset(bi, col / NR) + (ci - u0) * NR + col % NR
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
    let mut bufs: Vec<AlignedBuf> = (0..tile.points())
        .map(|_| {
            let mut b = AlignedBuf::recycled::<f32>(len);
            b.slice_mut::<f32>(len);
            b
        })
        .collect();
    let dsts: Vec<Dst> = bufs
        .iter_mut()
        .map(|b| Dst(b.slice_mut::<f32>(len).as_mut_ptr()))
        .collect();
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
