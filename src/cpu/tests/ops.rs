//! Storage-level element-wise ops, softmax and matmul for every dtype, strided layouts and both
//! SIMD levels, against `f64` references.

use super::storage::{values, views};
use super::*;
use crate::cpu::{with_simd_level, CpuStorage};
use crate::layout::Layout;
use crate::{DType, Error};
use half::{bf16, f16};

/// Epsilon of a float dtype.
pub(crate) fn eps(d: DType) -> f64 {
    match d {
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        _ => f64::from(f32::EPSILON),
    }
}

/// A storage of `dtype` holding `v` (rounded to the dtype).
pub(crate) fn make(dtype: DType, v: &[f32]) -> CpuStorage {
    match dtype {
        DType::F32 => CpuStorage::from_vec(v.to_vec()).unwrap(),
        DType::F16 => {
            CpuStorage::from_vec(v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>()).unwrap()
        }
        DType::BF16 => {
            CpuStorage::from_vec(v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>()).unwrap()
        }
        DType::I32 => {
            CpuStorage::from_vec(v.iter().map(|&x| x as i32).collect::<Vec<_>>()).unwrap()
        }
        DType::U8 => CpuStorage::from_vec(v.iter().map(|&x| x as u8).collect::<Vec<_>>()).unwrap(),
    }
}

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// Layouts to test an op of `n` logical elements on: contiguous plus the strided views (whose
/// storages are created by the caller with `storage_len` elements).
fn cases(n: usize) -> Vec<(Layout, usize)> {
    let mut v = vec![(Layout::contiguous(&[n]), n)];
    if n == 17 {
        v.extend(views().into_iter().map(|(l, _)| (l, 30)));
    }
    v
}

#[test]
fn unary_every_dtype_layout_and_level() {
    for level in levels() {
        with_simd_level(level, || {
            for dtype in FLOATS {
                for op in all_unary() {
                    let (lo, hi) = input_range(op);
                    let (lo, hi) = if dtype == DType::F16 {
                        (lo.max(-60000.0), hi.min(60000.0))
                    } else {
                        (lo, hi)
                    };
                    let mut rng = Lcg::new(op.code() as u64 * 31 + 5);
                    for n in LENGTHS {
                        for (layout, len) in cases(n) {
                            let mut data = rng.vec(len, lo, hi);
                            if len > 4 {
                                data[..4].copy_from_slice(&[
                                    f32::NAN,
                                    f32::INFINITY,
                                    f32::NEG_INFINITY,
                                    -0.0,
                                ]);
                            }
                            let s = make(dtype, &data);
                            let out = s.unary(&layout, op).unwrap();
                            assert_eq!((out.dtype(), out.len()), (dtype, layout.numel()));
                            let input = values(&s, &layout);
                            let got = values(&out, &Layout::contiguous(&[out.len()]));
                            let (ulps, atol) = tolerance(op);
                            let tol = if dtype == DType::F32 {
                                (ulps, atol)
                            } else {
                                (1.0, atol.max(1e-6))
                            };
                            for (x, g) in input.iter().zip(&got) {
                                let want = ref_unary(op, *x);
                                assert!(
                                    close(*g, want, eps(dtype), tol),
                                    "{level:?} {dtype} {op:?}({x}) = {g}, want {want}"
                                );
                            }
                        }
                    }
                }
            }
        });
    }
}

