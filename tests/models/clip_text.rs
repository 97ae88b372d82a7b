//! CLIP text encoders (`xpu::models::clip`) against transformers, and Xpu against Cpu.
//!
//! Fixtures: tests/fixtures/make_clip_text_fixtures.py (sd1: quick GELU, argmax pooling,
//! transformers 5 names; sd2: GELU, 3 layers, the published `text_model.` layout with an int64
//! `position_ids`; proj: with projection, pooled at the first end token, fp16 sharded variant),
//! each at sequence lengths 1, 7 and 77 with several rows (padding, end tokens at different
//! places, a row without one). References are computed in float64.
//!
//! Tolerances (max abs error over max |reference|; measured worst cases in brackets):
//! - f32, Cpu or Xpu, vs transformers and Xpu vs Cpu: 5e-6 [4.7e-7; 7.4e-7 Xpu vs Cpu].
//! - f16 vs the f32 reference, and Xpu vs Cpu in f16: 5e-3 [1.1e-3; 1.0e-3] (weights and every
//!   activation rounded to 11 bits of mantissa).
//! - bf16 likewise: 3e-2 [1.2e-2; 8.9e-3] (8 bits of mantissa; the devices round intermediate
//!   results at different points).

use crate::clip_text_common;
use crate::common;
use clip_text_common::{assert_rel, assert_same, fixture_dir, named, Encoder, Io, LENGTHS};
use xpu::models::clip::{input_ids, ClipTextConfig, ClipTextModel, ClipTextModelWithProjection};
use xpu::{DType, Device, Tensor};

const FIXTURES: [&str; 3] = ["sd1", "sd2", "proj"];

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 5e-6,
        DType::F16 => 5e-3,
        _ => 3e-2,
    }
}

/// Every output of fixture `name` in `dtype` on `device` against transformers.
fn check_against_reference(name: &str, dtype: DType, device: Device, tol: f64) {
    let io = Io::open(name);
    let model = Encoder::load(name, dtype, device);
    for len in LENGTHS {
        let out = model.run(&io.ids(len, device));
        for (key, got) in named(&out) {
            let what = format!("{name} {dtype} {device:?} L={len} {key}");
            assert_eq!(got.dtype(), dtype, "{what}");
            assert_eq!(got.device(), device, "{what}");
            assert_rel(&what, &got, &io.out(key, len), tol);
        }
    }
}

#[test]
fn cpu_f32_matches_transformers() {
    for name in FIXTURES {
        check_against_reference(name, DType::F32, Device::Cpu, tolerance(DType::F32));
    }
}

#[test]
fn cpu_half_precision_is_close_to_transformers() {
    for dtype in [DType::F16, DType::BF16] {
        for name in FIXTURES {
            check_against_reference(name, dtype, Device::Cpu, tolerance(dtype));
        }
    }
}

#[test]
fn xpu_f32_matches_transformers() {
    if !common::xpu() {
        return;
    }
    for name in FIXTURES {
        check_against_reference(name, DType::F32, Device::Xpu, tolerance(DType::F32));
    }
}

#[test]
fn xpu_matches_cpu_in_every_dtype() {
    if !common::xpu() {
        return;
    }
    for dtype in common::FLOATS {
        for name in FIXTURES {
            let io = Io::open(name);
            let cpu = Encoder::load(name, dtype, Device::Cpu);
            // Loaded straight onto the Xpu, and moved there from the Cpu: the same weights.
            let loaded = Encoder::load(name, dtype, Device::Xpu);
            let moved = cpu.to(Device::Xpu);
            for len in LENGTHS {
                let want = named(&cpu.run(&io.ids(len, Device::Cpu)));
                let ids = io.ids(len, Device::Xpu);
                let (a, b) = (named(&loaded.run(&ids)), named(&moved.run(&ids)));
                for (((key, w), (_, g)), (_, m)) in want.iter().zip(&a).zip(&b) {
                    let what = format!("{name} {dtype} L={len} {key}");
                    assert_eq!(g.device(), Device::Xpu, "{what}");
                    assert_rel(&format!("{what} xpu"), g, w, tolerance(dtype));
                    assert_same(&format!("{what} loaded vs moved"), m, g);
                }
            }
        }
    }
}

