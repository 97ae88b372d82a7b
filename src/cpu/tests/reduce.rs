//! Reductions for every op, dtype, dim and layout kind at both SIMD levels, against `f64`.

use super::ops::{eps, make};
use super::storage::values;
use super::*;
use crate::cpu::{with_simd_level, CpuStorage};
use crate::desc::kinds::ReduceOp;
use crate::layout::Layout;
use crate::{DType, Error};

const OPS: [ReduceOp; 6] = [
    ReduceOp::Sum,
    ReduceOp::Mean,
    ReduceOp::Max,
    ReduceOp::Min,
    ReduceOp::ArgMax,
    ReduceOp::ArgMin,
];

/// Reference reduction of logical values `x` of `shape` along `dim`.
fn reduce_ref(x: &[f64], shape: &[usize], dim: usize, op: ReduceOp) -> Vec<f64> {
    let outer: usize = shape[..dim].iter().product();
    let inner: usize = shape[dim + 1..].iter().product();
    let r = shape[dim];
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let row: Vec<f64> = (0..r).map(|j| x[(o * r + j) * inner + i]).collect();
            let first_nan = row.iter().position(|v| v.is_nan());
            out.push(match op {
                ReduceOp::Sum => row.iter().sum(),
                ReduceOp::Mean => row.iter().sum::<f64>() / r as f64,
                ReduceOp::Max => first_nan.map_or_else(
                    || row.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                    |_| f64::NAN,
                ),
                ReduceOp::Min => first_nan.map_or_else(
                    || row.iter().copied().fold(f64::INFINITY, f64::min),
                    |_| f64::NAN,
                ),
                ReduceOp::ArgMax | ReduceOp::ArgMin => first_nan.unwrap_or_else(|| {
                    let mut best = 0;
                    for (j, &v) in row.iter().enumerate() {
                        if (op == ReduceOp::ArgMax && v > row[best])
                            || (op == ReduceOp::ArgMin && v < row[best])
                        {
                            best = j;
                        }
                    }
                    best
                }) as f64,
            });
        }
    }
    out
}

fn check(s: &CpuStorage, layout: &Layout, dim: usize, op: ReduceOp, what: &str) {
    let dtype = s.dtype();
    let out = s.reduce(layout, dim, op).unwrap();
    let want_dtype = if op.returns_index() {
        DType::I32
    } else {
        dtype
    };
    assert_eq!(out.dtype(), want_dtype);
    let x = values(s, layout);
    let want = reduce_ref(&x, layout.shape(), dim, op);
    let got = values(&out, &Layout::contiguous(&[out.len()]));
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let ok = if dtype == DType::I32 && op == ReduceOp::Sum {
            *g == f64::from((*w as i64) as i32)
        } else if op.returns_index() || dtype == DType::I32 {
            g == w
        } else {
            close(*g, *w, eps(dtype), (0.5, 1e-300)) || (g.is_nan() && w.is_nan())
        };
        assert!(
            ok,
            "{what} {dtype} {op:?} dim {dim} {layout:?} [{i}]: {g} vs {w}"
        );
    }
}

#[test]
fn reduce_every_op_dim_dtype_layout_and_level() {
    let shapes: [&[usize]; 6] = [&[1], &[17], &[3, 65], &[4, 5, 6], &[2, 257, 3], &[16, 7]];
    for level in levels() {
        with_simd_level(level, || {
            for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32] {
                let mut rng = Lcg::new(17);
                for shape in shapes {
                    let n: usize = shape.iter().product();
                    let mut data = rng.vec(n, -50.0, 50.0);
                    // Ties, so "first index" matters.
                    if n > 6 {
                        data[5] = 1000.0;
                        data[n - 1] = 1000.0;
                        data[2] = -1000.0;
                        data[n - 2] = -1000.0;
                    }
                    let s = make(dtype, &data);
                    let base = Layout::contiguous(shape);
                    let mut layouts = vec![base.clone()];
                    if shape.len() >= 2 {
                        layouts.push(base.transpose(0, shape.len() - 1));
                        layouts.push(base.narrow(0, 1, shape[0] - 1).unwrap());
                    }
                    for layout in layouts {
                        for dim in 0..layout.rank() {
                            for op in OPS {
                                if dtype == DType::I32 && op == ReduceOp::Mean {
                                    assert!(matches!(
                                        s.reduce(&layout, dim, op),
                                        Err(Error::UnsupportedDType { .. })
                                    ));
                                    continue;
                                }
                                check(&s, &layout, dim, op, &format!("{level:?}"));
                            }
                        }
                    }
                }
                // Broadcast input (stride 0).
                let s = make(dtype, &rng.vec(7, -5.0, 5.0));
                let b = Layout::contiguous(&[7]).broadcast_to(&[4, 7]).unwrap();
                for op in OPS
                    .into_iter()
                    .filter(|&o| !(dtype == DType::I32 && o == ReduceOp::Mean))
                {
                    check(&s, &b, 0, op, "broadcast");
                    check(&s, &b, 1, op, "broadcast");
                }
            }
        });
    }
}

