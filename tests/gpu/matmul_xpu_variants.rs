//! Every forced Xpu matmul kernel (Simple, each tile kernel; CoopMatrix where the adapter has
//! it, a clear error where it does not) against the Cpu fused engine, over edge sizes,
//! transposed operands, broadcast batches, each epilogue and each float dtype; plus one large
//! product sampled against an f64 reference.

use crate::common;
use common::{assert_close, matmul_tol, randn, values, FLOATS};
use xpu::{Activation, DType, Device, Error, MatmulKernel, Tensor, TileConfig};

const SIZES: [usize; 9] = [1, 3, 17, 63, 64, 65, 127, 129, 257];

/// Every kernel a forced config selects (`TileConfig::Large` and `Medium` name the kernels of
/// their `Vec4` forms).
const KERNELS: [MatmulKernel; 5] = [
    MatmulKernel::Simple,
    MatmulKernel::Tiled(TileConfig::LargeVec4),
    MatmulKernel::Tiled(TileConfig::MediumVec4),
    MatmulKernel::Tiled(TileConfig::Skinny),
    MatmulKernel::Tiled(TileConfig::Gemv),
];

/// A `[rows, cols]` operand (or `[batch, rows, cols]`) on `device`, stored transposed when
/// `t`: a transposed view taken on the device (whatever `Tensor::to` does with strides).
fn operand(
    batch: Option<usize>,
    [rows, cols]: [usize; 2],
    t: bool,
    dtype: DType,
    seed: u64,
    device: Device,
) -> Tensor {
    let mut shape: Vec<usize> = batch.into_iter().collect();
    if t {
        shape.extend([cols, rows]);
        let x = randn(&shape, dtype, seed).to(device).unwrap();
        x.transpose(-1, -2).unwrap()
    } else {
        shape.extend([rows, cols]);
        randn(&shape, dtype, seed).to(device).unwrap()
    }
}

/// Operands of one case on `device`: a, b, bias (product columns), c and residual.
struct Case {
    a: Tensor,
    b: Tensor,
    bias: Tensor,
    c: Tensor,
    res: Tensor,
}

/// Case `ci` (its bits pick transposes, batching and C/residual layouts) with epilogue `e`.
fn case(m: usize, k: usize, n: usize, ci: usize, e: usize, dtype: DType, device: Device) -> Case {
    let (ta, tb) = (ci & 1 == 1, ci & 2 == 2);
    let geglu = e == 4;
    let np = if geglu { 2 * n } else { n };
    // Batch layouts: none, A batched with B broadcast, B batched with A broadcast.
    let (ba, bb, out_b) = match ci % 3 {
        0 => (None, None, None),
        1 => (Some(2), None, Some(2)),
        _ => (None, Some(3), Some(3)),
    };
    let seed = (ci * 7919 + m * 31 + k * 17 + n) as u64;
    let on = |t: Tensor| t.to(device).unwrap();
    let full: Vec<usize> = out_b.into_iter().chain([m, n]).collect();
    let c = match ci % 4 {
        0 => randn(&full, dtype, seed + 3),
        1 => randn(&[n], dtype, seed + 3),
        2 => randn(&[m, 1], dtype, seed + 3),
        _ => randn(&[m, n], dtype, seed + 3),
    };
    // A column-major residual, made on the device (see `operand`).
    let res = if ci.is_multiple_of(2) {
        on(randn(&full, dtype, seed + 4))
    } else {
        on(randn(&[m, n], dtype, seed + 4))
            .transpose(0, 1)
            .unwrap()
            .contiguous()
            .unwrap()
            .transpose(0, 1)
            .unwrap()
    };
    Case {
        a: operand(ba, [m, k], ta, dtype, seed, device),
        b: operand(bb, [k, np], tb, dtype, seed + 1, device),
        bias: on(randn(&[np], dtype, seed + 2)),
        c: on(c),
        res,
    }
}

