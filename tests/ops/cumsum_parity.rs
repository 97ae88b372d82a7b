//! `cumsum` on every device and float dtype against in-order f64 prefix sums: every dim, short
//! rows and long ones (several 256-element blocks of the Xpu's workgroup scan), many strided
//! column rows (its one-invocation-per-row kernel), views, empty dims, and the errors.

use crate::common;
use common::{devices, eps, values, FLOATS};
use xpu::{DType, Device, Tensor};

/// Prefix sums along `dim` of row-major `v` (shape `shape`), and each prefix's sum of |x|
/// (the scale of its rounding error).
fn reference(v: &[f64], shape: &[usize], dim: usize) -> (Vec<f64>, Vec<f64>) {
    let outer: usize = shape[..dim].iter().product();
    let n = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let (mut out, mut scale) = (vec![0.0; v.len()], vec![0.0; v.len()]);
    for o in 0..outer {
        for i in 0..inner {
            let (mut acc, mut abs) = (0.0, 0.0);
            for k in 0..n {
                let at = (o * n + k) * inner + i;
                acc += v[at];
                abs += v[at].abs();
                out[at] = acc;
                scale[at] = abs;
            }
        }
    }
    (out, scale)
}

fn check(what: &str, got: &Tensor, x: &Tensor, dim: usize) {
    let (want, scale) = reference(&values(x), x.shape(), dim);
    let got = values(got);
    assert_eq!(got.len(), want.len(), "{what}");
    let e = eps(x.dtype()).max(1.2e-7);
    for (i, ((g, w), s)) in got.iter().zip(&want).zip(&scale).enumerate() {
        let tol = 2.0 * e * w.abs() + 4.0 * 1.2e-7 * s + 1e-30;
        assert!(
            (g - w).abs() <= tol,
            "{what}[{i}]: got {g}, want {w} (tol {tol})"
        );
    }
}

#[test]
fn cumsum_matches_in_order_sums_along_every_dim() {
    for device in devices() {
        for dtype in FLOATS {
            for shape in [
                vec![1],
                vec![7],
                vec![1000],
                vec![3, 257],
                vec![2, 65, 3],
                vec![4, 1, 513],
                vec![0, 5],
            ] {
                let x = Tensor::randn(&shape, DType::F32, Device::Cpu, 11)
                    .and_then(|t| t.to_dtype(dtype))
                    .and_then(|t| t.to(device))
                    .unwrap();
                for dim in 0..shape.len() {
                    let got = x.cumsum(dim as isize).unwrap();
                    assert_eq!(got.shape(), &shape[..]);
                    assert_eq!(got.dtype(), dtype);
                    check(
                        &format!("{device} {dtype} {shape:?} dim {dim}"),
                        &got,
                        &x,
                        dim,
                    );
                }
            }
        }
    }
}

#[test]
fn cumsum_reads_views_and_many_column_rows() {
    for device in devices() {
        // 9000 rows of 3 along dim 0 (stride 9000): the per-row kernel on the Xpu.
        let cols = Tensor::randn(&[3, 9000], DType::F32, device, 2).unwrap();
        check(
            &format!("{device} columns"),
            &cols.cumsum(0).unwrap(),
            &cols,
            0,
        );
        // A transposed, narrowed view, and a negative dim.
        let base = Tensor::randn(&[300, 40], DType::F32, device, 3).unwrap();
        let view = base.t().unwrap().narrow(1, 5, 290).unwrap(); // [40, 290]
        let got = view.cumsum(-1).unwrap();
        check(
            &format!("{device} view"),
            &got,
            &view.contiguous().unwrap(),
            1,
        );
    }
}

#[test]
fn cumsum_errors_name_the_problem() {
    for device in devices() {
        let i = Tensor::zeros(&[3], DType::I32, device).unwrap();
        let e = i.cumsum(0).unwrap_err().to_string();
        assert!(e.contains("cumsum"), "{device}: {e}");
        let x = Tensor::zeros(&[3], DType::F32, device).unwrap();
        assert!(x.cumsum(1).is_err(), "{device} dim out of range");
    }
}