#[test]
fn reduce_nan_empty_big_and_errors() {
    for level in levels() {
        with_simd_level(level, || {
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                // NaN at different places, rows and columns.
                let mut data: Vec<f32> = (0..40).map(|i| (i % 7) as f32).collect();
                data[9] = f32::NAN;
                data[23] = f32::NAN;
                let s = make(dtype, &data);
                for layout in [
                    Layout::contiguous(&[4, 10]),
                    Layout::contiguous(&[10, 4]).transpose(0, 1),
                ] {
                    for dim in 0..2 {
                        for op in OPS {
                            check(&s, &layout, dim, op, "nan");
                        }
                    }
                }
                // Empty reduced dim.
                let e = CpuStorage::zeros(dtype, 0).unwrap();
                let l = Layout::contiguous(&[3, 0]);
                assert_eq!(
                    values(
                        &e.reduce(&l, 1, ReduceOp::Sum).unwrap(),
                        &Layout::contiguous(&[3])
                    ),
                    vec![0.0; 3]
                );
                assert!(values(
                    &e.reduce(&l, 1, ReduceOp::Mean).unwrap(),
                    &Layout::contiguous(&[3])
                )
                .iter()
                .all(|v| v.is_nan()));
                for op in [
                    ReduceOp::Max,
                    ReduceOp::Min,
                    ReduceOp::ArgMax,
                    ReduceOp::ArgMin,
                ] {
                    assert!(matches!(
                        e.reduce(&l, 1, op),
                        Err(Error::InvalidArgument { .. })
                    ));
                }
                assert_eq!(e.reduce(&l, 0, ReduceOp::Max).unwrap().len(), 0);
            }
            // > 1M elements: row sums in parallel and a column reduction.
            let n = 1 << 20;
            let mut rng = Lcg::new(1);
            let s = make(DType::F32, &rng.vec(n + 3, -1.0, 1.0));
            check(&s, &Layout::contiguous(&[n + 3]), 0, ReduceOp::Sum, "big");
            check(
                &s,
                &Layout::contiguous(&[1024, 1024]),
                0,
                ReduceOp::Mean,
                "big-col",
            );
            check(
                &s,
                &Layout::contiguous(&[1024, 1024]),
                1,
                ReduceOp::ArgMax,
                "big-row",
            );
        });
    }
    let s = make(DType::F32, &[1.0; 6]);
    assert!(matches!(
        s.reduce(&Layout::contiguous(&[2, 3]), 2, ReduceOp::Sum),
        Err(Error::DimOutOfRange { .. })
    ));
    assert!(s
        .reduce(&Layout::contiguous(&[7]), 0, ReduceOp::Sum)
        .is_err());
    assert!(matches!(
        make(DType::U8, &[1.0]).reduce(&Layout::contiguous(&[1]), 0, ReduceOp::Sum),
        Err(Error::UnsupportedDType { .. })
    ));
    let big = make(DType::I32, &[2147483000.0, 2147483000.0]);
    assert_eq!(
        values(
            &big.reduce(&Layout::contiguous(&[2]), 0, ReduceOp::Sum)
                .unwrap(),
            &Layout::contiguous(&[1])
        ),
        vec![-1280.0]
    ); // 2 * 2147483008 wraps
}
