//! The lean staging of the tensor-core kernel (`XPU_COOP16_LEAN=1`,
//! `shaders/matmul_coop16_lean.wgsl`): in child processes (the switch is read once per
//! process; one child with naga's bounds clamps, one without) with the kernel profiler on, f16 products against the Cpu whose 128x128 tiles lie
//! inside the matrix (the unchecked fetches) and on its edges (the checked ones, K < 32
//! included), with B row-major and transposed, every epilogue (GEGLU in both B layouts),
//! broadcast batches, K tails and split K; and channels-last convolutions (the lean weight
//! fetch, with the checked gather or, where C is a multiple of 32, the lean one). Where the adapter has f16 cooperative matrices mm_coop16 must serve
//! each; elsewhere (lavapipe 22 in CI) the FMA kernels serve and the test covers the routing.
//! On lavapipe 26 (`benches/lavapipe_coop/run.sh`) the lean fetches' numbers are checked.

mod common;

use common::coop16::{
    channels_last_conv_kernels, coop_kernel, products_match_the_cpu, split_k_kernels,
};

const NAME: &str = "lean_staging_matches_the_cpu";
const SINGLE: &str = "matmul_coop16.wgsl";

fn child() {
    let (coop, kernel) = coop_kernel();
    // [m, k, n, transposes (bit 0 A, bit 1 B), batch layout (0 none, 1 A batched, 2 B)];
    // case i has epilogue i % 6 (5: GEGLU, whose B holds 2n columns).
    let cases = [
        [257, 96, 256, 0, 0],
        [256, 128, 384, 2, 1],
        [300, 1000, 130, 2, 2],
        [128, 110, 128, 0, 0],
        [1, 17, 3, 3, 0],
        [256, 64, 128, 0, 0],
        [129, 96, 256, 2, 0],
        [256, 66, 256, 0, 2],
        [384, 32, 128, 2, 0],
        [128, 256, 129, 0, 1],
        [65, 63, 257, 1, 0],
        [256, 160, 192, 2, 2],
        [256, 20, 128, 2, 0],
        // A transposed with M and K even: mm_coop16's default loop stages A by rows (the lean
        // form leaves these layouts to it), B by columns and by k, every epilogue.
        [256, 96, 130, 1, 0],
        [130, 64, 256, 3, 1],
        [128, 1000, 128, 1, 2],
        [64, 32, 384, 3, 0],
        [256, 128, 128, 1, 0],
        [256, 64, 256, 3, 0],
    ];
    products_match_the_cpu(&cases, kernel, |what, _, kernels| {
        let ran = kernels.iter().any(|k| k.starts_with(SINGLE));
        assert_eq!(ran, coop, "{what}: {kernels:?}");
    });
    for b_transposed in [false, true] {
        let kernels = split_k_kernels(b_transposed);
        let partials = kernels
            .iter()
            .any(|k| k.starts_with(SINGLE) && k.contains("->F32"));
        assert_eq!(
            partials, coop,
            "split K, B transposed {b_transposed}: {kernels:?}"
        );
    }
    // Channels-last convolutions with the lean weight fetch: C not a multiple of 32 (the
    // checked gather): whole 128-channel column tiles and a partial one, padded, strided, K =
    // 9 C with a tail; C a multiple of 32 (the lean gather): rows past M, stride 2 with a
    // partial column tile, a 1x1 kernel, a 5x5 kernel whose taps wrap rows and columns.
    let convs = [
        [16, 128, 13, 11, 3, 1, 1],
        [18, 160, 13, 11, 3, 2, 1],
        [40, 256, 13, 11, 3, 1, 1],
        [32, 128, 13, 11, 3, 1, 1],
        [64, 160, 13, 11, 3, 2, 1],
        [96, 128, 9, 7, 1, 1, 0],
        [32, 128, 10, 10, 5, 1, 2],
    ];
    for (i, case) in convs.into_iter().enumerate() {
        let kernels = channels_last_conv_kernels(case, 100 + 3 * i as u64);
        let ran = kernels.iter().any(|k| k.starts_with(SINGLE));
        assert_eq!(ran, coop, "conv {case:?}: {kernels:?}");
    }
}

#[test]
fn lean_staging_matches_the_cpu() {
    if !common::xpu() {
        return;
    }
    if std::env::var_os("XPU_TEST_LEAN_CHILD").is_some() {
        child();
        return;
    }
    // Also without naga's bounds clamps (`XPU_COOP16_UNCHECKED=1`): the lean stores' word
    // offsets are then the stores' immediate offsets, so their bounds rest on construction.
    for unchecked in ["0", "1"] {
        common::rerun_profiled(
            NAME,
            &[
                ("XPU_TEST_LEAN_CHILD", "1".as_ref()),
                ("XPU_COOP16_LEAN", "1".as_ref()),
                ("XPU_COOP16_UNCHECKED", unchecked.as_ref()),
            ],
        );
    }
}
