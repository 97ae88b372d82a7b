//! Causal attention (`scaled_dot_product_attention_causal`) against PyTorch's
//! `is_causal=True` (fixtures `sdpa_causal_*` of `tests/fixtures/ops.safetensors`, made by
//! `make_op_fixtures.py`): square, fewer and more queries than keys, contiguous and diffusers'
//! transposed heads (which keep PyTorch's flash layout), on every device.

use crate::common::fixtures::{get, load};
use crate::common::{assert_close, devices, values};
use xpu::{DType, Tensor};

#[test]
fn causal_attention_matches_torch() {
    let fx = load("ops.safetensors");
    for device in devices() {
        for case in ["sdpa_causal_33", "sdpa_causal_9x13", "sdpa_causal_13x9"] {
            let on = |name: &str| get(&fx, case, name).to(device).unwrap();
            let (q, k, v) = (on("q"), on("k"), on("v"));
            let want = values(get(&fx, case, "out"));
            let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
            let causal = q.scaled_dot_product_attention_causal(&k, &v, None).unwrap();
            let what = format!("{case} on {device}");
            assert_close(&what, &values(&causal), &want, 2e-5 * scale, 1e-4);
            // diffusers' transposed heads: PyTorch's flash layout, the same values.
            let heads = |t: &Tensor| {
                let stored = t.transpose(1, 2).unwrap().copy().unwrap();
                stored.transpose(1, 2).unwrap()
            };
            let (qt, kt, vt) = (heads(&q), heads(&k), heads(&v));
            let strided = qt
                .scaled_dot_product_attention_causal(&kt, &vt, None)
                .unwrap();
            assert_eq!(strided.strides(), qt.strides(), "{what}: strides");
            let what = format!("{what}, transposed heads");
            assert_close(&what, &values(&strided), &want, 2e-5 * scale, 1e-4);
        }
        let q = Tensor::zeros(&[4], DType::F32, device).unwrap();
        assert!(q.scaled_dot_product_attention_causal(&q, &q, None).is_err());
    }
}
