//! Loading `xpu::models::vae::AutoencoderKl` and its errors: `VaeConfig` parsing and validation
//! (presets, unknown keys and block types), the folder layouts (`vae/` or the pipeline root,
//! variants, sharded checkpoints), diffusers' legacy attention names, one error listing every
//! missing/unexpected/mis-shaped tensor, and bad inputs (rank, channels, sizes, dtype, device,
//! noise).

use crate::common;
use std::path::{Path, PathBuf};

use xpu::models::vae::{AutoencoderKl, VaeConfig, VaeTiling};
use xpu::nn::ActFn;
use xpu::{DType, Device, Tensor};

fn fixture_dir(name: &str) -> PathBuf {
    common::repo_root().join("tests/fixtures/vae").join(name)
}

/// A fresh folder unique to this process and test, removed when dropped.
struct Folder(PathBuf);

impl Folder {
    fn new(name: &str) -> Folder {
        let dir =
            std::env::temp_dir().join(format!("xpu-vae-loading-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Folder(dir)
    }

    fn put(&self, name: &str, bytes: &[u8]) {
        let path = self.0.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `l2` fixture's tensors (f32 on disk) as `(name, dtype, shape, bytes)`, sorted by name.
fn tensors() -> Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> {
    let bytes =
        std::fs::read(fixture_dir("l2").join("diffusion_pytorch_model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<_> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// A safetensors file of `items`.
fn serialize(items: &[(String, safetensors::Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<(String, safetensors::tensor::TensorView)> = items
        .iter()
        .map(|(n, d, s, b)| {
            let v = safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap();
            (n.clone(), v)
        })
        .collect();
    safetensors::serialize(views, None).unwrap()
}

/// A folder with the `l2` config and `items` as its weights.
fn folder_with(name: &str, items: &[(String, safetensors::Dtype, Vec<usize>, Vec<u8>)]) -> Folder {
    let dir = Folder::new(name);
    let config = std::fs::read(fixture_dir("l2").join("config.json")).unwrap();
    dir.put("config.json", &config);
    dir.put("diffusion_pytorch_model.safetensors", &serialize(items));
    dir
}

fn load(dir: &Path) -> xpu::Result<AutoencoderKl> {
    AutoencoderKl::from_pretrained(dir, DType::F32, Device::Cpu)
}

/// The model's decode of fixed latents (for "the same weights were loaded").
fn output(m: &AutoencoderKl) -> Vec<f64> {
    let z = Tensor::randn(&[1, 4, 3, 2], DType::F32, Device::Cpu, 3).unwrap();
    common::values(&m.decode(&z).unwrap())
}

fn error<T>(r: xpu::Result<T>) -> String {
    match r {
        Ok(_) => panic!("succeeded where an error was expected"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn configs_parse_with_diffusers_defaults_and_presets() {
    let c = VaeConfig::from_file(fixture_dir("shift").join("config.json")).unwrap();
    assert_eq!(c.block_out_channels, [16, 16]);
    assert_eq!(c.shift_factor, Some(0.0609));
    assert!(!c.use_quant_conv && !c.use_post_quant_conv && c.force_upcast);
    assert_eq!(
        (c.tile_sample_min_size(), c.tile_latent_min_size()),
        (32, 16)
    );
    let c = VaeConfig::from_file(fixture_dir("l2").join("config.json")).unwrap();
    assert_eq!(
        (c.levels(), c.downscale(), c.tile_latent_min_size()),
        (3, 4, 8)
    );
    assert_eq!(c.shift_factor, None);
    let c = VaeConfig::from_file(fixture_dir("noattn").join("config.json")).unwrap();
    assert!(!c.mid_block_add_attention && !c.force_upcast);

    // An empty object is diffusers' constructor defaults.
    let d = VaeConfig::from_json_str("{}").unwrap();
    assert_eq!(d.block_out_channels, [64]);
    assert_eq!(
        (d.layers_per_block, d.sample_size, d.latent_channels),
        (1, 32, 4)
    );
    assert_eq!(d.act_fn, ActFn::Silu);
    assert_eq!(d.scaling_factor, 0.18215);

    let sd = VaeConfig::sd();
    sd.validate().unwrap();
    assert_eq!(sd.block_out_channels, [128, 256, 512, 512]);
    assert_eq!((sd.downscale(), sd.tile_latent_min_size()), (8, 64));
    let xl = VaeConfig::sdxl();
    assert_eq!(
        (xl.scaling_factor, xl.force_upcast, xl.sample_size),
        (0.13025, true, 1024)
    );
    let with_stats = r#"{"latents_mean": [0.1, 0.2, 0.3, 0.4], "latents_std": [1, 2, 3, 4],
        "sample_size": [64, 64], "act_fn": "swish", "shift_factor": null}"#;
    let c = VaeConfig::from_json_str(with_stats).unwrap();
    assert_eq!(c.latents_std, Some(vec![1.0, 2.0, 3.0, 4.0]));
    assert_eq!(c.sample_size, 64);
}

#[test]
fn bad_configs_are_errors_naming_the_key() {
    for (json, key, says) in [
        (
            r#"{"down_block_types": ["DownBlock2D"]}"#,
            "down_block_types",
            "\"DownBlock2D\"",
        ),
        (
            r#"{"up_block_types": ["AttnUpDecoderBlock2D"]}"#,
            "up_block_types",
            "\"AttnUpDecoderBlock2D\"",
        ),
        (
            r#"{"block_out_channels": [64, 128]}"#,
            "down_block_types",
            "2",
        ),
        (r#"{"norm_num_groups": 24}"#, "block_out_channels", "24"),
        (r#"{"layers_per_block": 0}"#, "layers_per_block", "0"),
        (r#"{"act_fn": "tanh"}"#, "act_fn", "tanh"),
        (r#"{"scaling_factor": 0}"#, "scaling_factor", "nonzero"),
        (r#"{"shift_factor": "x"}"#, "shift_factor", "number"),
        (
            r#"{"latents_mean": [1, 2]}"#,
            "latents_mean",
            "latent_channels",
        ),
        (r#"{"norm_type": "spatial"}"#, "norm_type", "unknown"),
        (r#"{"sample_size": -1}"#, "sample_size", "-1"),
    ] {
        let e = error(VaeConfig::from_json_str(json));
        assert!(e.contains(key) && e.contains(says), "{json}: {e}");
    }
    assert!(error(VaeConfig::from_json_str("[1]")).contains("JSON object"));
    assert!(error(VaeConfig::from_json_str("{")).contains("not valid JSON"));
    let mut c = VaeConfig::sd();
    c.up_block_types.pop();
    assert!(error(AutoencoderKl::random(&c, DType::F32, Device::Cpu, 0)).contains("up_block_types"));
    let e = error(AutoencoderKl::random(
        &VaeConfig::sd(),
        DType::I32,
        Device::Cpu,
        0,
    ));
    assert!(e.contains("f32, f16 or bf16"), "{e}");
}

/// The file holds exactly the parameters diffusers' `AutoencoderKL` has, under its names.
#[test]
fn parameter_shapes_are_diffusers() {
    for name in ["g32", "l2", "shift", "noattn"] {
        let dir = fixture_dir(name);
        let config = VaeConfig::from_file(dir.join("config.json")).unwrap();
        let mut want: Vec<(String, Vec<usize>)> = Vec::new();
        let file = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains("diffusion_pytorch_model"))
            .unwrap();
        let bytes = std::fs::read(file).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        for (n, v) in st.tensors() {
            want.push((n, v.shape().to_vec()));
        }
        let mut got = AutoencoderKl::parameter_shapes(&config).unwrap();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn folders_variants_and_shards_load_the_same_model() {
    let want = output(&load(&fixture_dir("l2")).unwrap());
    let items = tensors();
    // A pipeline root holding vae/, with the weights as the fp16-named variant only.
    let root = Folder::new("root");
    root.put("model_index.json", b"{}");
    root.put(
        "vae/config.json",
        &std::fs::read(fixture_dir("l2").join("config.json")).unwrap(),
    );
    root.put(
        "vae/diffusion_pytorch_model.fp16.safetensors",
        &serialize(&items),
    );
    assert_eq!(output(&load(&root.0).unwrap()), want);
    let m = AutoencoderKl::from_pretrained_variant(&root.0, Some("fp16"), DType::F32, Device::Cpu);
    assert_eq!(output(&m.unwrap()), want);
    let e = error(AutoencoderKl::from_pretrained_variant(
        &root.0,
        Some("bf16"),
        DType::F32,
        Device::Cpu,
    ));
    assert!(e.contains("bf16"), "{e}");

    // Two shards and their index.
    let sharded = folder_with("sharded", &[]);
    std::fs::remove_file(sharded.0.join("diffusion_pytorch_model.safetensors")).unwrap();
    let half = items.len() / 2;
    let shard = |k: usize| format!("diffusion_pytorch_model-0000{}-of-00002.safetensors", k + 1);
    let mut map = serde_json::Map::new();
    for (i, (n, ..)) in items.iter().enumerate() {
        map.insert(
            n.clone(),
            serde_json::Value::String(shard(usize::from(i >= half))),
        );
    }
    sharded.put(&shard(0), &serialize(&items[..half]));
    sharded.put(&shard(1), &serialize(&items[half..]));
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    sharded.put(
        "diffusion_pytorch_model.safetensors.index.json",
        index.to_string().as_bytes(),
    );
    assert_eq!(output(&load(&sharded.0).unwrap()), want);

    let empty = Folder::new("empty");
    assert!(error(load(&empty.0)).contains("no config.json"));
    let pickles = folder_with("pickles", &[]);
    std::fs::remove_file(pickles.0.join("diffusion_pytorch_model.safetensors")).unwrap();
    pickles.put("diffusion_pytorch_model.bin", b"pickle");
    let e = error(load(&pickles.0));
    assert!(
        e.contains("pickle") && e.contains("safe_serialization"),
        "{e}"
    );
}

/// Checkpoints with the pre-rename attention names (`query`, `key`, `value`, `proj_attn`)
/// load as diffusers loads them; a file with both names for one parameter is refused.
#[test]
fn legacy_attention_names_load() {
    let want = output(&load(&fixture_dir("l2")).unwrap());
    let legacy_of = |n: &str| {
        n.replace(".to_q.", ".query.")
            .replace(".to_k.", ".key.")
            .replace(".to_v.", ".value.")
            .replace(".to_out.0.", ".proj_attn.")
    };
    let items: Vec<_> = tensors()
        .into_iter()
        .map(|(n, d, s, b)| (legacy_of(&n), d, s, b))
        .collect();
    assert!(items
        .iter()
        .any(|(n, ..)| n.ends_with("attentions.0.proj_attn.weight")));
    let dir = folder_with("legacy", &items);
    assert_eq!(output(&load(&dir.0).unwrap()), want);

    let mut both = tensors();
    let extra = both
        .iter()
        .find(|(n, ..)| n.ends_with("decoder.mid_block.attentions.0.to_q.weight"))
        .cloned()
        .unwrap();
    both.push((legacy_of(&extra.0), extra.1, extra.2, extra.3));
    let dir = folder_with("both-names", &both);
    let e = error(load(&dir.0));
    assert!(
        e.contains("decoder.mid_block.attentions.0.query.weight"),
        "{e}"
    );
}

#[test]
fn weight_errors_list_every_tensor() {
    let mut items = tensors();
    items.retain(|(n, ..)| n != "decoder.conv_in.bias" && n != "quant_conv.weight");
    items.push((
        "decoder.extra".into(),
        safetensors::Dtype::F32,
        vec![1],
        vec![0; 4],
    ));
    let conv_out = items
        .iter_mut()
        .find(|(n, ..)| n == "encoder.conv_out.bias")
        .unwrap();
    conv_out.2 = vec![4];
    conv_out.3.truncate(16);
    let dir = folder_with("bad-weights", &items);
    let e = error(load(&dir.0));
    for want in [
        "decoder.conv_in.bias",
        "quant_conv.weight",
        "decoder.extra",
        "encoder.conv_out.bias",
    ] {
        assert!(e.contains(want), "{want} not in: {e}");
    }
    let dir = Folder::new("truncated");
    dir.put(
        "config.json",
        &std::fs::read(fixture_dir("l2").join("config.json")).unwrap(),
    );
    dir.put("diffusion_pytorch_model.safetensors", &[1, 2, 3]);
    assert!(error(load(&dir.0)).contains("truncated"));
}

#[test]
fn bad_inputs_are_errors() {
    let vae = load(&fixture_dir("l2")).unwrap();
    let t = |shape: &[usize]| Tensor::zeros(shape, DType::F32, Device::Cpu).unwrap();
    for (shape, says) in [
        (&[4, 3, 2][..], "latents [B, 4, H, W]"),
        (&[1, 3, 4, 4][..], "latents [B, 4, H, W]"),
        (&[1, 4, 0, 4][..], "H, W >= 1"),
        (&[0, 4, 2, 2][..], "B >= 1"),
    ] {
        let e = error(vae.decode(&t(shape)));
        assert!(e.contains(says), "{shape:?}: {e}");
        let e = error(vae.decode_with(&t(shape), VaeTiling::On));
        assert!(e.contains(says), "tiled {shape:?}: {e}");
    }
    for shape in [&[1, 4, 8, 8][..], &[1, 3, 3, 8], &[3, 8, 8]] {
        let e = error(vae.encode(&t(shape)));
        assert!(
            e.contains("[B, 3, H, W]") && e.contains("H, W >= 4"),
            "{shape:?}: {e}"
        );
    }
    let half = Tensor::zeros(&[1, 4, 2, 2], DType::F16, Device::Cpu).unwrap();
    assert!(error(vae.decode(&half)).contains("f16"));
    let post = vae.encode(&t(&[1, 3, 8, 8])).unwrap();
    assert!(error(post.sample(&t(&[1, 4, 3, 2]))).contains("noise"));
    assert!(error(post.sample(&half)).contains("f16"));
    if common::xpu() {
        let z = t(&[1, 4, 2, 2]).to(Device::Xpu).unwrap();
        let e = error(vae.decode(&z));
        assert!(e.to_lowercase().contains("xpu"), "{e}");
    }
    // A tile too small to overlap (diffusers' range() with step 0).
    let config = VaeConfig {
        sample_size: 4,
        ..VaeConfig::from_file(fixture_dir("l2").join("config.json")).unwrap()
    };
    let tiny = AutoencoderKl::random(&config, DType::F32, Device::Cpu, 0).unwrap();
    let e = error(tiny.decode_tiled(&t(&[1, 4, 2, 2])));
    assert!(e.contains("too small"), "{e}");
    // The last tile column of an image is thinner than the encoder's minimum.
    let config = VaeConfig {
        sample_size: 32,
        ..config
    };
    let vae = AutoencoderKl::random(&config, DType::F32, Device::Cpu, 0).unwrap();
    let e = error(vae.encode_tiled(&t(&[1, 3, 8, 26])));
    assert!(e.contains("tiles of at least 4x4"), "{e}");
}
