//! Routing of f16 convolutions under the static rules: where the adapter has f16 cooperative
//! matrices, the tensor-core convolution (`mm_coop16` in its gather mode) serves them, i.e.
//! both self-checks (the matmul's and the gather's) passed; elsewhere, or with the autotuner's
//! `gpu_conv2d` candidate `gemm` forced, the FMA kernels do. A child process with the kernel
//! profiler on tells the kernels apart. (The values of every path are checked against the Cpu
//! by `f16_even_channels_on_every_path`.)

use super::common;
use xpu::ops::conv::Conv2dParams;
use xpu::ops::conv_xpu::{conv2d_xpu, ConvXpuArgs};
use xpu::{DType, Device};

const NAME: &str = "coop::tensor_core_convolutions_serve_where_reported";

fn conv_kernels() -> Vec<String> {
    let x = common::randn(&[1, 8, 13, 11], DType::F16, 3)
        .to(Device::Xpu)
        .unwrap();
    let w = common::randn(&[6, 8, 3, 3], DType::F16, 4)
        .to(Device::Xpu)
        .unwrap();
    let p = Conv2dParams {
        padding: (1, 1),
        ..Conv2dParams::default()
    };
    let args = ConvXpuArgs {
        channels_last_out: true,
        ..ConvXpuArgs::default()
    };
    conv2d_xpu(&x, &w, p, &args).unwrap();
    xpu::synchronize().unwrap();
    let rows = xpu::xpu_profile()
        .unwrap()
        .expect("the profiler runs (XPU_PROFILE=1 and timestamp queries)");
    rows.into_iter().map(|r| r.kernel).collect()
}

#[test]
fn tensor_core_convolutions_serve_where_reported() {
    if !common::xpu() || !common::coop16::in_profiled_child(NAME) {
        return;
    }
    use common::coop16::{fma_only, static_rules, tensor_cores};
    // The first call runs the once-per-process self-checks (their dispatches are not counted).
    static_rules(conv_kernels);
    let kernels = static_rules(conv_kernels);
    let coop = kernels.iter().any(|k| k.contains("mm_coop16"));
    assert_eq!(coop, tensor_cores(), "kernels: {kernels:?}");
    let off = fma_only(conv_kernels);
    assert!(
        !off.iter().any(|k| k.contains("mm_coop16")),
        "gemm forced: {off:?}"
    );
}
