//! Helpers of the tensor-core kernel tests (`matmul_coop16.rs`, `conv_xpu/coop.rs`,
//! `attention_parity/coop.rs`): whether the adapter has the kernels, a child process with the
//! kernel profiler on, the kernels a call ran (profiled), and f16 products over edge cases
//! against the Cpu.

use super::{assert_close, matmul_tol, randn, values};
use xpu::{Activation, DType, Device, MatmulKernel, Tensor};

/// Whether f16 products can take the tensor-core kernels on this adapter.
pub fn tensor_cores() -> bool {
    let f = xpu::xpu_features().unwrap();
    f.cooperative_matrix && f.coop_f16_16x16 && f.subgroup
}

/// `f` with every GPU kernel choice made by the static rules (no measuring, no cached
/// winners): the routing tests tell kernels apart by the profile.
pub fn static_rules<R>(f: impl FnOnce() -> R) -> R {
    xpu::config::scoped(|c| c.autotune.mode = xpu::config::AutotuneMode::Off, f)
}

/// `f` with the FMA kernels forced in every GPU family that has tensor-core candidates (the
/// medium tiles for products, the implicit GEMM for convolutions, the FMA attention), under the
/// static rules otherwise.
pub fn fma_only<R>(f: impl FnOnce() -> R) -> R {
    xpu::config::scoped(
        |c| {
            c.autotune.mode = xpu::config::AutotuneMode::Off;
            c.autotune.force("gpu_matmul", "medium4");
            c.autotune.force("gpu_conv2d", "gemm");
            c.autotune.force("gpu_attention", "fma");
        },
        f,
    )
}

/// True in a process whose kernel profiler is on (the profiler is created with the Xpu context,
/// so a test that tells kernels apart runs in a child process started with `XPU_PROFILE=1`);
/// elsewhere runs test `name` in such a child and returns false.
pub fn in_profiled_child(name: &str) -> bool {
    if xpu::config::get().profile != xpu::config::Profile::Off {
        return true;
    }
    super::rerun_profiled(name, &[]);
    false
}

/// `f`'s result moved to the Cpu, and the kernels its dispatches ran (needs `XPU_PROFILE=1`).
pub fn profiled(f: impl FnOnce() -> Tensor) -> (Tensor, Vec<String>) {
    xpu::synchronize().unwrap();
    xpu::xpu_profile().unwrap();
    let y = f().to(Device::Cpu).unwrap();
    let rows = xpu::xpu_profile()
        .unwrap()
        .expect("XPU_PROFILE=1 and timestamp queries");
    (y, rows.into_iter().map(|r| r.kernel).collect())
}

/// Epilogue `e` (5 is GEGLU) of `a @ b` with `kernel`.
pub fn product(
    a: &Tensor,
    b: &Tensor,
    bias: &Tensor,
    res: &Tensor,
    e: usize,
    k: MatmulKernel,
) -> Tensor {
    let p = a.matmul_fused(b).kernel(k);
    match e {
        0 => p.run(),
        1 => p.bias(bias).activation(Activation::Gelu).run(),
        2 => p
            .alpha(0.5)
            .add_scaled(0.25, res)
            .activation(Activation::Silu)
            .run(),
        3 => p.bias(bias).residual(res).out_dtype(DType::F32).run(),
        4 => p
            .alpha(2.0)
            .bias(bias)
            .activation(Activation::Relu)
            .residual(res)
            .run(),
        _ => p.bias(bias).geglu().residual(res).run(),
    }
    .unwrap()
}

