//! Prepacked Cpu layers with fused stores: `Linear::forward_residual` and `nn::FeedForward`
//! against their unfused op sequences, on every device and float dtype, with residuals that are
//! contiguous, transposed views, broadcasts and 16-bit.

use crate::common;
use common::{assert_close, eps, randn, values, FLOATS};
use xpu::nn::{FeedForward, Linear};
use xpu::{DType, Device, Error, Tensor};

fn tol(dtype: DType, k: usize) -> f64 {
    let base = if dtype == DType::F32 {
        2e-5
    } else {
        8.0 * eps(dtype)
    };
    base * (k as f64).sqrt()
}

/// Residual variants for an output `[2, rows, n]`: contiguous, a transposed view of `[2, n,
/// rows]`, a broadcast `[n]` row.
fn residuals(rows: usize, n: usize, dtype: DType, device: Device) -> Vec<(&'static str, Tensor)> {
    let dense = randn(&[2, rows, n], dtype, 11).to(device).unwrap();
    let transposed = randn(&[2, n, rows], dtype, 12)
        .to(device)
        .unwrap()
        .permute(&[0, 2, 1])
        .unwrap();
    let row = randn(&[n], dtype, 13).to(device).unwrap();
    vec![
        ("dense", dense),
        ("transposed", transposed),
        ("broadcast", row),
    ]
}

#[test]
fn linear_forward_residual_matches_unfused() {
    for device in common::devices() {
        for &dtype in &FLOATS {
            for &(rows, inf, outf) in &[(1, 7, 3), (65, 33, 63), (257, 64, 65)] {
                let w = randn(&[outf, inf], dtype, 1).to(device).unwrap();
                let b = randn(&[outf], dtype, 2).to(device).unwrap();
                let x = randn(&[2, rows, inf], dtype, 3).to(device).unwrap();
                let lin = Linear::new(w, Some(b)).unwrap();
                for (name, r) in residuals(rows, outf, dtype, device) {
                    let got = lin.forward_residual(&x, &r).unwrap();
                    assert_eq!(got.shape(), &[2, rows, outf]);
                    assert_eq!(got.dtype(), dtype);
                    let want = lin
                        .forward(&x)
                        .unwrap()
                        .to_dtype(DType::F32)
                        .unwrap()
                        .add(&r.to_dtype(DType::F32).unwrap())
                        .unwrap();
                    // One rounding fewer than the unfused sequence in 16-bit: one eps slack.
                    let t = tol(dtype, inf) + 2.0 * eps(dtype);
                    assert_close(
                        &format!("{device} {dtype} {rows}x{inf}->{outf} residual {name}"),
                        &values(&got),
                        &values(&want),
                        t,
                        t,
                    );
                }
            }
        }
    }
}

#[test]
fn linear_forward_residual_rejects_bad_residuals() {
    let lin = Linear::new(randn(&[4, 6], DType::F32, 1), None).unwrap();
    let x = randn(&[3, 6], DType::F32, 2);
    assert!(matches!(
        lin.forward_residual(&x, &randn(&[3, 5], DType::F32, 3)),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        lin.forward_residual(&x, &randn(&[3, 4], DType::BF16, 3)),
        Err(Error::DTypeMismatch { .. })
    ));
}

#[test]
fn feedforward_matches_unfused_on_every_device() {
    for device in common::devices() {
        for &dtype in &FLOATS {
            for &(rows, dim, inner) in &[(1, 8, 5), (77, 40, 33), (65, 64, 128)] {
                let x = randn(&[2, rows, dim], dtype, 1).to(device).unwrap();
                let p = |shape: &[usize], seed, scale| {
                    randn(shape, dtype, seed)
                        .mul_scalar(scale)
                        .unwrap()
                        .to(device)
                        .unwrap()
                };
                let (w1, b1) = (p(&[2 * inner, dim], 2, 0.2), p(&[2 * inner], 3, 1.0));
                let (w2, b2) = (p(&[dim, inner], 4, 0.2), p(&[dim], 5, 1.0));
                let ff = FeedForward::new(w1.clone(), b1.clone(), w2.clone(), b2.clone()).unwrap();
                assert_eq!(ff.is_prepacked(), device == Device::Cpu);
                let mut cases = residuals(rows, dim, dtype, device)
                    .into_iter()
                    .map(|(n, r)| (n, Some(r)))
                    .collect::<Vec<_>>();
                cases.push(("none", None));
                for (name, r) in cases {
                    let got = ff.forward(&x, r.as_ref()).unwrap();
                    assert_eq!(got.shape(), &[2, rows, dim]);
                    assert_eq!(got.dtype(), dtype);
                    let want = x
                        .ffn_geglu_unfused(&w1, Some(&b1), &w2, Some(&b2), r.as_ref())
                        .unwrap();
                    let t = tol(dtype, dim + inner);
                    assert_close(
                        &format!("{device} {dtype} ffn {rows}x{dim} inner {inner} residual {name}"),
                        &values(&got),
                        &values(&want),
                        t,
                        t,
                    );
                }
            }
        }
    }
}

