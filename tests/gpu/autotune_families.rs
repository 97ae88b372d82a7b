//! The GPU kernel choices as autotuner families: every candidate of `gpu_matmul`,
//! `gpu_split_k`, `gpu_conv2d` and `gpu_attention` forced in turn (`AutotuneConfig::force`),
//! shown to have run by `xpu::autotune::trace` wherever it is valid (elsewhere the family's
//! rule runs instead), and each result checked against the Cpu on odd shapes; and a GPU
//! product measured and reported under `AutotuneMode::Tune`.
//!
//! The tensor-core candidates (`coop16`) are listed only where the adapter has f16
//! cooperative matrices whose self-checks passed (an NVIDIA GPU, or Mesa's lavapipe 26 with
//! `XPU_COOP16_ASSUME=1`); elsewhere forcing them runs the rule, which the tests check too.

use crate::common;
use common::{assert_close, matmul_tol, randn, values};
use xpu::autotune::{bucket, Chosen};
use xpu::config::AutotuneMode;
use xpu::{Conv2dParams, DType, Device, Tensor};

/// `body` with only `forced` candidates forced (none from the environment) and the static
/// rules elsewhere, and the choices it made.
fn forced<R>(forced: &[(&str, &str)], body: impl FnOnce() -> R) -> (R, Vec<Chosen>) {
    xpu::config::scoped(
        |c| {
            c.autotune.mode = AutotuneMode::Off;
            c.autotune.force.clear();
            for (family, name) in forced {
                c.autotune.force(family, name);
            }
        },
        || xpu::autotune::trace(body),
    )
}

/// The candidate `family` chose first in `chosen`.
fn ran<'a>(chosen: &'a [Chosen], family: &str) -> &'a str {
    chosen
        .iter()
        .find(|c| c.op == family)
        .map(|c| c.candidate.as_str())
        .unwrap_or_else(|| panic!("no {family} choice in {chosen:?}"))
}

/// Whether the adapter lists the tensor-core candidates (its self-checks pass where it has
/// the kernels: a failed check is a bug these tests report).
fn tensor_cores() -> bool {
    common::coop16::tensor_cores()
}

/// `[m, k] @ [k, n]` (B stored transposed when `bt`) in `dtype` with a bias, on `device`.
fn product(m: usize, k: usize, n: usize, bt: bool, dtype: DType, device: Device) -> Tensor {
    let seed = (m * 31 + k * 7 + n) as u64;
    let a = randn(&[m, k], dtype, seed).to(device).unwrap();
    let b = if bt {
        randn(&[n, k], dtype, seed + 1)
            .to(device)
            .unwrap()
            .t()
            .unwrap()
    } else {
        randn(&[k, n], dtype, seed + 1).to(device).unwrap()
    };
    let bias = randn(&[n], dtype, seed + 2).to(device).unwrap();
    a.matmul_fused(&b).bias(&bias).run().unwrap()
}

/// Every `gpu_matmul` candidate forced on a GEMV-sized, a skinny and a wide product (f32 and
/// f16, B row-major and transposed): it runs where the family lists it, and matches the Cpu.
#[test]
fn every_gpu_matmul_candidate_runs_where_valid_and_matches_the_cpu() {
    if !common::xpu() {
        return;
    }
    let subgroup = xpu::xpu_features().unwrap().subgroup;
    for dtype in [DType::F32, DType::F16] {
        for (m, k, n, bt) in [
            (3, 65, 33, true),
            (5, 40, 70, false),
            (37, 129, 65, true),
            (131, 67, 129, false),
        ] {
            let (bm, bn) = (bucket(m), bucket(n));
            let want = values(&product(m, k, n, bt, dtype, Device::Cpu));
            for (name, valid) in [
                ("medium4", true),
                ("large4", bm >= 128 && bn >= 128),
                ("skinny", bm <= 64),
                ("gemv", bm <= 16),
                ("gemv_sg", bm <= 16 && bt && subgroup),
                ("coop16", dtype == DType::F16 && bm > 16 && tensor_cores()),
            ] {
                let (got, chosen) = forced(&[("gpu_matmul", name)], || {
                    product(m, k, n, bt, dtype, Device::Xpu)
                });
                let what = format!("{name} {dtype} {m}x{k}x{n} bt {bt}");
                assert_eq!(
                    ran(&chosen, "gpu_matmul") == name,
                    valid,
                    "{what}: {chosen:?}"
                );
                let t = matmul_tol(dtype, k);
                assert_close(&what, &values(&got), &want, t, t);
            }
        }
    }
}

