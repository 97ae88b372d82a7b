//! Unary, binary and cast ops: Cpu against a plain f64 reference, Xpu against Cpu, for every
//! float dtype, odd and large shapes, non-contiguous views, broadcasting and zero-size dims.

use crate::common;
use common::{assert_close, eps, randn, values, FLOATS};
use xpu::{BinaryOp, DType, Device, Tensor, UnaryOp};

const SHAPES: [&[usize]; 7] = [&[1], &[7], &[63], &[65], &[257], &[3, 5, 7], &[0, 4]];

const UNARY: [UnaryOp; 26] = [
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Rsqrt,
    UnaryOp::Tanh,
    UnaryOp::Sigmoid,
    UnaryOp::Relu,
    UnaryOp::GeluErf,
    UnaryOp::GeluTanh,
    UnaryOp::Silu,
    UnaryOp::Sin,
    UnaryOp::Cos,
    UnaryOp::Affine {
        mul: 1.5,
        add: -0.25,
    },
    UnaryOp::PowScalar(2.5),
    UnaryOp::MaxScalar(0.1),
    UnaryOp::MinScalar(-0.2),
    UnaryOp::Recip,
    UnaryOp::Square,
    UnaryOp::Floor,
    UnaryOp::Ceil,
    UnaryOp::Round,
    UnaryOp::Trunc,
    UnaryOp::Sign,
    UnaryOp::Erf,
];

/// Inputs suited to an op's domain (positive for log/sqrt/rsqrt/pow, scaled for exp).
fn input(op: UnaryOp, shape: &[usize], dtype: DType, seed: u64) -> Tensor {
    let x = randn(shape, DType::F32, seed);
    let x = match op {
        UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::PowScalar(_) | UnaryOp::Recip => {
            x.abs().unwrap().add_scalar(0.05).unwrap()
        }
        UnaryOp::Exp | UnaryOp::Sin | UnaryOp::Cos => x.mul_scalar(3.0).unwrap(),
        _ => x.mul_scalar(2.0).unwrap(),
    };
    x.to_dtype(dtype).unwrap()
}

/// Rounds f64 values to what `dtype` can hold.
fn round_to(dtype: DType, v: &[f64]) -> Vec<f64> {
    let t = Tensor::from_vec(
        v.iter().map(|&x| x as f32).collect(),
        &[v.len()],
        Device::Cpu,
    )
    .unwrap();
    values(&t.to_dtype(dtype).unwrap())
}

fn tol(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F32 => (2e-6, 1e-5),
        d => (2.0 * eps(d), 2.0 * eps(d)),
    }
}

#[test]
fn unary_cpu_matches_reference_and_xpu_matches_cpu() {
    let devices = common::devices();
    for &dtype in &FLOATS {
        for (si, shape) in SHAPES.iter().enumerate() {
            for (oi, &op) in UNARY.iter().enumerate() {
                let x = input(op, shape, dtype, (si * 100 + oi) as u64);
                let cpu = x.unary(op).unwrap();
                assert_eq!(cpu.shape(), *shape);
                let want = round_to(
                    dtype,
                    &values(&x).iter().map(|&v| op.apply(v)).collect::<Vec<_>>(),
                );
                let (atol, rtol) = tol(dtype);
                let what = format!("{} {dtype} {shape:?}", op.name());
                assert_close(&format!("cpu {what}"), &values(&cpu), &want, atol, rtol);
                if devices.contains(&Device::Xpu) {
                    let gpu = x.to(Device::Xpu).unwrap().unary(op).unwrap();
                    assert_eq!(gpu.dtype(), dtype);
                    assert_close(
                        &format!("xpu {what}"),
                        &values(&gpu),
                        &values(&cpu),
                        atol,
                        rtol,
                    );
                }
            }
        }
    }
}

