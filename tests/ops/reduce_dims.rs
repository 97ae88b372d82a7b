//! Reductions over several dims at once (`sum_dims`, `mean_dims`, `max_dims`, `min_dims`,
//! `var_dims`, `std_dims`, `logsumexp_dims`, `all_dims`, `any_dims`): against PyTorch's
//! values (`reduce_dims.*` of `tests/fixtures/ops.safetensors`, made by
//! `make_op_fixtures.py`), and against a plain f64 reference on odd shapes, channels-last,
//! transposed and broadcast inputs, every float dtype and both devices; dims named as PyTorch
//! names them (negative, unsorted, empty for all), with and without keepdim.

use crate::common;
use common::fixtures::{get, load};
use common::{assert_close, devices, eps, randn, values};
use xpu::{DType, MemoryFormat, Tensor};

/// The f64 reference: `f` over each output element's reduced values, gathered on the host
/// from the row-major values of `x`.
fn reference(x: &Tensor, dims: &[isize], f: &dyn Fn(&[f64]) -> f64) -> Vec<f64> {
    let shape = x.shape().to_vec();
    let rank = shape.len();
    let reduced: Vec<bool> = (0..rank)
        .map(|d| {
            dims.is_empty()
                || dims
                    .iter()
                    .any(|&e| (e + rank as isize) as usize % rank == d)
        })
        .collect();
    let xs = values(x);
    let out_shape: Vec<usize> = (0..rank)
        .map(|d| if reduced[d] { 1 } else { shape[d] })
        .collect();
    let out_n: usize = out_shape.iter().product();
    let mut groups = vec![Vec::new(); out_n];
    for (i, &v) in xs.iter().enumerate() {
        let (mut rest, mut o, mut stride) = (i, 0, 1);
        for d in (0..rank).rev() {
            let c = rest % shape[d];
            rest /= shape[d];
            if !reduced[d] {
                o += c * stride;
                stride *= shape[d];
            }
        }
        groups[o].push(v);
    }
    groups.iter().map(|g| f(g)).collect()
}

/// A reference reduction of one output element's values.
type Reference = Box<dyn Fn(&[f64]) -> f64>;

fn mean(g: &[f64]) -> f64 {
    g.iter().sum::<f64>() / g.len() as f64
}

fn var(g: &[f64], correction: f64) -> f64 {
    let m = mean(g);
    g.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (g.len() as f64 - correction).max(0.0)
}