/// The tile shapes of the tensor-core product as pipeline constants (`mm_coop16t`), the
/// `gpu_matmul` candidates besides `coop16` where the adapter has tensor cores.
const TILE_SHAPES: [&str; 6] = [
    "coop16t_4x2_2x4_32_2",
    "coop16t_4x2_2x4_64",
    "coop16t_2x2_4x4_32_2",
    "coop16t_4x4_2x2_32_2",
    "coop16t_4x2_4x4_32",
    "coop16t_2x2_2x2_64_2",
];

/// Every tile shape of `mm_coop16t` forced on f16 products over edge sizes (one tile, ragged
/// tiles, odd K for the element-wise staging), B row-major and transposed (staged both ways),
/// a broadcast batch, every epilogue (bias, activation, residual, alpha/beta with C, f32
/// output) and split K: it runs where the adapter has tensor cores (elsewhere the rule) and
/// matches the Cpu; a GEGLU product never takes it.
#[test]
fn every_tile_shape_of_the_tensor_core_product_matches_the_cpu() {
    if !common::xpu() {
        return;
    }
    let cores = tensor_cores();
    let dt = DType::F16;
    // [m, k, n, B transposed, batch of A]
    let cases = [
        [257, 65, 129, 0, 1],
        [129, 258, 257, 1, 2],
        [300, 1000, 130, 0, 1],
        [65, 7, 65, 1, 1],
        [33, 64, 200, 0, 3],
    ];
    for (ci, [m, k, n, bt, batch]) in cases.into_iter().enumerate() {
        let seed = 100 + 10 * ci as u64;
        let a = randn(&[batch, m, k], dt, seed);
        let b = if bt == 1 {
            randn(&[n, k], dt, seed + 1).t().unwrap()
        } else {
            randn(&[k, n], dt, seed + 1)
        };
        let bias = randn(&[n], dt, seed + 2);
        let res = randn(&[batch, m, n], dt, seed + 3);
        let c = randn(&[m, n], dt, seed + 4);
        let run = |device: Device, epilogue: usize| {
            let (a, b) = (a.to(device).unwrap(), b.to(device).unwrap());
            let (bias, res, c) = (
                bias.to(device).unwrap(),
                res.to(device).unwrap(),
                c.to(device).unwrap(),
            );
            let f = a.matmul_fused(&b);
            let f = match epilogue {
                0 => f.bias(&bias).activation(xpu::Activation::Gelu),
                1 => f.residual(&res).out_dtype(DType::F32),
                _ => f.alpha(0.5).add_scaled(2.0, &c).bias(&bias),
            };
            f.run().unwrap()
        };
        for epilogue in 0..3 {
            let want = values(&run(Device::Cpu, epilogue));
            for name in TILE_SHAPES {
                let (got, chosen) = forced(&[("gpu_matmul", name)], || run(Device::Xpu, epilogue));
                let what = format!("{name} case {ci} epilogue {epilogue}");
                assert_eq!(
                    ran(&chosen, "gpu_matmul") == name,
                    cores,
                    "{what}: {chosen:?}"
                );
                let t = matmul_tol(dt, k);
                assert_close(&what, &values(&got), &want, t, t);
            }
        }
    }
    // Split K: few output tiles and a long odd K, in f32 partials summed by the epilogue pass.
    let (a, b) = (randn(&[2, 130, 2113], dt, 7), randn(&[2113, 129], dt, 8));
    let want = values(&a.matmul(&b).unwrap());
    let (ax, bx) = (a.to(Device::Xpu).unwrap(), b.to(Device::Xpu).unwrap());
    for name in TILE_SHAPES {
        for count in ["2", "3"] {
            let force = [("gpu_matmul", name), ("gpu_split_k", count)];
            let (got, chosen) = forced(&force, || ax.matmul(&bx).unwrap());
            let what = format!("{name} split {count}");
            assert_eq!(
                ran(&chosen, "gpu_matmul") == name,
                cores,
                "{what}: {chosen:?}"
            );
            let t = matmul_tol(dt, 2113);
            assert_close(&what, &values(&got), &want, t, t);
        }
    }
    // GEGLU stays off the tile shapes.
    let (a, b) = (randn(&[300, 64], dt, 9), randn(&[64, 256], dt, 10));
    let want = values(&a.matmul_fused(&b).geglu().run().unwrap());
    let (ax, bx) = (a.to(Device::Xpu).unwrap(), b.to(Device::Xpu).unwrap());
    let (got, chosen) = forced(&[("gpu_matmul", TILE_SHAPES[0])], || {
        ax.matmul_fused(&bx).geglu().run().unwrap()
    });
    assert_ne!(ran(&chosen, "gpu_matmul"), TILE_SHAPES[0], "{chosen:?}");
    let t = matmul_tol(dt, 64);
    assert_close("geglu", &values(&got), &want, t, t);
}

