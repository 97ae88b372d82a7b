//! Reductions (sum, mean, max, min, argmax, argmin; along a dim, keepdim or not, and over all)
//! and softmax: Cpu against a plain f64 reference, Xpu against Cpu.

use crate::common;
use common::{assert_close, eps, randn, values, FLOATS};
use xpu::{DType, Device, ReduceOp, Tensor};

const OPS: [ReduceOp; 6] = [
    ReduceOp::Sum,
    ReduceOp::Mean,
    ReduceOp::Max,
    ReduceOp::Min,
    ReduceOp::ArgMax,
    ReduceOp::ArgMin,
];

/// Reference reduction of `v` (row-major `shape`) along `dim`.
fn reference(v: &[f64], shape: &[usize], dim: usize, op: ReduceOp) -> Vec<f64> {
    let outer: usize = shape[..dim].iter().product();
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let row: Vec<f64> = (0..len).map(|r| v[(o * len + r) * inner + i]).collect();
            let first = |better: &dyn Fn(f64, f64) -> bool| {
                let mut bi = 0;
                for (r, &x) in row.iter().enumerate() {
                    if better(x, row[bi]) {
                        bi = r;
                    }
                }
                bi
            };
            out.push(match op {
                ReduceOp::Sum => row.iter().sum(),
                ReduceOp::Mean => row.iter().sum::<f64>() / len as f64,
                ReduceOp::Max => row.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                ReduceOp::Min => row.iter().cloned().fold(f64::INFINITY, f64::min),
                ReduceOp::ArgMax => first(&|x, b| x > b) as f64,
                ReduceOp::ArgMin => first(&|x, b| x < b) as f64,
            });
        }
    }
    out
}

