//! Reading the parity inputs and writing outputs as safetensors. Inputs may store f32, f16,
//! bf16, int64 or int32 (diffusers' timesteps are int64); outputs are written exactly as given.

use std::collections::HashMap;
use std::path::Path;

use safetensors::{Dtype as St, SafeTensors};
use xpu::{DType, Device, Error, Result, Tensor};

fn invalid(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::InvalidFile {
        file: path.display().to_string(),
        msg: msg.to_string(),
    }
}

fn words<const N: usize, T>(data: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    data.chunks_exact(N)
        .map(|c| {
            let mut w = [0u8; N];
            w.copy_from_slice(c);
            f(w)
        })
        .collect()
}

/// Every tensor of `path` on Cpu (integers become f32, which holds SD's timesteps exactly).
pub fn read_tensors(path: &Path) -> Result<HashMap<String, Tensor>> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        context: format!("reading {}", path.display()),
        source,
    })?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| invalid(path, e))?;
    let mut out = HashMap::new();
    for (name, view) in file.tensors() {
        let (shape, data) = (view.shape().to_vec(), view.data());
        let t = match view.dtype() {
            St::F32 => Tensor::from_vec(
                words::<4, f32>(data, f32::from_le_bytes),
                &shape,
                Device::Cpu,
            )?,
            St::F16 => Tensor::from_vec(
                words::<2, half::f16>(data, half::f16::from_le_bytes),
                &shape,
                Device::Cpu,
            )?,
            St::BF16 => Tensor::from_vec(
                words::<2, half::bf16>(data, half::bf16::from_le_bytes),
                &shape,
                Device::Cpu,
            )?,
            St::I64 => Tensor::from_vec(
                words::<8, f32>(data, |w| i64::from_le_bytes(w) as f32),
                &shape,
                Device::Cpu,
            )?,
            St::I32 => Tensor::from_vec(
                words::<4, f32>(data, |w| i32::from_le_bytes(w) as f32),
                &shape,
                Device::Cpu,
            )?,
            other => {
                return Err(invalid(
                    path,
                    format!("tensor {name} has unsupported dtype {other:?}"),
                ))
            }
        };
        out.insert(name, t);
    }
    Ok(out)
}

/// Writes f32 copies of `tensors` to `path` (parent folders are created).
pub fn write_tensors(path: &Path, tensors: &[(&str, &Tensor)]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            context: format!("creating {}", dir.display()),
            source,
        })?;
    }
    let mut owned = Vec::new();
    for (name, t) in tensors {
        let values = t.to_dtype(DType::F32)?.to(Device::Cpu)?.to_vec::<f32>()?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        owned.push((name.to_string(), t.shape().to_vec(), bytes));
    }
    let mut views = Vec::new();
    for (name, shape, bytes) in &owned {
        let view = safetensors::tensor::TensorView::new(St::F32, shape.clone(), bytes)
            .map_err(|e| invalid(path, e))?;
        views.push((name.clone(), view));
    }
    safetensors::serialize_to_file(views, None, path).map_err(|e| invalid(path, e))
}
