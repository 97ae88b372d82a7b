//! Empty inputs and argument errors of scaled dot-product attention: every bad call is a clear
//! `xpu::Error`, never a panic.

use super::common::{self, assert_close, randn, values};
use super::xpu_lock;
use xpu::{DType, Device, Error, Tensor};

#[test]
fn empty_inputs_do_not_panic() {
    let _g = xpu_lock();
    for device in common::devices() {
        for &(lq, lk) in &[(0, 5), (4, 0), (0, 0)] {
            let q = Tensor::zeros(&[1, 2, lq, 8], DType::F32, device).unwrap();
            let k = Tensor::zeros(&[1, 2, lk, 8], DType::F32, device).unwrap();
            let v = Tensor::zeros(&[1, 2, lk, 6], DType::F32, device).unwrap();
            for fused in [true, false] {
                let out = if fused {
                    q.scaled_dot_product_attention(&k, &v, None, None)
                } else {
                    q.scaled_dot_product_attention_unfused(&k, &v, None, None)
                }
                .unwrap();
                assert_eq!(out.shape(), &[1, 2, lq, 6]);
                assert!(values(&out).iter().all(|&x| x == 0.0));
            }
        }
        // D = 0: every score is 0, so each row is the mean of v (default scale 1).
        let q = Tensor::zeros(&[1, 2, 3, 0], DType::F32, device).unwrap();
        let k = Tensor::zeros(&[1, 2, 4, 0], DType::F32, device).unwrap();
        let v = randn(&[1, 2, 4, 5], DType::F32, 3).to(device).unwrap();
        let vv = values(&v);
        let want: Vec<f64> = (0..2 * 3 * 5)
            .map(|i| {
                let (h, c) = (i / 15, i % 5);
                (0..4).map(|j| vv[(h * 4 + j) * 5 + c]).sum::<f64>() / 4.0
            })
            .collect();
        for fused in [true, false] {
            let out = if fused {
                q.scaled_dot_product_attention(&k, &v, None, None)
            } else {
                q.scaled_dot_product_attention_unfused(&k, &v, None, None)
            }
            .unwrap();
            assert_close(
                &format!("{device} D=0 fused={fused}"),
                &values(&out),
                &want,
                1e-6,
                1e-6,
            );
        }
        let q = Tensor::zeros(&[0, 2, 3, 8], DType::F16, device).unwrap();
        let out = q.scaled_dot_product_attention(&q, &q, None, None).unwrap();
        assert_eq!(out.shape(), &[0, 2, 3, 8]);
    }
}

#[test]
fn bad_arguments_are_errors() {
    let q = randn(&[1, 2, 3, 8], DType::F32, 1);
    let k = randn(&[1, 2, 5, 8], DType::F32, 2);
    let v = randn(&[1, 2, 5, 4], DType::F32, 3);
    assert!(q.scaled_dot_product_attention(&k, &v, None, None).is_ok());
    let shape_err = |r: xpu::Result<Tensor>| matches!(r, Err(Error::ShapeMismatch { .. }));
    assert!(shape_err(q.scaled_dot_product_attention(
        &randn(&[1, 2, 5, 7], DType::F32, 2),
        &v,
        None,
        None
    )));
    assert!(shape_err(q.scaled_dot_product_attention(
        &k,
        &randn(&[1, 2, 6, 4], DType::F32, 3),
        None,
        None
    )));
    // Leading dims broadcast (as in PyTorch) unless they cannot.
    assert!(shape_err(q.scaled_dot_product_attention(
        &randn(&[2, 2, 5, 8], DType::F32, 2),
        &randn(&[3, 2, 5, 4], DType::F32, 3),
        None,
        None
    )));
    let q1 = randn(&[8], DType::F32, 1);
    assert!(shape_err(
        q1.scaled_dot_product_attention(&q1, &q1, None, None)
    ));
    let bad_mask = Tensor::ones(&[4, 5], DType::U8, Device::Cpu).unwrap();
    assert!(shape_err(q.scaled_dot_product_attention(
        &k,
        &v,
        Some(&bad_mask),
        None
    )));
    let i32_mask = Tensor::ones(&[3, 5], DType::I32, Device::Cpu).unwrap();
    assert!(matches!(
        q.scaled_dot_product_attention(&k, &v, Some(&i32_mask), None),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        q.scaled_dot_product_attention(&k.to_dtype(DType::F16).unwrap(), &v, None, None),
        Err(Error::DTypeMismatch { .. })
    ));
    let qi = Tensor::ones(&[1, 2, 3, 8], DType::I32, Device::Cpu).unwrap();
    assert!(matches!(
        qi.scaled_dot_product_attention(&qi, &qi, None, None),
        Err(Error::UnsupportedDType { .. })
    ));
    assert!(matches!(
        q.scaled_dot_product_attention(&k, &v, None, Some(f64::NAN)),
        Err(Error::InvalidArgument { .. })
    ));
}
