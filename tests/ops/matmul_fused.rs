//! Fused matmul epilogues against the unfused sequence, on each device and dtype, plus the
//! validation errors of the builder.

use crate::common;
use common::{assert_close, eps, randn, values, FLOATS};
use xpu::{Activation, DType, Device, Error, MatmulKernel, Tensor};

const ACTS: [Activation; 5] = [
    Activation::None,
    Activation::Relu,
    Activation::Gelu,
    Activation::GeluTanh,
    Activation::Silu,
];

fn tol(dtype: DType, k: usize) -> f64 {
    let e = if dtype == DType::F32 {
        2e-6
    } else {
        2.0 * eps(dtype)
    };
    e * (k as f64).sqrt() * 4.0 + 1e-5
}

#[test]
fn every_epilogue_matches_the_unfused_sequence() {
    for device in common::devices() {
        for &dtype in &FLOATS {
            for &(m, k, n) in &[(1, 7, 3), (17, 63, 65), (65, 129, 17)] {
                let a = randn(&[2, m, k], dtype, 1).to(device).unwrap();
                let b = randn(&[k, n], dtype, 2).to(device).unwrap();
                let bias = randn(&[n], dtype, 3).to(device).unwrap();
                let c = randn(&[2, m, n], dtype, 4).to(device).unwrap();
                let res = randn(&[m, n], dtype, 5).to(device).unwrap();
                for act in ACTS {
                    let cases = [
                        a.matmul_fused(&b).activation(act),
                        a.matmul_fused(&b).bias(&bias).activation(act),
                        a.matmul_fused(&b)
                            .alpha(0.5)
                            .add_scaled(0.25, &c)
                            .activation(act),
                        a.matmul_fused(&b)
                            .bias(&bias)
                            .activation(act)
                            .residual(&res),
                        a.matmul_fused(&b)
                            .alpha(2.0)
                            .add_scaled(-1.0, &c)
                            .bias(&bias)
                            .activation(act)
                            .residual(&res)
                            .out_dtype(DType::F32),
                    ];
                    for (i, case) in cases.iter().enumerate() {
                        let fused = case.run().unwrap();
                        let unfused = case.run_unfused().unwrap();
                        assert_eq!(fused.shape(), unfused.shape());
                        assert_eq!(fused.dtype(), unfused.dtype());
                        let t = tol(dtype, k);
                        assert_close(
                            &format!("{device} {dtype} {m}x{k}x{n} {act:?} case {i}"),
                            &values(&fused),
                            &values(&unfused),
                            t,
                            t,
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn geglu_matches_the_unfused_sequence() {
    for device in common::devices() {
        for &dtype in &FLOATS {
            let (m, k, n) = (33, 40, 2 * 24);
            let x = randn(&[2, m, k], dtype, 7).to(device).unwrap();
            let w = randn(&[k, n], dtype, 8).to(device).unwrap();
            let bias = randn(&[n], dtype, 9).to(device).unwrap();
            let res = randn(&[2, m, n / 2], dtype, 10).to(device).unwrap();
            let case = x.matmul_fused(&w).bias(&bias).geglu().residual(&res);
            let fused = case.run().unwrap();
            assert_eq!(fused.shape(), &[2, m, n / 2]);
            let t = tol(dtype, k);
            assert_close(
                &format!("{device} {dtype} geglu"),
                &values(&fused),
                &values(&case.run_unfused().unwrap()),
                t,
                t,
            );
            // The definition: h * gelu(g) over the column halves.
            let y = x
                .matmul(&w)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .add(&bias.to_dtype(DType::F32).unwrap())
                .unwrap();
            let want = y
                .narrow(-1, 0, n / 2)
                .unwrap()
                .mul(&y.narrow(-1, n / 2, n / 2).unwrap().gelu().unwrap())
                .unwrap();
            let want = want.add(&res.to_dtype(DType::F32).unwrap()).unwrap();
            assert_close(
                &format!("{device} {dtype} geglu def"),
                &values(&fused),
                &values(&want),
                4.0 * t,
                4.0 * t,
            );
        }
    }
}

/// Per-element relative error of `got` against `want` (a floor of 1e-30 for zeros).
fn worst_relative(got: &[f64], want: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / w.abs().max(1e-30))
        .fold(0.0, f64::max)
}

#[test]
fn gelu_epilogue_keeps_the_negative_tail() {
    // Pre-activations from -9.5 to 3 (GELU down to ~1e-20): the fused GELU and GEGLU must keep
    // each value's relative accuracy there, as the elementwise `gelu` does (the GEMM store
    // once used an erf approximation whose tail was off by 0.5% at -6.6).
    let (m, n) = (64, 32);
    let rows: Vec<f32> = (0..m).map(|i| 0.5 + i as f32 / (2 * m) as f32).collect();
    let gates: Vec<f32> = (0..n)
        .map(|j| -9.5 + 12.5 * j as f32 / (n - 1) as f32)
        .collect();
    let mut w = vec![1.0f32; n];
    w.extend(&gates);
    for device in common::devices() {
        let x = Tensor::from_vec(rows.clone(), &[m, 1], device).unwrap();
        let wg = Tensor::from_vec(gates.clone(), &[1, n], device).unwrap();
        let w2 = Tensor::from_vec(w.clone(), &[1, 2 * n], device).unwrap();
        let fused = x
            .matmul_fused(&wg)
            .activation(Activation::Gelu)
            .run()
            .unwrap();
        let want = x.matmul(&wg).unwrap().gelu().unwrap();
        let err = worst_relative(&values(&fused), &values(&want));
        assert!(err < 2e-5, "{device}: fused GELU tail off by {err:.2e}");
        let geglu = x.matmul_fused(&w2).geglu().run().unwrap();
        let y = x.matmul(&w2).unwrap();
        let gated = y.narrow(1, 0, n).unwrap();
        let want = gated
            .mul(&y.narrow(1, n, n).unwrap().gelu().unwrap())
            .unwrap();
        let err = worst_relative(&values(&geglu), &values(&want));
        assert!(err < 2e-5, "{device}: fused GEGLU tail off by {err:.2e}");
    }
}

#[test]
fn builder_validates_operands() {
    let a = randn(&[4, 6], DType::F32, 1);
    let b = randn(&[6, 5], DType::F32, 2);
    let e = a
        .matmul_fused(&b)
        .bias(&randn(&[4], DType::F32, 3))
        .run()
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && e.to_string().contains("[5]"),
        "{e}"
    );
    let e = a
        .matmul_fused(&b)
        .residual(&randn(&[3, 5], DType::F32, 3))
        .run()
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = a.matmul_fused(&b).geglu().run().unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("even"),
        "{e}"
    );
    let e = a
        .matmul_fused(&b)
        .bias(&randn(&[5], DType::F16, 3))
        .run()
        .unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    let e = a.matmul_fused(&b).out_dtype(DType::BF16).run().unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = a
        .matmul_fused(&randn(&[5, 5], DType::F32, 3))
        .run()
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    if common::xpu() {
        let g = b.to(Device::Xpu).unwrap();
        assert!(matches!(
            a.matmul_fused(&g).run(),
            Err(Error::DeviceMismatch { .. })
        ));
        let ga = a.to(Device::Xpu).unwrap();
        assert!(matches!(
            ga.matmul_fused(&g)
                .bias(&Tensor::zeros(&[5], DType::F32, Device::Cpu).unwrap())
                .run(),
            Err(Error::DeviceMismatch { .. })
        ));
        let _ = MatmulKernel::Auto;
    }
}

/// The Cpu fused product writes into recycled storage (a NaN-filled buffer of the output's
/// size is dropped first), keeps the partial sums of 16-bit outputs in scratch across K blocks
/// (K = 700, batches run one after another above 4M multiply-adds), and reads residuals in
/// place at their strides: transposed, broadcast along rows, broadcast along the batch.
#[test]
fn cpu_fused_products_in_recycled_storage_with_residual_views() {
    let (m, k, n) = (600, 700, 256);
    for &dtype in &FLOATS {
        // Scaled so each sum is O(1): the tolerance is relative to the terms' size, and a
        // GEGLU output h·gelu(g) can be small where h is.
        let a = randn(&[2, m, k], dtype, 21)
            .mul_scalar(1.0 / (k as f64).sqrt())
            .unwrap();
        let b = randn(&[k, 2 * n], dtype, 22);
        let bias = randn(&[2 * n], dtype, 23);
        let residuals = [
            randn(&[n, m], dtype, 24).t().unwrap(),
            randn(&[n], dtype, 25),
            randn(&[m, n], dtype, 26),
            randn(&[2, m, n], dtype, 27),
        ];
        for (i, res) in residuals.iter().enumerate() {
            for geglu in [false, true] {
                let b = if geglu {
                    b.clone()
                } else {
                    b.narrow(1, 0, n).unwrap()
                };
                let bias = if geglu {
                    bias.clone()
                } else {
                    bias.narrow(0, 0, n).unwrap()
                };
                let mut case = a.matmul_fused(&b).bias(&bias).residual(res);
                case = if geglu {
                    case.geglu()
                } else {
                    case.activation(Activation::Silu)
                };
                for _ in 0..2 {
                    let junk = Tensor::full(f64::NAN, &[2, m, n], DType::F32, Device::Cpu);
                    drop(junk.unwrap());
                    let junk16 = Tensor::full(f64::NAN, &[2, m, n], dtype, Device::Cpu);
                    drop(junk16.unwrap());
                    let fused = case.run().unwrap();
                    assert_eq!(fused.shape(), &[2, m, n]);
                    let t = tol(dtype, k);
                    assert_close(
                        &format!("{dtype} residual {i} geglu {geglu}"),
                        &values(&fused),
                        &values(&case.run_unfused().unwrap()),
                        t,
                        t,
                    );
                }
            }
        }
    }
}

/// K = 0: the epilogue alone (bias, activation, residual view), on each device.
#[test]
fn empty_products_run_the_epilogue_alone() {
    for device in common::devices() {
        for &dtype in &FLOATS {
            let a = Tensor::zeros(&[2, 5, 0], dtype, device).unwrap();
            let b = Tensor::zeros(&[0, 6], dtype, device).unwrap();
            let bias = randn(&[6], dtype, 31).to(device).unwrap();
            let res = randn(&[6, 5], dtype, 32).to(device).unwrap().t().unwrap();
            let half = res.narrow(1, 0, 3).unwrap();
            for geglu in [false, true] {
                let case = if geglu {
                    a.matmul_fused(&b).bias(&bias).residual(&half).geglu()
                } else {
                    let case = a.matmul_fused(&b).bias(&bias).residual(&res);
                    case.activation(Activation::Gelu)
                };
                let fused = case.run().unwrap();
                assert_close(
                    &format!("{device} {dtype} K=0 geglu {geglu}"),
                    &values(&fused),
                    &values(&case.run_unfused().unwrap()),
                    1e-6,
                    1e-6,
                );
            }
        }
    }
}
