//! The memory one UNet forward needs beyond its weights, from the shapes alone
//! ([`UNetConfig::forward_memory`]), and the check every forward runs before any work
//! ([`UNet2DConditionModel::check_forward_memory`]): a sample too large for the device is
//! refused in microseconds with [`crate::Error::MemoryExceeded`], naming the bytes asked and
//! what fits, instead of running for minutes and failing (or being killed) mid-step.
//!
//! The estimate is a lower bound of the peak, so a request is only refused when it cannot fit:
//! the skip activations the down path keeps for the up path (`conv_in`'s output, every down
//! ResNet's or transformer's output, every downsampler's), plus the largest working set of one
//! block (a ResNet holds about three activations of its level at once; a transformer its input,
//! its residual and the feed-forward's hidden states, four times as wide). The largest single
//! buffer is the widest of an up level's skip concatenation (twice the level's channels) and a
//! feed-forward's hidden states. Level `i` has `block_out_channels[i]` channels at
//! `ceil(H / 2^i) × ceil(W / 2^i)` (diffusers' stride-2, padding-1 downsamplers).
//!
//! Invariants: sizes are computed in `u128` and saturate at `u64::MAX` (a saturated figure is
//! refused by any finite budget); the estimate depends only on the config, the batch, the
//! latent size and the dtype.

use super::config::DownBlockType;
use super::{UNet2DConditionModel, UNetConfig};
use crate::{DType, Result};

/// Bytes one UNet forward needs beyond its weights (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardMemory {
    /// Activations alive at the peak plus the largest block's working set.
    pub total: u64,
    /// The largest single buffer.
    pub largest: u64,
}

impl UNetConfig {
    /// The memory a forward of `batch` samples of `height × width` latents in `dtype` needs
    /// beyond the weights: a lower bound of its peak (see the module docs).
    pub fn forward_memory(
        &self,
        batch: usize,
        (height, width): (usize, usize),
        dtype: DType,
    ) -> ForwardMemory {
        let e = dtype.size_in_bytes() as u128;
        let b = batch as u128;
        let (mut h, mut w) = (height as u128, width as u128);
        let (mut skips, mut working, mut largest) = (0u128, 0u128, 0u128);
        let levels = self.levels().min(self.block_out_channels.len());
        for i in 0..levels {
            let c = self.block_out_channels[i] as u128;
            let act = b.saturating_mul(c).saturating_mul(h).saturating_mul(w);
            if i == 0 {
                skips = skips.saturating_add(act);
            }
            let layers = self.layers_per_block.get(i).copied().unwrap_or(1) as u128;
            skips = skips.saturating_add(layers.saturating_mul(act));
            let (nh, nw) = (h.div_ceil(2), w.div_ceil(2));
            if i + 1 < levels {
                let down = b.saturating_mul(c).saturating_mul(nh).saturating_mul(nw);
                skips = skips.saturating_add(down);
            }
            let attention =
                self.down_block_types.get(i) == Some(&DownBlockType::CrossAttnDownBlock2D);
            let block = if attention {
                // Input, residual and the feed-forward's hidden states (4× the channels).
                act.saturating_mul(6)
            } else {
                act.saturating_mul(3)
            };
            working = working.max(block);
            let widest = if attention {
                act.saturating_mul(4)
            } else {
                act.saturating_mul(2)
            };
            largest = largest.max(widest);
            (h, w) = (nh, nw);
        }
        let clamp = |v: u128| u64::try_from(v.saturating_mul(e)).unwrap_or(u64::MAX);
        ForwardMemory {
            total: clamp(skips.saturating_add(working)),
            largest: clamp(largest),
        }
    }
}

impl UNet2DConditionModel {
    /// Refuses, before any work, a forward of `batch` samples of `height × width` latents that
    /// cannot fit the model's device ([`crate::memory_budget`]): [`crate::Error::MemoryExceeded`]
    /// naming the sample, the bytes it needs and what fits. Every forward runs this check.
    pub fn check_forward_memory(
        &self,
        batch: usize,
        (height, width): (usize, usize),
    ) -> Result<()> {
        let need = self
            .config()
            .forward_memory(batch, (height, width), self.dtype());
        let what = format!(
            "one forward of {batch} sample(s) of {height}×{width} latents ({} activations beyond the weights)",
            self.dtype()
        );
        crate::tensor::memory_budget(self.device())?.check(
            "UNet2DConditionModel::forward",
            &what,
            need.total,
            need.largest,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_grows_with_the_sample_and_saturates() {
        let c = UNetConfig::sd15();
        let small = c.forward_memory(2, (64, 64), DType::F32);
        // SD 1.5 at 512×512 (64×64 latents), batch 2: the skips alone are about 53 MB.
        assert!(
            small.total > 100 << 20 && small.total < 1 << 30,
            "{small:?}"
        );
        assert!(small.largest < small.total);
        let half = c.forward_memory(2, (64, 64), DType::F16);
        assert_eq!(half.total, small.total / 2);
        let huge = c.forward_memory(2, (12500, 12500), DType::F32);
        assert!(huge.total > 1 << 40, "{huge:?}");
        let absurd = c.forward_memory(usize::MAX, (usize::MAX, usize::MAX), DType::F32);
        assert_eq!(absurd.total, u64::MAX);
    }
}
