//! `tests/fixtures/strides.json` (made by `make_stride_fixtures.py`): view recipes and the
//! strides PyTorch gives their copies and elementwise results.
#![allow(dead_code)]

use serde_json::Value;
use xpu::{Device, MemoryFormat, Tensor};

/// The whole fixture.
pub fn load() -> Value {
    let path = super::repo_root().join("tests/fixtures/strides.json");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A JSON list of sizes.
pub fn usizes(v: &Value) -> Vec<usize> {
    let v = v.as_array().unwrap();
    v.iter().map(|d| d.as_u64().unwrap() as usize).collect()
}

/// Small integers, exact in every dtype (u8 included).
pub fn host(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 5) % 97) as f32).collect()
}

/// One view op of the fixture's little language (see `make_stride_fixtures.py`).
pub fn apply(x: Tensor, op: &[Value]) -> Tensor {
    let int = |i: usize| op[i].as_u64().unwrap() as usize;
    match op[0].as_str().unwrap() {
        "t" => x.t(),
        "transpose" => x.transpose(int(1) as isize, int(2) as isize),
        "permute" => x.permute(&usizes(&op[1])),
        "narrow" => x.narrow(int(1) as isize, int(2), int(3)),
        "expand" => x.broadcast_to(&usizes(&op[1])),
        "unsqueeze" => x.unsqueeze(int(1) as isize),
        "channels_last" => x.to_memory_format(MemoryFormat::ChannelsLast),
        other => panic!("unknown fixture op {other}"),
    }
    .unwrap()
}

/// The view a recipe (`{"base": shape, "ops": [...]}`) makes of a fresh tensor on `device`
/// holding `host` values.
pub fn made(recipe: &Value, device: Device) -> Tensor {
    let base = usizes(&recipe["base"]);
    let n = base.iter().product();
    let mut view = Tensor::from_vec(host(n), &base, device).unwrap();
    for op in recipe["ops"].as_array().unwrap() {
        view = apply(view, op.as_array().unwrap());
    }
    view
}
