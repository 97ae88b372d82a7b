//! Reading the parity inputs and writing outputs as safetensors. Inputs may store f32, f16,
//! bf16, f64 (numpy's default), int64 or int32 (diffusers' timesteps are int64); outputs are
//! written exactly as given.
//!
//! Invariant: an output file is either written whole or left as it was: bytes go to a hidden
//! sibling file that is renamed over the target only once everything is on disk
//! ([`write_file_atomically`]), so a failure (disk full, a bad path) never leaves half a file.

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

/// Every tensor of `path` on Cpu (integers and f64 become f32, which holds SD's timesteps
/// exactly).
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
            St::F64 => Tensor::from_vec(
                words::<8, f32>(data, |w| f64::from_le_bytes(w) as f32),
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

/// Writes `bytes` to `path` whole or not at all: to a hidden sibling file first, renamed over
/// `path` once written and synced (parent folders are created). The sibling is removed on error.
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let io_err = |what: &str, p: &Path| {
        let context = format!("{what} {}", p.display());
        move |source| Error::Io { context, source }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
    }
    let name = path
        .file_name()
        .ok_or_else(|| invalid(path, "the output path names no file"))?;
    let mut partial_name = std::ffi::OsString::from(".");
    partial_name.push(name);
    partial_name.push(format!(".partial-{}", std::process::id()));
    let partial = path.with_file_name(partial_name);
    let writing = format!("{} (through its temporary sibling", path.display());
    let written = std::fs::File::create(&partial)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .map_err(|source| Error::Io {
            context: format!("writing {writing} {})", partial.display()),
            source,
        })
        .and_then(|()| std::fs::rename(&partial, path).map_err(io_err("renaming onto", path)));
    if written.is_err() {
        // Best effort: the error that matters is the one returned.
        let _ = std::fs::remove_file(&partial);
    }
    written
}

/// Writes f32 copies of `tensors` to `path` as safetensors, whole or not at all
/// ([`write_file_atomically`]).
pub fn write_tensors(path: &Path, tensors: &[(&str, &Tensor)]) -> Result<()> {
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
    let bytes = safetensors::serialize(views, None).map_err(|e| invalid(path, e))?;
    write_file_atomically(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("xpu-sd-unet-io-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_written_file_is_whole_and_leaves_no_partial() {
        let dir = scratch("whole");
        let path = dir.join("sub").join("out.safetensors");
        let t = Tensor::from_vec(vec![1.5f32, -2.0, 3.25], &[3], Device::Cpu).unwrap();
        write_tensors(&path, &[("latents", &t)]).unwrap();
        let back = read_tensors(&path).unwrap();
        assert_eq!(back["latents"].to_vec::<f32>().unwrap(), [1.5, -2.0, 3.25]);
        assert_eq!(entries(&dir.join("sub")), ["out.safetensors"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn inputs_of_every_stored_dtype_are_read() {
        let dir = scratch("dtypes");
        let path = dir.join("in.safetensors");
        let f64s: Vec<u8> = [981.0f64, 0.5]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let i64s: Vec<u8> = [999i64, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let i32s: Vec<u8> = [7i32, -3].iter().flat_map(|v| v.to_le_bytes()).collect();
        let f16s: Vec<u8> = [half::f16::from_f32(1.5), half::f16::from_f32(-2.0)]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        fn view(dtype: St, bytes: &[u8]) -> safetensors::tensor::TensorView<'_> {
            safetensors::tensor::TensorView::new(dtype, vec![2], bytes).unwrap()
        }
        let views = vec![
            ("a", view(St::F64, &f64s)),
            ("b", view(St::I64, &i64s)),
            ("c", view(St::I32, &i32s)),
            ("d", view(St::F16, &f16s)),
        ];
        std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
        let t = read_tensors(&path).unwrap();
        let f = |k: &str| t[k].to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(f("a"), [981.0, 0.5]);
        assert_eq!(f("b"), [999.0, 1.0]);
        assert_eq!(f("c"), [7.0, -3.0]);
        assert_eq!(f("d"), [1.5, -2.0]);
        // Other dtypes: a clear error naming the tensor.
        let bools = vec![("flag", view(St::U8, &[1u8, 0]))];
        std::fs::write(&path, safetensors::serialize(bools, None).unwrap()).unwrap();
        let e = read_tensors(&path).unwrap_err().to_string();
        assert!(e.contains("flag") && e.contains("U8"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_leaves_no_partial() {
        let dir = scratch("failed");
        // The target is a folder: the rename fails after the bytes were written.
        let target = dir.join("out.safetensors");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), b"old").unwrap();
        let err = write_file_atomically(&target, b"new bytes").unwrap_err();
        assert!(err.to_string().contains("out.safetensors"), "{err}");
        assert_eq!(entries(&dir), ["out.safetensors"]);
        assert_eq!(std::fs::read(target.join("keep")).unwrap(), b"old");
        // A parent that is a file: nothing can be created, nothing is left.
        let blocked = dir.join("file");
        std::fs::write(&blocked, b"x").unwrap();
        assert!(write_file_atomically(&blocked.join("out.png"), b"png").is_err());
        assert_eq!(entries(&dir), ["file", "out.safetensors"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
