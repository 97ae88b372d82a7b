//! The fused GEGLU feed-forward against the unfused op sequence and an f64 reference.

use crate::common;
use common::{assert_close, eps, randn, values, FLOATS};
use xpu::{DType, Error};

#[test]
fn ffn_geglu_matches_unfused_and_reference() {
    for device in common::devices() {
        for &dtype in &FLOATS {
            for &(rows, dim, inner) in &[(1, 8, 5), (77, 40, 33), (65, 64, 128)] {
                let x = randn(&[2, rows, dim], dtype, 1).to(device).unwrap();
                let w1 = randn(&[2 * inner, dim], dtype, 2)
                    .mul_scalar(0.2)
                    .unwrap()
                    .to(device)
                    .unwrap();
                let b1 = randn(&[2 * inner], dtype, 3).to(device).unwrap();
                let w2 = randn(&[dim, inner], dtype, 4)
                    .mul_scalar(0.2)
                    .unwrap()
                    .to(device)
                    .unwrap();
                let b2 = randn(&[dim], dtype, 5).to(device).unwrap();
                let fused = x
                    .ffn_geglu(&w1, Some(&b1), &w2, Some(&b2), Some(&x))
                    .unwrap();
                assert_eq!(fused.shape(), &[2, rows, dim]);
                let unfused = x
                    .ffn_geglu_unfused(&w1, Some(&b1), &w2, Some(&b2), Some(&x))
                    .unwrap();
                let t = if dtype == DType::F32 {
                    2e-5
                } else {
                    8.0 * eps(dtype)
                } * ((dim + inner) as f64).sqrt();
                let what = format!("{device} {dtype} {rows}x{dim} inner {inner}");
                assert_close(&what, &values(&fused), &values(&unfused), t, t);
                // f64 reference on the same (rounded) inputs.
                let (xv, w1v, b1v, w2v, b2v) = (
                    values(&x),
                    values(&w1),
                    values(&b1),
                    values(&w2),
                    values(&b2),
                );
                let gelu = |z: f64| xpu::UnaryOp::GeluErf.apply(z);
                let mut want = Vec::new();
                for r in 0..2 * rows {
                    let xr = &xv[r * dim..(r + 1) * dim];
                    let p: Vec<f64> = (0..2 * inner)
                        .map(|j| b1v[j] + (0..dim).map(|k| xr[k] * w1v[j * dim + k]).sum::<f64>())
                        .collect();
                    let h: Vec<f64> = (0..inner).map(|j| p[j] * gelu(p[inner + j])).collect();
                    for o in 0..dim {
                        want.push(
                            b2v[o]
                                + xr[o]
                                + (0..inner).map(|j| h[j] * w2v[o * inner + j]).sum::<f64>(),
                        );
                    }
                }
                assert_close(
                    &format!("{what} vs f64"),
                    &values(&fused),
                    &want,
                    4.0 * t,
                    4.0 * t,
                );
            }
        }
    }
}

#[test]
fn ffn_geglu_rejects_bad_shapes() {
    let x = randn(&[3, 8], DType::F32, 1);
    let w1 = randn(&[10, 8], DType::F32, 2);
    let w2 = randn(&[8, 5], DType::F32, 3);
    assert!(x.ffn_geglu(&w1, None, &w2, None, None).is_ok());
    assert!(matches!(
        x.ffn_geglu(&randn(&[9, 8], DType::F32, 2), None, &w2, None, None),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        x.ffn_geglu(&w1, None, &randn(&[8, 4], DType::F32, 3), None, None),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        randn(&[3, 7], DType::F32, 1).ffn_geglu(&w1, None, &w2, None, None),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        x.ffn_geglu(&w1, Some(&randn(&[9], DType::F32, 4)), &w2, None, None),
        Err(Error::ShapeMismatch { .. })
    ));
}
