//! Split K for the f16 tensor-core products and convolutions (`mm_coop16`): when a product has
//! too few 128x128 output tiles to fill the GPU, each tile's K range is cut into `S` splits that
//! run as separate workgroups, each writing an f32 partial product; the matmul family's
//! `epilogue` pass then sums the partials and applies the fused epilogue once.
//!
//! Why: SD 1.5's 16x16 and 8x8 levels convolve 1280 channels over 512 or 128 output pixels
//! (K = 11520 or 23040): 40 or 10 tiles on a GPU with 132 SMs (an H200), where one convolution
//! took 0.81 ms at 16x16 against 0.43 ms for the same FLOPs at 64x64. The partials cost one f32
//! write and read of `S * M * N` words, small beside the product.
//!
//! Auto plans split only the tensor-core kernel (the case measured); the large and medium FMA
//! tiles (`matmul_vec4.wgsl`) and the simple engine read the same K ranges but split only when
//! forced.
//!
//! Invariants: a plan has `S >= 2` splits of `kc` K each (a multiple of the kernel's K step of
//! 32, the last split shorter), so no split is empty; `config::GpuConfig::split_k` (`XPU_SPLIT_K`)
//! `Some(0)` turns splitting off and `Some(n)` asks for `n` splits wherever K allows (tests use
//! it to cover the path); it is read where the product is dispatched.
//! The split never changes which products are summed, only their order (f32 partials, one
//! rounding of the output at the end).

/// Workgroups a split product aims for (about two per SM on the largest GPUs; wgpu does not
/// report the SM count).
const TARGET_WORKGROUPS: usize = 256;
/// Products with at least this many tiles are not split (on an H200 the 80-tile 640-channel 3x3
/// convolution at 32x32 read 0.371 ms in four splits against 0.363 whole; the 40-tile one at
/// 16x16 0.410 in seven against 0.673; 1024^3, 64 tiles, 0.107 in two against 0.126).
const ENOUGH_TILES: usize = 80;
/// The smallest K of one split (16 steps of 32), so each split's loads are amortised.
const MIN_SPLIT_K: usize = 512;
/// K step of `mm_coop16`.
const K_STEP: usize = 32;

/// The configured split (`config::GpuConfig::split_k`): `Some(0)` off, `Some(n)` forced splits.
fn forced() -> Option<usize> {
    crate::config::with(|c| c.gpu.split_k)
}

/// The splits `(S, kc)` for a product of `tiles` output tiles (all batches) over `k`, or `None`
/// to run it whole.
pub(crate) fn plan(tiles: usize, k: usize) -> Option<(usize, usize)> {
    match forced() {
        Some(n) => split(k, n),
        None => auto(tiles, k),
    }
}

/// The splits the configuration forces for a product over `k` (the simple engine splits only then,
/// so a software adapter covers the split bookkeeping and the summing epilogue pass).
pub(crate) fn forced_plan(k: usize) -> Option<(usize, usize)> {
    forced().and_then(|n| split(k, n))
}

/// Auto's choice: split only grids under [`ENOUGH_TILES`], into enough splits to reach about
/// [`TARGET_WORKGROUPS`], each at least [`MIN_SPLIT_K`] long.
fn auto(tiles: usize, k: usize) -> Option<(usize, usize)> {
    if tiles == 0 || tiles >= ENOUGH_TILES {
        return None;
    }
    split(k, TARGET_WORKGROUPS.div_ceil(tiles).min(k / MIN_SPLIT_K))
}

/// `wanted` splits of `k` rounded to whole K steps: `(S, kc)` with `S >= 2`, or `None`.
fn split(k: usize, wanted: usize) -> Option<(usize, usize)> {
    if wanted < 2 {
        return None;
    }
    let kc = k.div_ceil(wanted).div_ceil(K_STEP) * K_STEP;
    let s = k.div_ceil(kc);
    (s >= 2).then_some((s, kc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_k_without_empty_splits() {
        for k in [1, 31, 32, 33, 63, 64, 65, 1000, 11520, 23040] {
            for wanted in 0..40 {
                if let Some((s, kc)) = split(k, wanted) {
                    assert!(s >= 2 && s <= wanted, "k {k} wanted {wanted}: {s}");
                    assert_eq!(kc % K_STEP, 0);
                    assert!((s - 1) * kc < k && s * kc >= k, "k {k}: {s} x {kc}");
                }
            }
        }
        assert_eq!(split(64, 2), Some((2, 32)));
        assert_eq!(split(33, 2), Some((2, 32)));
        assert_eq!(split(32, 4), None);
    }

    #[test]
    fn small_grids_with_long_k_split() {
        // SD 1.5's 1280-channel 3x3 convolutions at 16x16 and 8x8 (batch 2): 40 and 10 tiles.
        assert_eq!(auto(40, 11520), Some((7, 1664)));
        assert_eq!(auto(10, 23040), Some((26, 896)));
        // Short K, or enough tiles, stays whole.
        assert_eq!(auto(6, 768), None);
        assert_eq!(auto(80, 23040), None);
        assert_eq!(auto(64, 1024), Some((2, 512)));
        assert_eq!(auto(0, 23040), None);
    }
}