/// Every `gpu_split_k` count forced (whole, the listed powers of two, and 3, which runs
/// wherever K splits though not listed) on the kernels that split K (the medium and large FMA
/// tiles, the simple engine, and the tensor-core kernel where there is one), on a batched
/// product with few tiles and a long odd K: it runs and matches the Cpu; a kernel that does
/// not split K never asks.
#[test]
fn every_gpu_split_k_count_runs_and_matches_the_cpu() {
    if !common::xpu() {
        return;
    }
    let (m, k, n) = (130, 2113, 129);
    let mut kernels = vec![
        (DType::F32, "medium4", xpu::MatmulKernel::Auto),
        (DType::F16, "large4", xpu::MatmulKernel::Auto),
        (DType::BF16, "simple", xpu::MatmulKernel::Simple),
    ];
    if tensor_cores() {
        kernels.push((DType::F16, "coop16", xpu::MatmulKernel::Auto));
    }
    for (dtype, kernel, api) in kernels {
        let a = randn(&[2, m, k], dtype, 1);
        let b = randn(&[k, n], dtype, 2);
        let want = values(&a.matmul(&b).unwrap());
        let (ax, bx) = (a.to(Device::Xpu).unwrap(), b.to(Device::Xpu).unwrap());
        for count in ["1", "2", "4", "3"] {
            let force = [("gpu_matmul", kernel), ("gpu_split_k", count)];
            let (got, chosen) = forced(&force, || ax.matmul_fused(&bx).kernel(api).run().unwrap());
            let what = format!("{kernel} {dtype} split {count}");
            assert_eq!(ran(&chosen, "gpu_matmul"), kernel, "{what}: {chosen:?}");
            assert_eq!(ran(&chosen, "gpu_split_k"), count, "{what}: {chosen:?}");
            let t = matmul_tol(dtype, k);
            assert_close(&what, &values(&got), &want, t, t);
        }
    }
    // The skinny tiles do not split K: no split is chosen.
    let a = randn(&[20, 1500], DType::F32, 3).to(Device::Xpu).unwrap();
    let b = randn(&[1500, 30], DType::F32, 4).to(Device::Xpu).unwrap();
    let force = [("gpu_matmul", "skinny"), ("gpu_split_k", "2")];
    let (_, chosen) = forced(&force, || a.matmul(&b).unwrap());
    assert_eq!(ran(&chosen, "gpu_matmul"), "skinny");
    assert!(!chosen.iter().any(|c| c.op == "gpu_split_k"), "{chosen:?}");
}

