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

use super::super::alloc;
use super::super::elem::FloatElem;
use super::super::parallel;
use super::super::pool;
use super::super::simd::Kernels;
use crate::desc::kinds::{BinaryOp, UnaryOp};
use crate::Result;

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

/// Per-task scratch of the statistics pass (`f32` rows of one block, `f64` channel sums).
struct StatScratch {
    wide: Vec<f32>,
    tiled: Vec<f32>,
    dev: Vec<f32>,
    sq: Vec<f32>,
    sums: Vec<f64>,
    /// The block's group means, per channel.
    means: Vec<f32>,
}

/// Two-pass moments of every group over one block `x` of whole pixels (`f32`).
fn block_moments(k: Kernels, x: &[f32], s: &NhwcSpec, t: &mut StatScratch, out: &mut [Moments]) {
    let (c, cpg) = (s.channels, s.cpg());
    let len = x.len();
    let pixels = len / c.max(1);
    let sums = &mut t.sums;
    sums.fill(0.0);
    for px in x.chunks_exact(c) {
        k.add_assign_f64_f32(sums, px);
    }
    let count = (pixels * cpg) as f64;
    let means = &mut t.means;
    for (m, g) in means.chunks_exact_mut(cpg).zip(sums.chunks_exact(cpg)) {
        m.fill((g.iter().sum::<f64>() / count) as f32);
    }
    // Deviations from the block's group means (formed in f32), squared, summed in f64.
    sums.fill(0.0);
    if k.add_sq_dev_f64_f32(sums, x, means) {
        return moments_out(out, sums, means, cpg, count);
    }
    let tiled = &mut t.tiled[..len];
    for row in tiled.chunks_exact_mut(c) {
        row.copy_from_slice(means);
    }
    let (dev, sq) = (&mut t.dev[..len], &mut t.sq[..len]);
    k.binary_f32(BinaryOp::Sub, x, tiled, dev);
    k.binary_f32(BinaryOp::Mul, dev, dev, sq);
    sums.fill(0.0);
    for px in sq.chunks_exact(c) {
        k.add_assign_f64_f32(sums, px);
    }
    moments_out(out, sums, means, cpg, count);
}