#[test]
fn feedforward_rejects_bad_weights_and_inputs() {
    let f = |s: &[usize]| randn(s, DType::F32, 1);
    assert!(matches!(
        FeedForward::new(f(&[10, 8]), f(&[10]), f(&[8, 4]), f(&[8])),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        FeedForward::new(
            f(&[10, 8]),
            f(&[10]),
            f(&[8, 5]),
            randn(&[8], DType::BF16, 1)
        ),
        Err(Error::DTypeMismatch { .. })
    ));
    let ff = FeedForward::new(f(&[10, 8]), f(&[10]), f(&[8, 5]), f(&[8])).unwrap();
    assert!(matches!(
        ff.forward(&f(&[3, 7]), None),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ff.forward(&randn(&[3, 8], DType::BF16, 2), None),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        ff.forward(&f(&[3, 8]), Some(&f(&[3, 5]))),
        Err(Error::ShapeMismatch { .. })
    ));
}

/// Exact values of a tensor as f64 (every f32/f16/bf16 value is exact in f64).
fn exact(t: &Tensor) -> Vec<f64> {
    values(t)
}

/// On the Cpu the prepacked panels are the only copy of a Linear's weight: `weight()` rebuilds
/// it bit for bit (K over several packing blocks, odd N, a transposed source view), `to_dtype`
/// and `to` convert from the panels without keeping a copy in the source layer.
#[test]
fn linear_holds_its_cpu_weight_once_and_gives_it_back_exactly() {
    for &dtype in &FLOATS {
        let w = randn(&[1000, 45], dtype, 21).t().unwrap(); // [45, 1000], transposed view
        let lin = Linear::new(w.clone(), Some(randn(&[45], dtype, 22))).unwrap();
        // Every packed layout (f32, bf16 pairs, AMX tiles) gives the weight back.
        assert!(!lin.holds_weight_tensor(), "{dtype}: packs only");
        let wide = lin.to_dtype(DType::F32).unwrap();
        assert!(!lin.holds_weight_tensor(), "{dtype}: to_dtype kept a copy");
        assert_eq!(exact(wide.weight()), exact(&w), "{dtype}: to_dtype values");
        let x = randn(&[3, 1000], dtype, 23);
        let before = exact(&lin.forward(&x).unwrap());
        let got = lin.weight();
        assert_eq!(got.shape(), &[45, 1000]);
        assert_eq!(got.dtype(), dtype);
        assert!(got.is_contiguous(), "{dtype}: rebuilt weight layout");
        assert_eq!(exact(got), exact(&w), "{dtype}: rebuilt weight");
        assert!(
            lin.holds_weight_tensor(),
            "{dtype}: weight() keeps what it rebuilt"
        );
        assert_eq!(
            exact(&lin.forward(&x).unwrap()),
            before,
            "{dtype}: forward changed"
        );
        for device in common::devices() {
            let moved = lin.to(device).unwrap();
            assert_eq!(exact(moved.weight()), exact(&w), "{dtype}: to({device})");
        }
    }
}

/// The same for FeedForward's two weights (a GEGLU pack and a plain one).
#[test]
fn feedforward_holds_its_cpu_weights_once_and_gives_them_back_exactly() {
    for &dtype in &FLOATS {
        let (dim, inner) = (40, 160);
        let w1 = randn(&[2 * inner, dim], dtype, 31);
        let w2 = randn(&[dim, inner], dtype, 32);
        let (b1, b2) = (randn(&[2 * inner], dtype, 33), randn(&[dim], dtype, 34));
        let ff = FeedForward::new(w1.clone(), b1, w2.clone(), b2).unwrap();
        assert!(!ff.holds_weight_tensors(), "{dtype}: packs only");
        assert_eq!(exact(ff.w1()), exact(&w1), "{dtype}: w1");
        assert_eq!(exact(ff.w2()), exact(&w2), "{dtype}: w2");
        assert_eq!(ff.w1().shape(), &[2 * inner, dim]);
        assert_eq!(ff.w2().shape(), &[dim, inner]);
    }
}

