//! Group norm of dense channels-last data (`[N, C, H, W]` stored as NHWC): the Cpu kernel behind
//! [`crate::Tensor::group_norm`] for channels-last inputs; the output is dense NHWC too.
//!
//! Invariants:
//! - The data is read as row-major `[batch, pixels, channels]`; the channels of group `g` are the
//!   run `g·cpg .. (g+1)·cpg` inside every pixel. Nothing is transposed or gathered.
//! - Statistics are exact two-pass per block of whole pixels (a block is at most [`BLOCK`]
//!   elements, so its second pass reads the cache): the block's per-channel sums are accumulated
//!   in `f64`, its group means formed in `f64`, the deviations `x - mean` in `f32` and their
//!   squares summed in `f64`. Blocks are merged per `(batch, group)` in block order with Chan's
//!   pairwise formula (`f64`), so the result does not depend on the thread count; the variance
//!   is biased, as PyTorch's.
//! - The output is `(x - mean) · (rstd · w[c]) + b[c]` (optionally SiLU'd) in `f32`, rounded once
//!   to the input dtype: the NCHW kernel's formula, up to `f32` rounding of the statistics.

use rayon::prelude::*;

use super::super::elem::FloatElem;
use super::super::parallel;
use super::super::simd::Kernels;
use crate::ops::kinds::UnaryOp;

/// Elements per statistics / normalisation block (64 KiB of `f32`).
const BLOCK: usize = 1 << 14;

/// Geometry of a channels-last group norm.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NhwcSpec {
    pub batch: usize,
    pub pixels: usize,
    pub channels: usize,
    pub groups: usize,
    pub eps: f32,
    pub silu: bool,
}

impl NhwcSpec {
    fn cpg(&self) -> usize {
        self.channels / self.groups.max(1)
    }

    /// Pixels per block (at least one).
    fn block_pixels(&self) -> usize {
        (BLOCK / self.channels.max(1)).max(1)
    }
}

/// `(count, mean, M2)` of one group over some elements.
#[derive(Clone, Copy, Debug, Default)]
struct Moments {
    count: f64,
    mean: f64,
    m2: f64,
}

impl Moments {
    /// Chan et al.'s pairwise merge (exact in exact arithmetic, stable in `f64`).
    fn merge(self, o: Moments) -> Moments {
        let count = self.count + o.count;
        if count == 0.0 {
            return self;
        }
        let delta = o.mean - self.mean;
        Moments {
            count,
            mean: self.mean + delta * (o.count / count),
            m2: self.m2 + o.m2 + delta * delta * (self.count * o.count / count),
        }
    }
}

/// Two-pass moments of every group over one block `x` of whole pixels (`f32`).
fn block_moments(x: &[f32], s: &NhwcSpec, sums: &mut [f64], out: &mut [Moments]) {
    let (c, cpg) = (s.channels, s.cpg());
    let pixels = x.len() / c.max(1);
    sums.fill(0.0);
    for px in x.chunks_exact(c) {
        for (a, &v) in sums.iter_mut().zip(px) {
            *a += f64::from(v);
        }
    }
    let count = (pixels * cpg) as f64;
    let means: Vec<f32> = sums
        .chunks_exact(cpg)
        .map(|g| (g.iter().sum::<f64>() / count) as f32)
        .collect();
    sums.fill(0.0);
    for px in x.chunks_exact(c) {
        for ((a, xs), &m) in sums
            .chunks_exact_mut(cpg)
            .zip(px.chunks_exact(cpg))
            .zip(&means)
        {
            for (a, &v) in a.iter_mut().zip(xs) {
                let d = v - m;
                *a += f64::from(d * d);
            }
        }
    }
    for ((o, g), &m) in out.iter_mut().zip(sums.chunks_exact(cpg)).zip(&means) {
        *o = Moments {
            count,
            mean: f64::from(m),
            m2: g.iter().sum::<f64>(),
        };
    }
}

/// Per batch item: the per-channel `(mean, scale, shift)` of the normalisation, `f32`.
struct Affine {
    mean: Vec<f32>,
    scale: Vec<f32>,
    shift: Vec<f32>,
}

