//! `from_pretrained` on the folder layouts diffusers users have: the `unet/` folder or the
//! pipeline root above it, the plain weights file or only a variant (`fp16`), an explicit
//! variant, sharded checkpoints (`*.safetensors.index.json`, plain or variant); and clear errors
//! for PyTorch pickles, inconsistent shard indexes, empty folders and a missing variant.

use crate::common;
use std::path::{Path, PathBuf};

use xpu::models::unet::UNet2DConditionModel;
use xpu::{DType, Device, Tensor};

fn fixture_dir() -> PathBuf {
    common::repo_root().join("tests/fixtures/unet_sd1")
}

/// A fresh folder unique to this process and test, removed when dropped.
struct Folder(PathBuf);

impl Folder {
    fn new(name: &str) -> Folder {
        let dir =
            std::env::temp_dir().join(format!("xpu-unet-folders-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Folder(dir)
    }

    /// Writes `name` (parent folders created) with `bytes`.
    fn put(&self, name: &str, bytes: &[u8]) {
        let path = self.0.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    /// Copies the fixture's config and weights under `sub` (weights under `weights_name`).
    fn put_fixture(&self, sub: &str, weights_name: &str) {
        let read = |n: &str| std::fs::read(fixture_dir().join(n)).unwrap();
        self.put(&format!("{sub}config.json"), &read("config.json"));
        let weights = read("diffusion_pytorch_model.safetensors");
        self.put(&format!("{sub}{weights_name}"), &weights);
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn load(dir: &Path, variant: Option<&str>) -> xpu::Result<UNet2DConditionModel> {
    UNet2DConditionModel::from_pretrained_variant(dir, variant, DType::F32, Device::Cpu)
}

/// The model's output on fixed inputs (for "the same weights were loaded").
fn output(m: &UNet2DConditionModel) -> Vec<f32> {
    let x = Tensor::randn(&[1, 4, 8, 8], DType::F32, Device::Cpu, 3).unwrap();
    let t = Tensor::from_vec(vec![10f32], &[1], Device::Cpu).unwrap();
    let ctx = Tensor::randn(&[1, 3, 32], DType::F32, Device::Cpu, 4).unwrap();
    m.forward(&x, &t, &ctx).unwrap().to_vec().unwrap()
}

fn error(r: xpu::Result<UNet2DConditionModel>) -> String {
    match r {
        Ok(_) => panic!("loaded where an error was expected"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn pipeline_roots_and_variant_only_folders_load_the_same_model() {
    let want = output(&load(&fixture_dir(), None).unwrap());
    let root = Folder::new("root");
    root.put_fixture("unet/", "diffusion_pytorch_model.fp16.safetensors");
    root.put("model_index.json", b"{}");
    // The pipeline root (finds unet/), the unet folder itself, and the variant by name.
    for (dir, variant) in [
        (root.0.clone(), None),
        (root.0.join("unet"), None),
        (root.0.clone(), Some("fp16")),
    ] {
        let got = output(&load(&dir, variant).unwrap());
        assert_eq!(got, want, "{} {variant:?}", dir.display());
    }
}

#[test]
fn the_plain_file_wins_unless_a_variant_is_asked_for() {
    let dir = Folder::new("both");
    dir.put_fixture("", "diffusion_pytorch_model.safetensors");
    // A variant that cannot load: reading it would fail.
    dir.put(
        "diffusion_pytorch_model.fp16.safetensors",
        b"not a safetensors file",
    );
    dir.put("diffusion_pytorch_model.ema.safetensors", b"nor this");
    assert!(load(&dir.0, None).is_ok());
    let e = error(load(&dir.0, Some("fp16")));
    assert!(e.contains("fp16.safetensors"), "{e}");
    let e = error(load(&dir.0, Some("bf16")));
    assert!(e.contains("variant \"bf16\""), "{e}");
    // Without the plain file, fp16 comes before other variants.
    std::fs::remove_file(dir.0.join("diffusion_pytorch_model.safetensors")).unwrap();
    let e = error(load(&dir.0, None));
    assert!(e.contains("fp16.safetensors"), "{e}");
}

#[test]
fn unsupported_layouts_are_errors_that_say_what_to_do() {
    let empty = Folder::new("empty");
    let e = error(load(&empty.0, None));
    assert!(e.contains("no config.json"), "{e}");

    let pickles = Folder::new("pickles");
    pickles.put(
        "config.json",
        &std::fs::read(fixture_dir().join("config.json")).unwrap(),
    );
    pickles.put("diffusion_pytorch_model.bin", b"pickle");
    let e = error(load(&pickles.0, None));
    assert!(
        e.contains("pickle") && e.contains("safe_serialization"),
        "{e}"
    );

    let pickled_shards = Folder::new("pickled-shards");
    pickled_shards.put(
        "config.json",
        &std::fs::read(fixture_dir().join("config.json")).unwrap(),
    );
    pickled_shards.put("diffusion_pytorch_model.bin.index.json", b"{}");
    let e = error(load(&pickled_shards.0, None));
    assert!(e.contains("pickle"), "{e}");
}

/// The fixture's tensors as `(name, dtype, shape, bytes)`, sorted by name.
fn fixture_tensors() -> Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(fixture_dir().join("diffusion_pytorch_model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<_> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Writes the fixture under `dir` as shards: tensor `i` (by name) goes to the shards
/// `place(i)` lists (none: left out), shard `k` named `shard(k)`; the index (`index_name`)
/// maps each tensor to its first shard, or to `index_file(name)` where that says otherwise.
fn put_sharded(
    dir: &Folder,
    index_name: &str,
    shard: impl Fn(usize) -> String,
    place: impl Fn(usize) -> Vec<usize>,
    index_file: impl Fn(&str) -> Option<String>,
) {
    dir.put(
        "config.json",
        &std::fs::read(fixture_dir().join("config.json")).unwrap(),
    );
    let tensors = fixture_tensors();
    let mut weight_map = serde_json::Map::new();
    let mut per_shard: Vec<Vec<usize>> = vec![Vec::new(); 2];
    for (i, (name, ..)) in tensors.iter().enumerate() {
        let shards = place(i);
        for &k in &shards {
            per_shard[k].push(i);
        }
        if let Some(&k) = shards.first() {
            let file = index_file(name).unwrap_or_else(|| shard(k));
            weight_map.insert(name.clone(), serde_json::Value::String(file));
        }
    }
    for (k, members) in per_shard.iter().enumerate() {
        let views: Vec<(String, safetensors::tensor::TensorView)> = members
            .iter()
            .map(|&i| {
                let (name, dtype, shape, data) = &tensors[i];
                let view =
                    safetensors::tensor::TensorView::new(*dtype, shape.clone(), data).unwrap();
                (name.clone(), view)
            })
            .collect();
        dir.put(&shard(k), &safetensors::serialize(views, None).unwrap());
    }
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    dir.put(index_name, index.to_string().as_bytes());
}

const INDEX: &str = "diffusion_pytorch_model.safetensors.index.json";

fn two_shards(k: usize) -> String {
    format!("diffusion_pytorch_model-0000{}-of-00002.safetensors", k + 1)
}

#[test]
fn sharded_checkpoints_load_like_one_file() {
    let want = output(&load(&fixture_dir(), None).unwrap());
    let plain = Folder::new("sharded");
    put_sharded(&plain, INDEX, two_shards, |i| vec![i % 2], |_| None);
    assert_eq!(output(&load(&plain.0, None).unwrap()), want);
    // Only an fp16 variant, sharded (diffusers' `_add_variant` names).
    let variant = Folder::new("sharded-fp16");
    let fp16_shard = |k: usize| {
        format!(
            "diffusion_pytorch_model.fp16-0000{}-of-00002.safetensors",
            k + 1
        )
    };
    put_sharded(
        &variant,
        "diffusion_pytorch_model.safetensors.index.fp16.json",
        fp16_shard,
        |i| vec![usize::from(i > 3)],
        |_| None,
    );
    assert_eq!(output(&load(&variant.0, None).unwrap()), want);
    assert_eq!(output(&load(&variant.0, Some("fp16")).unwrap()), want);
}

#[test]
fn inconsistent_sharded_checkpoints_are_errors() {
    // The index places a tensor in the wrong shard (conv_in.weight, tensor 1, is in shard 1).
    let wrong = Folder::new("sharded-wrong");
    put_sharded(
        &wrong,
        INDEX,
        two_shards,
        |i| vec![i % 2],
        |n| (n == "conv_in.weight").then(|| two_shards(0)),
    );
    let e = error(load(&wrong.0, None));
    assert!(e.contains("does not hold"), "{e}");
    // A tensor in both shards.
    let twice = Folder::new("sharded-twice");
    put_sharded(
        &twice,
        INDEX,
        two_shards,
        |i| if i == 0 { vec![0, 1] } else { vec![i % 2] },
        |_| None,
    );
    let e = error(load(&twice.0, None));
    assert!(e.contains("two shards"), "{e}");
    // A tensor in no shard: the model's missing-weights error names it.
    let short = Folder::new("sharded-short");
    put_sharded(
        &short,
        INDEX,
        two_shards,
        |i| if i == 0 { vec![] } else { vec![i % 2] },
        |_| None,
    );
    let first = fixture_tensors()[0].0.clone();
    let e = error(load(&short.0, None));
    assert!(e.contains(&first), "{e}");
    // A shard outside the folder, a missing shard, and an index without a weight_map.
    let escape = Folder::new("sharded-escape");
    put_sharded(
        &escape,
        INDEX,
        two_shards,
        |i| vec![i % 2],
        |n| (n == "conv_in.weight").then(|| "../elsewhere.safetensors".to_string()),
    );
    let e = error(load(&escape.0, None));
    assert!(e.contains("no directories"), "{e}");
    let gone = Folder::new("sharded-gone");
    put_sharded(&gone, INDEX, two_shards, |i| vec![i % 2], |_| None);
    std::fs::remove_file(gone.0.join(two_shards(1))).unwrap();
    let e = error(load(&gone.0, None));
    assert!(e.contains(&two_shards(1)), "{e}");
    let bare = Folder::new("sharded-bare");
    put_sharded(&bare, INDEX, two_shards, |i| vec![i % 2], |_| None);
    bare.put(INDEX, b"{\"metadata\": {}}");
    let e = error(load(&bare.0, None));
    assert!(e.contains("weight_map"), "{e}");
}