#[test]
fn clip_skip_states_match_diffusers() {
    // diffusers' SD 1.x clip skip: final_layer_norm(hidden_states[-(skip + 1)]).
    let io = Io::open("sd1");
    let model =
        ClipTextModel::from_pretrained(fixture_dir("sd1"), DType::F32, Device::Cpu).unwrap();
    for len in LENGTHS {
        let h = model.hidden_state(&io.ids(len, Device::Cpu), -2).unwrap();
        let normed = model.final_layer_norm(&h).unwrap();
        assert_rel(
            &format!("sd1 L={len} skip_normed"),
            &normed,
            &io.out("skip_normed", len),
            tolerance(DType::F32),
        );
    }
}

#[test]
fn hidden_state_accessors_agree() {
    let io = Io::open("sd2");
    let model =
        ClipTextModel::from_pretrained(fixture_dir("sd2"), DType::F32, Device::Cpu).unwrap();
    let ids = io.ids(7, Device::Cpu);
    let all = model.hidden_states(&ids).unwrap();
    assert_eq!(all.len(), 4, "the embeddings and 3 layers");
    let full = model.forward_with_hidden_state(&ids, -2).unwrap();
    for (index, expect) in [(-2isize, 2usize), (2, 2), (0, 0), (-4, 0), (-1, 3), (3, 3)] {
        let h = model.hidden_state(&ids, index).unwrap();
        assert_same(&format!("hidden_state({index})"), &h, &all[expect]);
        let f = model.forward_with_hidden_state(&ids, index).unwrap();
        assert_same(
            &format!("forward_with_hidden_state({index})"),
            f.hidden_state.as_ref().unwrap(),
            &all[expect],
        );
    }
    assert_same("penultimate", full.hidden_state.as_ref().unwrap(), &all[2]);
    let last = model.final_layer_norm(&all[3]).unwrap();
    assert_same(
        "final norm of the last state",
        &last,
        &full.last_hidden_state,
    );
    assert!(model.forward(&ids).unwrap().hidden_state.is_none());
    for bad in [4isize, -5, 100, isize::MIN] {
        let e = model.hidden_state(&ids, bad).unwrap_err().to_string();
        assert!(e.contains("out of range"), "{bad}: {e}");
    }
}

#[test]
fn rows_do_not_depend_on_the_rest_of_the_batch() {
    let io = Io::open("proj");
    let model =
        ClipTextModelWithProjection::from_pretrained(fixture_dir("proj"), DType::F32, Device::Cpu)
            .unwrap();
    let ids = io.ids(77, Device::Cpu);
    let batch = model.forward(&ids).unwrap();
    for row in 0..ids.shape()[0] {
        let one = model.forward(&ids.narrow(0, row, 1).unwrap()).unwrap();
        let pick = |t: &Tensor| t.narrow(0, row, 1).unwrap();
        assert_rel(
            &format!("row {row} last_hidden_state"),
            &one.last_hidden_state,
            &pick(&batch.last_hidden_state),
            1e-6,
        );
        assert_rel(
            &format!("row {row} text_embeds"),
            one.text_embeds.as_ref().unwrap(),
            &pick(batch.text_embeds.as_ref().unwrap()),
            1e-6,
        );
    }
}

#[test]
fn pooling_positions_follow_transformers() {
    // sd1 (eos_token_id 2): the first position of the largest id; proj (700): the first 700,
    // or 0 without one.
    let sd1 = ClipTextModel::random(&tiny(2), DType::F32, Device::Cpu, 1).unwrap();
    let proj = ClipTextModel::random(&tiny(700), DType::F32, Device::Cpu, 1).unwrap();
    let rows = [
        vec![699, 5, 999, 999, 3],
        vec![699, 800, 700, 900, 700],
        vec![699, 1, 2, 3, 4],
    ];
    let ids = input_ids(&rows, Device::Cpu).unwrap();
    assert_eq!(sd1.eos_positions(&ids).unwrap(), vec![2, 3, 0]);
    assert_eq!(proj.eos_positions(&ids).unwrap(), vec![0, 2, 0]);
    let out = proj.forward(&ids).unwrap();
    let h = &out.last_hidden_state;
    let want = Tensor::cat(
        &[
            &h.narrow(0, 0, 1).unwrap().narrow(1, 0, 1).unwrap(),
            &h.narrow(0, 1, 1).unwrap().narrow(1, 2, 1).unwrap(),
            &h.narrow(0, 2, 1).unwrap().narrow(1, 0, 1).unwrap(),
        ],
        0,
    )
    .unwrap()
    .reshape(&[3, 32])
    .unwrap();
    assert_same("pooled rows", &out.pooled_output, &want);
}