/// Output shape of a reduction of `shape` over `dims`.
fn reduced_shape(shape: &[usize], dims: &[isize], keepdim: bool) -> Vec<usize> {
    let rank = shape.len() as isize;
    let named = |d: usize| dims.is_empty() || dims.iter().any(|&e| (e + rank) % rank == d as isize);
    (0..shape.len())
        .filter_map(|d| match (named(d), keepdim) {
            (false, _) => Some(shape[d]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

#[test]
fn reductions_over_dims_match_a_reference() {
    let dim_sets: [&[isize]; 6] = [&[1, 3], &[-1, 0], &[2], &[], &[3, 2, 1, 0], &[0, 2]];
    for device in devices() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let base = randn(&[7, 1, 65, 3], dtype, 11).to(device).unwrap();
            let cl = randn(&[2, 33, 7, 13], dtype, 12)
                .to(device)
                .unwrap()
                .to_memory_format(MemoryFormat::ChannelsLast)
                .unwrap();
            let t = randn(&[5, 257, 1, 2], dtype, 13)
                .to(device)
                .unwrap()
                .transpose(0, 1)
                .unwrap();
            let b = randn(&[1, 63, 1, 1], dtype, 14)
                .to(device)
                .unwrap()
                .broadcast_to(&[3, 63, 2, 5])
                .unwrap();
            for (name, x) in [
                ("odd", &base),
                ("channels_last", &cl),
                ("transposed", &t),
                ("broadcast", &b),
            ] {
                for dims in dim_sets {
                    for keepdim in [false, true] {
                        let what = format!("{name} {dims:?} keep {keepdim} {dtype} {device}");
                        let shape = reduced_shape(x.shape(), dims, keepdim);
                        let n = x.numel() / shape.iter().product::<usize>().max(1);
                        // Tolerances: the inputs' own rounding is in the reference, so only the
                        // result's rounding and f32 accumulation remain.
                        let tol = eps(dtype) * 4.0;
                        let run: [(&str, xpu::Result<Tensor>, Reference); 6] = [
                            (
                                "sum",
                                x.sum_dims(dims, keepdim),
                                Box::new(|g| g.iter().sum()),
                            ),
                            ("mean", x.mean_dims(dims, keepdim), Box::new(mean)),
                            (
                                "max",
                                x.max_dims(dims, keepdim),
                                Box::new(|g| g.iter().cloned().fold(f64::MIN, f64::max)),
                            ),
                            (
                                "min",
                                x.min_dims(dims, keepdim),
                                Box::new(|g| g.iter().cloned().fold(f64::MAX, f64::min)),
                            ),
                            (
                                "var",
                                x.var_dims(dims, 1.0, keepdim),
                                Box::new(|g| var(g, 1.0)),
                            ),
                            (
                                "std",
                                x.std_dims(dims, 0.0, keepdim),
                                Box::new(|g| var(g, 0.0).sqrt()),
                            ),
                        ];
                        for (op, got, f) in run {
                            let got = got.unwrap_or_else(|e| panic!("{op} {what}: {e}"));
                            assert_eq!(got.shape(), shape.as_slice(), "{op} {what}: shape");
                            assert_eq!(got.dtype(), dtype, "{op} {what}: dtype");
                            assert!(got.is_contiguous(), "{op} {what}: contiguous");
                            let want = reference(x, dims, &*f);
                            let scale = if op == "sum" {
                                (n as f64).sqrt() * 4.0
                            } else {
                                4.0
                            };
                            assert_close(
                                &format!("{op} {what}"),
                                &values(&got),
                                &want,
                                tol * scale,
                                tol,
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn truth_and_logsumexp_over_dims() {
    for device in devices() {
        let x = randn(&[4, 7, 5], DType::F32, 21).to(device).unwrap();
        let pos = x.cmp_scalar(xpu::CmpOp::Gt, -0.3).unwrap();
        for dims in [&[0isize, 2][..], &[-1], &[]] {
            let what = format!("{dims:?} on {device}");
            let lse = x.logsumexp_dims(dims, false).unwrap();
            let want = reference(&x, dims, &|g| g.iter().map(|v| v.exp()).sum::<f64>().ln());
            assert_close(
                &format!("logsumexp {what}"),
                &values(&lse),
                &want,
                1e-5,
                1e-5,
            );
            let all = pos.all_dims(dims, false).unwrap();
            let any = pos.any_dims(dims, true).unwrap();
            if dims.is_empty() {
                // PyTorch's `all(dim=())` reduces nothing: each element's truth.
                assert_eq!(all.shape(), x.shape(), "all {what}");
                assert_eq!(values(&all), values(&pos), "all {what}");
                assert_eq!(values(&any), values(&pos), "any {what}");
                continue;
            }
            let want_all = reference(&pos, dims, &|g| f64::from(g.iter().all(|&v| v != 0.0)));
            let want_any = reference(&pos, dims, &|g| f64::from(g.iter().any(|&v| v != 0.0)));
            assert_eq!(values(&all), want_all, "all {what}");
            assert_eq!(values(&any), want_any, "any {what}");
            assert_eq!(any.dtype(), DType::U8);
        }
        // A 0-d tensor reduces along its one dim, to a 0-d tensor, keepdim or not.
        let s = Tensor::full(2.5, &[], DType::F32, device).unwrap();
        for keepdim in [false, true] {
            let got = s.sum_dims(&[-1], keepdim).unwrap();
            assert_eq!(got.shape(), &[] as &[usize]);
            assert_eq!(values(&got), vec![2.5]);
        }
    }
}

#[test]
fn dims_named_twice_or_out_of_range_are_errors() {
    let x = Tensor::zeros(&[2, 3, 4], DType::F32, xpu::Device::Cpu).unwrap();
    for dims in [&[1isize, -2][..], &[3], &[-4], &[0, 0]] {
        let e = x.sum_dims(dims, false).unwrap_err().to_string();
        assert!(e.contains("sum"), "{dims:?}: {e}");
    }
    let e = x.var_dims(&[2, 2], 1.0, false).unwrap_err().to_string();
    assert!(e.contains("more than once"), "{e}");
}

#[test]
fn reductions_over_dims_match_torch() {
    let fx = load("ops.safetensors");
    let g = |name: &str| get(&fx, "reduce_dims", name);
    for device in devices() {
        let x = g("x").to(device).unwrap();
        let cl = x.to_memory_format(MemoryFormat::ChannelsLast).unwrap();
        let cases: [(&str, Tensor); 9] = [
            ("sum_1_3", x.sum_dims(&[1, 3], false).unwrap()),
            ("mean_0_2_keep", x.mean_dims(&[0, 2], true).unwrap()),
            ("amax_m1_1", x.max_dims(&[-1, 1], false).unwrap()),
            ("amin_2_3_keep", x.min_dims(&[2, 3], true).unwrap()),
            ("var_1_2", x.var_dims(&[1, 2], 1.0, false).unwrap()),
            ("std_0_3_keep", x.std_dims(&[0, 3], 0.0, true).unwrap()),
            ("logsumexp_2_3", x.logsumexp_dims(&[2, 3], false).unwrap()),
            ("sum_all", x.sum_dims(&[], false).unwrap()),
            ("mean_cl_hw", cl.mean_dims(&[2, 3], false).unwrap()),
        ];
        for (name, got) in cases {
            let want = g(name);
            let what = format!("{name} on {device}");
            assert_eq!(got.shape(), want.shape(), "{what}: shape");
            assert_close(&what, &values(&got), &values(want), 2e-5, 1e-5);
        }
    }
}