/// f16 products of `cases` (`[m, k, n, transposes (bit 0 A, bit 1 B), batch layout (0 none,
/// 1 A batched, 2 B)]`, case i with epilogue i % 6) on the Xpu with `kernel` against the Cpu;
/// `served(what, epilogue, kernels)` checks the kernels each one ran.
pub fn products_match_the_cpu(
    cases: &[[usize; 5]],
    kernel: MatmulKernel,
    served: impl Fn(&str, usize, &[String]),
) {
    for (ci, &[m, k, n, t, bl]) in cases.iter().enumerate() {
        let e = ci % 6;
        let np = if e == 5 { 2 * n } else { n };
        // A transposed operand is a transposed view taken on each device after the move: the
        // Xpu reads the strided layout.
        let operand = |batch: Option<usize>, r: usize, c: usize, tr: bool, seed: u64| {
            let mut shape: Vec<usize> = batch.into_iter().collect();
            shape.extend(if tr { [c, r] } else { [r, c] });
            let x = randn(&shape, DType::F16, seed);
            let view = |x: Tensor| if tr { x.transpose(-1, -2).unwrap() } else { x };
            (view(x.clone()), view(x.to(Device::Xpu).unwrap()))
        };
        let (a, ax) = operand((bl == 1).then_some(2), m, k, t & 1 == 1, 10 + ci as u64);
        let (b, bx) = operand((bl == 2).then_some(3), k, np, t & 2 == 2, 20 + ci as u64);
        let bias = randn(&[np], DType::F16, 30 + ci as u64);
        let res = randn(&[m, n], DType::F16, 40 + ci as u64);
        let want = product(&a, &b, &bias, &res, e, MatmulKernel::Auto);
        let [biasx, resx] = [&bias, &res].map(|x| x.to(Device::Xpu).unwrap());
        let (got, kernels) = profiled(|| product(&ax, &bx, &biasx, &resx, e, kernel));
        let what = format!("{m}x{k}x{n} case {ci} epilogue {e}");
        let tol = matmul_tol(DType::F16, k);
        assert_close(&what, &values(&got), &values(&want), tol, tol);
        served(&what, e, &kernels);
    }
}

/// Whether the tensor cores serve here, and the kernel that asks for them (`CoopMatrix` where
/// they do, else `Auto`); runs the once-per-process self-check first, so that its dispatches
/// are not counted by the callers' profiles.
pub fn coop_kernel() -> (bool, MatmulKernel) {
    let coop = tensor_cores();
    let a = randn(&[64, 32], DType::F16, 1).to(Device::Xpu).unwrap();
    a.matmul_fused(&a.transpose(0, 1).unwrap()).run().unwrap();
    let kernel = if coop {
        MatmulKernel::CoopMatrix
    } else {
        MatmulKernel::Auto
    };
    (coop, kernel)
}

/// A product with few output tiles and a long K (Auto splits K into f32 partial products;
/// `b_transposed`: B as a transposed weight) against the Cpu: the kernels it ran.
pub fn split_k_kernels(b_transposed: bool) -> Vec<String> {
    let a = randn(&[256, 4096], DType::F16, 50);
    let ax = a.to(Device::Xpu).unwrap();
    let (b, bx) = if b_transposed {
        let b = randn(&[200, 4096], DType::F16, 51);
        let bx = b.to(Device::Xpu).unwrap().t().unwrap();
        (b.t().unwrap(), bx)
    } else {
        let b = randn(&[4096, 200], DType::F16, 51);
        let bx = b.to(Device::Xpu).unwrap();
        (b, bx)
    };
    let want = a.matmul(&b).unwrap();
    let (got, kernels) = profiled(|| ax.matmul(&bx).unwrap());
    let tol = matmul_tol(DType::F16, 4096);
    assert_close("split K", &values(&got), &values(&want), tol, tol);
    kernels
}

/// One channels-last f16 convolution with bias (`[c, o, height, width, kernel, stride, pad]`,
/// batch 2) on the Xpu against the Cpu: the kernels it ran.
pub fn channels_last_conv_kernels(case: [usize; 7], seed: u64) -> Vec<String> {
    let [c, o, h, w, kernel, stride, pad] = case;
    let x = randn(&[2, c, h, w], DType::F16, seed);
    let wt = randn(&[o, c, kernel, kernel], DType::F16, seed + 1);
    let bias = randn(&[o], DType::F16, seed + 2);
    let p = xpu::ops::conv::Conv2dParams {
        stride: (stride, stride),
        padding: (pad, pad),
        ..Default::default()
    };
    let want = x.conv2d(&wt, Some(&bias), p).unwrap();
    let xl = x.to(Device::Xpu).unwrap();
    let xl = xl
        .to_memory_format(xpu::MemoryFormat::ChannelsLast)
        .unwrap();
    let [wx, bx] = [&wt, &bias].map(|t| t.to(Device::Xpu).unwrap());
    let (got, kernels) = profiled(|| xl.conv2d(&wx, Some(&bx), p).unwrap());
    let tol = matmul_tol(DType::F16, c * kernel * kernel);
    let what = format!("conv {case:?}");
    assert_close(&what, &values(&got), &values(&want), tol, tol);
    kernels
}