#[test]
fn reductions_along_each_dim() {
    let xpu = common::xpu();
    // [2, 33, 1100]: Cpu column reductions split over threads in runs of 1024 columns that
    // cross the 1100-column rows. Xpu reduces dims up to 64 long, and dim 0 of [67, 8200]
    // (reduced stride != 1, 8192+ rows), one invocation per output; the other dims one
    // workgroup per output.
    let shapes: [&[usize]; 8] = [
        &[1],
        &[7],
        &[257],
        &[63, 65],
        &[3, 257, 5],
        &[2, 1, 9],
        &[2, 33, 1100],
        &[67, 8200],
    ];
    for &dtype in &FLOATS {
        for (si, shape) in shapes.iter().enumerate() {
            let x = randn(shape, dtype, si as u64);
            let xv = values(&x);
            let gx = xpu.then(|| x.to(Device::Xpu).unwrap());
            for dim in 0..shape.len() {
                for op in OPS {
                    for keepdim in [false, true] {
                        let cpu = x.reduce(op, dim as isize, keepdim).unwrap();
                        let mut want_shape = shape.to_vec();
                        if keepdim {
                            want_shape[dim] = 1;
                        } else {
                            want_shape.remove(dim);
                        }
                        assert_eq!(cpu.shape(), &want_shape[..]);
                        let want = reference(&xv, shape, dim, op);
                        let what = format!("{} {dtype} {shape:?} dim {dim}", op.name());
                        let n = shape[dim] as f64;
                        let (atol, rtol) = if op.returns_index() {
                            assert_eq!(cpu.dtype(), DType::I32);
                            (0.0, 0.0)
                        } else {
                            (2.0 * eps(dtype) * n.sqrt() * 3.0, 2.0 * eps(dtype))
                        };
                        assert_close(&format!("cpu {what}"), &values(&cpu), &want, atol, rtol);
                        if let Some(gx) = &gx {
                            let gpu = gx.reduce(op, dim as isize, keepdim).unwrap();
                            assert_eq!(gpu.shape(), &want_shape[..]);
                            assert_eq!(gpu.dtype(), cpu.dtype());
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
    }
}

#[test]
fn reductions_over_views_all_and_large() {
    let xpu = common::xpu();
    let x = randn(&[65, 63], DType::F32, 3);
    let t = x.t().unwrap();
    let cpu = t.sum(1, false).unwrap();
    let want = reference(
        &values(&t.contiguous().unwrap()),
        &[63, 65],
        1,
        ReduceOp::Sum,
    );
    assert_close("cpu sum transposed", &values(&cpu), &want, 1e-4, 1e-5);
    let big = randn(&[(1 << 20) + 7], DType::F32, 4);
    let s = big.sum_all().unwrap();
    assert_eq!(s.shape(), &[] as &[usize]);
    let want_sum: f64 = values(&big).iter().sum();
    assert_close("cpu sum 1M", &values(&s), &[want_sum], 0.05, 1e-4);
    let am = big.argmax_all().unwrap().to_scalar::<i32>().unwrap();
    let bv = values(&big);
    assert_eq!(
        bv[am as usize],
        bv.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
    );
    if xpu {
        let g = x
            .to(Device::Xpu)
            .unwrap()
            .t()
            .unwrap()
            .sum(1, false)
            .unwrap();
        assert_close("xpu sum transposed", &values(&g), &want, 1e-4, 1e-5);
        for dim in [0, 1] {
            let cpu = t.softmax(dim).unwrap();
            let gpu = x
                .to(Device::Xpu)
                .unwrap()
                .t()
                .unwrap()
                .softmax(dim)
                .unwrap();
            let what = format!("xpu softmax transposed dim {dim}");
            assert_close(&what, &values(&gpu), &values(&cpu), 1e-6, 1e-5);
        }
        let gb = big.to(Device::Xpu).unwrap();
        assert_close(
            "xpu sum 1M",
            &values(&gb.sum_all().unwrap()),
            &[want_sum],
            0.05,
            1e-4,
        );
        assert_eq!(gb.argmax_all().unwrap().to_scalar::<i32>().unwrap(), am);
        assert_close(
            "xpu mean_all",
            &values(&gb.mean_all().unwrap()),
            &values(&big.mean_all().unwrap()),
            1e-6,
            1e-4,
        );
        assert_eq!(
            values(&gb.max_all().unwrap()),
            values(&big.max_all().unwrap())
        );
        assert_eq!(
            values(&gb.min_all().unwrap()),
            values(&big.min_all().unwrap())
        );
    }
}

#[test]
fn ties_nan_and_empty_dims() {
    for device in common::devices() {
        let x = Tensor::from_vec(vec![1.0f32, 3.0, 3.0, -1.0, -1.0, 2.0], &[6], device).unwrap();
        assert_eq!(
            x.argmax(0, false).unwrap().to_scalar::<i32>().unwrap(),
            1,
            "{device}: first max wins"
        );
        assert_eq!(
            x.argmin(0, false).unwrap().to_scalar::<i32>().unwrap(),
            3,
            "{device}: first min wins"
        );
        let n = Tensor::from_vec(vec![1.0f32, f32::NAN, 5.0], &[3], device).unwrap();
        assert!(
            n.max_all().unwrap().to_scalar::<f32>().unwrap().is_nan(),
            "{device}: max propagates NaN"
        );
        assert!(
            n.min_all().unwrap().to_scalar::<f32>().unwrap().is_nan(),
            "{device}: min propagates NaN"
        );
        assert_eq!(
            n.argmax_all().unwrap().to_scalar::<i32>().unwrap(),
            1,
            "{device}: argmax picks NaN"
        );
        let e = Tensor::zeros(&[3, 0], DType::F32, device).unwrap();
        assert_eq!(
            e.sum(1, false).unwrap().to_vec::<f32>().unwrap(),
            vec![0.0; 3]
        );
        assert!(
            e.max(1, false).is_err(),
            "{device}: max over an empty dim is an error"
        );
        assert_eq!(e.sum(0, false).unwrap().shape(), &[0]);
    }
}

#[test]
fn softmax_along_each_dim() {
    let xpu = common::xpu();
    // Xpu: dims up to 64 long and dim 0 of [67, 8200] take one invocation per output row.
    let shapes: [&[usize]; 6] = [&[1], &[77], &[7, 257], &[3, 5, 33], &[4, 1], &[67, 8200]];
    for &dtype in &FLOATS {
        for (si, shape) in shapes.iter().enumerate() {
            let x = randn(shape, DType::F32, 40 + si as u64)
                .mul_scalar(4.0)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            for dim in 0..shape.len() {
                let cpu = x.softmax(dim as isize).unwrap();
                assert_eq!(cpu.shape(), *shape);
                assert_eq!(cpu.dtype(), dtype);
                // Reference: exp / sum along dim in f64.
                let xv = values(&x);
                let maxes = reference(&xv, shape, dim, ReduceOp::Max);
                let inner: usize = shape[dim + 1..].iter().product();
                let len = shape[dim];
                let e: Vec<f64> = xv
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let (o, r) = (i / (len * inner), i % inner);
                        (v - maxes[o * inner + r]).exp()
                    })
                    .collect();
                let sums = reference(&e, shape, dim, ReduceOp::Sum);
                let want: Vec<f64> = e
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| v / sums[(i / (len * inner)) * inner + i % inner])
                    .collect();
                let tol = 2.0 * eps(dtype) + 1e-6;
                let what = format!("softmax {dtype} {shape:?} dim {dim}");
                assert_close(&format!("cpu {what}"), &values(&cpu), &want, tol, tol);
                if xpu {
                    let gpu = x.to(Device::Xpu).unwrap().softmax(dim as isize).unwrap();
                    assert_eq!(gpu.shape(), *shape);
                    assert_close(
                        &format!("xpu {what}"),
                        &values(&gpu),
                        &values(&cpu),
                        tol,
                        tol,
                    );
                }
            }
        }
    }
    // Large logits do not overflow.
    let big = Tensor::from_vec(vec![1000.0f32, 1001.0, -1000.0], &[3], Device::Cpu).unwrap();
    for device in common::devices() {
        let s = values(&big.to(device).unwrap().softmax(0).unwrap());
        assert!(
            s.iter().all(|v| v.is_finite()) && (s.iter().sum::<f64>() - 1.0).abs() < 1e-6,
            "{device}: {s:?}"
        );
    }
}

/// i32 reductions are exact on every device: the sum wraps like two's-complement addition,
/// max/min/argmax/argmin compare integers and ties keep the first index; mean is refused.
/// Values drawn from a small range (many ties) and from the whole i32 range (sums that wrap),
/// on odd shapes and on a transposed view.
#[test]
fn i32_reductions_are_exact_on_every_device() {
    let shapes: [&[usize]; 5] = [&[1], &[7], &[257], &[63, 65], &[3, 257, 5]];
    for device in common::devices() {
        for (si, shape) in shapes.iter().enumerate() {
            let n: usize = shape.iter().product();
            for wide in [false, true] {
                let host: Vec<i32> = (0..n as u32)
                    .map(|i| {
                        let h = i.wrapping_add(si as u32 * 7919).wrapping_mul(0x9E37_79B1);
                        if wide {
                            h as i32
                        } else {
                            (h >> 20) as i32 % 9 - 4
                        }
                    })
                    .collect();
                let base = Tensor::from_slice(&host, shape, device).unwrap();
                // The same values through a transposed view of the transposed data.
                let views = if shape.len() >= 2 {
                    let r = shape.len();
                    let t = base
                        .transpose(0, r as isize - 1)
                        .unwrap()
                        .contiguous()
                        .unwrap();
                    vec![base.clone(), t.transpose(0, r as isize - 1).unwrap()]
                } else {
                    vec![base.clone()]
                };
                for x in &views {
                    for dim in 0..shape.len() {
                        for op in OPS {
                            let what = format!("{device} {shape:?} wide={wide} dim {dim} {op:?}");
                            let r = x.reduce(op, dim as isize, false);
                            if op == ReduceOp::Mean {
                                assert!(r.is_err(), "{what}: mean of i32 must be refused");
                                continue;
                            }
                            let got = r.unwrap().to_vec::<i32>().unwrap();
                            assert_eq!(got, int_reference(&host, shape, dim, op), "{what}");
                        }
                    }
                }
            }
        }
    }
}

/// Exact i32 reference of `op` along `dim` (the sum wraps).
fn int_reference(v: &[i32], shape: &[usize], dim: usize, op: ReduceOp) -> Vec<i32> {
    let outer: usize = shape[..dim].iter().product();
    let len = shape[dim];
    let inner: usize = shape[dim + 1..].iter().product();
    let mut out = Vec::new();
    for o in 0..outer {
        for i in 0..inner {
            let row: Vec<i32> = (0..len).map(|r| v[(o * len + r) * inner + i]).collect();
            let first = |pick: i32| row.iter().position(|&x| x == pick).unwrap_or(0) as i32;
            let (max, min) = (*row.iter().max().unwrap(), *row.iter().min().unwrap());
            out.push(match op {
                ReduceOp::Sum => row.iter().map(|&x| x as i64).sum::<i64>() as i32,
                ReduceOp::Max => max,
                ReduceOp::Min => min,
                ReduceOp::ArgMax => first(max),
                ReduceOp::ArgMin => first(min),
                ReduceOp::Mean => unreachable!("mean is refused"),
            });
        }
    }
    out
}

/// Softmax along every dim of long rows (past the one-invocation-per-row kernel's reach, so
/// the workgroup-per-row kernel runs) on the Xpu: contiguous results in the input's dim order,
/// the Cpu's values, each float dtype.
#[test]
fn xpu_softmax_along_every_dim_is_contiguous() {
    if !common::xpu() {
        return;
    }
    for &dtype in &FLOATS {
        let x = randn(&[130, 3, 97], dtype, 8);
        let g = x.to(Device::Xpu).unwrap();
        for dim in 0..3 {
            let what = format!("{dtype} softmax dim {dim}");
            let got = g.softmax(dim).unwrap();
            assert!(got.is_contiguous(), "{what}");
            let want = values(&x.softmax(dim).unwrap());
            let tol = eps(dtype) * 2.0;
            assert_close(&what, &values(&got), &want, tol, tol);
        }
    }
}