/// The bf16 product method is an autotuner family (`cpu_bf16_product`): each method this CPU
/// can run, forced, runs (the trace says so), matches the f32 product within bf16 rounding,
/// keeps the layer's weight exact (the layer repacks for it from its own panels) and stays in
/// use afterwards; a method this CPU lacks leaves the layer on its rule.
#[test]
fn every_bf16_product_method_runs_when_forced_and_keeps_the_weight() {
    let (rows, k, n) = (37, 70, 45);
    let w = randn(&[n, k], DType::BF16, 41);
    let b = randn(&[n], DType::BF16, 42);
    let x = randn(&[rows, k], DType::BF16, 43);
    let want = common::linear_f32(&x, &w, &b);
    #[cfg(target_arch = "x86_64")]
    let (avx512, dot) = (
        is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("f16c"),
        is_x86_feature_detected!("avx512bf16"),
    );
    #[cfg(not(target_arch = "x86_64"))]
    let (avx512, dot) = (false, false);
    let runs = |method: &str| match method {
        "widen" => avx512,
        "dot" => avx512 && dot,
        _ => avx512 && xpu::cpu::gemm::amx_unavailable_reason().is_none(),
    };
    for method in ["widen", "dot", "amx"] {
        let lin = Linear::new(w.clone(), Some(b.clone())).unwrap();
        let (got, chosen) = xpu::autotune::trace(|| {
            xpu::config::scoped(
                |c| c.autotune.force("cpu_bf16_product", method),
                || lin.forward(&x).unwrap(),
            )
        });
        let ran: Vec<&str> = chosen
            .iter()
            .filter(|c| c.op == "cpu_bf16_product")
            .map(|c| c.candidate.as_str())
            .collect();
        if runs(method) {
            assert_eq!(ran, [method], "forced {method}");
        } else {
            assert!(!ran.contains(&method), "{method} ran on a CPU without it");
        }
        let t = tol(DType::BF16, k);
        assert_close(
            &format!("bf16 {method}"),
            &values(&got),
            &values(&want),
            t,
            t,
        );
        assert_eq!(
            exact(lin.weight()),
            exact(&w),
            "{method}: weight after repacking"
        );
        // Unforced, the layer keeps the packs it now holds.
        let (again, chosen) = xpu::autotune::trace(|| {
            xpu::config::scoped(
                |c| c.autotune.mode = xpu::config::AutotuneMode::Off,
                || lin.forward(&x).unwrap(),
            )
        });
        assert_eq!(values(&again), values(&got), "{method}: same packs after");
        // (AMX packs where AMX is usable have no other candidate unforced: they run directly.)
        if runs(method) && method != "amx" {
            let after: Vec<&str> = chosen.iter().map(|c| c.candidate.as_str()).collect();
            assert_eq!(after, [method], "{method}: still in use");
        }
    }
    // A feed-forward block's two products take the forced method too.
    let (dim, inner) = (40, 96);
    let ff = FeedForward::new(
        randn(&[2 * inner, dim], DType::BF16, 44),
        randn(&[2 * inner], DType::BF16, 45),
        randn(&[dim, inner], DType::BF16, 46),
        randn(&[dim], DType::BF16, 47),
    )
    .unwrap();
    let xf = randn(&[9, dim], DType::BF16, 48);
    let base = ff.forward(&xf, None).unwrap();
    let (got, chosen) = xpu::autotune::trace(|| {
        xpu::config::scoped(
            |c| c.autotune.force("cpu_bf16_product", "widen"),
            || ff.forward(&xf, None).unwrap(),
        )
    });
    if avx512 {
        let ran: Vec<&str> = chosen.iter().map(|c| c.candidate.as_str()).collect();
        assert_eq!(ran, ["widen", "widen"], "both products");
    }
    let t = tol(DType::BF16, inner);
    assert_close("ffn widen", &values(&got), &values(&base), t, t);
}
