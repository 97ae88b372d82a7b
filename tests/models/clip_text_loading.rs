//! Loading CLIP text encoders (`xpu::models::clip`): the checkpoint layouts transformers and
//! diffusers write (f32/f16/bf16 files, variants, shards, with and without the `text_model.`
//! prefix), and the errors for bad folders, configs, checkpoints and token ids.

use crate::clip_text_common;
use clip_text_common::{assert_same, fixture_dir, read_all, write_safetensors, Io, Scratch};
use xpu::models::clip::{input_ids, ClipTextConfig, ClipTextModel, ClipTextModelWithProjection};
use xpu::nn::WeightStore;
use xpu::{DType, Device, Error, Tensor};

fn sd1_tensors(dtype: DType) -> Vec<(String, Tensor)> {
    let store = WeightStore::open(fixture_dir("sd1").join("model.safetensors")).unwrap();
    read_all(&store, dtype)
}

fn last_state(m: &ClipTextModel, ids: &Tensor) -> Tensor {
    m.forward(ids).unwrap().last_hidden_state
}

#[test]
fn the_fp16_sharded_variant_is_found_and_read() {
    let dir = fixture_dir("proj");
    let ids = Io::open("proj").ids(7, Device::Cpu);
    let found =
        ClipTextModelWithProjection::from_pretrained(&dir, DType::F32, Device::Cpu).unwrap();
    let asked = ClipTextModelWithProjection::from_pretrained_variant(
        &dir,
        Some("fp16"),
        DType::F32,
        Device::Cpu,
    )
    .unwrap();
    assert_same(
        "found vs asked",
        found.forward(&ids).unwrap().text_embeds.as_ref().unwrap(),
        asked.forward(&ids).unwrap().text_embeds.as_ref().unwrap(),
    );
    let e = ClipTextModelWithProjection::from_pretrained_variant(
        &dir,
        Some("bf16"),
        DType::F32,
        Device::Cpu,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("model.bf16.safetensors"), "{e}");
}

#[test]
fn sixteen_bit_files_load_like_converted_models() {
    let ids = Io::open("sd1").ids(77, Device::Cpu);
    for (dtype, file) in [
        (DType::BF16, "model.safetensors"),
        (DType::F16, "model.fp16.safetensors"),
    ] {
        let dir = Scratch::new(&format!("sixteen_{dtype}")).with_config_of("sd1");
        write_safetensors(&dir.0.join(file), &sd1_tensors(dtype));
        let from_file = ClipTextModel::from_pretrained(&dir.0, DType::F32, Device::Cpu).unwrap();
        let converted = ClipTextModel::from_pretrained(fixture_dir("sd1"), dtype, Device::Cpu)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        assert_same(
            &format!("{dtype} file vs converted"),
            &last_state(&from_file, &ids),
            &last_state(&converted, &ids),
        );
    }
}