#[test]
fn unary_i32_and_errors() {
    use crate::desc::kinds::UnaryOp::*;
    let data = [-7.0f32, -1.0, 0.0, 3.0, 5.0, 2147483000.0];
    let s = make(DType::I32, &data);
    let l = Layout::contiguous(&[6]);
    let run = |op| values(&s.unary(&l, op).unwrap(), &l);
    assert_eq!(run(Neg), vec![7.0, 1.0, 0.0, -3.0, -5.0, -2147483008.0]);
    assert_eq!(run(Abs)[..2], [7.0, 1.0]);
    assert_eq!(run(Relu)[..4], [0.0, 0.0, 0.0, 3.0]);
    assert_eq!(
        run(Affine { mul: 0.5, add: 0.0 })[..5],
        [-4.0, -0.0, 0.0, 2.0, 2.0]
    );
    assert_eq!(
        run(Affine {
            mul: 1e10,
            add: 0.0
        })[5],
        i32::MAX as f64
    );
    assert_eq!(run(MaxScalar(1.0))[..4], [1.0, 1.0, 1.0, 3.0]);
    assert_eq!(run(MinScalar(1.0))[..4], [-7.0, -1.0, 0.0, 1.0]);
    assert_eq!(run(Square)[..4], [49.0, 1.0, 0.0, 9.0]);
    assert_eq!(run(Sign)[..4], [-1.0, -1.0, 0.0, 1.0]);
    for op in [Floor, Ceil, Round, Trunc] {
        assert_eq!(
            run(op),
            run(Affine { mul: 1.0, add: 0.0 }),
            "{op:?} keeps integers"
        );
    }
    assert!(matches!(
        s.unary(&l, Exp),
        Err(Error::UnsupportedDType {
            op: "unary",
            dtype: DType::I32,
            ..
        })
    ));
    let u = make(DType::U8, &data);
    assert!(matches!(
        u.unary(&l, Neg),
        Err(Error::UnsupportedDType { .. })
    ));
    assert!(make(DType::F32, &data)
        .unary(&Layout::contiguous(&[7]), Neg)
        .is_err());
}