/// Where an op's result is small beside the terms that make it (log near 1, tanh and erf near
/// 0, GELU/SiLU/sigmoid of negative inputs), each value must keep its own relative accuracy:
/// forms such as `1 + erf`, `1 + tanh` or a coarse builtin log are accurate only in absolute
/// terms there (they were off by up to 1.5e-4 relative on the Xpu).
#[test]
fn unary_small_results_keep_relative_accuracy() {
    let ramp = |lo: f64, hi: f64| -> Vec<f32> {
        (0..257)
            .map(|i| (lo + (hi - lo) * i as f64 / 256.0) as f32)
            .collect()
    };
    let cases: [(UnaryOp, Vec<f32>); 7] = [
        (UnaryOp::Log, ramp(0.97, 1.03)),
        (UnaryOp::Tanh, ramp(-0.02, 0.02)),
        (UnaryOp::Erf, ramp(-0.02, 0.02)),
        (UnaryOp::GeluErf, ramp(-5.0, -1.0)),
        (UnaryOp::GeluTanh, ramp(-5.0, -1.0)),
        (UnaryOp::Sigmoid, ramp(-12.0, -2.0)),
        (UnaryOp::Silu, ramp(-12.0, -2.0)),
    ];
    for (op, xs) in cases {
        let x = Tensor::from_vec(xs, &[257], Device::Cpu).unwrap();
        let want: Vec<f64> = values(&x).iter().map(|&v| op.apply(v)).collect();
        for device in common::devices() {
            let got = values(&x.to(device).unwrap().unary(op).unwrap());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let rel = (g - w).abs() / w.abs().max(1e-30);
                assert!(
                    rel <= 1e-5,
                    "{device:?} {}({}) = {g:e}, want {w:e} (rel err {rel:.1e})",
                    op.name(),
                    values(&x)[i]
                );
            }
        }
    }
}

#[test]
fn unary_special_values_agree() {
    let specials: Vec<f32> = vec![
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        100.0,
        -100.0,
        1e-30,
        -1e-30,
        88.0,
        -88.0,
    ];
    let x = Tensor::from_vec(specials.clone(), &[specials.len()], Device::Cpu).unwrap();
    let xpu = common::xpu();
    for op in UNARY {
        let cpu = values(&x.unary(op).unwrap());
        let want: Vec<f64> = specials
            .iter()
            .map(|&v| (op.apply(v as f64) as f32) as f64)
            .collect();
        assert_close(
            &format!("cpu {} specials", op.name()),
            &cpu,
            &want,
            1e-6,
            1e-5,
        );
        if xpu {
            let gpu = values(&x.to(Device::Xpu).unwrap().unary(op).unwrap());
            assert_close(
                &format!("xpu {} specials", op.name()),
                &gpu,
                &cpu,
                1e-6,
                1e-5,
            );
        }
    }
}

#[test]
fn unary_on_views_and_large_tensors() {
    let xpu = common::xpu();
    let base = randn(&[33, 40], DType::F32, 5);
    let views = [
        base.t().unwrap(),
        base.narrow(1, 3, 31).unwrap(),
        base.narrow(0, 1, 1)
            .unwrap()
            .broadcast_to(&[6, 40])
            .unwrap(),
        base.reshape(&[3, 11, 40])
            .unwrap()
            .permute(&[2, 0, 1])
            .unwrap(),
    ];
    for &dtype in &FLOATS {
        for v in &views {
            let v = v.to_dtype(dtype).unwrap();
            let cpu = v.gelu().unwrap();
            let want = round_to(
                dtype,
                &values(&v)
                    .iter()
                    .map(|&x| UnaryOp::GeluErf.apply(x))
                    .collect::<Vec<_>>(),
            );
            let (atol, rtol) = tol(dtype);
            assert_close("cpu gelu view", &values(&cpu), &want, atol, rtol);
            if xpu {
                // A strided view moved to Xpu, and a view taken on Xpu.
                let on_xpu = v.to(Device::Xpu).unwrap().gelu().unwrap();
                assert_close(
                    "xpu gelu moved view",
                    &values(&on_xpu),
                    &values(&cpu),
                    atol,
                    rtol,
                );
            }
        }
        if xpu {
            let gb = base.to_dtype(dtype).unwrap().to(Device::Xpu).unwrap();
            let gv = gb.t().unwrap().narrow(0, 2, 37).unwrap().exp().unwrap();
            let cv = base
                .to_dtype(dtype)
                .unwrap()
                .t()
                .unwrap()
                .narrow(0, 2, 37)
                .unwrap()
                .exp()
                .unwrap();
            let (atol, rtol) = tol(dtype);
            assert_close(
                "xpu exp of device view",
                &values(&gv),
                &values(&cv),
                atol,
                rtol,
            );
        }
    }
    let big = randn(&[1 << 20 | 3], DType::F32, 9);
    let cpu = big.silu().unwrap();
    let want: Vec<f64> = values(&big)
        .iter()
        .map(|&x| UnaryOp::Silu.apply(x))
        .collect();
    assert_close("cpu silu 1M", &values(&cpu), &want, 2e-6, 1e-5);
    if xpu {
        let gpu = big.to(Device::Xpu).unwrap().silu().unwrap();
        assert_close("xpu silu 1M", &values(&gpu), &values(&cpu), 2e-6, 1e-5);
    }
}