#[test]
fn a_sharded_checkpoint_reads_as_one() {
    let store = WeightStore::open(fixture_dir("sd2").join("model.safetensors")).unwrap();
    let tensors = read_all(&store, DType::F32);
    let dir = Scratch::new("sharded").with_config_of("sd2");
    let (a, b) = tensors.split_at(tensors.len() / 2);
    let mut map = serde_json::Map::new();
    for (part, file) in [
        (a, "model-00001-of-00002.safetensors"),
        (b, "model-00002-of-00002.safetensors"),
    ] {
        write_safetensors(&dir.0.join(file), part);
        for (name, _) in part {
            map.insert(name.clone(), serde_json::Value::from(file));
        }
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(
        dir.0.join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let ids = Io::open("sd2").ids(7, Device::Cpu);
    let sharded = ClipTextModel::from_pretrained(&dir.0, DType::F32, Device::Cpu).unwrap();
    let single =
        ClipTextModel::from_pretrained(fixture_dir("sd2"), DType::F32, Device::Cpu).unwrap();
    assert_same(
        "sharded vs single",
        &last_state(&sharded, &ids),
        &last_state(&single, &ids),
    );
}

#[test]
fn a_projection_checkpoint_loads_as_its_text_model() {
    let dir = fixture_dir("proj");
    let ids = Io::open("proj").ids(77, Device::Cpu);
    let plain = ClipTextModel::from_pretrained(&dir, DType::F32, Device::Cpu).unwrap();
    let with = ClipTextModelWithProjection::from_pretrained(&dir, DType::F32, Device::Cpu).unwrap();
    let (p, w) = (plain.forward(&ids).unwrap(), with.forward(&ids).unwrap());
    assert_same("pooled", &p.pooled_output, &w.pooled_output);
    assert!(p.text_embeds.is_none());
    assert_same(
        "project",
        &with.project(&p.pooled_output).unwrap(),
        w.text_embeds.as_ref().unwrap(),
    );
}

#[test]
fn a_projection_model_needs_its_projection() {
    let e =
        ClipTextModelWithProjection::from_pretrained(fixture_dir("sd1"), DType::F32, Device::Cpu)
            .unwrap_err();
    match e {
        Error::Weights {
            missing,
            unexpected,
            mismatched,
            ..
        } => {
            assert_eq!(missing, vec!["text_projection.weight".to_string()]);
            assert!(unexpected.is_empty() && mismatched.is_empty());
        }
        other => panic!("expected a weights error, got {other}"),
    }
}

#[test]
fn missing_unexpected_and_misshaped_tensors_in_one_error() {
    let dir = Scratch::new("mismatch").with_config_of("sd1");
    let mut tensors: Vec<(String, Tensor)> = sd1_tensors(DType::F32)
        .into_iter()
        .filter(|(n, _)| n != "final_layer_norm.weight")
        .collect();
    for (name, t) in tensors.iter_mut() {
        if name == "encoder.layers.0.mlp.fc1.bias" {
            *t = Tensor::zeros(&[65], DType::F32, Device::Cpu).unwrap();
        }
    }
    tensors.push((
        "extra.weight".into(),
        Tensor::zeros(&[2], DType::F32, Device::Cpu).unwrap(),
    ));
    write_safetensors(&dir.0.join("model.safetensors"), &tensors);
    match ClipTextModel::from_pretrained(&dir.0, DType::F32, Device::Cpu).unwrap_err() {
        Error::Weights {
            missing,
            unexpected,
            mismatched,
            ..
        } => {
            assert_eq!(missing, vec!["final_layer_norm.weight".to_string()]);
            assert_eq!(unexpected, vec!["extra.weight".to_string()]);
            assert_eq!(mismatched.len(), 1, "{mismatched:?}");
            assert!(mismatched[0].contains("fc1.bias"), "{mismatched:?}");
        }
        other => panic!("expected a weights error, got {other}"),
    }
}

#[test]
fn a_config_for_other_shapes_lists_every_difference() {
    let dir = Scratch::new("other_config");
    std::fs::copy(
        fixture_dir("sd1").join("model.safetensors"),
        dir.0.join("model.safetensors"),
    )
    .unwrap();
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir("sd1").join("config.json")).unwrap(),
    )
    .unwrap();
    config["hidden_size"] = 64.into();
    config["num_hidden_layers"] = 3.into();
    std::fs::write(dir.0.join("config.json"), config.to_string()).unwrap();
    match ClipTextModel::from_pretrained(&dir.0, DType::F32, Device::Cpu).unwrap_err() {
        Error::Weights {
            missing,
            mismatched,
            ..
        } => {
            assert!(
                missing.iter().all(|n| n.contains("layers.2.")),
                "{missing:?}"
            );
            assert_eq!(missing.len(), 16, "{missing:?}");
            assert!(mismatched.len() > 20, "{mismatched:?}");
        }
        other => panic!("expected a weights error, got {other}"),
    }
}

fn config_error(edit: &[(&str, serde_json::Value)]) -> Error {
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_dir("sd1").join("config.json")).unwrap(),
    )
    .unwrap();
    for (k, v) in edit {
        config[*k] = v.clone();
    }
    ClipTextConfig::from_json_str(&config.to_string()).unwrap_err()
}

