//! `var` and `std` (`torch.var` / `torch.std` with `correction` and `keepdim`) on every device
//! and float dtype against a two-pass f64 reference: every dim, odd sizes, views, corrections 0,
//! 1 and past the length (inf / NaN as PyTorch), and the errors.

use crate::common;
use common::{assert_close, devices, eps, values, FLOATS};
use xpu::{DType, Device, Tensor};

/// Variance along `dim` of row-major `v` (shape `shape`) in f64.
fn reference(v: &[f64], shape: &[usize], dim: usize, correction: f64) -> Vec<f64> {
    let outer: usize = shape[..dim].iter().product();
    let n = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let mut out = Vec::new();
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| v[(o * n + k) * inner + i];
            let mean = (0..n).map(at).sum::<f64>() / n as f64;
            let ss: f64 = (0..n).map(|k| (at(k) - mean).powi(2)).sum();
            out.push(ss / (n as f64 - correction).max(0.0));
        }
    }
    out
}

#[test]
fn var_and_std_match_the_reference_along_every_dim() {
    for device in devices() {
        for dtype in FLOATS {
            for shape in [vec![7], vec![3, 65], vec![5, 1, 17], vec![2, 63, 3]] {
                let x = Tensor::randn(&shape, DType::F32, Device::Cpu, 3)
                    .and_then(|t| t.affine(2.0, 5.0))
                    .and_then(|t| t.to_dtype(dtype))
                    .unwrap();
                let host = values(&x);
                let x = x.to(device).unwrap();
                for dim in 0..shape.len() {
                    for correction in [1.0, 0.0] {
                        let want = reference(&host, &shape, dim, correction);
                        let var = x.var(dim as isize, correction, false).unwrap();
                        let mut kept = shape.clone();
                        kept[dim] = 1;
                        let var_kept = x.var(dim as isize, correction, true).unwrap();
                        assert_eq!(var_kept.shape(), &kept[..]);
                        assert_eq!(var.dtype(), dtype);
                        let (atol, rtol) = (1e-6, 4.0 * eps(dtype).max(1e-6));
                        let what = format!("{device} {dtype} {shape:?} dim {dim} c {correction}");
                        if shape[dim] as f64 > correction {
                            assert_close(&format!("var {what}"), &values(&var), &want, atol, rtol);
                            let sd: Vec<f64> = want.iter().map(|v| v.sqrt()).collect();
                            let got = values(&x.std(dim as isize, correction, false).unwrap());
                            assert_close(&format!("std {what}"), &got, &sd, atol, rtol);
                        }
                        let nan_safe = |t: &Tensor| -> Vec<u64> {
                            values(t).iter().map(|v| v.to_bits()).collect()
                        };
                        assert_eq!(nan_safe(&var_kept), nan_safe(&var), "{what} keepdim");
                    }
                }
            }
        }
    }
}

#[test]
fn var_reads_views_and_follows_torch_at_zero_degrees_of_freedom() {
    for device in devices() {
        let base = Tensor::randn(&[6, 9], DType::F32, device, 8).unwrap();
        let t = base.t().unwrap().narrow(0, 1, 7).unwrap(); // [7, 6], strided
        let c = t.contiguous().unwrap();
        for dim in [0, 1, -1] {
            assert_eq!(
                values(&t.var(dim, 1.0, false).unwrap()),
                values(&c.var(dim, 1.0, false).unwrap()),
                "{device} view dim {dim}"
            );
        }
        // One element with correction 1: 0/0 = NaN; a spread with correction past n: x/0 = inf.
        let one = Tensor::from_vec(vec![3.0f32], &[1], device).unwrap();
        assert!(values(&one.var(0, 1.0, false).unwrap())[0].is_nan());
        assert_eq!(one.var(0, 1.0, false).unwrap().shape(), &[] as &[usize]);
        let two = Tensor::from_vec(vec![1.0f32, 3.0], &[2], device).unwrap();
        assert_eq!(
            values(&two.var(0, 5.0, false).unwrap()),
            vec![f64::INFINITY]
        );
        assert_eq!(values(&two.std(0, 0.0, false).unwrap()), vec![1.0]);
    }
}

#[test]
fn var_errors_name_the_problem() {
    for device in devices() {
        let i = Tensor::zeros(&[3], DType::I32, device).unwrap();
        let e = i.var(0, 1.0, false).unwrap_err().to_string();
        assert!(e.contains("var") && e.contains("f32"), "{device}: {e}");
        let x = Tensor::zeros(&[3], DType::F32, device).unwrap();
        assert!(x.std(1, 1.0, false).is_err(), "{device} dim out of range");
        assert!(
            x.var(0, f64::NAN, false).is_err(),
            "{device} NaN correction"
        );
    }
}
