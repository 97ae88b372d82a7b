//! Elementwise results take PyTorch's memory order (its `TensorIterator`'s): `exp` of every
//! view recipe of `tests/fixtures/strides.json`, and `+`, `>` and `where` of its pairs (made by
//! `make_stride_fixtures.py` with PyTorch). Each result is checked for PyTorch's strides and,
//! against the operands' values broadcast on the host, for its values, on every device: the
//! kernels read operands permuted into the output's order, so wrong values would show a
//! mismatched permutation.

use crate::common;
use common::stride_fixture::{self, usizes};
use common::{devices, values};
use xpu::{CmpOp, Tensor};

/// The row-major values of `t` broadcast to `shape`.
fn broadcast_values(t: &Tensor, shape: &[usize]) -> Vec<f64> {
    values(&t.broadcast_to(shape).unwrap().contiguous().unwrap())
}

#[test]
fn unary_results_take_pytorchs_strides() {
    let fixture = stride_fixture::load();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 20, "fixture has {} cases", cases.len());
    for device in devices() {
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let view = stride_fixture::made(case, device);
            let got = view.neg().unwrap();
            let what = format!("{name} on {device}");
            assert_eq!(got.strides(), usizes(&case["unary_strides"]), "{what}");
            let want: Vec<f64> = values(&view).iter().map(|v| -v).collect();
            assert_eq!(values(&got), want, "{what}: values");
            // Another op (not a copy in disguise), the same order.
            let exp = view.exp().unwrap();
            assert_eq!(exp.strides(), got.strides(), "{what}: exp");
        }
    }
}

#[test]
fn binary_results_take_pytorchs_strides() {
    let fixture = stride_fixture::load();
    let pairs = fixture["binary"].as_array().unwrap();
    assert!(pairs.len() >= 16, "fixture has {} pairs", pairs.len());
    for device in devices() {
        for pair in pairs {
            let name = pair["name"].as_str().unwrap();
            let what = format!("{name} on {device}");
            let lhs = stride_fixture::made(&pair["lhs"], device);
            let rhs = stride_fixture::made(&pair["rhs"], device);
            let sum = lhs.add(&rhs).unwrap();
            let shape = sum.shape().to_vec();
            let (l, r) = (
                broadcast_values(&lhs, &shape),
                broadcast_values(&rhs, &shape),
            );
            assert_eq!(sum.strides(), usizes(&pair["add_strides"]), "{what}: add");
            let want: Vec<f64> = l.iter().zip(&r).map(|(a, b)| a + b).collect();
            assert_eq!(values(&sum), want, "{what}: add values");

            let gt = lhs.gt(&rhs).unwrap();
            assert_eq!(gt.strides(), usizes(&pair["gt_strides"]), "{what}: gt");
            let want: Vec<f64> = l.iter().zip(&r).map(|(a, b)| f64::from(a > b)).collect();
            assert_eq!(values(&gt), want, "{what}: gt values");

            let mask = lhs.cmp_scalar(CmpOp::Gt, 5.0).unwrap();
            let picked = mask.where_cond(&lhs, &rhs).unwrap();
            assert_eq!(
                picked.strides(),
                usizes(&pair["where_strides"]),
                "{what}: where"
            );
            let want: Vec<f64> = l
                .iter()
                .zip(&r)
                .map(|(&a, &b)| if a > 5.0 { a } else { b })
                .collect();
            assert_eq!(values(&picked), want, "{what}: where values");
        }
    }
}
