//! UNet2DConditionModel's embedding options against diffusers, from the fixtures of
//! tests/fixtures/make_unet_fixtures.py: stable unCLIP's `class_embed_type: "projection"`
//! (`unet_unclip`), `"simple_projection"` with its own `time_embedding_dim` (`unet_sproj`), and
//! `unet_embeds` (`"timestep"` class labels concatenated to the time embedding,
//! `timestep_post_act`, `time_embedding_act_fn`, scale-shift ResNets, `encoder_hid_proj`, a
//! `UNetMidBlock2D`);
//! `unet_sproj` also has a `"fourier"` time projection and per-layer transformer depths.
//! `"identity"` has no parameters: it is checked against the time embedding plus the labels.
//! Every wrong class-label input is an error that says what was expected.

use crate::common;
use common::unet_fixture::{added, check_blocks, check_model, dtypes, load, Io};
use common::{devices, randn, values};
use xpu::models::unet::{
    AddedCond, ClassEmbedType, MidBlockType, TimeEmbeddingType, UNet2DConditionModel, UNetConfig,
};
use xpu::{DType, Device, Tensor};

#[test]
fn unclip_model_matches_diffusers() {
    for device in devices() {
        for dtype in dtypes(device, DType::BF16) {
            check_model("unclip", device, dtype);
        }
        check_blocks("unclip", device);
    }
}

#[test]
fn embeds_model_matches_diffusers() {
    for device in devices() {
        for dtype in dtypes(device, DType::F16) {
            check_model("embeds", device, dtype);
        }
        check_blocks("embeds", device);
    }
}

#[test]
fn sproj_model_matches_diffusers() {
    for device in devices() {
        for dtype in dtypes(device, DType::F16) {
            check_model("sproj", device, dtype);
        }
        check_blocks("sproj", device);
    }
}

#[test]
fn fixture_configs_parse_to_their_options() {
    let unclip = load("unclip", DType::F32, Device::Cpu);
    assert_eq!(
        unclip.config().class_embed_type,
        Some(ClassEmbedType::Projection { input_dim: 20 })
    );
    let embeds = load("embeds", DType::F32, Device::Cpu);
    let c = embeds.config();
    assert_eq!(c.class_embed_type, Some(ClassEmbedType::Timestep));
    assert!(c.class_embeddings_concat && c.resnet_scale_shift);
    assert_eq!(c.encoder_hid_dim, Some(20));
    assert_eq!(c.blocks_time_embed_dim(), 2 * c.time_embed_dim());
    assert_eq!(c.mid_block_type, Some(MidBlockType::UNetMidBlock2D));
    let mid = embeds.mid_block().unwrap();
    assert_eq!((mid.resnets().len(), mid.attentions().len()), (1, 0));
    assert_eq!(mid.kind(), MidBlockType::UNetMidBlock2D);
    let sproj = load("sproj", DType::F32, Device::Cpu);
    let c = sproj.config();
    assert_eq!(
        c.class_embed_type,
        Some(ClassEmbedType::SimpleProjection { input_dim: 12 })
    );
    // The asymmetrical depths: down [1, [2, 1]], up [[1, 3, 2], 1], mid from the last level.
    assert_eq!(c.transformer_layers_per_block, vec![vec![1, 1], vec![2, 1]]);
    assert_eq!(c.up_transformer_depths(0), vec![1, 3, 2]);
    assert_eq!(c.up_transformer_depths(1), vec![1, 1, 1]);
    assert_eq!(c.mid_transformer_depth(), 2);
    assert_eq!(c.time_embedding_type, TimeEmbeddingType::Fourier);
    assert_eq!((c.time_embed_dim(), c.timestep_input_dim()), (40, 40));
    let depths: Vec<usize> = sproj.up_blocks()[0]
        .attentions()
        .iter()
        .map(|a| a.blocks().len())
        .collect();
    assert_eq!(depths, [1, 3, 2]);
}

fn err(r: xpu::Result<Tensor>) -> String {
    match r {
        Ok(t) => panic!("expected an error, got a tensor of shape {:?}", t.shape()),
        Err(e) => e.to_string(),
    }
}

fn with_labels(labels: Tensor) -> AddedCond {
    AddedCond {
        class_labels: Some(labels),
        ..AddedCond::default()
    }
}

