//! `nn::Linear`: prepacked Cpu path and fused Xpu path against `x @ Wᵀ + b`.

use crate::common;
use common::{assert_close, eps, randn, values, FLOATS};
use xpu::nn::Linear;
use xpu::{Activation, DType, Device, Error};

#[test]
fn linear_matches_matmul_plus_bias_on_every_device() {
    for device in common::devices() {
        for &dtype in &FLOATS {
            for &(rows, inf, outf) in &[(1, 7, 3), (77, 64, 65), (130, 33, 257)] {
                let w = randn(&[outf, inf], dtype, 1).to(device).unwrap();
                let b = randn(&[outf], dtype, 2).to(device).unwrap();
                let x = randn(&[2, rows, inf], dtype, 3).to(device).unwrap();
                let lin = Linear::new(w.clone(), Some(b.clone())).unwrap();
                assert_eq!(lin.is_prepacked(), device == Device::Cpu);
                let y = lin.forward(&x).unwrap();
                assert_eq!(y.shape(), &[2, rows, outf]);
                assert_eq!(y.dtype(), dtype);
                let want = common::linear_f32(&x, &w, &b);
                let t = if dtype == DType::F32 {
                    1e-5
                } else {
                    4.0 * eps(dtype)
                } * (inf as f64).sqrt()
                    + 1e-5;
                assert_close(
                    &format!("{device} {dtype} linear {rows}x{inf}->{outf}"),
                    &values(&y),
                    &values(&want),
                    t,
                    t,
                );
                let ys = lin.forward_act(&x, Activation::Silu).unwrap();
                assert_close(
                    &format!("{device} {dtype} linear+silu"),
                    &values(&ys),
                    &values(&want.silu().unwrap()),
                    t,
                    t,
                );
            }
        }
    }
}

#[test]
fn prepacked_is_bit_identical_to_the_plain_product() {
    let w = randn(&[96, 80], DType::F32, 4);
    let x = randn(&[33, 80], DType::F32, 5);
    let lin = Linear::new(w.clone(), None).unwrap();
    assert_eq!(
        lin.forward(&x).unwrap().to_vec::<f32>().unwrap(),
        x.matmul(&w.t().unwrap()).unwrap().to_vec::<f32>().unwrap()
    );
    // Moving keeps semantics; moving back to Cpu prepacks again.
    for device in common::devices() {
        let moved = lin.to(device).unwrap().to(Device::Cpu).unwrap();
        assert!(moved.is_prepacked());
        assert_eq!(
            moved.forward(&x).unwrap().to_vec::<f32>().unwrap(),
            lin.forward(&x).unwrap().to_vec::<f32>().unwrap()
        );
    }
}

#[test]
fn linear_rejects_bad_input() {
    let w = randn(&[4, 6], DType::F32, 1);
    assert!(matches!(
        Linear::new(randn(&[4], DType::F32, 1), None),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        Linear::new(w.clone(), Some(randn(&[5], DType::F32, 1))),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        Linear::new(w.clone(), Some(randn(&[4], DType::F16, 1))),
        Err(Error::DTypeMismatch { .. })
    ));
    let lin = Linear::new(w, None).unwrap();
    let e = lin.forward(&randn(&[3, 5], DType::F32, 2)).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && e.to_string().contains("[..., 6]"),
        "{e}"
    );
    assert!(matches!(
        lin.forward(&randn(&[3, 6], DType::BF16, 2)),
        Err(Error::DTypeMismatch { .. })
    ));
}
