//! Direct 2-D pooling on the Cpu: one pass over contiguous NCHW f32 planes, windows clipped to
//! the input (so padding is never materialised), planes split over threads.
//!
//! Why not the window-view reduction the Xpu runs (`ops/pool.rs`): on the Cpu that reduces
//! rows of 2–3 elements through the strided path and ran at ~1% of the memory bandwidth.
//!
//! Invariants: the caller has checked the geometry (kernel, stride positive; padding at most
//! half the kernel, so every window holds at least one input element; output size from
//! PyTorch's formula); max propagates NaN; average divides by `kh·kw` or by the window's
//! count of input elements.

use crate::desc::pool::{PoolGeom, PoolKind};
use crate::Result;
use rayon::prelude::*;

/// Pools `x` (`planes` contiguous `h × w` planes) into `planes` contiguous `oh × ow` planes
/// (an error when the host will not allocate the output or a task's row buffer).
pub(crate) fn pool2d(
    x: &[f32],
    (h, w): (usize, usize),
    g: PoolGeom,
    kind: PoolKind,
) -> Result<Vec<f32>> {
    let (oh, ow) = g.out;
    let plane_in = h * w;
    let plane_out = oh * ow;
    if plane_in == 0 || plane_out == 0 {
        return Ok(Vec::new());
    }
    let planes = x.len() / plane_in;
    let mut out = crate::cpu::pool::take::<f32>(OP, planes * plane_out)?;
    out.par_chunks_mut(plane_out)
        .zip(x.par_chunks(plane_in))
        .try_for_each(|(dst, src)| pool_plane(src, (h, w), g, kind, dst))?;
    Ok(out)
}

/// The op named in out-of-memory errors.
const OP: &str = "pool2d";

/// The outputs `lo..hi` whose window tap `k` lands inside `0..len` (tap position
/// `o·stride + k - pad`).
fn tap_range(k: usize, stride: usize, pad: usize, len: usize, outs: usize) -> (usize, usize) {
    let lo = pad.saturating_sub(k).div_ceil(stride);
    // Largest o with o·stride + k - pad <= len - 1.
    let hi = if len + pad > k {
        ((len + pad - k - 1) / stride + 1).min(outs)
    } else {
        0
    };
    (lo, hi.max(lo))
}

/// Folds `v` into the running window value `acc`.
#[inline(always)]
fn fold(kind: PoolKind, acc: f32, v: f32) -> f32 {
    match kind {
        // NaN wins (a select, not a branch, so the loops vectorise).
        PoolKind::Max => {
            if v > acc || v.is_nan() {
                v
            } else {
                acc
            }
        }
        PoolKind::Avg(_) => acc + v,
    }
}

/// Separable pooling of one plane: rows pooled along W into `[h, ow]`, then along H (every
/// element of `dst` is written).
fn pool_plane(
    src: &[f32],
    (h, w): (usize, usize),
    g: PoolGeom,
    kind: PoolKind,
    dst: &mut [f32],
) -> Result<()> {
    let (oh, ow) = g.out;
    let (kh, kw) = g.kernel;
    let (sh, sw) = g.stride;
    let (ph, pw) = g.padding;
    let init = match kind {
        PoolKind::Max => f32::NEG_INFINITY,
        PoolKind::Avg(_) => 0.0,
    };
    let mut rows = crate::cpu::alloc::filled(OP, h * ow, init)?;
    for (row, acc) in src.chunks_exact(w).zip(rows.chunks_exact_mut(ow)) {
        for kx in 0..kw {
            let (lo, hi) = tap_range(kx, sw, pw, w, ow);
            for (ox, a) in acc.iter_mut().enumerate().take(hi).skip(lo) {
                if let Some(&v) = row.get(ox * sw + kx - pw) {
                    *a = fold(kind, *a, v);
                }
            }
        }
    }
    dst.fill(init);
    for ky in 0..kh {
        let (lo, hi) = tap_range(ky, sh, ph, h, oh);
        for oy in lo..hi {
            let iy = oy * sh + ky - ph;
            let (Some(from), Some(to)) = (
                rows.get(iy * ow..(iy + 1) * ow),
                dst.get_mut(oy * ow..(oy + 1) * ow),
            ) else {
                continue;
            };
            for (d, &v) in to.iter_mut().zip(from) {
                *d = fold(kind, *d, v);
            }
        }
    }
    if let PoolKind::Avg(include_pad) = kind {
        // Window sizes are separable: (taps inside along H) x (taps inside along W).
        let count = |o: usize, k: usize, s: usize, p: usize, len: usize| {
            (0..k)
                .filter(|&t| (o * s + t) >= p && (o * s + t) - p < len)
                .count()
        };
        let full = (kh * kw) as f32;
        for (oy, row) in dst.chunks_exact_mut(ow).enumerate() {
            let ch = count(oy, kh, sh, ph, h);
            for (ox, d) in row.iter_mut().enumerate() {
                let n = if include_pad {
                    full
                } else {
                    (ch * count(ox, kw, sw, pw, w)).max(1) as f32
                };
                *d /= n;
            }
        }
    }
    Ok(())
}
