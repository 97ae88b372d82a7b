//! Bad inputs to the Xpu implicit-GEMM conv2d: every one is a clear `xpu::Error`, nothing
//! written, no panic.

use super::common::{self, assert_close, randn, values};
use super::{f32_cpu, gpu_lock, params};
use xpu::ops::conv_xpu::{conv2d_xpu, ConvXpuArgs};
use xpu::{Conv2dParams, DType, Device, Error, Tensor};

#[test]
fn bad_inputs_are_errors() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    let gx = |t: Tensor| t.to(Device::Xpu).unwrap();
    let x = gx(randn(&[1, 4, 6, 6], DType::F32, 1));
    let w = gx(randn(&[2, 4, 3, 3], DType::F32, 2));
    let p = Conv2dParams::default();
    let none = ConvXpuArgs::default();
    // Cpu operands.
    let e = conv2d_xpu(&randn(&[1, 4, 6, 6], DType::F32, 1), &w, p, &none).unwrap_err();
    assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
    let e = conv2d_xpu(&x, &randn(&[2, 4, 3, 3], DType::F32, 2), p, &none).unwrap_err();
    assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
    // Dtypes.
    let e = conv2d_xpu(&x, &w.to_dtype(DType::F16).unwrap(), p, &none).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    let xi = x.to_dtype(DType::I32).unwrap();
    let e = conv2d_xpu(&xi, &w.to_dtype(DType::I32).unwrap(), p, &none).unwrap_err();
    assert!(matches!(e, Error::UnsupportedDType { .. }), "{e}");
    // Shapes and parameters.
    let bad_bias = gx(randn(&[3], DType::F32, 3));
    let args = ConvXpuArgs {
        bias: Some(&bad_bias),
        ..Default::default()
    };
    let e = conv2d_xpu(&x, &w, p, &args).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let bad_res = gx(randn(&[1, 2, 5, 4], DType::F32, 4));
    let args = ConvXpuArgs {
        residual: Some(&bad_res),
        ..Default::default()
    };
    let e = conv2d_xpu(&x, &w, p, &args).unwrap_err();
    assert!(e.to_string().contains("broadcastable"), "{e}");
    let e = conv2d_xpu(&x, &gx(randn(&[2, 3, 3, 3], DType::F32, 5)), p, &none).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = conv2d_xpu(&x, &gx(randn(&[2, 4, 9, 3], DType::F32, 5)), p, &none).unwrap_err();
    assert!(e.to_string().contains("does not fit"), "{e}");
    let e = conv2d_xpu(&x, &w, params(0, 0, 1, 1), &none).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let x3 = gx(randn(&[4, 6, 6], DType::F32, 6));
    let e = conv2d_xpu(&x3, &w, p, &none).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // A broadcast residual ([O, 1, 1]) works.
    let r = gx(randn(&[2, 1, 1], DType::F32, 7));
    let args = ConvXpuArgs {
        residual: Some(&r),
        ..Default::default()
    };
    let got = conv2d_xpu(&x, &w, p, &args).unwrap();
    let want = f32_cpu(&x)
        .conv2d(&f32_cpu(&w), None, p)
        .unwrap()
        .add(&f32_cpu(&r))
        .unwrap();
    assert_close(
        "broadcast residual",
        &values(&got),
        &values(&want),
        1e-5,
        1e-5,
    );
}