#[test]
fn binary_every_dtype_broadcast_and_level() {
    use crate::desc::kinds::BinaryOp::*;
    // (lhs layout, rhs layout, lhs storage len, rhs storage len)
    let m = 5;
    let shapes: Vec<(Layout, Layout, usize, usize)> = vec![
        (Layout::contiguous(&[0]), Layout::contiguous(&[0]), 0, 0),
        (Layout::contiguous(&[1]), Layout::contiguous(&[1]), 1, 1),
        (
            Layout::contiguous(&[257]),
            Layout::contiguous(&[257]),
            257,
            257,
        ),
        // rhs scalar broadcast
        (
            Layout::contiguous(&[3, 17]),
            Layout::contiguous(&[1]).broadcast_to(&[3, 17]).unwrap(),
            51,
            1,
        ),
        // lhs scalar
        (
            Layout::contiguous(&[]).broadcast_to(&[65]).unwrap(),
            Layout::contiguous(&[65]),
            1,
            65,
        ),
        // bias row over [m, 63]
        (
            Layout::contiguous(&[m, 63]),
            Layout::contiguous(&[63]).broadcast_to(&[m, 63]).unwrap(),
            m * 63,
            63,
        ),
        // column over [m, 16]
        (
            Layout::contiguous(&[m, 16]),
            Layout::contiguous(&[m, 1]).broadcast_to(&[m, 16]).unwrap(),
            m * 16,
            m,
        ),
        // transposed lhs, narrowed rhs
        (
            Layout::contiguous(&[7, 15]).transpose(0, 1),
            Layout::contiguous(&[15, 9]).narrow(1, 1, 7).unwrap(),
            105,
            135,
        ),
        // both strided 3-d
        (
            Layout::contiguous(&[2, 3, 4]).permute(&[1, 2, 0]).unwrap(),
            Layout::from_parts(vec![3, 4, 2], vec![0, 2, 1], 3),
            24,
            11,
        ),
    ];
    for level in levels() {
        with_simd_level(level, || {
            for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32] {
                for op in [Add, Sub, Mul, Div, Maximum, Minimum, Pow] {
                    let mut rng = Lcg::new(op.code() as u64 + 77);
                    for (la, lb, na, nb) in &shapes {
                        let (lo, hi) = if op == Pow { (0.0, 3.0) } else { (-20.0, 20.0) };
                        let a = make(dtype, &rng.vec(*na, lo, hi));
                        let b = make(dtype, &rng.vec(*nb, -4.0, 4.0));
                        let out = a.binary(la, &b, lb, op).unwrap();
                        assert_eq!((out.dtype(), out.len()), (dtype, la.numel()));
                        let (va, vb) = (values(&a, la), values(&b, lb));
                        let got = values(&out, &Layout::contiguous(&[out.len()]));
                        for i in 0..got.len() {
                            let want = if dtype == DType::I32 {
                                f64::from(op.apply_i32(va[i] as i32, vb[i] as i32))
                            } else {
                                ref_binary(op, va[i], vb[i])
                            };
                            let tol = if op == Pow { (1.5, 0.0) } else { (0.5, 0.0) };
                            assert!(
                                close(got[i], want, eps(dtype), tol)
                                    || (dtype == DType::I32 && got[i] == want),
                                "{level:?} {dtype} {op:?} {} {} -> {} want {want} ({la:?})",
                                va[i],
                                vb[i],
                                got[i]
                            );
                        }
                    }
                }
            }
        });
    }
    let a = make(DType::F32, &[1.0; 4]);
    let l = Layout::contiguous(&[4]);
    assert!(matches!(
        a.binary(&l, &make(DType::I32, &[1.0; 4]), &l, Add),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        a.binary(&l, &a, &Layout::contiguous(&[2, 2]), Add),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(a.binary(&l, &make(DType::F32, &[1.0; 3]), &l, Add).is_err());
    let u = make(DType::U8, &[1.0; 4]);
    assert!(matches!(
        u.binary(&l, &u, &l, Add),
        Err(Error::UnsupportedDType { .. })
    ));
}

#[test]
fn big_tensors_use_threads_and_match() {
    let n = 1 << 20 | 5;
    let mut rng = Lcg::new(99);
    let data = rng.vec(n, -20.0, 20.0);
    let bias = rng.vec(1024 + 5, -1.0, 1.0);
    for level in levels() {
        with_simd_level(level, || {
            let s = make(DType::F32, &data);
            let l = Layout::contiguous(&[n]);
            let e = s.unary(&l, crate::desc::kinds::UnaryOp::Exp).unwrap();
            let e = values(&e, &l);
            assert!(data.iter().zip(&e).all(|(&x, &y)| close(
                y,
                f64::from(x).exp(),
                eps(DType::F32),
                (8.0, 0.0)
            )));
            // [1024, 1029] + bias row, as bf16.
            let rows = n / bias.len();
            let la = Layout::contiguous(&[rows, bias.len()]);
            let lb = Layout::contiguous(&[bias.len()])
                .broadcast_to(&[rows, bias.len()])
                .unwrap();
            let (a, b) = (make(DType::BF16, &data), make(DType::BF16, &bias));
            let out = a
                .binary(&la, &b, &lb, crate::desc::kinds::BinaryOp::Add)
                .unwrap();
            let (va, vb, got) = (
                values(&a, &la),
                values(&b, &lb),
                values(&out, &Layout::contiguous(&[la.numel()])),
            );
            for i in 0..got.len() {
                assert!(
                    close(got[i], va[i] + vb[i], eps(DType::BF16), (0.5, 0.0)),
                    "{level:?} {i}"
                );
            }
        });
    }
}

fn softmax_ref(x: &[f64], shape: &[usize], dim: usize) -> Vec<f64> {
    let outer: usize = shape[..dim].iter().product();
    let inner: usize = shape[dim + 1..].iter().product();
    let r = shape[dim];
    let mut out = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * r + j) * inner + i;
            let m = (0..r).map(|j| x[at(j)]).fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = (0..r).map(|j| (x[at(j)] - m).exp()).sum();
            for j in 0..r {
                out[at(j)] = (x[at(j)] - m).exp() / z;
            }
        }
    }
    out
}

