//! The f16 tensor-core product (`mm_coop16`): in a child process with the kernel profiler on,
//! f16 products over edge sizes, transposes, broadcast batches and every epilogue (GEGLU
//! included), a split-K product and a channels-last convolution (the gather), each against the
//! Cpu and each checked for the kernel that served it. Where the adapter has f16 cooperative
//! matrices `mm_coop16` must serve them all (the static rules: the autotuner is off here);
//! elsewhere (lavapipe 22 in CI), or with the FMA candidates forced, the FMA kernels serve and
//! the test covers the routing.
//! On Mesa's lavapipe 26 (`XPU_COOP16_ASSUME=1`) the kernel's numbers are checked too.

use crate::common;
use common::coop16::{
    channels_last_conv_kernels, coop_kernel, fma_only, in_profiled_child, products_match_the_cpu,
    split_k_kernels, static_rules,
};

const NAME: &str = "matmul_coop16::tensor_core_products_match_the_cpu";
const COOP16: &str = "matmul_coop16.wgsl";

fn cases(coop: bool, kernel: xpu::MatmulKernel) {
    // [m, k, n, transposes (bit 0 A, bit 1 B), batch layout (0 none, 1 A batched, 2 B)]
    let cases = [
        [257, 65, 129, 0, 0],
        [129, 257, 257, 1, 1],
        [300, 1000, 130, 2, 2],
        [1, 17, 3, 3, 0],
        [65, 63, 257, 2, 1],
        [128, 96, 256, 0, 0],
    ];
    products_match_the_cpu(&cases, kernel, |what, _, kernels| {
        let ran = kernels.iter().any(|k| k.starts_with(COOP16));
        assert_eq!(ran, coop, "{what}: {kernels:?}");
    });
    // Few output tiles and a long K: Auto splits K into f32 partial products.
    let kernels = split_k_kernels(true);
    let partials = kernels
        .iter()
        .any(|k| k.starts_with(COOP16) && k.contains("->F32"));
    assert_eq!(partials, coop, "split K: {kernels:?}");
    // A padded 3x3 convolution on channels-last f16 input (the gather).
    let kernels = channels_last_conv_kernels([16, 24, 13, 11, 3, 1, 1], 60);
    let ran = kernels.iter().any(|k| k.starts_with(COOP16));
    assert_eq!(ran, coop, "conv: {kernels:?}");
}

#[test]
fn tensor_core_products_match_the_cpu() {
    if !common::xpu() || !in_profiled_child(NAME) {
        return;
    }
    let (coop, kernel) = coop_kernel();
    static_rules(|| cases(coop, kernel));
    if coop {
        fma_only(|| cases(false, xpu::MatmulKernel::Auto));
    }
}