/// `"identity"`: the labels are added to the time embedding as they are (or concatenated).
#[test]
fn identity_class_labels_are_the_embedding() {
    for device in devices() {
        for concat in [false, true] {
            let config = UNetConfig {
                class_embed_type: Some(ClassEmbedType::Identity),
                class_embeddings_concat: concat,
                ..UNetConfig::tiny()
            };
            let unet = UNet2DConditionModel::random(&config, DType::F32, device, 5).unwrap();
            let d = config.time_embed_dim();
            let labels = randn(&[2, d], DType::F32, 11).to(device).unwrap();
            let t = Tensor::from_vec(vec![10f32, 700.0], &[2], Device::Cpu).unwrap();
            let emb = unet.embed(&t, 2, &with_labels(labels.clone())).unwrap();
            let temb = unet.time_embed(&t, 2).unwrap();
            let want = if concat {
                Tensor::cat(&[&temb, &labels], 1).unwrap()
            } else {
                temb.add(&labels).unwrap()
            };
            assert_eq!(emb.shape(), [2, config.blocks_time_embed_dim()]);
            common::assert_close("identity emb", &values(&emb), &values(&want), 0.0, 0.0);
            // The whole model runs with it (the ResNets take the concatenated width).
            let sample = randn(&[2, 4, 8, 8], DType::F32, 1).to(device).unwrap();
            let ehs = randn(&[2, 3, 32], DType::F32, 2).to(device).unwrap();
            let y = unet
                .forward_with_added_cond(&sample, &t, &ehs, &with_labels(labels))
                .unwrap();
            assert_eq!(y.shape(), [2, 4, 8, 8]);
        }
    }
}

#[test]
fn class_label_inputs_are_checked() {
    let cpu = Device::Cpu;
    let io = Io::open("unclip");
    let unclip = load("unclip", DType::F32, cpu);
    let (sample, t, ehs) = (
        io.get("sample", DType::F32, cpu),
        io.get("timestep", DType::F32, cpu),
        io.get("encoder_hidden_states", DType::F32, cpu),
    );
    let e = err(unclip.forward(&sample, &t, &ehs));
    assert!(e.contains("class_labels") && e.contains("[B, 20]"), "{e}");
    for shape in [vec![2, 19], vec![3, 20], vec![20]] {
        let n = shape.iter().product();
        let bad = Tensor::from_vec(vec![0.5f32; n], &shape, cpu).unwrap();
        let e = err(unclip.forward_with_added_cond(&sample, &t, &ehs, &with_labels(bad)));
        assert!(e.contains("[2, 20]"), "{shape:?}: {e}");
    }
    let labels = io.get("class_labels", DType::F32, cpu);
    let half = labels.to_dtype(DType::F16).unwrap();
    let e = err(unclip.forward_with_added_cond(&sample, &t, &ehs, &with_labels(half)));
    assert!(e.contains("f16") || e.contains("F16"), "{e}");
    // One row for the whole batch is broadcast, as diffusers' addition does.
    let row = labels.narrow(0, 1, 1).unwrap();
    let one = unclip
        .forward_with_added_cond(&sample, &t, &ehs, &with_labels(row.clone()))
        .unwrap();
    let both = unclip
        .forward_with_added_cond(
            &sample,
            &t,
            &ehs,
            &with_labels(Tensor::cat(&[&row, &row], 0).unwrap()),
        )
        .unwrap();
    assert_eq!(values(&one), values(&both));
    let mut wrong = added(&io, DType::F32, cpu);
    wrong.text_embeds = Some(Tensor::zeros(&[2, 4], DType::F32, cpu).unwrap());
    let e = err(unclip.forward_with_added_cond(&sample, &t, &ehs, &wrong));
    assert!(e.contains("text_embeds"), "{e}");

    // "timestep" labels are timesteps: float or i32, one per sample or one for the batch.
    let io = Io::open("embeds");
    let embeds = load("embeds", DType::F32, cpu);
    let (sample, t) = (
        io.get("sample", DType::F32, cpu),
        io.get("timestep", DType::F32, cpu),
    );
    let ehs = io.get("encoder_hidden_states", DType::F32, cpu);
    let e = err(embeds.forward(&sample, &t, &ehs));
    assert!(e.contains("timesteps"), "{e}");
    let e = err(embeds.forward_with_added_cond(
        &sample,
        &t,
        &ehs,
        &with_labels(Tensor::zeros(&[3], DType::F32, cpu).unwrap()),
    ));
    assert!(e.contains("timestep"), "{e}");
    let as_i32 = io.get("class_labels", DType::I32, cpu);
    let as_f32 = as_i32.to_dtype(DType::F32).unwrap();
    let a = embeds
        .forward_with_added_cond(&sample, &t, &ehs, &with_labels(as_i32))
        .unwrap();
    let b = embeds
        .forward_with_added_cond(&sample, &t, &ehs, &with_labels(as_f32))
        .unwrap();
    assert_eq!(values(&a), values(&b));
    // The text states have encoder_hid_dim's width, not cross_attention_dim's.
    let wide = Tensor::zeros(&[2, 6, 24], DType::F32, cpu).unwrap();
    let labels = added(&io, DType::F32, cpu);
    let e = err(embeds.forward_with_added_cond(&sample, &t, &wide, &labels));
    assert!(e.contains("encoder_hid_dim") && e.contains("20"), "{e}");
}