const BINARY: [BinaryOp; 7] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Maximum,
    BinaryOp::Minimum,
    BinaryOp::Pow,
];

const PAIRS: [(&[usize], &[usize]); 9] = [
    (&[1], &[1]),
    (&[7], &[7]),
    (&[63, 1], &[1, 65]),
    (&[2, 3, 4], &[4]),
    (&[257], &[1]),
    (&[1], &[5, 3]),
    (&[4, 1, 3], &[2, 1]),
    (&[0, 3], &[3]),
    (&[], &[5]),
];

#[test]
fn binary_broadcasting_cpu_reference_and_xpu() {
    let xpu = common::xpu();
    for &dtype in &FLOATS {
        for (pi, (sa, sb)) in PAIRS.iter().enumerate() {
            for &op in &BINARY {
                let mut a = randn(sa, DType::F32, pi as u64);
                let mut b = randn(sb, DType::F32, 50 + pi as u64);
                if op == BinaryOp::Pow {
                    a = a.abs().unwrap().add_scalar(0.1).unwrap();
                }
                if op == BinaryOp::Div {
                    b = b.abs().unwrap().add_scalar(0.5).unwrap();
                }
                let (a, b) = (a.to_dtype(dtype).unwrap(), b.to_dtype(dtype).unwrap());
                let cpu = a.binary(&b, op).unwrap();
                // Reference: broadcast on the host by explicit index arithmetic.
                let shape = cpu.shape().to_vec();
                let (va, vb) = (
                    values(&a.broadcast_to(&shape).unwrap()),
                    values(&b.broadcast_to(&shape).unwrap()),
                );
                let want = round_to(
                    dtype,
                    &va.iter()
                        .zip(&vb)
                        .map(|(&x, &y)| op.apply(x, y))
                        .collect::<Vec<_>>(),
                );
                let (atol, rtol) = tol(dtype);
                let what = format!("{} {dtype} {sa:?} {sb:?}", op.name());
                assert_close(&format!("cpu {what}"), &values(&cpu), &want, atol, rtol);
                if xpu {
                    let gpu = a
                        .to(Device::Xpu)
                        .unwrap()
                        .binary(&b.to(Device::Xpu).unwrap(), op)
                        .unwrap();
                    assert_eq!(gpu.shape(), &shape[..]);
                    assert_close(
                        &format!("xpu {what}"),
                        &values(&gpu),
                        &values(&cpu),
                        atol,
                        rtol,
                    );
                }
            }
        }
    }
}

#[test]
fn binary_i32_and_views() {
    let xpu = common::xpu();
    let a = Tensor::from_vec(
        (0..35).map(|i| i * 7 - 100).collect::<Vec<i32>>(),
        &[5, 7],
        Device::Cpu,
    )
    .unwrap();
    let b = Tensor::from_vec(
        (0..7).map(|i| i - 3).collect::<Vec<i32>>(),
        &[7],
        Device::Cpu,
    )
    .unwrap();
    for op in BINARY {
        let cpu = a.binary(&b, op).unwrap();
        let (va, vb) = (a.to_vec::<i32>().unwrap(), b.to_vec::<i32>().unwrap());
        let want: Vec<i32> = (0..35).map(|i| op.apply_i32(va[i], vb[i % 7])).collect();
        assert_eq!(cpu.to_vec::<i32>().unwrap(), want, "cpu i32 {}", op.name());
        if xpu {
            let gpu = a
                .to(Device::Xpu)
                .unwrap()
                .binary(&b.to(Device::Xpu).unwrap(), op)
                .unwrap();
            assert_eq!(gpu.to_vec::<i32>().unwrap(), want, "xpu i32 {}", op.name());
        }
    }
    // Transposed lhs with a broadcast column rhs.
    let x = randn(&[9, 13], DType::F32, 3);
    let col = randn(&[13, 1], DType::F32, 4);
    let cpu = x.t().unwrap().mul(&col).unwrap();
    let want: Vec<f64> = {
        let (vx, vc) = (values(&x), values(&col));
        (0..13)
            .flat_map(|i| (0..9).map(move |j| (i, j)))
            .map(|(i, j)| vx[j * 13 + i] * vc[i])
            .collect()
    };
    assert_close("cpu strided mul", &values(&cpu), &want, 1e-6, 1e-6);
    if xpu {
        let gpu = x
            .to(Device::Xpu)
            .unwrap()
            .t()
            .unwrap()
            .mul(&col.to(Device::Xpu).unwrap())
            .unwrap();
        assert_close("xpu strided mul", &values(&gpu), &want, 1e-6, 1e-6);
    }
}

