//! Loads PyTorch fixture files (safetensors written by the scripts in tests/fixtures/) into
//! Cpu tensors keyed by name.
#![allow(dead_code)]

use std::collections::HashMap;

use xpu::{Device, Tensor};

/// All tensors of a fixture file under tests/fixtures/, on Cpu in their stored dtype
/// (F32, F16, BF16, U8, I32; I64 is narrowed to I32).
pub fn load(name: &str) -> HashMap<String, Tensor> {
    let path = super::repo_root().join("tests").join("fixtures").join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out = HashMap::new();
    for (key, view) in file.tensors() {
        let shape = view.shape().to_vec();
        let data = view.data();
        use safetensors::Dtype as D;
        let t = match view.dtype() {
            D::F32 => Tensor::from_vec(
                words::<4, f32>(data, f32::from_le_bytes),
                &shape,
                Device::Cpu,
            ),
            D::F16 => Tensor::from_vec(
                words::<2, half::f16>(data, half::f16::from_le_bytes),
                &shape,
                Device::Cpu,
            ),
            D::BF16 => Tensor::from_vec(
                words::<2, half::bf16>(data, half::bf16::from_le_bytes),
                &shape,
                Device::Cpu,
            ),
            D::U8 | D::BOOL => Tensor::from_vec(data.to_vec(), &shape, Device::Cpu),
            D::I32 => Tensor::from_vec(
                words::<4, i32>(data, i32::from_le_bytes),
                &shape,
                Device::Cpu,
            ),
            D::I64 => Tensor::from_vec(
                words::<8, i32>(data, |b| i64::from_le_bytes(b) as i32),
                &shape,
                Device::Cpu,
            ),
            other => panic!("{key}: unsupported fixture dtype {other:?}"),
        }
        .unwrap();
        out.insert(key, t);
    }
    out
}

fn words<const N: usize, T>(data: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    data.chunks_exact(N)
        .map(|c| f(c.try_into().unwrap()))
        .collect()
}

/// The tensor `<case>.<name>` of a loaded fixture file.
pub fn get<'a>(fx: &'a HashMap<String, Tensor>, case: &str, name: &str) -> &'a Tensor {
    fx.get(&format!("{case}.{name}"))
        .unwrap_or_else(|| panic!("fixture {case}.{name} missing: rerun tests/fixtures/make_*.py"))
}
