//! `logsumexp` and `log_softmax` against an f64 reference on every device and float dtype: odd
//! sizes, every dim, transposed views made on the device, inputs around 1e4 (where the naive
//! `log(sum(exp(x)))` overflows), and the error for integer dtypes. PyTorch's own values, with
//! infinities, are checked in tests/torch_parity.rs.

use crate::common;
use common::{assert_close, devices, eps, values, FLOATS};
use xpu::{DType, Device, Tensor};

/// f64 logsumexp of each line along `dim` of contiguous `v` (shape `shape`), keepdim layout.
fn reference(v: &[f64], shape: &[usize], dim: usize) -> Vec<f64> {
    let outer: usize = shape[..dim].iter().product();
    let inner: usize = shape[dim + 1..].iter().product();
    let n = shape[dim];
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| v[(o * n + k) * inner + i];
            let m = (0..n).map(at).fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = (0..n).map(|k| (at(k) - m).exp()).sum();
            out.push(m + s.ln());
        }
    }
    out
}

#[test]
fn logsumexp_and_log_softmax_match_an_f64_reference() {
    let cases: [(&[usize], usize, f32); 5] = [
        (&[1], 0, 0.0),
        (&[7, 65], 1, 0.0),
        (&[7, 65], 0, 1.0e4),
        (&[2, 257, 3], 1, 0.0),
        (&[63], 0, -3.0e3),
    ];
    for device in devices() {
        for dtype in FLOATS {
            for &(shape, dim, offset) in &cases {
                // A transposed view made on the device holds the same values as `shape`.
                let stored: Vec<usize> = shape.iter().rev().copied().collect();
                let order: Vec<usize> = (0..shape.len()).rev().collect();
                let x = Tensor::randn(&stored, DType::F32, Device::Cpu, 7)
                    .and_then(|t| t.mul_scalar(3.0)?.add_scalar(f64::from(offset)))
                    .and_then(|t| t.to_dtype(dtype)?.to(device)?.permute(&order))
                    .unwrap();
                let v = values(&x.contiguous().unwrap());
                let lse = reference(&v, shape, dim);
                let what = format!("{device:?} {dtype} {shape:?} dim {dim} offset {offset}");
                let got = x.logsumexp(dim as isize, true).unwrap();
                assert_eq!(got.dtype(), dtype, "{what}");
                let scale = lse.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                let tol = 4.0 * eps(dtype) * scale;
                assert_close(&format!("logsumexp {what}"), &values(&got), &lse, tol, 0.0);
                let squeezed = x.logsumexp(dim as isize, false).unwrap();
                let mut want_shape = shape.to_vec();
                want_shape.remove(dim);
                assert_eq!(squeezed.shape(), want_shape.as_slice(), "{what}");
                // log_softmax = x - lse, broadcast along dim.
                let inner: usize = shape[dim + 1..].iter().product();
                let n = shape[dim];
                let want: Vec<f64> = (0..v.len())
                    .map(|i| v[i] - lse[(i / (n * inner)) * inner + i % inner])
                    .collect();
                let got = x.log_softmax(dim as isize).unwrap();
                assert_eq!(got.shape(), shape, "{what}");
                // Each output rounds once: a relative error of the larger of x and lse.
                let tol = 4.0 * eps(dtype) * scale.max(v.iter().fold(1.0, |m, x| m.max(x.abs())));
                assert_close(
                    &format!("log_softmax {what}"),
                    &values(&got),
                    &want,
                    tol,
                    0.0,
                );
            }
        }
        let ints = Tensor::zeros(&[3], DType::I32, device).unwrap();
        assert!(ints.logsumexp(0, false).is_err(), "{device:?}");
        assert!(ints.log_softmax(0).is_err(), "{device:?}");
    }
}