#[test]
fn scalar_forms_match_tensor_forms() {
    for device in common::devices() {
        let x = Tensor::randn(&[65], DType::F32, device, 11).unwrap();
        let s = Tensor::full(0.75, &[1], DType::F32, device).unwrap();
        let pairs = [
            (x.add_scalar(0.75).unwrap(), x.add(&s).unwrap()),
            (x.sub_scalar(0.75).unwrap(), x.sub(&s).unwrap()),
            (x.mul_scalar(0.75).unwrap(), x.mul(&s).unwrap()),
            (x.div_scalar(0.75).unwrap(), x.div(&s).unwrap()),
            (x.maximum_scalar(0.75).unwrap(), x.maximum(&s).unwrap()),
            (x.minimum_scalar(0.75).unwrap(), x.minimum(&s).unwrap()),
            (
                x.abs().unwrap().pow_scalar(0.75).unwrap(),
                x.abs().unwrap().pow(&s).unwrap(),
            ),
        ];
        for (i, (a, b)) in pairs.iter().enumerate() {
            assert_close(
                &format!("{device} scalar form {i}"),
                &values(a),
                &values(b),
                1e-6,
                1e-6,
            );
        }
        let c = x.clamp(-0.5, 0.5).unwrap();
        assert!(values(&c).iter().all(|v| (-0.5..=0.5).contains(v)));
    }
}

#[test]
fn casts_between_every_dtype_pair() {
    let xpu = common::xpu();
    let raw: Vec<f32> = vec![
        0.0, 1.0, 2.5, -3.75, 100.0, 255.0, 300.0, -1.0, 0.33, 7.0, 65504.0, 1e-3, 42.0,
    ];
    for &from in &DType::ALL {
        let src = Tensor::from_vec(raw.clone(), &[raw.len()], Device::Cpu)
            .unwrap()
            .to_dtype(from)
            .unwrap();
        for &to in &DType::ALL {
            let cpu = src.to_dtype(to).unwrap();
            assert_eq!(cpu.dtype(), to);
            if xpu {
                let gpu = src.to(Device::Xpu).unwrap().to_dtype(to).unwrap();
                assert_eq!(values(&gpu), values(&cpu), "cast {from} -> {to}");
                // A cast from an odd offset into packed 16/8-bit storage.
                let gv = src
                    .to(Device::Xpu)
                    .unwrap()
                    .narrow(0, 1, 11)
                    .unwrap()
                    .to_dtype(to)
                    .unwrap();
                let cv = src.narrow(0, 1, 11).unwrap().to_dtype(to).unwrap();
                assert_eq!(values(&gv), values(&cv), "cast view {from} -> {to}");
            }
        }
    }
    // Float -> int truncates toward zero and saturates; NaN -> 0.
    let f = Tensor::from_vec(vec![-1.7f32, 2.9, 1e10, f32::NAN, -1e10], &[5], Device::Cpu).unwrap();
    assert_eq!(
        f.to_dtype(DType::I32).unwrap().to_vec::<i32>().unwrap(),
        vec![-1, 2, i32::MAX, 0, i32::MIN]
    );
    assert_eq!(
        f.to_dtype(DType::U8).unwrap().to_vec::<u8>().unwrap(),
        vec![0, 2, 255, 0, 0]
    );
    if xpu {
        let g = f.to(Device::Xpu).unwrap();
        let gi = g.to_dtype(DType::I32).unwrap().to_vec::<i32>().unwrap();
        assert_eq!(&gi[..2], &[-1, 2]);
        assert_eq!(gi[3], 0);
        assert_eq!(
            g.to_dtype(DType::U8).unwrap().to_vec::<u8>().unwrap(),
            vec![0, 2, 255, 0, 0]
        );
    }
}