/// Statistics of every `(batch, group)`, expanded to per-channel affines.
fn affines<T: FloatElem>(
    k: Kernels,
    x: &[T],
    s: &NhwcSpec,
    w: Option<&[f32]>,
    b: Option<&[f32]>,
) -> Vec<Affine> {
    let (c, g) = (s.channels, s.groups.max(1));
    let bp = s.block_pixels();
    let nblocks = s.pixels.div_ceil(bp);
    let tasks = s.batch * nblocks;
    let stats = |t: usize| {
        let (n, blk) = (t / nblocks.max(1), t % nblocks.max(1));
        let p0 = blk * bp;
        let p1 = (p0 + bp).min(s.pixels);
        let base = n * s.pixels * c;
        let mut out = vec![Moments::default(); g];
        let Some(xs) = x.get(base + p0 * c..base + p1 * c) else {
            return out;
        };
        let mut sums = vec![0f64; c];
        match T::as_f32(xs) {
            Some(f) => block_moments(f, s, &mut sums, &mut out),
            None => {
                let mut wide = vec![0f32; xs.len()];
                T::load(k, xs, &mut wide);
                block_moments(&wide, s, &mut sums, &mut out);
            }
        }
        out
    };
    let work = s.batch * s.pixels * c;
    let per_block: Vec<Vec<Moments>> = if work < parallel::PAR_THRESHOLD {
        (0..tasks).map(stats).collect()
    } else {
        (0..tasks).into_par_iter().map(stats).collect()
    };
    let cpg = s.cpg();
    (0..s.batch)
        .map(|n| {
            let mut m = vec![Moments::default(); g];
            for blk in per_block.iter().skip(n * nblocks).take(nblocks) {
                for (a, &o) in m.iter_mut().zip(blk) {
                    *a = a.merge(o);
                }
            }
            let mut aff = Affine {
                mean: vec![0.0; c],
                scale: vec![0.0; c],
                shift: vec![0.0; c],
            };
            for ch in 0..c {
                let gm = m[ch / cpg.max(1)];
                let var = if gm.count > 0.0 {
                    gm.m2 / gm.count
                } else {
                    0.0
                };
                let rstd = (1.0 / (var + f64::from(s.eps)).sqrt()) as f32;
                aff.mean[ch] = gm.mean as f32;
                aff.scale[ch] = rstd * w.and_then(|w| w.get(ch)).copied().unwrap_or(1.0);
                aff.shift[ch] = b.and_then(|b| b.get(ch)).copied().unwrap_or(0.0);
            }
            aff
        })
        .collect()
}

/// Group norm (+ SiLU) of dense NHWC `x` (`batch · pixels · channels` elements) with `f32`
/// per-channel weight and bias; returns dense NHWC output of the same dtype.
pub(crate) fn group_norm_nhwc<T: FloatElem>(
    k: Kernels,
    x: &[T],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    s: &NhwcSpec,
) -> Vec<T> {
    let c = s.channels;
    let total = s.batch * s.pixels * c;
    let mut out = vec![T::zeroed(); total];
    if total == 0 || x.len() < total {
        return out;
    }
    let aff = affines(k, x, s, w, b);
    let block = s.block_pixels() * c;
    parallel::for_each_chunk(&mut out, c, 4 * c, |start, chunk| {
        let cap = block.min(chunk.len());
        let mut wide = vec![0f32; if T::as_f32(&x[..0]).is_some() { 0 } else { cap }];
        let mut y = vec![0f32; cap];
        let mut act = vec![0f32; if s.silu { cap } else { 0 }];
        let mut at = start;
        for o in chunk.chunks_mut(block) {
            let len = o.len();
            let Some(xs) = x.get(at..at + len) else {
                return;
            };
            let xf: &[f32] = match T::as_f32(xs) {
                Some(f) => f,
                None => {
                    T::load(k, xs, &mut wide[..len]);
                    &wide[..len]
                }
            };
            for (p, (yp, xp)) in y[..len].chunks_mut(c).zip(xf.chunks(c)).enumerate() {
                let n = (at / c + p) / s.pixels.max(1);
                let Some(a) = aff.get(n) else { return };
                let rows = yp.iter_mut().zip(xp).zip(&a.mean).zip(&a.scale);
                for ((((yo, &xv), &m), &sc), &sh) in rows.zip(&a.shift) {
                    *yo = (xv - m) * sc + sh;
                }
            }
            if s.silu {
                k.unary_f32(UnaryOp::Silu, &y[..len], &mut act[..len]);
                T::store(k, &act[..len], o);
            } else {
                T::store(k, &y[..len], o);
            }
            at += len;
        }
    });
    out
}
