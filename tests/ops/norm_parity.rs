//! Normalisation (layer_norm, group_norm, group_norm_silu): Cpu against a plain f64 reference
//! and Xpu against Cpu, over channel counts, group counts, spatial sizes, batches, dtypes,
//! optional weight/bias, fused SiLU, strided views, large-offset inputs, and every error case.

use crate::common;
use common::{assert_close, eps, randn, values, FLOATS};
use xpu::{DType, Device, Error, Tensor};

const EPS: f64 = 1e-5;

/// How a case is normalised: layer norm (last dim) or group norm with `groups`.
#[derive(Clone, Copy)]
enum Kind {
    Layer,
    Group(usize, bool),
}

/// Plain f64 reference of PyTorch's layer_norm / group_norm (+ SiLU).
fn reference(
    x: &[f64],
    shape: &[usize],
    kind: Kind,
    w: Option<&[f64]>,
    b: Option<&[f64]>,
) -> Vec<f64> {
    let n: usize = shape.iter().product();
    let (channels, groups, inner, silu) = match kind {
        Kind::Layer => (*shape.last().unwrap(), 1, 1, false),
        Kind::Group(g, silu) => (shape[1], g, shape[2..].iter().product(), silu),
    };
    let len = channels / groups * inner;
    let mut out = vec![0.0; n];
    for r in 0..n / len.max(1) {
        let row = &x[r * len..(r + 1) * len];
        let mean = row.iter().sum::<f64>() / len as f64;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / len as f64;
        for (j, &v) in row.iter().enumerate() {
            let c = (r % groups) * (channels / groups) + j / inner;
            let mut y = (v - mean) / (var + EPS).sqrt();
            y = y * w.map_or(1.0, |w| w[c]) + b.map_or(0.0, |b| b[c]);
            if silu {
                y /= 1.0 + (-y).exp();
            }
            out[r * len + j] = y;
        }
    }
    out
}

fn run(x: &Tensor, kind: Kind, w: Option<&Tensor>, b: Option<&Tensor>) -> xpu::Result<Tensor> {
    match kind {
        Kind::Layer => x.layer_norm(w, b, EPS),
        Kind::Group(g, false) => x.group_norm(g, w, b, EPS),
        Kind::Group(g, true) => x.group_norm_silu(g, w, b, EPS),
    }
}

/// Tolerance (atol = rtol) of one output: f32 arithmetic, then one rounding to `dtype`.
fn tol(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 2e-5,
        _ => 2.0 * eps(dtype),
    }
}

/// Checks one case on Cpu against the reference and on Xpu (if present) against Cpu.
/// `x`, `w`, `b` are Cpu tensors, moved to the Xpu as they are (`Tensor::to` keeps dense views'
/// strides but makes slices contiguous: for views with gaps use `check_views`).
fn check(what: &str, xpu: bool, x: &Tensor, kind: Kind, w: Option<&Tensor>, b: Option<&Tensor>) {
    check_views(what, xpu, kind, |device| {
        let to = |t: &Tensor| t.to(device).unwrap();
        (to(x), w.map(to), b.map(to))
    });
}

/// `x`, weight and bias on a device.
type Operands = (Tensor, Option<Tensor>, Option<Tensor>);

/// `check` for operands that `make` builds on the given device, any views taken there after
/// the move, so the Xpu reads the same views as the Cpu.
fn check_views(what: &str, xpu: bool, kind: Kind, make: impl Fn(Device) -> Operands) {
    let (x, w, b) = make(Device::Cpu);
    let (w, b) = (w.as_ref(), b.as_ref());
    let dtype = x.dtype();
    let want = reference(
        &values(&x.contiguous().unwrap()),
        x.shape(),
        kind,
        w.map(values).as_deref(),
        b.map(values).as_deref(),
    );
    let cpu = run(&x, kind, w, b).unwrap();
    assert_eq!(cpu.shape(), x.shape(), "{what}");
    assert_eq!(cpu.dtype(), dtype, "{what}");
    let t = tol(dtype);
    assert_close(&format!("cpu {what}"), &values(&cpu), &want, t, t);
    if xpu {
        let (gx, gw, gb) = make(Device::Xpu);
        assert_eq!(gx.strides(), x.strides(), "{what}: Xpu view");
        let gpu = run(&gx, kind, gw.as_ref(), gb.as_ref()).unwrap();
        assert_eq!(gpu.shape(), x.shape(), "{what}");
        assert_eq!(gpu.dtype(), dtype, "{what}");
        assert_close(&format!("xpu {what}"), &values(&gpu), &values(&cpu), t, t);
    }
}