#[test]
fn softmax_every_dim_dtype_and_level() {
    let shapes: [&[usize]; 5] = [&[17], &[3, 65], &[4, 5, 6], &[2, 0, 3], &[1, 257]];
    for level in levels() {
        with_simd_level(level, || {
            for dtype in FLOATS {
                let mut rng = Lcg::new(5);
                for shape in shapes {
                    let n: usize = shape.iter().product();
                    let base = Layout::contiguous(shape);
                    let mut layouts = vec![base.clone()];
                    if shape.len() == 3 {
                        layouts.push(base.transpose(0, 2));
                    }
                    for layout in layouts {
                        let s = make(dtype, &rng.vec(n, -30.0, 30.0));
                        let x = values(&s, &layout);
                        for dim in 0..layout.rank() {
                            let out = s.softmax(&layout, dim).unwrap();
                            let got = values(&out, &Layout::contiguous(&[out.len()]));
                            let want = softmax_ref(&x, layout.shape(), dim);
                            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                                let (ulps, atol) = if dtype == DType::F32 {
                                    (70.0, 1e-30)
                                } else {
                                    (1.0, 6e-8)
                                };
                                assert!(
                                    close(*g, *w, eps(dtype), (ulps, atol)),
                                    "{level:?} {dtype} {layout:?} dim {dim} [{i}]: {g} vs {w}"
                                );
                            }
                        }
                    }
                }
            }
        });
    }
    let s = make(DType::F32, &[f32::NAN, 1.0, f32::NEG_INFINITY, 0.0]);
    let out = values(
        &s.softmax(&Layout::contiguous(&[2, 2]), 1).unwrap(),
        &Layout::contiguous(&[4]),
    );
    assert!(out[0].is_nan() && out[1].is_nan());
    assert_eq!(out[2..], [0.0, 1.0]);
    assert!(matches!(
        s.softmax(&Layout::contiguous(&[4]), 1),
        Err(Error::DimOutOfRange { .. })
    ));
    assert!(make(DType::I32, &[1.0])
        .softmax(&Layout::contiguous(&[1]), 0)
        .is_err());
}

#[test]
fn matmul_shapes_strides_dtypes_and_levels() {
    // (batch, m, k, n)
    let dims = [
        (1, 1, 1, 1),
        (1, 7, 5, 3),
        (2, 13, 17, 33),
        (3, 6, 0, 4),
        (1, 65, 40, 70),
        (2, 100, 64, 96),
    ];
    for level in levels() {
        with_simd_level(level, || {
            for dtype in FLOATS {
                let mut rng = Lcg::new(21);
                for (b, m, k, n) in dims {
                    let a = make(dtype, &rng.vec(b * m * k, -2.0, 2.0));
                    let w = make(dtype, &rng.vec(b * k * n, -2.0, 2.0));
                    let variants = [
                        (
                            Layout::contiguous(&[b, m, k]),
                            Layout::contiguous(&[b, k, n]),
                        ),
                        (
                            Layout::contiguous(&[b, k, m]).transpose(1, 2),
                            Layout::contiguous(&[b, n, k]).transpose(1, 2),
                        ),
                        // rhs batch-broadcast (stride 0) from its first batch
                        (
                            Layout::contiguous(&[b, m, k]),
                            Layout::from_parts(vec![b, k, n], vec![0, n, 1], 0),
                        ),
                    ];
                    for (la, lb) in variants {
                        let out = a.matmul(&la, &w, &lb).unwrap();
                        assert_eq!(out.len(), b * m * n);
                        let (va, vb) = (values(&a, &la), values(&w, &lb));
                        let got = values(&out, &Layout::contiguous(&[out.len()]));
                        for bi in 0..b {
                            for i in 0..m {
                                for j in 0..n {
                                    let (mut want, mut mag) = (0f64, 0f64);
                                    for p in 0..k {
                                        let t = va[(bi * m + i) * k + p] * vb[(bi * k + p) * n + j];
                                        want += t;
                                        mag += t.abs();
                                    }
                                    let g = got[(bi * m + i) * n + j];
                                    let tol = 1e-6 * mag
                                        + eps(dtype)
                                            * want.abs()
                                            * if dtype == DType::F32 { 0.0 } else { 1.0 };
                                    assert!((g - want).abs() <= tol + 1e-30, "{level:?} {dtype} {b}x{m}x{k}x{n} [{bi},{i},{j}]: {g} vs {want}");
                                }
                            }
                        }
                    }
                }
            }
        });
    }
    let a = make(DType::F32, &[1.0; 6]);
    assert!(matches!(
        a.matmul(
            &Layout::contiguous(&[2, 3]),
            &a,
            &Layout::contiguous(&[2, 3])
        ),
        Err(Error::ShapeMismatch { .. })
    ));
    let i = make(DType::I32, &[1.0; 6]);
    let (l23, l32) = (Layout::contiguous(&[2, 3]), Layout::contiguous(&[3, 2]));
    assert!(matches!(
        i.matmul(&l23, &i, &l32),
        Err(Error::UnsupportedDType { .. })
    ));
    assert!(matches!(
        a.matmul(&l23, &i, &l32),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(a.matmul(&Layout::contiguous(&[3, 3]), &a, &l32).is_err());
}