fn config_err(json: &str) -> (String, String) {
    match UNetConfig::from_json_str(json) {
        Err(xpu::Error::Config { key, msg }) => (key, msg),
        other => panic!("{json}: expected Error::Config, got {other:?}"),
    }
}

#[test]
fn embedding_options_that_disagree_are_config_errors() {
    let cases = [
        // A projection needs its input width.
        (
            r#"{"class_embed_type": "projection"}"#,
            "projection_class_embeddings_input_dim",
        ),
        (
            r#"{"class_embed_type": "simple_projection", "projection_class_embeddings_input_dim": 0}"#,
            "projection_class_embeddings_input_dim",
        ),
        // Concatenation without a class embedding, or with SDXL's added embedding.
        (
            r#"{"class_embeddings_concat": true}"#,
            "class_embeddings_concat",
        ),
        (
            r#"{"class_embeddings_concat": true, "class_embed_type": "timestep",
                "addition_embed_type": "text_time", "addition_time_embed_dim": 8,
                "projection_class_embeddings_input_dim": 56}"#,
            "class_embeddings_concat",
        ),
        // encoder_hid_dim_type without encoder_hid_dim; one projection width for all levels.
        (
            r#"{"encoder_hid_dim_type": "text_proj"}"#,
            "encoder_hid_dim",
        ),
        (
            r#"{"encoder_hid_dim": 16, "cross_attention_dim": [768, 1024, 1024, 1024]}"#,
            "cross_attention_dim",
        ),
        (r#"{"class_embed_type": 3}"#, "class_embed_type"),
        // Per-layer depths need the up blocks' list, and one depth per layer in each.
        (
            r#"{"layers_per_block": 2, "transformer_layers_per_block": [1, 1, 1, [2, 1]]}"#,
            "reverse_transformer_layers_per_block",
        ),
        (
            r#"{"layers_per_block": 2, "transformer_layers_per_block": [1, 1, 1, [2, 1, 1]],
                "reverse_transformer_layers_per_block": 1}"#,
            "transformer_layers_per_block",
        ),
        (
            r#"{"layers_per_block": 2, "transformer_layers_per_block": [1, 1, 1, [2, 1]],
                "reverse_transformer_layers_per_block": [[1, 2], 1, 1, 1]}"#,
            "reverse_transformer_layers_per_block",
        ),
        (
            r#"{"reverse_transformer_layers_per_block": [1, 1, 0, 1]}"#,
            "reverse_transformer_layers_per_block",
        ),
        // A Fourier projection splits its width into sin and cos halves.
        (
            r#"{"time_embedding_type": "fourier", "time_embedding_dim": 41}"#,
            "time_embedding_dim",
        ),
    ];
    for (json, key) in cases {
        let (k, msg) = config_err(json);
        assert_eq!(k, key, "{json}: {msg}");
    }
    // encoder_hid_dim alone means "text_proj", as in diffusers.
    let c = UNetConfig::from_json_str(r#"{"encoder_hid_dim": 16}"#).unwrap();
    assert_eq!((c.encoder_hid_dim, c.encoder_states_dim()), (Some(16), 16));
}

/// A stable-unCLIP-shaped SD 2.1 config (`class_embed_type: "projection"`, 2048-wide labels)
/// has diffusers' parameters: 690 tensors, 870,173,124 values (diffusers 0.42).
#[test]
fn unclip_config_has_diffusers_parameters() {
    let json = r#"{"act_fn": "silu", "attention_head_dim": [5, 10, 20, 20],
        "block_out_channels": [320, 640, 1280, 1280], "class_embed_type": "projection",
        "cross_attention_dim": 1024, "num_class_embeds": null,
        "projection_class_embeddings_input_dim": 2048, "resnet_time_scale_shift": "default",
        "sample_size": 96, "timestep_post_act": null, "upcast_attention": true,
        "use_linear_projection": true}"#;
    let c = UNetConfig::from_json_str(json).unwrap();
    assert_eq!(
        UNetConfig {
            class_embed_type: None,
            ..c.clone()
        },
        UNetConfig::sd21()
    );
    let params = UNet2DConditionModel::parameter_shapes(&c).unwrap();
    let values: usize = params
        .iter()
        .map(|(_, s)| s.iter().product::<usize>())
        .sum();
    assert_eq!((params.len(), values), (690, 870_173_124));
    let class: Vec<&str> = params
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| n.starts_with("class_embedding."))
        .collect();
    assert_eq!(class.len(), 4, "{class:?}");
}
