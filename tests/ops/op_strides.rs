//! Every op's result takes PyTorch's memory format: reductions, softmax and norms, joins,
//! padding and resizing, pooling, convolution, flips and selections, each on row-major,
//! channels-last, sliced, transposed and permuted inputs (the `ops` of
//! `tests/fixtures/strides.json`, made by `make_stride_fixtures.py` with PyTorch, whose
//! strides they are). Each result must also hold the same values as the op applied to a
//! contiguous copy of its input, on every device: a layout rule that permuted the wrong dims
//! would show there.

use crate::common;
use common::stride_fixture::{self, usizes};
use common::{assert_close, devices, values};
use serde_json::Value;
use xpu::{CmpOp, Conv2dParams, ConvTranspose2dParams, DType, Device, Tensor};

/// The op named `name` (the Python script's names) on `x`.
fn apply(name: &str, x: &Tensor) -> xpu::Result<Tensor> {
    let r = x.rank();
    let last = x.shape()[r - 1];
    let dev = x.device();
    if let Some((op, rest)) = name.split_once('_') {
        let reduce = ["sum", "mean", "amax", "argmax", "var", "logsumexp"];
        if reduce.contains(&op) {
            let (dim, keep) = rest.split_once('_').unwrap();
            let (d, k): (isize, bool) = (dim.parse().unwrap(), keep == "keep");
            return match op {
                "sum" => x.sum(d, k),
                "mean" => x.mean(d, k),
                "amax" => x.max(d, k),
                "argmax" => x.argmax(d, k),
                "var" => x.var(d, 1.0, k),
                _ => x.logsumexp(d, k),
            };
        }
    }
    let pool = ((2, 2), (2, 2), (0, 0));
    match name {
        "softmax_1" => x.softmax(1),
        "softmax_last" => x.softmax(-1),
        "log_softmax_1" => x.log_softmax(1),
        "log_softmax_last" => x.log_softmax(-1),
        "cumsum_1" => x.cumsum(1),
        "cumsum_last" => x.cumsum(-1),
        "std_1" => x.std(1, 1.0, false),
        "layer_norm" => x.layer_norm(None, None, 1e-5),
        "cat_1" => Tensor::cat(&[x, x], 1),
        "cat_0" => Tensor::cat(&[x, x], 0),
        "stack_0" => Tensor::stack(&[x, x], 0),
        "stack_1" => Tensor::stack(&[x, x], 1),
        "stack_end" => Tensor::stack(&[x, x], r as isize),
        "pad_last" => x.pad(&[1, 2], 0.0),
        "flip_1" => x.flip(&[1]),
        "flip_last" => x.flip(&[-1]),
        "flip_0_last" => x.flip(&[0, -1]),
        "clamp" => x.clamp(3.0, 60.0),
        "masked_fill" => x.masked_fill(&x.cmp_scalar(CmpOp::Gt, 20.0)?, 0.0),
        "pow_scalar" => x.pow_scalar(2.0),
        "index_select_1" => {
            let idx = Tensor::from_vec(vec![0i32, 1, 1], &[3], dev)?;
            x.index_select(1, &idx)
        }
        "gather_1" => {
            let mut shape = x.shape().to_vec();
            shape[1] = 1;
            x.gather(1, &Tensor::zeros(&shape, DType::I32, dev)?)
        }
        "repeat" => {
            let mut reps = vec![1; r];
            reps[r - 1] = 2;
            x.repeat(&reps)
        }
        "tril" => x.tril(0),
        "triu_1" => x.triu(1),
        "matmul" => x.matmul(&Tensor::ones(&[last, 3], DType::F32, dev)?),
        "group_norm" => x.group_norm(1, None, None, 1e-5),
        "pad_hw" => x.pad(&[1, 1, 2, 0], 0.0),
        "upsample_nearest2d" => x.upsample_nearest2d(2),
        "interpolate_nearest" => x.interpolate_nearest(&[3, 7]),
        "interpolate_bilinear" => x.interpolate_bilinear([7, 9], false),
        "avg_pool2d" => x.avg_pool2d(pool.0, pool.1, pool.2, true),
        "max_pool2d" => x.max_pool2d(pool.0, pool.1, pool.2),
        "conv2d" => {
            let w = Tensor::ones(&[4, x.shape()[1], 3, 3], DType::F32, dev)?;
            let p = Conv2dParams {
                padding: (1, 1),
                ..Default::default()
            };
            x.conv2d(&w, None, p)
        }
        "conv2d_1x1" => {
            let w = Tensor::ones(&[4, x.shape()[1], 1, 1], DType::F32, dev)?;
            x.conv2d(&w, None, Conv2dParams::default())
        }
        "conv_transpose2d" => {
            let w = Tensor::ones(&[x.shape()[1], 4, 2, 2], DType::F32, dev)?;
            let p = ConvTranspose2dParams {
                stride: (2, 2),
                ..Default::default()
            };
            x.conv_transpose2d(&w, None, p)
        }
        other => panic!("op {other} of the fixture is not replayed here"),
    }
}

/// Checks one input's every op on `device`; returns the mismatches found.
fn check_input(input: &Value, device: Device) -> Vec<String> {
    let name = input["name"].as_str().unwrap();
    let x = stride_fixture::made(input, device);
    let dense = x.contiguous().unwrap();
    assert!(dense.is_contiguous());
    let mut wrong = Vec::new();
    for (op, want) in input["results"].as_object().unwrap() {
        let what = format!("{op} of {name} on {device}");
        let got = apply(op, &x).unwrap_or_else(|e| panic!("{what}: {e}"));
        if got.strides() != usizes(want).as_slice() {
            wrong.push(format!(
                "{what}: strides {:?}, PyTorch's {:?}",
                got.strides(),
                usizes(want)
            ));
        }
        let reference = apply(op, &dense).unwrap();
        assert_eq!(got.shape(), reference.shape(), "{what}: shape");
        assert_eq!(got.dtype(), reference.dtype(), "{what}: dtype");
        assert_close(&what, &values(&got), &values(&reference), 1e-4, 1e-5);
    }
    wrong
}

#[test]
fn op_results_take_pytorchs_memory_formats() {
    let fixture = stride_fixture::load();
    let inputs = fixture["ops"].as_array().unwrap();
    assert!(inputs.len() >= 6, "fixture has {} op inputs", inputs.len());
    let mut wrong = Vec::new();
    for device in devices() {
        for input in inputs {
            let results = input["results"].as_object().unwrap();
            assert!(results.len() >= 48, "{} ops", results.len());
            wrong.extend(check_input(input, device));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} mismatches:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