fn tiny(eos: u32) -> ClipTextConfig {
    let text = format!(
        r#"{{"architectures": ["CLIPTextModel"], "vocab_size": 1000, "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "hidden_act": "gelu_new", "eos_token_id": {eos}, "projection_dim": 8}}"#
    );
    ClipTextConfig::from_json_str(&text).unwrap()
}

#[test]
fn random_models_are_seeded_and_the_same_on_every_device() {
    let config = tiny(700);
    let ids = input_ids(&[vec![699, 17, 801, 700, 0, 0, 0]], Device::Cpu).unwrap();
    let a = ClipTextModelWithProjection::random(&config, DType::F32, Device::Cpu, 7).unwrap();
    let b = ClipTextModelWithProjection::random(&config, DType::F32, Device::Cpu, 7).unwrap();
    let c = ClipTextModelWithProjection::random(&config, DType::F32, Device::Cpu, 8).unwrap();
    let (oa, ob, oc) = (
        a.forward(&ids).unwrap(),
        b.forward(&ids).unwrap(),
        c.forward(&ids).unwrap(),
    );
    let (ea, eb, ec) = (
        oa.text_embeds.unwrap(),
        ob.text_embeds.unwrap(),
        oc.text_embeds.unwrap(),
    );
    assert_eq!(ea.shape(), &[1, 8]);
    assert_same("same seed", &ea, &eb);
    assert_ne!(common::values(&ea), common::values(&ec), "another seed");
    if common::xpu() {
        let x = ClipTextModelWithProjection::random(&config, DType::F32, Device::Xpu, 7).unwrap();
        let ex = x.forward(&ids.to(Device::Xpu).unwrap()).unwrap();
        assert_rel("random on Xpu", ex.text_embeds.as_ref().unwrap(), &ea, 1e-5);
    }
}

#[test]
fn presets_describe_the_stable_diffusion_encoders() {
    let count = |c: &ClipTextConfig| c.num_hidden_layers * 16 + 4;
    for (c, hidden, layers) in [
        (ClipTextConfig::sd15(), 768, 12),
        (ClipTextConfig::sd21(), 1024, 23),
        (ClipTextConfig::sdxl_1(), 768, 12),
        (ClipTextConfig::sdxl_2(), 1280, 32),
    ] {
        c.validate().unwrap();
        assert_eq!((c.hidden_size, c.num_hidden_layers), (hidden, layers));
        assert_eq!(c.head_dim(), 64);
        let shapes = ClipTextModel::parameter_shapes(&c).unwrap();
        assert_eq!(shapes.len(), count(&c));
        assert_eq!(
            shapes[0],
            (
                "text_model.embeddings.token_embedding.weight".to_string(),
                vec![49408, hidden]
            )
        );
    }
    let with = ClipTextModelWithProjection::parameter_shapes(&ClipTextConfig::sdxl_2()).unwrap();
    assert_eq!(
        with.last().unwrap(),
        &("text_projection.weight".to_string(), vec![1280, 1280])
    );
}

#[test]
fn dtype_conversions_round_trip() {
    // A model converted to bf16 and back holds bf16-rounded weights: exactly what loading the
    // f32 file in bf16 gives, converted to f32.
    let dir = fixture_dir("sd1");
    let f32_model = ClipTextModel::from_pretrained(&dir, DType::F32, Device::Cpu).unwrap();
    let via = f32_model.to_dtype(DType::BF16).unwrap();
    let loaded = ClipTextModel::from_pretrained(&dir, DType::BF16, Device::Cpu).unwrap();
    assert_eq!(via.dtype(), DType::BF16);
    let ids = Io::open("sd1").ids(7, Device::Cpu);
    assert_same(
        "bf16 via to_dtype vs loaded",
        &via.forward(&ids).unwrap().last_hidden_state,
        &loaded.forward(&ids).unwrap().last_hidden_state,
    );
    let back = via.to_dtype(DType::F32).unwrap();
    assert_eq!(back.dtype(), DType::F32);
    assert!(back.to_dtype(DType::I32).is_err());
}
