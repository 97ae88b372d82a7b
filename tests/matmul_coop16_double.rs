//! The double-buffered tensor-core layout (`XPU_COOP16_DOUBLE=1`,
//! `shaders/matmul_coop16_double.wgsl`): in a child process (the switch is read once per
//! process) with the kernel profiler on, f16 products over edge sizes, transposes, broadcast
//! batches and every epilogue, a split-K product and a channels-last convolution, each against
//! the Cpu and each checked for the kernel that served it. Where the adapter has f16 cooperative
//! matrices, the double layout must serve everything but GEGLU products (their tiles finish
//! beside their gate tiles, which only the single layout does); elsewhere (lavapipe 22 in CI)
//! the FMA kernels serve and the test covers the routing. On lavapipe 26
//! (`benches/lavapipe_coop/run.sh`) the layout's numbers are checked.

mod common;

use common::coop16::{
    channels_last_conv_kernels, coop_kernel, products_match_the_cpu, split_k_kernels,
};

const NAME: &str = "double_layout_matches_the_cpu_where_it_serves";
const DOUBLE: &str = "matmul_coop16_double.wgsl";
const SINGLE: &str = "matmul_coop16.wgsl";

fn child() {
    let (coop, kernel) = coop_kernel();
    // [m, k, n, transposes (bit 0 A, bit 1 B), batch layout (0 none, 1 A batched, 2 B)]
    let cases = [
        [257, 65, 129, 0, 0],
        [129, 257, 257, 1, 1],
        [300, 1000, 130, 2, 2],
        [1, 17, 3, 3, 0],
        [65, 63, 257, 2, 1],
        [128, 96, 256, 0, 0],
    ];
    products_match_the_cpu(&cases, kernel, |what, e, kernels| {
        let ran = |file: &str| kernels.iter().any(|k| k.starts_with(file));
        assert_eq!(ran(DOUBLE), coop && e != 5, "{what}: {kernels:?}");
        assert_eq!(ran(SINGLE), coop && e == 5, "{what}: {kernels:?}");
    });
    // Few output tiles and a long K: Auto splits K into f32 partial products.
    let kernels = split_k_kernels(false);
    let partials = kernels
        .iter()
        .any(|k| k.starts_with(DOUBLE) && k.contains("->F32"));
    assert_eq!(partials, coop, "split K: {kernels:?}");
    // A padded 3x3 convolution on channels-last f16 input (the gather).
    let kernels = channels_last_conv_kernels([16, 24, 13, 11, 3, 1, 1], 60);
    assert_eq!(
        kernels.iter().any(|k| k.starts_with(DOUBLE)),
        coop,
        "conv: {kernels:?}"
    );
}

#[test]
fn double_layout_matches_the_cpu_where_it_serves() {
    if !common::xpu() {
        return;
    }
    if std::env::var_os("XPU_TEST_DOUBLE_CHILD").is_some() {
        child();
        return;
    }
    common::rerun_profiled(
        NAME,
        &[
            ("XPU_TEST_DOUBLE_CHILD", "1".as_ref()),
            ("XPU_COOP16_DOUBLE", "1".as_ref()),
        ],
    );
}
