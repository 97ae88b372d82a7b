//! i32 unary ops: the Xpu kernel against the Cpu, bit for bit, at the edges of the i32 range
//! (wrapping neg/abs/square, saturating affine and scalar clamps, scalars that are NaN,
//! fractional or beyond the range), on a non-contiguous view; and the ops i32 does not take.

use crate::common;
use xpu::{DType, Device, Tensor, UnaryOp};

fn ints(t: &Tensor) -> Vec<i32> {
    t.to(Device::Cpu).unwrap().to_vec::<i32>().unwrap()
}

#[test]
fn i32_unary_xpu_matches_cpu_bit_for_bit() {
    let edge = [
        i32::MIN,
        i32::MIN + 1,
        -2147483520,
        -65537,
        -7,
        -3,
        -2,
        -1,
        0,
        1,
        2,
        3,
        46341,
        65536,
        16777217,
        2147483517,
        2147483520,
        i32::MAX - 1,
        i32::MAX,
    ];
    // 19 x 3, read through a transposed view (2147483517 + 2 and -2147483520 + 1 sit one below
    // and above an f32 scalar they round to).
    let data: Vec<i32> = (0..3)
        .flat_map(|r| edge.iter().map(move |&v| v.wrapping_add(r)))
        .collect();
    let base = Tensor::from_vec(data, &[3, 19], Device::Cpu).unwrap();
    let cpu = base.t().unwrap();
    let mut ops = vec![
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Relu,
        UnaryOp::Square,
        UnaryOp::Sign,
        UnaryOp::Floor,
        UnaryOp::Round,
    ];
    for s in [
        1.0,
        2.5,
        -2.5,
        0.5,
        -0.5,
        3e9,
        -3e9,
        f32::NAN,
        2147483520.0,
        -2147483520.0,
        -2147483648.0,
        16777216.0,
    ] {
        ops.push(UnaryOp::MaxScalar(s));
        ops.push(UnaryOp::MinScalar(s));
    }
    for (mul, add) in [
        (2.0, 3.0),
        (-1.0, 0.0),
        (65536.0, 7.0),
        (1e9, -5.0),
        (-2147483648.0, 0.0),
        (0.0, -2147483648.0),
        (3.0, 2147483520.0),
    ] {
        ops.push(UnaryOp::Affine { mul, add });
    }
    let want: Vec<Vec<i32>> = ops
        .iter()
        .map(|&op| ints(&cpu.unary(op).unwrap()))
        .collect();
    // The Cpu's own semantics, spot-checked (the view is [19, 3]: edge value i, offset r at
    // i * 3 + r).
    assert_eq!(want[0][0], i32::MIN, "neg wraps");
    let x = 3 * edge.iter().position(|&v| v == 65536).unwrap();
    assert_eq!(want[3][x], 0, "square wraps: 65536^2");
    assert_eq!(want[ops.len() - 5][x], i32::MAX, "affine saturates");
    if !common::xpu() {
        return;
    }
    // The same view taken on the Xpu.
    let gpu = base.to(Device::Xpu).unwrap().t().unwrap();
    assert!(!gpu.is_contiguous());
    for (op, want) in ops.iter().zip(&want) {
        let got = ints(&gpu.unary(*op).unwrap());
        assert_eq!(&got, want, "{op:?}");
    }
    // The scalar forms go through the same kernel.
    assert_eq!(
        ints(&gpu.clamp(-2.0, 3.0).unwrap()),
        ints(&cpu.clamp(-2.0, 3.0).unwrap())
    );
    assert_eq!(
        ints(&gpu.mul_scalar(-3.0).unwrap()),
        ints(&cpu.mul_scalar(-3.0).unwrap())
    );
}

#[test]
fn i32_unary_refusals_name_the_op() {
    let mut devices = vec![Device::Cpu];
    if common::xpu() {
        devices.push(Device::Xpu);
    }
    for device in devices {
        let t = Tensor::from_vec(vec![1i32, -2, 3], &[3], Device::Cpu)
            .unwrap()
            .to(device)
            .unwrap();
        let e = t.exp().unwrap_err().to_string();
        assert!(e.contains("exp") && e.contains("i32"), "{device:?}: {e}");
        let u = t.to_dtype(DType::U8).unwrap();
        assert!(u.neg().is_err(), "{device:?}: u8 neg");
    }
    if common::xpu() {
        let t = Tensor::from_vec(vec![1i32, -2, 3], &[3], Device::Xpu).unwrap();
        let e = t.mul_scalar(0.5).unwrap_err().to_string();
        assert!(e.contains("whole-number") && e.contains("0.5"), "{e}");
    }
}