#[test]
fn bad_configs_name_their_key() {
    use serde_json::json;
    for (edit, key, says) in [
        (
            vec![("num_attention_heads", json!(5))],
            "num_attention_heads",
            "divide",
        ),
        (
            vec![("hidden_act", json!("relu"))],
            "hidden_act",
            "quick_gelu",
        ),
        (
            vec![("model_type", json!("clip"))],
            "model_type",
            "text_encoder",
        ),
        (vec![("model_type", json!("bert"))], "model_type", "bert"),
        (
            vec![("architectures", json!(["BertModel"]))],
            "architectures",
            "BertModel",
        ),
        (
            vec![("eos_token_id", json!([2, 3]))],
            "eos_token_id",
            "list",
        ),
        (vec![("eos_token_id", json!(-1))], "eos_token_id", "-1"),
        (
            vec![("layer_norm_eps", json!(0.0))],
            "layer_norm_eps",
            "> 0",
        ),
        (vec![("vocab_size", json!(0))], "vocab_size", "> 0"),
        (vec![("hidden_size", json!("32"))], "hidden_size", "integer"),
        (
            vec![
                ("architectures", json!(["CLIPTextModelWithProjection"])),
                ("projection_dim", json!(null)),
            ],
            "projection_dim",
            "projection_dim",
        ),
    ] {
        match config_error(&edit) {
            Error::Config { key: k, msg } => {
                assert_eq!(k, key, "{edit:?}: {msg}");
                assert!(msg.contains(says), "{edit:?}: {msg}");
            }
            other => panic!("{edit:?}: expected a config error, got {other}"),
        }
    }
    for text in ["not json", "[1, 2]"] {
        assert!(
            matches!(
                ClipTextConfig::from_json_str(text),
                Err(Error::InvalidFile { .. })
            ),
            "{text}"
        );
    }
    // A projection model refuses a config without a projection size.
    let mut c = ClipTextConfig::sd15();
    c.projection_dim = None;
    assert!(ClipTextModelWithProjection::random(&c, DType::F32, Device::Cpu, 0).is_err());
}

#[test]
fn folders_without_a_model_are_clear_errors() {
    let missing = std::env::temp_dir().join("xpu_clip_no_such_folder");
    assert!(matches!(
        ClipTextModel::from_pretrained(&missing, DType::F32, Device::Cpu),
        Err(Error::Io { .. })
    ));

    let root = Scratch::new("pipeline_root");
    std::fs::create_dir_all(root.0.join("text_encoder_2")).unwrap();
    std::fs::copy(
        fixture_dir("proj").join("config.json"),
        root.0.join("text_encoder_2/config.json"),
    )
    .unwrap();
    let e = ClipTextModel::from_pretrained(&root.0, DType::F32, Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pipeline") && e.contains("text_encoder_2"),
        "{e}"
    );

    let pickles = Scratch::new("pickles").with_config_of("sd1");
    std::fs::write(pickles.0.join("pytorch_model.bin"), b"not read").unwrap();
    let e = ClipTextModel::from_pretrained(&pickles.0, DType::F32, Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pickle") && e.contains("model.safetensors"),
        "{e}"
    );

    let truncated = Scratch::new("truncated").with_config_of("sd1");
    let bytes = std::fs::read(fixture_dir("sd1").join("model.safetensors")).unwrap();
    std::fs::write(
        truncated.0.join("model.safetensors"),
        &bytes[..bytes.len() / 2],
    )
    .unwrap();
    assert!(matches!(
        ClipTextModel::from_pretrained(&truncated.0, DType::F32, Device::Cpu),
        Err(Error::InvalidFile { .. })
    ));

    assert!(matches!(
        ClipTextModel::from_pretrained(fixture_dir("sd1"), DType::I32, Device::Cpu),
        Err(Error::UnsupportedDType { .. })
    ));
}

#[test]
fn bad_token_ids_are_errors() {
    let model =
        ClipTextModel::from_pretrained(fixture_dir("sd1"), DType::F32, Device::Cpu).unwrap();
    let run = |ids: Tensor| model.forward(&ids).unwrap_err().to_string();
    let e = run(input_ids(&[vec![998, 1000, 999]], Device::Cpu).unwrap());
    assert!(e.contains("1000") && e.contains("[0, 1]"), "{e}");
    let e = run(input_ids(&[vec![5; 78]], Device::Cpu).unwrap());
    assert!(e.contains("78") && e.contains("77"), "{e}");
    let e = run(Tensor::zeros(&[1, 7], DType::F32, Device::Cpu).unwrap());
    assert!(e.contains("i32"), "{e}");
    let e = run(Tensor::zeros(&[7], DType::I32, Device::Cpu).unwrap());
    assert!(e.contains("[batch, tokens]"), "{e}");
    let e = run(Tensor::zeros(&[1, 0], DType::I32, Device::Cpu).unwrap());
    assert!(e.contains("at least one"), "{e}");
    let e = run(Tensor::full(-1.0, &[1, 3], DType::I32, Device::Cpu).unwrap());
    assert!(e.contains("-1"), "{e}");
    let e = input_ids(&[vec![1, 2], vec![3]], Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(e.contains("same length"), "{e}");
    let e = input_ids(&[vec![u32::MAX]], Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(e.contains("i32"), "{e}");
    // The model still works after refusing them.
    model
        .forward(&input_ids(&[vec![998, 5, 999]], Device::Cpu).unwrap())
        .unwrap();
}