/// Runs epilogue `e` of case `cs` with `kernel`.
fn run(cs: &Case, e: usize, kernel: MatmulKernel) -> xpu::Result<Tensor> {
    let acts = [
        Activation::None,
        Activation::Relu,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
    ];
    let act = acts[e % acts.len()];
    let b = cs.a.matmul_fused(&cs.b).kernel(kernel);
    match e {
        0 => b.run(),
        1 => b.bias(&cs.bias).activation(act).run(),
        2 => b
            .alpha(0.5)
            .add_scaled(0.25, &cs.c)
            .activation(Activation::Silu)
            .run(),
        3 => b
            .bias(&cs.bias)
            .activation(Activation::GeluTanh)
            .residual(&cs.res)
            .out_dtype(DType::F32)
            .run(),
        4 => b.bias(&cs.bias).geglu().residual(&cs.res).run(),
        _ => b
            .alpha(2.0)
            .add_scaled(-1.0, &cs.c)
            .bias(&cs.bias)
            .activation(Activation::Relu)
            .residual(&cs.res)
            .run(),
    }
}

#[test]
fn every_forced_kernel_matches_the_cpu() {
    if !common::xpu() {
        return;
    }
    let start = std::time::Instant::now();
    let mut checked = 0;
    for (ki, &kernel) in KERNELS.iter().enumerate() {
        for (di, &dtype) in FLOATS.iter().enumerate() {
            for i in 0..SIZES.len() {
                let m = SIZES[i];
                let k = SIZES[(i + 2 * ki + di + 4) % SIZES.len()];
                let n = SIZES[(i * 5 + ki + 2 * di + 1) % SIZES.len()];
                let ci = i + 3 * ki + di;
                let e = ci % 6;
                let cpu = case(m, k, n, ci, e, dtype, Device::Cpu);
                let gpu = case(m, k, n, ci, e, dtype, Device::Xpu);
                let want = run(&cpu, e, MatmulKernel::Auto).unwrap();
                let got = run(&gpu, e, kernel).unwrap();
                assert_eq!(got.shape(), want.shape());
                assert_eq!(got.dtype(), want.dtype());
                let t = matmul_tol(dtype, k);
                assert_close(
                    &format!("{kernel:?} {dtype} {m}x{k}x{n} case {ci} epilogue {e}"),
                    &values(&got),
                    &values(&want),
                    t,
                    t,
                );
                checked += 1;
            }
        }
    }
    eprintln!(
        "{checked} forced-kernel cases in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

/// `TileConfig::Large` and `Medium` name the kernels of their `Vec4` forms: the same bits.
#[test]
fn large_and_medium_are_their_vec4_kernels() {
    if !common::xpu() {
        return;
    }
    let bits = |t: Tensor| -> Vec<u32> {
        let t = t.to_dtype(DType::F32).unwrap();
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    let gpu = case(129, 65, 130, 3, 1, DType::F16, Device::Xpu);
    for (named, vec4) in [
        (TileConfig::Large, TileConfig::LargeVec4),
        (TileConfig::Medium, TileConfig::MediumVec4),
    ] {
        let want = bits(run(&gpu, 1, MatmulKernel::Tiled(vec4)).unwrap());
        let got = bits(run(&gpu, 1, MatmulKernel::Tiled(named)).unwrap());
        assert!(want == got, "{named:?} differs from {vec4:?}");
    }
}

#[test]
fn auto_matches_the_cpu_on_every_epilogue_and_k_zero() {
    if !common::xpu() {
        return;
    }
    for &dtype in &FLOATS {
        for (ci, &(m, k, n)) in [
            (2, 65, 127),
            (17, 64, 3),
            (65, 129, 64),
            (129, 0, 17),
            (3, 257, 1),
            (64, 17, 63),
        ]
        .iter()
        .enumerate()
        {
            for e in 0..6 {
                let ci = ci * 6 + e;
                let cpu = case(m, k, n, ci, e, dtype, Device::Cpu);
                let gpu = case(m, k, n, ci, e, dtype, Device::Xpu);
                let want = run(&cpu, e, MatmulKernel::Auto).unwrap();
                let got = run(&gpu, e, MatmulKernel::Auto).unwrap();
                let t = matmul_tol(dtype, k);
                assert_close(
                    &format!("auto {dtype} {m}x{k}x{n} case {ci} epilogue {e}"),
                    &values(&got),
                    &values(&want),
                    t,
                    t,
                );
            }
        }
    }
}

/// GEMV with K-contiguous B (`case` with ci & 2) on every dtype and epilogue.
fn gemv_col_major_cases() {
    for &dtype in &FLOATS {
        for (i, &(m, k, n)) in [
            (1, 65, 129),
            (4, 257, 63),
            (3, 17, 1),
            (5, 64, 17),
            (2, 129, 65),
        ]
        .iter()
        .enumerate()
        {
            for e in 0..6 {
                let ci = 2 + 4 * (i * 6 + e);
                let cpu = case(m, k, n, ci, e, dtype, Device::Cpu);
                let gpu = case(m, k, n, ci, e, dtype, Device::Xpu);
                let want = run(&cpu, e, MatmulKernel::Auto).unwrap();
                let got = run(&gpu, e, MatmulKernel::Tiled(TileConfig::Gemv)).unwrap();
                let t = matmul_tol(dtype, k);
                assert_close(
                    &format!("gemv {dtype} {m}x{k}x{n} case {ci} epilogue {e}"),
                    &values(&got),
                    &values(&want),
                    t,
                    t,
                );
            }
        }
    }
}

#[test]
fn gemv_col_major_with_subgroups() {
    if common::xpu() {
        gemv_col_major_cases();
    }
}

/// The workgroup-reduction GEMV for K-contiguous B, which adapters with SUBGROUP skip unless
/// the autotuner's `gpu_matmul` candidate `gemv` is forced over `gemv_sg`.
#[test]
fn gemv_col_major_without_subgroups() {
    if common::xpu() {
        xpu::config::scoped(
            |c| c.autotune.force("gpu_matmul", "gemv"),
            gemv_col_major_cases,
        );
    }
}

/// Whether the adapter's driver reports a cooperative-matrix configuration for `dtype`.
fn coop_runs(dtype: DType) -> bool {
    let f = xpu::xpu_features().unwrap();
    f.subgroup && (f.coop_f32_8x8 || (dtype == DType::F16 && f.coop_f16_16x16))
}

#[test]
fn coop_matrix_runs_where_reported_else_is_refused() {
    if !common::xpu() {
        return;
    }
    for (di, &dtype) in FLOATS.iter().enumerate() {
        if !coop_runs(dtype) {
            let a = randn(&[64, 32], dtype, 1).to(Device::Xpu).unwrap();
            let b = randn(&[32, 48], dtype, 2).to(Device::Xpu).unwrap();
            let e = a
                .matmul_fused(&b)
                .kernel(MatmulKernel::CoopMatrix)
                .run()
                .unwrap_err();
            assert!(
                matches!(e, Error::InvalidArgument { .. })
                    && e.to_string().contains("EXPERIMENTAL_COOPERATIVE_MATRIX"),
                "{e}"
            );
            continue;
        }
        // Every edge size, transposes, broadcast batches and epilogue on the forced kernel.
        for i in 0..SIZES.len() {
            let (m, k, n) = (SIZES[i], SIZES[(i + 4 + di) % 9], SIZES[(i * 5 + 1) % 9]);
            let ci = i + di;
            let e = ci % 6;
            let cpu = case(m, k, n, ci, e, dtype, Device::Cpu);
            let gpu = case(m, k, n, ci, e, dtype, Device::Xpu);
            let want = run(&cpu, e, MatmulKernel::Auto).unwrap();
            // A driver whose cooperative matrices fail xpu's self-check gets an error naming
            // it, never numbers: wrong results are the one outcome this test rejects.
            let got = match run(&gpu, e, MatmulKernel::CoopMatrix) {
                Ok(t) => t,
                Err(err) => {
                    let msg = err.to_string();
                    assert!(msg.contains("self-check"), "{msg}");
                    // `XPU_COOP16_ASSUME=1` takes lavapipe 26's cooperative matrices, which run
                    // our kernels exactly: there a refusal is our kernel's fault.
                    assert!(
                        !xpu::config::get().gpu.coop16_assume,
                        "the cooperative kernel was refused with coop16_assume on: {msg}"
                    );
                    eprintln!("cooperative matrices refused after the self-check: {msg}");
                    return;
                }
            };
            let t = matmul_tol(dtype, k);
            let what = format!("coop {dtype} {m}x{k}x{n} case {ci} epilogue {e}");
            assert_close(&what, &values(&got), &values(&want), t, t);
        }
    }
}

/// F16 products large enough for Auto to take the tensor-core kernel where the driver reports
/// one (the tiled kernels elsewhere): every epilogue, odd edges, transposes and batches.
#[test]
fn auto_f16_at_tensor_core_sizes() {
    if !common::xpu() {
        return;
    }
    for (i, &(m, k, n)) in [
        (257, 65, 129),
        (129, 257, 257),
        (128, 31, 128),
        (300, 1000, 130),
        // Whole 128x128 tiles with K a multiple of 16 (the direct-load form's case, where it
        // is on), next to edge tiles.
        (256, 96, 384),
        (384, 160, 200),
    ]
    .iter()
    .enumerate()
    {
        for e in 0..6 {
            let ci = i * 6 + e;
            let cpu = case(m, k, n, ci, e, DType::F16, Device::Cpu);
            let gpu = case(m, k, n, ci, e, DType::F16, Device::Xpu);
            let want = run(&cpu, e, MatmulKernel::Auto).unwrap();
            let got = run(&gpu, e, MatmulKernel::Auto).unwrap();
            let t = matmul_tol(DType::F16, k);
            let what = format!("auto f16 {m}x{k}x{n} case {ci} epilogue {e}");
            assert_close(&what, &values(&got), &values(&want), t, t);
        }
    }
}

#[test]
fn devices_report_matmul_paths() {
    for a in xpu::devices() {
        let dts: Vec<DType> = a.matmul_paths.iter().map(|(d, _)| *d).collect();
        assert_eq!(dts, FLOATS.to_vec(), "{}", a.name);
        assert!(a.matmul_paths.iter().all(|(_, p)| p.contains("tiled")));
    }
}

/// Large square product on Xpu, sampled against f64 dot products.
#[test]
fn large_product_against_f64_reference() {
    if !common::xpu() {
        return;
    }
    let s: usize = std::env::var("XPU_LARGE_MATMUL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(LARGE);
    let a = randn(&[s, s], DType::F32, 11);
    let b = randn(&[s, s], DType::F32, 12);
    let start = std::time::Instant::now();
    let y = a
        .to(Device::Xpu)
        .unwrap()
        .matmul(&b.to(Device::Xpu).unwrap())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{s}^3 f32 on Xpu in {secs:.2} s ({:.2} GFLOP/s)",
        2.0 * (s as f64).powi(3) / secs / 1e9
    );
    let (av, bv) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    for t in 0..256 {
        let (i, j) = ((t * 7919 + 13) % s, (t * 104_729 + 5) % s);
        let want: f64 = (0..s)
            .map(|p| f64::from(av[i * s + p]) * f64::from(bv[p * s + j]))
            .sum();
        let got = f64::from(y[i * s + j]);
        assert!(
            (got - want).abs() <= 1e-5 * (s as f64).sqrt() * 4.0,
            "[{i},{j}]: got {got}, want {want}"
        );
    }
}

/// Side of the large product (at least 2048^3 on both devices). On lavapipe it takes 25-50 s
/// (0.35-0.7 GFLOP/s on 2 cores); `XPU_LARGE_MATMUL=N` picks another size.
const LARGE: usize = 2048;