/// Every `gpu_conv2d` candidate forced on odd 3x3 convolutions (NCHW and channels-last, f32
/// and f16, even and odd channel counts) and on a strided 5x5 one (no Winograd there): each
/// runs where valid and matches the Cpu.
#[test]
fn every_gpu_conv2d_candidate_runs_where_valid_and_matches_the_cpu() {
    if !common::xpu() {
        return;
    }
    // [n, c, h, w, o, kernel, stride, pad]
    for (ci, &[n, c, h, w, o, ks, stride, pad]) in [
        [2, 6, 9, 7, 10, 3, 1, 1],
        [1, 5, 11, 6, 7, 3, 1, 0],
        [2, 8, 10, 9, 6, 5, 2, 2],
    ]
    .iter()
    .enumerate()
    {
        for dtype in [DType::F32, DType::F16] {
            let p = Conv2dParams {
                stride: (stride, stride),
                padding: (pad, pad),
                ..Default::default()
            };
            let x = randn(&[n, c, h, w], dtype, 10 + ci as u64);
            let wt = randn(&[o, c, ks, ks], dtype, 20 + ci as u64);
            let bias = randn(&[o], dtype, 30 + ci as u64);
            let want = values(&x.conv2d(&wt, Some(&bias), p).unwrap());
            let [xx, wx, bx] = [&x, &wt, &bias].map(|t| t.to(Device::Xpu).unwrap());
            let channels_last = ci % 2 == 1;
            let xx = if channels_last {
                xx.to_memory_format(xpu::MemoryFormat::ChannelsLast)
                    .unwrap()
            } else {
                xx
            };
            let winograd = ks == 3 && stride == 1;
            let even = c % 2 == 0 && o % 2 == 0;
            for (name, valid) in [
                ("gemm", true),
                ("winograd", winograd),
                ("coop16", dtype == DType::F16 && even && tensor_cores()),
            ] {
                let (got, chosen) = forced(&[("gpu_conv2d", name)], || {
                    xx.conv2d(&wx, Some(&bx), p).unwrap()
                });
                let what = format!("{name} {dtype} case {ci}");
                assert_eq!(
                    ran(&chosen, "gpu_conv2d") == name,
                    valid,
                    "{what}: {chosen:?}"
                );
                let t = 2.0 * matmul_tol(dtype, c * ks * ks);
                assert_close(&what, &values(&got), &want, t, t);
            }
        }
    }
}

/// Every tile shape of the tensor-core product forced on f16 convolutions (the gather): 3x3
/// padded with bias, 3x3 stride 2 on 32 channels, 1x1, NCHW and channels-last, and a split K:
/// each runs where the adapter has tensor cores (elsewhere the rule) and matches the Cpu.
#[test]
fn every_tile_shape_of_the_tensor_core_convolution_matches_the_cpu() {
    if !common::xpu() {
        return;
    }
    let cores = tensor_cores();
    let dt = DType::F16;
    // [n, c, h, w, o, kernel, stride, pad]
    for (ci, &[n, c, h, w, o, ks, stride, pad]) in [
        [1, 16, 13, 11, 24, 3, 1, 1],
        [2, 32, 9, 17, 40, 3, 2, 1],
        [1, 34, 7, 5, 8, 1, 1, 0],
    ]
    .iter()
    .enumerate()
    {
        let p = Conv2dParams {
            stride: (stride, stride),
            padding: (pad, pad),
            ..Default::default()
        };
        let x = randn(&[n, c, h, w], dt, 60 + ci as u64);
        let wt = randn(&[o, c, ks, ks], dt, 70 + ci as u64);
        let bias = randn(&[o], dt, 80 + ci as u64);
        let want = values(&x.conv2d(&wt, Some(&bias), p).unwrap());
        let [xx, wx, bx] = [&x, &wt, &bias].map(|t| t.to(Device::Xpu).unwrap());
        let xx = if ci % 2 == 0 {
            xx.to_memory_format(xpu::MemoryFormat::ChannelsLast)
                .unwrap()
        } else {
            xx
        };
        for name in TILE_SHAPES {
            let splits: &[&str] = if ci == 1 { &["1", "2"] } else { &["1"] };
            for &count in splits {
                let force = [("gpu_conv2d", name), ("gpu_split_k", count)];
                let (got, chosen) = forced(&force, || xx.conv2d(&wx, Some(&bx), p).unwrap());
                let what = format!("{name} case {ci} split {count}");
                assert_eq!(
                    ran(&chosen, "gpu_conv2d") == name,
                    cores,
                    "{what}: {chosen:?}"
                );
                let t = 2.0 * matmul_tol(dt, c * ks * ks);
                assert_close(&what, &values(&got), &want, t, t);
            }
        }
    }
}

