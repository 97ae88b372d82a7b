//! The fused attention's output takes PyTorch's memory format: `empty_like(q)` where PyTorch's
//! CPU flash kernel serves the call, contiguous where its math path does, grouped-query calls
//! (`enable_gqa`) included (the `attention` part
//! of `tests/fixtures/strides.json`, made by `make_stride_fixtures.py` with PyTorch: q, k, v
//! and mask recipes and the output strides PyTorch gave). Each output must also hold the values
//! of the same call on contiguous copies, on every device and in every float dtype.

use crate::common;
use common::stride_fixture::{self, usizes};
use common::{assert_close, devices, values};
use serde_json::Value;
use xpu::{DType, Device, Tensor};

/// The view a recipe makes, its values scaled into a softmax-friendly range.
fn made(recipe: &Value, device: Device, dtype: DType) -> Tensor {
    let base = usizes(&recipe["base"]);
    let n = base.iter().product();
    let host: Vec<f32> = stride_fixture::host(n)
        .iter()
        .map(|x| (x - 48.0) / 64.0)
        .collect();
    let mut view = Tensor::from_vec(host, &base, device)
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    for op in recipe["ops"].as_array().unwrap() {
        view = stride_fixture::apply(view, op.as_array().unwrap());
    }
    view
}

/// Checks one call on `device` in `dtype`; returns the stride mismatch, if any.
fn check_call(call: &Value, device: Device, dtype: DType) -> Option<String> {
    let name = call["name"].as_str().unwrap();
    let what = format!("{name} on {device} in {dtype}");
    let [q, k, v] = ["q", "k", "v"].map(|t| made(&call[t], device, dtype));
    let mask = (!call["mask"].is_null()).then(|| made(&call["mask"], device, dtype));
    let gqa = call["enable_gqa"].as_bool().unwrap_or(false);
    let run = |q: &Tensor, k: &Tensor, v: &Tensor, m: Option<&Tensor>| match gqa {
        true => q.scaled_dot_product_attention_gqa(k, v, m, None),
        false => q.scaled_dot_product_attention(k, v, m, None),
    };
    let out = run(&q, &k, &v, mask.as_ref()).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        out.shape(),
        usizes(&call["shape"]).as_slice(),
        "{what}: shape"
    );
    assert_eq!(out.dtype(), dtype, "{what}: dtype");
    let [qc, kc, vc] = [&q, &k, &v].map(|t| t.contiguous().unwrap());
    let mc = mask.as_ref().map(|m| m.contiguous().unwrap());
    let reference = run(&qc, &kc, &vc, mc.as_ref()).unwrap();
    assert!(reference.is_contiguous(), "{what}: contiguous operands");
    // 16-bit calls may take another kernel for the copies (the tensor-core attention reads
    // only some layouts), which rounds its probabilities differently.
    let tol = if dtype == DType::F32 { 1e-6 } else { 5e-3 };
    assert_close(&what, &values(&out), &values(&reference), tol, tol);
    let want = usizes(&call["strides"]);
    (out.strides() != want.as_slice())
        .then(|| format!("{what}: strides {:?}, PyTorch's {want:?}", out.strides()))
}

#[test]
fn attention_output_takes_pytorchs_memory_format() {
    let fixture = stride_fixture::load();
    let calls = fixture["attention"].as_array().unwrap();
    assert!(
        calls.len() >= 20,
        "fixture has {} attention calls",
        calls.len()
    );
    let mut wrong = Vec::new();
    for device in devices() {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            wrong.extend(calls.iter().filter_map(|c| check_call(c, device, dtype)));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} mismatches:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn diffusers_head_merge_after_attention_is_a_view() {
    // [B, L, H·D] projections split into heads as diffusers does: the output's
    // `transpose(1, 2).reshape(B, L, H·D)` must need no copy, and its values must be right
    // for every kernel that writes it in place (short and long query runs, every dtype).
    for device in devices() {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            for l in [7, 65] {
                let what = format!("L {l} on {device} in {dtype}");
                let (b, h, d) = (2, 3, 8);
                let proj = Tensor::randn(&[b, l, 3 * h * d], DType::F32, device, 5)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let heads = |i: usize| {
                    proj.narrow(2, i * h * d, h * d)
                        .unwrap()
                        .reshape(&[b, l, h, d])
                        .unwrap()
                        .transpose(1, 2)
                        .unwrap()
                };
                let (q, k, v) = (heads(0), heads(1), heads(2));
                let out = q.scaled_dot_product_attention(&k, &v, None, None).unwrap();
                assert_eq!(out.strides(), &[l * h * d, d, h * d, 1], "{what}");
                let flat = out
                    .transpose(1, 2)
                    .unwrap()
                    .reshape(&[b, l, h * d])
                    .unwrap();
                assert!(flat.is_contiguous(), "{what}: merged heads are a view");
                let reference = q
                    .contiguous()
                    .unwrap()
                    .scaled_dot_product_attention_unfused(&k, &v, None, None)
                    .unwrap();
                assert!(reference.is_contiguous(), "{what}: the unfused output");
                let tol = if dtype == DType::F32 { 1e-5 } else { 2e-2 };
                assert_close(&what, &values(&out), &values(&reference), tol, tol);
            }
        }
    }
}
