//! Loading errors of the UNet: missing, unexpected and mis-shaped tensors in one error,
//! truncated and corrupt safetensors files, unsupported or inconsistent config values (each
//! naming its key), and the config parser on diffusers' real SD configs.

use std::path::{Path, PathBuf};

use xpu::models::unet::{UNet2DConditionModel, UNetConfig};
use xpu::nn::WeightStore;
use xpu::{DType, Device, Error};

fn fixture_dir() -> PathBuf {
    repo_root().join("tests/fixtures/unet_sd1")
}

fn fixture_weights() -> Vec<u8> {
    std::fs::read(fixture_dir().join("diffusion_pytorch_model.safetensors")).unwrap()
}

fn config() -> UNetConfig {
    UNetConfig::from_file(fixture_dir().join("config.json")).unwrap()
}

/// A scratch file unique to this test process and name, removed when dropped.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn scratch(name: &str, bytes: &[u8]) -> Scratch {
    // One folder per file: tests run in parallel threads, and a shared folder removed by one
    // test's drop raced another test's write (seen on a 16-core machine).
    let dir = std::env::temp_dir().join(format!("xpu-unet-loading-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    Scratch(path)
}

/// A safetensors file from `(name, dtype, shape, bytes)` entries.
fn safetensors_bytes(tensors: &[(String, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let start = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let mut h = serde_json::Value::Object(header).to_string().into_bytes();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    out
}

/// The fixture's tensors as `(name, dtype, shape, bytes)` (re-read through the public API).
fn fixture_entries() -> Vec<(String, &'static str, Vec<usize>, Vec<u8>)> {
    let store =
        WeightStore::open(fixture_dir().join("diffusion_pytorch_model.safetensors")).unwrap();
    store
        .names()
        .into_iter()
        .map(|n| {
            let shape = store.shape(&n).unwrap().to_vec();
            let v: Vec<f32> = store
                .tensor(&n, DType::F32, Device::Cpu)
                .unwrap()
                .to_vec()
                .unwrap();
            let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            (n, "F32", shape, bytes)
        })
        .collect()
}

fn load(path: &Path) -> xpu::Result<UNet2DConditionModel> {
    UNet2DConditionModel::from_safetensors(&config(), path, DType::F32, Device::Cpu)
}

#[test]
fn f32_file_loads_like_the_f16_fixture() {
    let path = scratch("f32.safetensors", &safetensors_bytes(&fixture_entries()));
    let a = load(&path).unwrap();
    let b = UNet2DConditionModel::from_pretrained(fixture_dir(), DType::F32, Device::Cpu).unwrap();
    let x = xpu::Tensor::randn(&[1, 4, 8, 8], DType::F32, Device::Cpu, 3).unwrap();
    let t = xpu::Tensor::from_vec(vec![10f32], &[1], Device::Cpu).unwrap();
    let ctx = xpu::Tensor::randn(&[1, 3, 32], DType::F32, Device::Cpu, 4).unwrap();
    let ya: Vec<f32> = a.forward(&x, &t, &ctx).unwrap().to_vec().unwrap();
    let yb: Vec<f32> = b.forward(&x, &t, &ctx).unwrap().to_vec().unwrap();
    assert_eq!(ya, yb);
}

/// The store drops a tensor's mapped pages once it is read (to keep a load's resident memory
/// down): reading every tensor again, in another order, gives the same bits.
#[test]
fn tensors_read_twice_from_one_store_are_the_same() {
    let store =
        xpu::nn::WeightStore::open(fixture_dir().join("diffusion_pytorch_model.safetensors"))
            .unwrap();
    let names: Vec<String> = fixture_entries().into_iter().map(|e| e.0).collect();
    let read = |n: &String| -> Vec<u32> {
        let t = store.tensor(n, DType::F32, Device::Cpu).unwrap();
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    let first: Vec<Vec<u32>> = names.iter().map(read).collect();
    for (n, want) in names.iter().zip(&first).rev() {
        assert_eq!(&read(n), want, "{n}");
    }
    assert!(first.iter().map(Vec::len).sum::<usize>() > 100_000);
}

#[test]
fn missing_unexpected_and_misshaped_tensors_in_one_error() {
    let mut entries = fixture_entries();
    let missing = entries.remove(3).0;
    let renamed = entries[10].0.clone();
    entries[10].0 = format!("{renamed}_extra");
    let (name, _, shape, bytes) = &mut entries[20];
    let reshaped = name.clone();
    let n: usize = shape.iter().product();
    *shape = vec![n / 2, 2];
    if !n.is_multiple_of(2) {
        *shape = vec![n, 1, 1, 1, 1];
    }
    assert_eq!(bytes.len(), n * 4);
    let path = scratch("mismatch.safetensors", &safetensors_bytes(&entries));
    match load(&path) {
        Err(Error::Weights {
            missing: m,
            unexpected: u,
            mismatched: s,
            ..
        }) => {
            let mut want_missing = vec![missing.clone(), renamed.clone()];
            want_missing.sort();
            assert_eq!(m, want_missing);
            assert_eq!(u, vec![format!("{renamed}_extra")]);
            assert_eq!(s.len(), 1);
            assert!(s[0].starts_with(&reshaped), "{s:?}");
            let msg = load(&path).err().unwrap().to_string();
            for needle in [
                missing.as_str(),
                renamed.as_str(),
                reshaped.as_str(),
                "2 missing",
                "1 unexpected",
                "1 mis-shaped",
            ] {
                assert!(msg.contains(needle), "message lacks {needle}: {msg}");
            }
        }
        other => panic!("expected Error::Weights, got {other:?}"),
    }
}

#[test]
fn a_file_for_another_config_lists_every_difference() {
    let mut cfg = config();
    cfg.cross_attention_dim = vec![48; 2];
    let err = UNet2DConditionModel::from_safetensors(
        &cfg,
        fixture_dir().join("diffusion_pytorch_model.safetensors"),
        DType::F32,
        Device::Cpu,
    )
    .unwrap_err();
    match err {
        Error::Weights {
            missing,
            unexpected,
            mismatched,
            ..
        } => {
            assert!(missing.is_empty() && unexpected.is_empty());
            // to_k and to_v of every cross-attention: sd1 has 4 transformers (down 0, mid,
            // and 2 in up 1).
            assert_eq!(mismatched.len(), 8, "{mismatched:?}");
        }
        other => panic!("expected Error::Weights, got {other:?}"),
    }
}

fn expect_invalid_file(what: &str, bytes: &[u8]) -> String {
    let path = scratch(&format!("{what}.safetensors"), bytes);
    match WeightStore::open(&path) {
        Err(e @ Error::InvalidFile { .. }) => {
            assert!(matches!(load(&path), Err(Error::InvalidFile { .. })));
            e.to_string()
        }
        other => panic!("{what}: expected Error::InvalidFile, got {other:?}"),
    }
}

#[test]
fn truncated_files_are_clear_errors() {
    let full = fixture_weights();
    let header = u64::from_le_bytes(full[..8].try_into().unwrap()) as usize;
    for cut in [
        0,
        5,
        8,
        8 + header / 2,
        8 + header,
        full.len() / 2,
        full.len() - 1,
    ] {
        let msg = expect_invalid_file(&format!("cut{cut}"), &full[..cut]);
        assert!(msg.contains("truncated"), "cut at {cut}: {msg}");
    }
    // Extra bytes after the data are also rejected.
    let mut longer = full.clone();
    longer.extend([0u8; 16]);
    expect_invalid_file("longer", &longer);
}

#[test]
fn corrupt_headers_are_clear_errors() {
    let full = fixture_weights();
    // A header length far beyond the file (no allocation of that size happens).
    let mut huge = full.clone();
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    let msg = expect_invalid_file("huge", &huge);
    assert!(msg.contains("header"), "{msg}");
    let mut big = full.clone();
    big[..8].copy_from_slice(&(50_000_000u64).to_le_bytes());
    expect_invalid_file("big", &big);
    // Garbage in the JSON.
    let mut garbage = full.clone();
    garbage[8..16].copy_from_slice(b"#garbage");
    let msg = expect_invalid_file("garbage", &garbage);
    assert!(msg.contains("JSON"), "{msg}");
    // Not UTF-8.
    let mut binary = full.clone();
    binary[9] = 0xff;
    expect_invalid_file("binary", &binary);
    // Offsets that do not match shape x dtype, overlap, or run past the data.
    let b = |shape: Vec<usize>, offsets: (usize, usize), data: usize| {
        let h = serde_json::json!({"w": {"dtype": "F32", "shape": shape, "data_offsets": [offsets.0, offsets.1]}})
            .to_string()
            .into_bytes();
        let mut out = (h.len() as u64).to_le_bytes().to_vec();
        out.extend(h);
        out.extend(vec![0u8; data]);
        out
    };
    expect_invalid_file("shape_vs_offsets", &b(vec![4, 4], (0, 16), 16));
    expect_invalid_file("offsets_past_end", &b(vec![4], (0, 16), 8));
    expect_invalid_file("gap", &b(vec![2], (8, 16), 16));
    expect_invalid_file("overflow", &b(vec![usize::MAX / 2, 4], (0, 16), 16));
    // A dtype xpu cannot convert.
    let i64s = safetensors_bytes(&[("w".into(), "I64", vec![2], vec![0u8; 16])]);
    let path = scratch("i64.safetensors", &i64s);
    let store = WeightStore::open(&path).unwrap();
    let e = store.tensor("w", DType::F32, Device::Cpu).unwrap_err();
    assert!(
        matches!(e, Error::InvalidFile { .. }) && e.to_string().contains("I64"),
        "{e}"
    );
}

#[test]
fn missing_files_are_io_errors() {
    let e = UNet2DConditionModel::from_pretrained("/nonexistent/unet", DType::F32, Device::Cpu)
        .unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    assert!(
        e.to_string().contains("/nonexistent/unet/config.json"),
        "{e}"
    );
    let e = load(Path::new("/nonexistent/w.safetensors")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
}

fn fixture_json() -> serde_json::Map<String, serde_json::Value> {
    let text = std::fs::read_to_string(fixture_dir().join("config.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn config_error(key: &str, value: serde_json::Value) -> String {
    let mut map = fixture_json();
    map.insert(key.to_string(), value.clone());
    let text = serde_json::Value::Object(map).to_string();
    match UNetConfig::from_json_str(&text) {
        Err(Error::Config { key: k, msg }) => {
            assert_eq!(k, key, "{key} = {value}: error names {k}: {msg}");
            msg
        }
        other => panic!("{key} = {value}: expected Error::Config, got {other:?}"),
    }
}

#[test]
fn unsupported_config_values_name_their_key() {
    use serde_json::json;
    let cases = [
        ("dual_cross_attention", json!(true)),
        ("class_embed_type", json!("learned")),
        ("addition_embed_type", json!("text_image")),
        ("num_class_embeds", json!(0)),
        ("num_class_embeds", json!("many")),
        ("encoder_hid_dim", json!(0)),
        ("encoder_hid_dim_type", json!("image_proj")),
        ("resnet_time_scale_shift", json!("ada_group")),
        ("time_embedding_type", json!("learned")),
        ("attention_type", json!("gated")),
        ("time_cond_proj_dim", json!(0)),
        ("timestep_post_act", json!("tanh")),
        ("time_embedding_act_fn", json!("tanh")),
        ("cross_attention_norm", json!(3)),
        ("resnet_skip_time_act", json!("yes")),
        ("class_embeddings_concat", json!(true)),
        ("mid_block_type", json!("UNetMidBlock2DSimpleCrossAttn")),
        ("mid_block_only_cross_attention", json!("yes")),
        ("act_fn", json!("tanh")),
        ("norm_num_groups", json!(null)),
        ("norm_num_groups", json!(5)),
        (
            "down_block_types",
            json!(["AttnDownBlock2D", "DownBlock2D"]),
        ),
        ("up_block_types", json!(["UpBlock2D"])),
        (
            "up_block_types",
            json!(["UpBlock2D", "SimpleCrossAttnUpBlock2D"]),
        ),
        ("layers_per_block", json!([1, 2, 3])),
        ("attention_head_dim", json!(7)),
        ("attention_head_dim", json!([8])),
        ("num_attention_heads", json!(5)),
        ("cross_attention_dim", json!("wide")),
        ("transformer_layers_per_block", json!([1, 2, 3])),
        ("transformer_layers_per_block", json!([1, [2, "x"]])),
        ("reverse_transformer_layers_per_block", json!([[1], [1]])),
        ("block_out_channels", json!(64)),
        ("conv_in_kernel", json!(4)),
        ("downsample_padding", json!(2)),
        ("use_linear_projection", json!("yes")),
        ("in_channels", json!(-4)),
        ("norm_eps", json!("small")),
        ("some_future_option", json!(1)),
        ("layers_per_block", json!(1_000_000_000)),
        ("transformer_layers_per_block", json!([1, 0])),
        ("conv_out_kernel", json!(101)),
    ];
    for (key, value) in cases {
        let msg = config_error(key, value);
        assert!(!msg.is_empty());
    }
    let msg = config_error("dual_cross_attention", json!(true));
    assert!(msg.contains("false"), "says what is supported: {msg}");
    // The whole message names the key.
    let mut map = fixture_json();
    map.insert("attention_type".into(), json!("gated"));
    let e = UNetConfig::from_json_str(&serde_json::Value::Object(map).to_string()).unwrap_err();
    assert!(e.to_string().contains("`attention_type`"), "{e}");
    // Not JSON / not an object: InvalidFile.
    assert!(matches!(
        UNetConfig::from_json_str("{"),
        Err(Error::InvalidFile { .. })
    ));
    assert!(matches!(
        UNetConfig::from_json_str("[1]"),
        Err(Error::InvalidFile { .. })
    ));
}

#[test]
fn diffusers_sd_configs_parse_to_the_presets() {
    // runwayml/stable-diffusion-v1-5 unet/config.json (diffusers 0.6 era: few keys).
    let sd15 = r#"{"_class_name": "UNet2DConditionModel", "_diffusers_version": "0.6.0",
        "act_fn": "silu", "attention_head_dim": 8, "block_out_channels": [320, 640, 1280, 1280],
        "center_input_sample": false, "cross_attention_dim": 768,
        "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
        "downsample_padding": 1, "flip_sin_to_cos": true, "freq_shift": 0, "in_channels": 4,
        "layers_per_block": 2, "mid_block_scale_factor": 1, "norm_eps": 1e-05, "norm_num_groups": 32,
        "out_channels": 4, "sample_size": 64,
        "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"]}"#;
    assert_eq!(UNetConfig::from_json_str(sd15).unwrap(), UNetConfig::sd15());
    // stabilityai/stable-diffusion-2-1 unet/config.json.
    let sd21 = r#"{"_class_name": "UNet2DConditionModel", "_diffusers_version": "0.10.0.dev0",
        "act_fn": "silu", "attention_head_dim": [5, 10, 20, 20], "block_out_channels": [320, 640, 1280, 1280],
        "center_input_sample": false, "cross_attention_dim": 1024,
        "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
        "downsample_padding": 1, "dual_cross_attention": false, "flip_sin_to_cos": true, "freq_shift": 0,
        "in_channels": 4, "layers_per_block": 2, "mid_block_scale_factor": 1, "norm_eps": 1e-05,
        "norm_num_groups": 32, "num_class_embeds": null, "only_cross_attention": false, "out_channels": 4,
        "sample_size": 96,
        "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
        "use_linear_projection": true, "upcast_attention": true}"#;
    assert_eq!(UNetConfig::from_json_str(sd21).unwrap(), UNetConfig::sd21());
    // stabilityai/stable-diffusion-xl-base-1.0 unet/config.json (`upcast_attention: null`).
    let sdxl = r#"{"_class_name": "UNet2DConditionModel", "_diffusers_version": "0.19.0.dev0",
        "act_fn": "silu", "addition_embed_type": "text_time", "addition_embed_type_num_heads": 64,
        "addition_time_embed_dim": 256, "attention_head_dim": [5, 10, 20],
        "block_out_channels": [320, 640, 1280], "center_input_sample": false,
        "class_embed_type": null, "class_embeddings_concat": false, "conv_in_kernel": 3,
        "conv_out_kernel": 3, "cross_attention_dim": 2048, "cross_attention_norm": null,
        "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
        "downsample_padding": 1, "dual_cross_attention": false, "encoder_hid_dim": null,
        "encoder_hid_dim_type": null, "flip_sin_to_cos": true, "freq_shift": 0, "in_channels": 4,
        "layers_per_block": 2, "mid_block_only_cross_attention": null, "mid_block_scale_factor": 1,
        "mid_block_type": "UNetMidBlock2DCrossAttn", "norm_eps": 1e-05, "norm_num_groups": 32,
        "num_attention_heads": null, "num_class_embeds": null, "only_cross_attention": false,
        "out_channels": 4, "projection_class_embeddings_input_dim": 2816,
        "resnet_out_scale_factor": 1.0, "resnet_skip_time_act": false,
        "resnet_time_scale_shift": "default", "sample_size": 128, "time_cond_proj_dim": null,
        "time_embedding_act_fn": null, "time_embedding_dim": null,
        "time_embedding_type": "positional", "timestep_post_act": null,
        "transformer_layers_per_block": [1, 2, 10],
        "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
        "upcast_attention": null, "use_linear_projection": true}"#;
    assert_eq!(UNetConfig::from_json_str(sdxl).unwrap(), UNetConfig::sdxl());
    // text_time without its sizes, and other added-embedding kinds: errors naming the key.
    let text_time_only = r#"{"addition_embed_type": "text_time", "addition_time_embed_dim": 8}"#;
    let e = UNetConfig::from_json_str(text_time_only)
        .unwrap_err()
        .to_string();
    assert!(e.contains("projection_class_embeddings_input_dim"), "{e}");
    let e = UNetConfig::from_json_str(r#"{"addition_embed_type": "text_image"}"#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("addition_embed_type") && e.contains("text_time"),
        "{e}"
    );
    let tiny_ids = r#"{"addition_embed_type": "text_time", "addition_time_embed_dim": 1,
        "projection_class_embeddings_input_dim": 8}"#;
    let e = UNetConfig::from_json_str(tiny_ids).unwrap_err().to_string();
    assert!(e.contains("addition_time_embed_dim"), "{e}");
    // The fixtures' configs (every key diffusers 0.42 writes).
    let c = config();
    assert_eq!(c.heads(0), 8);
    assert_eq!(c.block_out_channels, vec![32, 64]);
    let sd2 = UNetConfig::from_file(fixture_dir().join("../unet_sd2/config.json")).unwrap();
    assert_eq!(sd2.attention_head_dim, vec![2, 4, 4]);
    assert_eq!(sd2.only_cross_attention, vec![false, true, false]);
    assert!(sd2.use_linear_projection && sd2.upcast_attention);
}

/// The repository root: where the tests were built, or the current directory when that path
/// does not exist (test binaries carried to another machine run from the repository root).
fn repo_root() -> std::path::PathBuf {
    let built = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if built.join("tests").is_dir() {
        built
    } else {
        std::path::PathBuf::from(".")
    }
}
