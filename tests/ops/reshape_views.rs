//! `Tensor::reshape` returns a view wherever PyTorch's does (a channels-last tensor's H and W
//! merged, a transpose's dims split, a broadcast split) with PyTorch's strides, and a
//! row-major copy elsewhere, as `tests/fixtures/strides.json` records (made by
//! `make_stride_fixtures.py` with PyTorch). Values are checked against the source's on every
//! device; a view keeps the source's storage offset, a copy starts at 0.

use crate::common;
use common::stride_fixture::{self, usizes};
use common::{devices, values};

#[test]
fn reshapes_view_where_pytorch_does() {
    let fixture = stride_fixture::load();
    let cases = fixture["reshapes"].as_array().unwrap();
    assert!(cases.len() >= 12, "fixture has {} reshapes", cases.len());
    for device in devices() {
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let what = format!("{name} on {device}");
            let view = stride_fixture::made(case, device);
            let shape = usizes(&case["new_shape"]);
            let got = view.reshape(&shape).unwrap();
            assert_eq!(got.shape(), shape, "{what}");
            assert_eq!(got.strides(), usizes(&case["strides"]), "{what}: strides");
            let is_view = case["is_view"].as_bool().unwrap();
            let offset = if is_view { view.layout().offset() } else { 0 };
            assert_eq!(got.layout().offset(), offset, "{what}: offset");
            // Row-major values are the source's, in order.
            let flat = values(&view.contiguous().unwrap());
            assert_eq!(values(&got), flat, "{what}: values");
        }
    }
}