#[test]
fn group_norm_sweep() {
    let xpu = common::xpu();
    let mut seed = 0;
    for &dtype in &FLOATS {
        for channels in [3usize, 5, 32, 33] {
            let divisor = match channels {
                32 => Some(8),
                33 => Some(11),
                _ => None,
            };
            let groups = [Some(1), Some(channels), divisor];
            for spatial in [1usize, 7, 13] {
                for batch in [1usize, 2] {
                    let shape = [batch, channels, spatial];
                    seed += 1;
                    let x = randn(&shape, dtype, seed);
                    let w = randn(&[channels], dtype, seed + 1000);
                    let b = randn(&[channels], dtype, seed + 2000);
                    for g in groups.into_iter().flatten() {
                        for silu in [false, true] {
                            for affine in [false, true] {
                                let what =
                                    format!("{dtype} {shape:?} g{g} silu {silu} affine {affine}");
                                let (w, b) = if affine {
                                    (Some(&w), Some(&b))
                                } else {
                                    (None, None)
                                };
                                check(&what, xpu, &x, Kind::Group(g, silu), w, b);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn group_norm_ranks_partial_affine_and_large() {
    let xpu = common::xpu();
    for &dtype in &FLOATS {
        // Rank 2 ([N, C]) and rank 4 ([N, C, H, W]); weight only, bias only.
        let x = randn(&[4, 6], dtype, 1);
        let w = randn(&[6], dtype, 2);
        let b = randn(&[6], dtype, 3);
        check(
            &format!("{dtype} rank 2 w"),
            xpu,
            &x,
            Kind::Group(3, false),
            Some(&w),
            None,
        );
        let x = randn(&[2, 6, 3, 5], dtype, 4);
        check(
            &format!("{dtype} rank 4 b"),
            xpu,
            &x,
            Kind::Group(2, true),
            None,
            Some(&b),
        );
    }
    // A diffusers-sized block once: [2, 32, 64, 64], 8 groups (rows of 16K elements).
    let x = randn(&[2, 32, 64, 64], DType::F16, 5);
    let w = randn(&[32], DType::F16, 6);
    let b = randn(&[32], DType::F16, 7);
    check(
        "f16 64x64",
        xpu,
        &x,
        Kind::Group(8, true),
        Some(&w),
        Some(&b),
    );
}

#[test]
fn layer_norm_sweep() {
    let xpu = common::xpu();
    for &dtype in &FLOATS {
        for (i, shape) in [
            &[1usize, 3][..],
            &[2, 7, 5],
            &[13, 32],
            &[3, 33],
            &[2, 1000],
            &[1, 4096],
        ]
        .iter()
        .enumerate()
        {
            let c = *shape.last().unwrap();
            let x = randn(shape, dtype, 10 + i as u64);
            let w = randn(&[c], dtype, 20 + i as u64);
            let b = randn(&[c], dtype, 30 + i as u64);
            for (wo, bo) in [
                (None, None),
                (Some(&w), Some(&b)),
                (Some(&w), None),
                (None, Some(&b)),
            ] {
                let what = format!(
                    "layer {dtype} {shape:?} w {} b {}",
                    wo.is_some(),
                    bo.is_some()
                );
                check(&what, xpu, &x, Kind::Layer, wo, bo);
            }
        }
    }
}

#[test]
fn strided_views() {
    let xpu = common::xpu();
    for &dtype in &FLOATS {
        // Every view is taken on the device after the move (`Tensor::to` would make the
        // slices contiguous).
        let on = |shape: &[usize], seed: u64, device: Device| {
            randn(shape, dtype, seed).to(device).unwrap()
        };
        // Weight/bias as views with an odd offset (exercises packed 16-bit lanes on the Xpu).
        let w = |device| on(&[7], 41, device).narrow(0, 1, 6).unwrap();
        let b = |device| on(&[9], 42, device).narrow(0, 3, 6).unwrap();
        // NHWC storage viewed as NCHW.
        check_views(
            &format!("{dtype} permuted"),
            xpu,
            Kind::Group(3, true),
            |device| {
                let x = on(&[2, 5, 4, 6], 40, device)
                    .permute(&[0, 3, 1, 2])
                    .unwrap();
                assert!(!x.is_contiguous());
                (x, Some(w(device)), Some(b(device)))
            },
        );
        // Narrowed channels: [2, 9, 7] -> [2, 6, 7] starting at channel 1.
        check_views(
            &format!("{dtype} narrowed"),
            xpu,
            Kind::Group(2, false),
            |device| {
                let x = on(&[2, 9, 7], 43, device).narrow(1, 1, 6).unwrap();
                (x, Some(w(device)), None)
            },
        );
        // Layer norm of a transposed matrix and of a contiguous view with an odd offset.
        check_views(&format!("{dtype} transposed"), xpu, Kind::Layer, |device| {
            let x = on(&[6, 11], 44, device).t().unwrap();
            (x, Some(w(device)), Some(b(device)))
        });
        check_views(&format!("{dtype} offset"), xpu, Kind::Layer, |device| {
            let x = on(&[5, 6], 45, device).narrow(0, 1, 3).unwrap();
            (x, None, Some(b(device)))
        });
    }
}

#[test]
fn large_offset_is_stable() {
    let xpu = common::xpu();
    // Values around 1000 with a spread small against the offset (scaled so the dtype still
    // resolves it); a one-pass E[x^2] - E[x]^2 in f32 would lose the variance entirely.
    for (dtype, scale) in [(DType::F32, 0.01), (DType::F16, 1.0), (DType::BF16, 16.0)] {
        let x = |shape: &[usize], seed| {
            randn(shape, DType::F32, seed)
                .affine(scale, 1000.0)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
        };
        let w = randn(&[32], dtype, 51);
        let b = randn(&[32], dtype, 52);
        let g = x(&[2, 32, 9, 9], 50);
        check(
            &format!("{dtype} offset group"),
            xpu,
            &g,
            Kind::Group(4, false),
            Some(&w),
            Some(&b),
        );
        let l = x(&[7, 32], 53);
        check(
            &format!("{dtype} offset layer"),
            xpu,
            &l,
            Kind::Layer,
            Some(&w),
            Some(&b),
        );
    }
}

#[test]
fn errors_name_the_op_and_the_expectation() {
    for device in common::devices() {
        let x = Tensor::zeros(&[2, 6, 3], DType::F32, device).unwrap();
        let w6 = Tensor::ones(&[6], DType::F32, device).unwrap();
        let w3 = Tensor::ones(&[3], DType::F32, device).unwrap();
        let e = x.group_norm(4, None, None, EPS).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "group_norm",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("divide the 6 channels"), "{e}");
        let e = x.group_norm_silu(0, None, None, EPS).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "group_norm_silu",
                    ..
                }
            ),
            "{e}"
        );
        let e = x.group_norm(2, Some(&w3), None, EPS).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ShapeMismatch {
                    op: "group_norm",
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string().contains("[6]") && e.to_string().contains("[3]"),
            "{e}"
        );
        let e = x.layer_norm(None, Some(&w6), EPS).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ShapeMismatch {
                    op: "layer_norm",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("bias of shape [3]"), "{e}");
        let w16 = w6.to_dtype(DType::F16).unwrap();
        let e = x.group_norm(2, Some(&w16), None, EPS).unwrap_err();
        assert!(
            matches!(
                e,
                Error::DTypeMismatch {
                    op: "group_norm",
                    ..
                }
            ),
            "{e}"
        );
        let xi = Tensor::zeros(&[2, 6, 3], DType::I32, device).unwrap();
        let e = xi.group_norm(2, None, None, EPS).unwrap_err();
        assert!(
            matches!(
                e,
                Error::UnsupportedDType {
                    op: "group_norm",
                    ..
                }
            ),
            "{e}"
        );
        let e = xi.layer_norm(None, None, EPS).unwrap_err();
        assert!(
            matches!(
                e,
                Error::UnsupportedDType {
                    op: "layer_norm",
                    ..
                }
            ),
            "{e}"
        );
        let e = w6.group_norm(1, None, None, EPS).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ShapeMismatch {
                    op: "group_norm",
                    ..
                }
            ),
            "{e}"
        );
        let scalar = Tensor::zeros(&[], DType::F32, device).unwrap();
        let e = scalar.layer_norm(None, None, EPS).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ShapeMismatch {
                    op: "layer_norm",
                    ..
                }
            ),
            "{e}"
        );
        let e = x.layer_norm(None, None, -1.0).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "layer_norm",
                    ..
                }
            ),
            "{e}"
        );
        if device == Device::Xpu {
            let wc = Tensor::ones(&[6], DType::F32, Device::Cpu).unwrap();
            let e = x.group_norm(2, Some(&wc), None, EPS).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::DeviceMismatch {
                        op: "group_norm",
                        ..
                    }
                ),
                "{e}"
            );
        }
    }
}
