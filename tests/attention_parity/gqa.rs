//! Grouped-query attention (`scaled_dot_product_attention_gqa`) against PyTorch's
//! `enable_gqa=True` (fixtures `sdpa_gqa_*` of `tests/fixtures/ops.safetensors`, made by
//! `make_op_fixtures.py`): grouped k/v heads, k and v with different head counts, a per-head
//! mask; on every device, with q as diffusers' transposed heads too; head counts that do not
//! divide are errors.

use crate::common::fixtures::{get, load};
use crate::common::{assert_close, devices, values};
use xpu::{DType, Tensor};

#[test]
fn grouped_query_attention_matches_torch() {
    let fx = load("ops.safetensors");
    for device in devices() {
        for case in ["sdpa_gqa_8x2", "sdpa_gqa_k2_v3", "sdpa_gqa_mask"] {
            let on = |name: &str| get(&fx, case, name).to(device).unwrap();
            let (q, k, v) = (on("q"), on("k"), on("v"));
            let mask = fx
                .get(&format!("{case}.mask"))
                .map(|m| m.to(device).unwrap());
            let want = values(get(&fx, case, "out"));
            let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
            let what = format!("{case} on {device}");
            let out = q
                .scaled_dot_product_attention_gqa(&k, &v, mask.as_ref(), None)
                .unwrap();
            assert_close(&what, &values(&out), &want, 2e-5 * scale, 1e-4);
            let qt = q
                .transpose(1, 2)
                .unwrap()
                .copy()
                .unwrap()
                .transpose(1, 2)
                .unwrap();
            let out = qt
                .scaled_dot_product_attention_gqa(&k, &v, mask.as_ref(), None)
                .unwrap();
            let what = format!("{what}, transposed q");
            assert_close(&what, &values(&out), &want, 2e-5 * scale, 1e-4);
        }
        let q = Tensor::zeros(&[1, 6, 3, 8], DType::F32, device).unwrap();
        let k = Tensor::zeros(&[1, 4, 3, 8], DType::F32, device).unwrap();
        let e = q
            .scaled_dot_product_attention_gqa(&k, &k, None, None)
            .unwrap_err();
        assert!(e.to_string().contains("divide"), "{e}");
        let flat = Tensor::zeros(&[3, 8], DType::F32, device).unwrap();
        assert!(flat
            .scaled_dot_product_attention_gqa(&flat, &flat, None, None)
            .is_err());
    }
}
