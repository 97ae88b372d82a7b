//! `from_pretrained` on the folder layouts diffusers users have: the `unet/` folder or the
//! pipeline root above it, the plain weights file or only a variant (`fp16`), an explicit
//! variant; and clear errors for PyTorch pickles, sharded checkpoints, empty folders and a
//! missing variant.

mod common;

use std::path::{Path, PathBuf};

use xpu::nn::UNet2DConditionModel;
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

    let sharded = Folder::new("sharded");
    sharded.put(
        "unet/config.json",
        &std::fs::read(fixture_dir().join("config.json")).unwrap(),
    );
    sharded.put("unet/diffusion_pytorch_model.safetensors.index.json", b"{}");
    sharded.put(
        "unet/diffusion_pytorch_model-00001-of-00002.safetensors",
        b"",
    );
    let e = error(load(&sharded.0, None));
    assert!(e.contains("sharded"), "{e}");
}
