//! Shared by the CLIP text encoder tests: the fixtures written by
//! tests/fixtures/make_clip_text_fixtures.py (`tests/fixtures/clip_text/<name>/`), their
//! recorded ids and transformers' outputs, comparisons, and writing safetensors files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use xpu::models::clip::{ClipTextModel, ClipTextModelWithProjection, ClipTextOutput};
use xpu::nn::WeightStore;
use xpu::{DType, Device, Tensor};

use super::common::{repo_root, values};

/// The sequence lengths the fixtures record.
pub const LENGTHS: [usize; 3] = [1, 7, 77];

pub fn fixture_dir(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/clip_text").join(name)
}

/// A fixture's recorded ids and outputs.
pub struct Io(pub WeightStore);

impl Io {
    pub fn open(name: &str) -> Io {
        Io(WeightStore::open(fixture_dir(name).join("io.safetensors")).unwrap())
    }

    pub fn has(&self, key: &str) -> bool {
        self.0.shape(key).is_some()
    }

    /// `ids_{len}` (i32) on `device`.
    pub fn ids(&self, len: usize, device: Device) -> Tensor {
        self.0
            .tensor(&format!("ids_{len}"), DType::I32, device)
            .unwrap()
    }

    /// Output `{key}_{len}` in f32 on the Cpu.
    pub fn out(&self, key: &str, len: usize) -> Tensor {
        self.0
            .tensor(&format!("{key}_{len}"), DType::F32, Device::Cpu)
            .unwrap()
    }
}

/// Either model kind, as the fixtures hold them.
pub enum Encoder {
    Plain(ClipTextModel),
    Projection(ClipTextModelWithProjection),
}

impl Encoder {
    /// Loads fixture `name` (`proj` with a projection) in `dtype` on `device`.
    pub fn load(name: &str, dtype: DType, device: Device) -> Encoder {
        let dir = fixture_dir(name);
        if name == "proj" {
            Encoder::Projection(
                ClipTextModelWithProjection::from_pretrained(dir, dtype, device).unwrap(),
            )
        } else {
            Encoder::Plain(ClipTextModel::from_pretrained(dir, dtype, device).unwrap())
        }
    }

    pub fn text_model(&self) -> &ClipTextModel {
        match self {
            Encoder::Plain(m) => m,
            Encoder::Projection(m) => m.text_model(),
        }
    }

    /// Outputs with `hidden_states[-2]`.
    pub fn run(&self, ids: &Tensor) -> ClipTextOutput {
        match self {
            Encoder::Plain(m) => m.forward_with_hidden_state(ids, -2).unwrap(),
            Encoder::Projection(m) => m.forward_with_hidden_state(ids, -2).unwrap(),
        }
    }

    pub fn to(&self, device: Device) -> Encoder {
        match self {
            Encoder::Plain(m) => Encoder::Plain(m.to(device).unwrap()),
            Encoder::Projection(m) => Encoder::Projection(m.to(device).unwrap()),
        }
    }

    pub fn to_dtype(&self, dtype: DType) -> Encoder {
        match self {
            Encoder::Plain(m) => Encoder::Plain(m.to_dtype(dtype).unwrap()),
            Encoder::Projection(m) => Encoder::Projection(m.to_dtype(dtype).unwrap()),
        }
    }
}

/// The outputs of a forward pass by their fixture keys.
pub fn named(out: &ClipTextOutput) -> Vec<(&'static str, Tensor)> {
    let mut v = vec![
        ("last_hidden_state", out.last_hidden_state.clone()),
        ("pooled", out.pooled_output.clone()),
        ("hidden_m2", out.hidden_state.clone().unwrap()),
    ];
    if let Some(t) = &out.text_embeds {
        v.push(("text_embeds", t.clone()));
    }
    v
}

/// `max |got - want| / max |want|`, after checking the shapes agree.
pub fn rel_err(what: &str, got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w) = (values(got), values(want));
    assert!(g.iter().all(|x| x.is_finite()), "{what}: non-finite output");
    let scale = w.iter().fold(0f64, |m, x| m.max(x.abs()));
    let err = g
        .iter()
        .zip(&w)
        .fold(0f64, |m, (a, b)| m.max((a - b).abs()));
    err / scale.max(f64::MIN_POSITIVE)
}

/// Asserts `max |got - want| <= tol * max |want|`.
pub fn assert_rel(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    let e = rel_err(what, got, want);
    eprintln!("{what}: relative error {e:.2e}");
    assert!(e <= tol, "{what}: relative error {e:.3e} > {tol:e}");
}

/// Asserts two tensors hold the same values bit for bit (as f64).
pub fn assert_same(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(values(got), values(want), "{what}");
}

/// Writes `tensors` (Cpu, f32/f16/bf16/i32) to a safetensors file.
pub fn write_safetensors(path: &Path, tensors: &[(String, Tensor)]) {
    use safetensors::tensor::TensorView;
    use safetensors::Dtype;
    let bytes: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, t)| {
            let t = t.to(Device::Cpu).unwrap();
            let (dtype, data) = match t.dtype() {
                DType::F32 => (
                    Dtype::F32,
                    bytemuck::cast_slice(&t.to_vec::<f32>().unwrap()).to_vec(),
                ),
                DType::F16 => (
                    Dtype::F16,
                    bytemuck::cast_slice(&t.to_vec::<half::f16>().unwrap()).to_vec(),
                ),
                DType::BF16 => (
                    Dtype::BF16,
                    bytemuck::cast_slice(&t.to_vec::<half::bf16>().unwrap()).to_vec(),
                ),
                DType::I32 => (
                    Dtype::I32,
                    bytemuck::cast_slice(&t.to_vec::<i32>().unwrap()).to_vec(),
                ),
                other => panic!("{other} not written"),
            };
            (name.clone(), dtype, t.shape().to_vec(), data)
        })
        .collect();
    let views: Vec<(String, TensorView)> = bytes
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

/// Every float tensor of a store, read in `dtype` (others, like an int64 `position_ids`,
/// are left out).
pub fn read_all(store: &WeightStore, dtype: DType) -> Vec<(String, Tensor)> {
    store
        .names()
        .into_iter()
        .filter(|n| store.dtype(n).is_some_and(|d| d.is_float()))
        .map(|n| {
            let t = store.tensor(&n, dtype, Device::Cpu).unwrap();
            (n, t)
        })
        .collect()
}

/// A fresh scratch folder under the system's temporary directory, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("xpu_clip_{name}_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// A copy of fixture `name`'s config.json here.
    pub fn with_config_of(self, name: &str) -> Scratch {
        std::fs::copy(
            fixture_dir(name).join("config.json"),
            self.0.join("config.json"),
        )
        .unwrap();
        self
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
