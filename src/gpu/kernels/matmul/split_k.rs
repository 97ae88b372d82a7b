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
//! The static rule ([`auto`]) plans splits only on the tensor-core kernel (the case measured);
//! the large and medium FMA tiles (`matmul_vec4.wgsl`) and the simple engine read the same K
//! ranges and split where the autotuner (family `gpu_split_k`, counts from [`counts`]) measured
//! a split faster, or where one is forced.
//!
//! Invariants: a plan has `S >= 2` splits of `kc` K each (a multiple of the kernel's K step of
//! 32, the last split shorter), so no split is empty; asking for `n` splits gives `n`, or fewer
//! where K in whole steps does not make `n`. The split never changes which products are
//! summed, only their order (f32 partials, one rounding of the output at the end).

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

/// The most splits a product is cut into (the rule's plans never ask for more).
pub(crate) const MAX_SPLITS: usize = TARGET_WORKGROUPS;
/// The counts besides the rule's that the autotuner measures.
const COUNTS: [usize; 5] = [2, 4, 8, 16, 32];

/// The static rule's splits for the tensor-core kernel: split only grids under
/// [`ENOUGH_TILES`], into enough splits to reach about [`TARGET_WORKGROUPS`], each at least
/// [`MIN_SPLIT_K`] long.
pub(crate) fn auto(tiles: usize, k: usize) -> Option<(usize, usize)> {
    if tiles == 0 || tiles >= ENOUGH_TILES {
        return None;
    }
    split(k, TARGET_WORKGROUPS.div_ceil(tiles).min(k / MIN_SPLIT_K))
}

/// The static rule's split count for a product of `tiles` output tiles over `k`: [`auto`]'s
/// plan where the kernel `plans` (the tensor-core kernel), else 1 (whole).
pub(crate) fn rule(tiles: usize, k: usize, plans: bool) -> usize {
    match auto(tiles, k) {
        Some((s, _)) if plans => s,
        _ => 1,
    }
}

/// The split counts worth measuring for a product of `tiles` output tiles (all batches) over
/// `k`, and the index of the rule's: 1 (whole) first; 2, 4, 8, 16 and 32 where the grid has
/// under [`ENOUGH_TILES`] tiles and each split keeps about [`MIN_SPLIT_K`] of K (both judged on
/// their `autotune::bucket`, so one tuning key lists the same counts); and the rule's count,
/// which is [`auto`]'s plan when `plans` (the tensor-core kernel) and 1 otherwise.
pub(crate) fn counts(tiles: usize, k: usize, plans: bool) -> (Vec<usize>, usize) {
    use crate::autotune::bucket;
    let mut list = vec![1];
    if bucket(tiles) < ENOUGH_TILES {
        let most = bucket(k) / MIN_SPLIT_K;
        list.extend(
            COUNTS
                .iter()
                .copied()
                .filter(|&n| n <= most && split(k, n).is_some()),
        );
    }
    let rule = rule(tiles, k, plans);
    let at = match list.iter().position(|&n| n == rule) {
        Some(at) => at,
        None => {
            list.push(rule);
            list.len() - 1
        }
    };
    (list, at)
}

/// `wanted` splits of `k` rounded to whole K steps: `(S, kc)` with `2 <= S <= wanted`, or
/// `None` (one split, or none possible).
pub(crate) fn split(k: usize, wanted: usize) -> Option<(usize, usize)> {
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

    #[test]
    fn counts_list_whole_the_powers_of_two_that_fit_and_the_rule() {
        // Auto's 7 splits for SD's 16x16 level, next to whole and 2 to 16.
        assert_eq!(counts(40, 11520, true), (vec![1, 2, 4, 8, 16, 7], 5));
        // The FMA tiles' rule is whole.
        assert_eq!(counts(40, 11520, false), (vec![1, 2, 4, 8, 16], 0));
        // Enough tiles, or short K: whole only.
        assert_eq!(counts(300, 11520, true), (vec![1], 0));
        assert_eq!(counts(4, 600, true), (vec![1], 0));
        assert_eq!(counts(4, 1100, true), (vec![1, 2], 1));
        assert_eq!(counts(4, 64, false), (vec![1], 0));
        // Every listed count splits K.
        for k in [1000, 1024, 4096, 23040] {
            let (list, _) = counts(10, k, true);
            assert!(list[1..].iter().all(|&n| split(k, n).is_some()), "{k}");
        }
    }
}