/// Both `gpu_attention` candidates forced on odd lengths (f32 and f16, with and without a
/// mask): the FMA kernel serves every call, the tensor-core one f16 calls without a mask where
/// the adapter has it; each matches the Cpu.
#[test]
fn every_gpu_attention_candidate_runs_where_valid_and_matches_the_cpu() {
    if !common::xpu() {
        return;
    }
    let (heads, lq, lk, d) = (2, 37, 53, 40);
    for dtype in [DType::F32, DType::F16] {
        for masked in [false, true] {
            let q = randn(&[1, heads, lq, d], dtype, 1);
            let k = randn(&[1, heads, lk, d], dtype, 2);
            let v = randn(&[1, heads, lk, d], dtype, 3);
            let mask = masked.then(|| {
                Tensor::ones(&[lq, lk], DType::U8, Device::Cpu)
                    .unwrap()
                    .tril(3)
                    .unwrap()
            });
            let want = values(
                &q.scaled_dot_product_attention(&k, &v, mask.as_ref(), None)
                    .unwrap(),
            );
            let [qx, kx, vx] = [&q, &k, &v].map(|t| t.to(Device::Xpu).unwrap());
            let mx = mask.as_ref().map(|m| m.to(Device::Xpu).unwrap());
            for (name, valid) in [
                ("fma", true),
                ("coop16", dtype == DType::F16 && !masked && tensor_cores()),
            ] {
                let (got, chosen) = forced(&[("gpu_attention", name)], || {
                    qx.scaled_dot_product_attention(&kx, &vx, mx.as_ref(), None)
                        .unwrap()
                });
                let what = format!("{name} {dtype} masked {masked}");
                assert_eq!(
                    ran(&chosen, "gpu_attention") == name,
                    valid,
                    "{what}: {chosen:?}"
                );
                let t = if dtype == DType::F32 { 1e-4 } else { 1e-2 };
                assert_close(&what, &values(&got), &want, t, t);
            }
        }
    }
}

/// Under `AutotuneMode::Tune` (no cache file) a new GPU problem with several candidates is
/// measured on its first call: the report holds its record with every candidate's time and a
/// winner, and that call and the next give the winner's result (the same bits).
#[test]
fn tune_mode_measures_a_gpu_product_and_reports_it() {
    if !common::xpu() {
        return;
    }
    let (m, k, n) = (7, 83, 45);
    let a = randn(&[m, k], DType::F32, 5);
    let b = randn(&[k, n], DType::F32, 6);
    let want = values(&a.matmul(&b).unwrap());
    let (ax, bx) = (a.to(Device::Xpu).unwrap(), b.to(Device::Xpu).unwrap());
    let tune = |c: &mut xpu::config::Config| {
        c.autotune.mode = AutotuneMode::Tune;
        c.autotune.cache_dir = None;
        c.autotune.force.clear();
    };
    let (got, chosen) =
        xpu::config::scoped(tune, || xpu::autotune::trace(|| ax.matmul(&bx).unwrap()));
    let t = matmul_tol(DType::F32, k);
    assert_close("tuned", &values(&got), &want, t, t);
    let problem = format!("m {} n {} k {}", bucket(m), bucket(n), bucket(k));
    let record = xpu::autotune::report()
        .into_iter()
        .find(|r| r.op == "gpu_matmul" && r.problem.contains(&problem))
        .unwrap_or_else(|| panic!("no gpu_matmul record for {problem}"));
    assert!(record.device.starts_with("gpu "), "{}", record.device);
    let names: Vec<&str> = record.candidates.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["medium4", "skinny", "gemv"], "{record}");
    assert!(
        record.candidates.iter().all(|c| c.ms.is_some()),
        "every candidate agrees with the rule: {record}"
    );
    assert!(names.contains(&record.winner.as_str()), "{record}");
    // The measured call's result is the winner's, as every later call's is.
    assert_eq!(ran(&chosen, "gpu_matmul"), record.winner, "{chosen:?}");
    let (again, chosen) =
        xpu::config::scoped(tune, || xpu::autotune::trace(|| ax.matmul(&bx).unwrap()));
    assert_eq!(ran(&chosen, "gpu_matmul"), record.winner, "{chosen:?}");
    assert_eq!(
        values(&again),
        values(&got),
        "the measured call gave the winner's bits"
    );
}