/// Each group's moments from its channels' sums of squared deviations and its mean.
fn moments_out(out: &mut [Moments], sq_sums: &[f64], means: &[f32], cpg: usize, count: f64) {
    for (o, (g, m)) in out
        .iter_mut()
        .zip(sq_sums.chunks_exact(cpg).zip(means.chunks_exact(cpg)))
    {
        *o = Moments {
            count,
            mean: f64::from(m[0]),
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

/// Statistics of every `(batch, group)`, expanded to per-channel affines (an error naming
/// `op` when the host will not allocate the scratch).
fn affines<T: FloatElem>(
    op: &'static str,
    k: Kernels,
    x: &[T],
    s: &NhwcSpec,
    (w, b): (Option<&[f32]>, Option<&[f32]>),
) -> Result<Vec<Affine>> {
    let (c, g) = (s.channels, s.groups.max(1));
    let bp = s.block_pixels();
    let nblocks = s.pixels.div_ceil(bp);
    let tasks = s.batch * nblocks;
    let cap = (bp * c).min(s.pixels * c);
    let scratch = || -> Result<StatScratch> {
        Ok(StatScratch {
            wide: alloc::zeroed(op, if T::as_f32(&x[..0]).is_some() { 0 } else { cap })?,
            tiled: alloc::zeroed(op, cap)?,
            dev: alloc::zeroed(op, cap)?,
            sq: alloc::zeroed(op, cap)?,
            sums: alloc::zeroed(op, c)?,
            means: alloc::zeroed(op, c)?,
        })
    };
    let stats = |t: &mut StatScratch, i: usize| -> Result<Vec<Moments>> {
        let (n, blk) = (i / nblocks.max(1), i % nblocks.max(1));
        let p0 = blk * bp;
        let p1 = (p0 + bp).min(s.pixels);
        let base = n * s.pixels * c;
        let mut out = alloc::filled(op, g, Moments::default())?;
        let Some(xs) = x.get(base + p0 * c..base + p1 * c) else {
            return Ok(out);
        };
        let mut wide = std::mem::take(&mut t.wide);
        match T::as_f32(xs) {
            Some(f) => block_moments(k, f, s, t, &mut out),
            None => {
                let wide = &mut wide[..xs.len()];
                T::load(k, xs, wide);
                block_moments(k, wide, s, t, &mut out);
            }
        }
        t.wide = wide;
        Ok(out)
    };
    let work = s.batch * s.pixels * c;
    let mut per_block: Vec<Vec<Moments>> = alloc::with_capacity(op, tasks)?;
    if work < parallel::PAR_THRESHOLD {
        let mut t = scratch()?;
        for i in 0..tasks {
            per_block.push(stats(&mut t, i)?);
        }
    } else {
        // A few contiguous runs of blocks per thread, one scratch per run; a run whose
        // scratch the host will not allocate ends the op with that error.
        let per = tasks.div_ceil(rayon::current_num_threads() * 4).max(1);
        let runs: Vec<Vec<Vec<Moments>>> = (0..tasks.div_ceil(per))
            .into_par_iter()
            .map(|r| {
                let mut t = scratch()?;
                (r * per..((r + 1) * per).min(tasks))
                    .map(|i| stats(&mut t, i))
                    .collect()
            })
            .collect::<Result<_>>()?;
        per_block.extend(runs.into_iter().flatten());
    }
    let cpg = s.cpg();
    (0..s.batch)
        .map(|n| {
            let mut m = alloc::filled(op, g, Moments::default())?;
            for blk in per_block.iter().skip(n * nblocks).take(nblocks) {
                for (a, &o) in m.iter_mut().zip(blk) {
                    *a = a.merge(o);
                }
            }
            let mut aff = Affine {
                mean: alloc::zeroed(op, c)?,
                scale: alloc::zeroed(op, c)?,
                shift: alloc::zeroed(op, c)?,
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
            Ok(aff)
        })
        .collect()
}

/// Per-task scratch of the normalisation pass.
struct NormScratch {
    wide: Vec<f32>,
    a: Vec<f32>,
    b: Vec<f32>,
    /// The batch item whose per-channel mean, scale and shift are repeated over `a.len()`.
    tiled: Option<(usize, [Vec<f32>; 3])>,
}

/// Normalises `xs` (whole pixels of batch item `n`) into `o` (an error naming `op` when the
/// host will not allocate the tiled affine).
#[allow(clippy::too_many_arguments)]
fn normalise_run<T: FloatElem>(
    op: &'static str,
    k: Kernels,
    xs: &[T],
    o: &mut [T],
    n: usize,
    aff: &[Affine],
    silu: bool,
    t: &mut NormScratch,
) -> Result<()> {
    let len = xs.len();
    let cap = t.a.len();
    let Some(af) = aff.get(n) else { return Ok(()) };
    let xf: &[f32] = match T::as_f32(xs) {
        Some(f) => f,
        None => {
            T::load(k, xs, &mut t.wide[..len]);
            &t.wide[..len]
        }
    };
    let per_channel = (&af.mean[..], &af.scale[..], &af.shift[..]);
    match T::as_f32_mut(o) {
        Some(of) => {
            if k.channel_affine_f32(xf, per_channel, silu, of) {
                return Ok(());
            }
        }
        None => {
            let a = &mut t.a[..len];
            if k.channel_affine_f32(xf, per_channel, silu, a) {
                T::store(k, a, o);
                return Ok(());
            }
        }
    }
    if t.tiled.as_ref().is_none_or(|tl| tl.0 != n) {
        let tile = |v: &[f32]| -> Result<Vec<f32>> {
            let mut t = alloc::zeroed::<f32>(op, cap)?;
            for row in t.chunks_mut(v.len().max(1)) {
                let n = row.len();
                row.copy_from_slice(&v[..n]);
            }
            Ok(t)
        };
        t.tiled = Some((n, [tile(&af.mean)?, tile(&af.scale)?, tile(&af.shift)?]));
    }
    let Some((_, [mean, scale, shift])) = t.tiled.as_ref() else {
        return Ok(());
    };
    let (a, bb) = (&mut t.a[..len], &mut t.b[..len]);
    let (mean, scale, shift) = (&mean[..len], &scale[..len], &shift[..len]);
    k.binary_f32(BinaryOp::Sub, xf, mean, a);
    k.binary_f32(BinaryOp::Mul, a, scale, bb);
    match (silu, T::as_f32_mut(o)) {
        (false, Some(of)) => k.binary_f32(BinaryOp::Add, bb, shift, of),
        (true, Some(of)) => {
            k.binary_f32(BinaryOp::Add, bb, shift, a);
            k.unary_f32(UnaryOp::Silu, a, of);
        }
        (false, None) => {
            k.binary_f32(BinaryOp::Add, bb, shift, a);
            T::store(k, a, o);
        }
        (true, None) => {
            k.binary_f32(BinaryOp::Add, bb, shift, a);
            k.unary_f32(UnaryOp::Silu, a, bb);
            T::store(k, bb, o);
        }
    }
    Ok(())
}

/// Group norm (+ SiLU) of dense NHWC `x` (`batch · pixels · channels` elements) with `f32`
/// per-channel weight and bias; returns dense NHWC output of the same dtype (an error naming
/// `op` when the host will not allocate the output or the scratch).
pub(crate) fn group_norm_nhwc<T: FloatElem>(
    op: &'static str,
    k: Kernels,
    x: &[T],
    params: (Option<&[f32]>, Option<&[f32]>),
    s: &NhwcSpec,
) -> Result<Vec<T>> {
    let c = s.channels;
    let total = s.batch * s.pixels * c;
    if total == 0 || x.len() < total {
        return alloc::zeroed(op, total);
    }
    // Every element is written below (whole pixels, all of them).
    let mut out = pool::take::<T>(op, total)?;
    let aff = affines(op, k, x, s, params)?;
    let block = s.block_pixels() * c;
    let image = s.pixels * c;
    let cap = block.min(total);
    let is_f32 = T::as_f32(&x[..0]).is_some();
    let scratch = || -> Result<NormScratch> {
        Ok(NormScratch {
            wide: alloc::zeroed(op, if is_f32 { 0 } else { cap })?,
            a: alloc::zeroed(op, cap)?,
            b: alloc::zeroed(op, cap)?,
            tiled: None,
        })
    };
    // Blocks of whole pixels (`block` is a multiple of `channels`), split at image boundaries.
    let run = |t: &mut NormScratch, (i, o): (usize, &mut [T])| -> Result<()> {
        let mut at = i * block;
        let mut rest = o;
        while !rest.is_empty() {
            let n = at / image.max(1);
            let len = rest.len().min((n + 1) * image - at);
            let (o, tail) = std::mem::take(&mut rest).split_at_mut(len);
            rest = tail;
            let Some(xs) = x.get(at..at + len) else {
                return Ok(());
            };
            at += len;
            normalise_run(op, k, xs, o, n, &aff, s.silu, t)?;
        }
        Ok(())
    };
    if total < parallel::PAR_THRESHOLD {
        let mut t = scratch()?;
        for io in out.chunks_mut(block).enumerate() {
            run(&mut t, io)?;
        }
    } else {
        // A few runs of whole blocks per thread, one scratch per run; a failed allocation
        // ends the op with its error.
        let per = total
            .div_ceil(block)
            .div_ceil(rayon::current_num_threads() * 4)
            .max(1);
        out.par_chunks_mut(per * block)
            .enumerate()
            .try_for_each(|(r, part)| -> Result<()> {
                let mut t = scratch()?;
                for (j, o) in part.chunks_mut(block).enumerate() {
                    run(&mut t, (r * per + j, o))?;
                }
                Ok(())
            })?;
    }
    Ok(out)
}
