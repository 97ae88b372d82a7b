//! The UNet fixtures written by tests/fixtures/make_unet_fixtures.py (`tests/fixtures/unet_*`):
//! their recorded inputs and outputs, and the whole-model and block-level comparisons with
//! diffusers that the UNet parity tests share (f32 within 1e-3 of the output's largest
//! magnitude, f16/bf16 within 3e-2).
#![allow(dead_code)]

use std::path::PathBuf;

use super::values;
use xpu::models::unet::{AddedCond, UNet2DConditionModel};
use xpu::nn::WeightStore;
use xpu::{DType, Device, Tensor};

pub fn fixture_dir(name: &str) -> PathBuf {
    super::repo_root()
        .join("tests/fixtures")
        .join(format!("unet_{name}"))
}

/// A fixture's recorded inputs and outputs.
pub struct Io(pub WeightStore);

impl Io {
    pub fn open(name: &str) -> Io {
        Io(WeightStore::open(fixture_dir(name).join("io.safetensors")).unwrap())
    }

    pub fn has(&self, key: &str) -> bool {
        self.0.shape(key).is_some()
    }

    pub fn get(&self, key: &str, dtype: DType, device: Device) -> Tensor {
        let stored = self
            .0
            .dtype(key)
            .unwrap_or_else(|| panic!("fixture has no {key}"));
        let dtype = if stored == DType::I32 { stored } else { dtype };
        self.0.tensor(key, dtype, device).unwrap()
    }

    pub fn f32(&self, key: &str) -> Tensor {
        self.get(key, DType::F32, Device::Cpu)
    }
}

pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-3,
        _ => 3e-2,
    }
}

/// Asserts `max |got - want| <= tol * max |want|`.
pub fn assert_rel(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w) = (values(got), values(want));
    let scale = w.iter().fold(0f64, |m, x| m.max(x.abs()));
    let err = g
        .iter()
        .zip(&w)
        .fold(0f64, |m, (a, b)| m.max((a - b).abs()));
    eprintln!(
        "{what}: max abs error {err:.2e} = {:.2e} of max |y| {scale:.3}",
        err / scale
    );
    assert!(
        err <= tol * scale,
        "{what}: max abs error {err:.3e} > {tol:e} * max |y| {scale:.3e}"
    );
}

pub fn load(name: &str, dtype: DType, device: Device) -> UNet2DConditionModel {
    UNet2DConditionModel::from_pretrained(fixture_dir(name), dtype, device).unwrap()
}

/// The fixture's extra conditions: SDXL's `text_embeds` and `time_ids`, `class_labels` (i32
/// where stored so, else in `dtype`) and `timestep_cond`, where it has them.
pub fn added(io: &Io, dtype: DType, device: Device) -> AddedCond {
    let get = |k: &str, dt: DType| io.has(k).then(|| io.get(k, dt, device));
    AddedCond {
        text_embeds: get("text_embeds", dtype),
        time_ids: get("time_ids", DType::F32),
        class_labels: get("class_labels", dtype),
        timestep_cond: get("timestep_cond", dtype),
    }
}

/// The whole model on `device` in `dtype` against diffusers' f32 output.
pub fn check_model(name: &str, device: Device, dtype: DType) {
    let io = Io::open(name);
    let unet = load(name, dtype, device);
    let (sample, t, ehs) = (
        io.get("sample", dtype, device),
        // Timesteps stay f32 as diffusers keeps them (a bf16 321 would be 320).
        io.get("timestep", DType::F32, device),
        io.get("encoder_hidden_states", dtype, device),
    );
    let y = unet
        .forward_with_added_cond(&sample, &t, &ehs, &added(&io, dtype, device))
        .unwrap();
    assert_eq!(y.dtype(), dtype);
    assert_eq!(y.device(), device);
    let what = format!("{name} {device} {dtype}");
    assert_rel(&what, &y, &io.f32("out"), tolerance(dtype));
}

/// Every float dtype on Cpu; on Xpu (lavapipe in CI is slow) f32 and one 16-bit dtype per
/// fixture, so both 16-bit paths run on each device.
pub fn dtypes(device: Device, half: DType) -> Vec<DType> {
    match device {
        Device::Cpu => vec![DType::F32, DType::F16, DType::BF16],
        Device::Xpu => vec![DType::F32, half],
    }
}

pub fn check_blocks(name: &str, device: Device) {
    let io = Io::open(name);
    let unet = load(name, DType::F32, device);
    let dt = DType::F32;
    let get = |k: &str| io.get(k, dt, device);
    let tol = tolerance(dt);
    // The blocks receive the text states after `encoder_hid_proj` where the model has one.
    let ehs = if io.has("encoder_hid_proj.out") {
        get("encoder_hid_proj.out")
    } else {
        get("encoder_hidden_states")
    };
    let b = ehs.shape()[0];
    let tag = |k: &str| format!("{name} {device} {k}");

    let t_emb = unet
        .time_embedding()
        .project(&get("timestep"), b, dt)
        .unwrap();
    assert_rel(&tag("time_proj"), &t_emb, &io.f32("time_embedding.in"), tol);
    let temb = unet.time_embed(&get("timestep"), b).unwrap();
    assert_rel(
        &tag("time_embedding"),
        &temb,
        &io.f32("time_embedding.out"),
        tol,
    );
    let full = unet
        .embed(&get("timestep"), b, &added(&io, dt, device))
        .unwrap();
    assert_rel(&tag("emb"), &full, &io.f32("temb"), tol);
    let temb = get("temb");

    let mut checked = 0;
    for (i, block) in unet.down_blocks().iter().enumerate() {
        let p = format!("down_blocks.{i}");
        let r = format!("{p}.resnets.0");
        let y = block.resnets()[0]
            .forward(&get(&format!("{r}.in")), &temb)
            .unwrap();
        assert_rel(&tag(&r), &y, &io.f32(&format!("{r}.out")), tol);
        if let Some(attn) = block.attentions().first() {
            let a = format!("{p}.attentions.0");
            let y = attn.forward(&get(&format!("{a}.in")), &ehs).unwrap();
            assert_rel(&tag(&a), &y, &io.f32(&format!("{a}.out")), tol);
            checked += 1;
        }
        let (y, skips) = block
            .forward(&get(&format!("{p}.in")), &temb, Some(&ehs))
            .unwrap();
        assert_rel(&tag(&p), &y, &io.f32(&format!("{p}.out")), tol);
        for (j, s) in skips.iter().enumerate() {
            let k = format!("{p}.res.{j}");
            assert_rel(&tag(&k), s, &io.f32(&k), tol);
        }
        assert!(
            !io.has(&format!("{p}.res.{}", skips.len())),
            "{p}: skip count"
        );
        checked += 1;
    }
    let mid = unet.mid_block().unwrap();
    let r = "mid_block.resnets.0";
    let y = mid.resnets()[0]
        .forward(&get(&format!("{r}.in")), &temb)
        .unwrap();
    assert_rel(&tag(r), &y, &io.f32(&format!("{r}.out")), tol);
    // A UNetMidBlock2D has no attention; diffusers' then recorded none either.
    let a = "mid_block.attentions.0";
    assert_eq!(
        mid.attentions().len(),
        usize::from(io.has(&format!("{a}.in")))
    );
    if let Some(attn) = mid.attentions().first() {
        let y = attn.forward(&get(&format!("{a}.in")), &ehs).unwrap();
        assert_rel(&tag(a), &y, &io.f32(&format!("{a}.out")), tol);
    }
    let y = mid.forward(&get("mid_block.in"), &temb, &ehs).unwrap();
    assert_rel(&tag("mid_block"), &y, &io.f32("mid_block.out"), tol);
    for (i, block) in unet.up_blocks().iter().enumerate() {
        let p = format!("up_blocks.{i}");
        let r = format!("{p}.resnets.0");
        let y = block.resnets()[0]
            .forward(&get(&format!("{r}.in")), &temb)
            .unwrap();
        assert_rel(&tag(&r), &y, &io.f32(&format!("{r}.out")), tol);
        if let Some(attn) = block.attentions().first() {
            let a = format!("{p}.attentions.0");
            let y = attn.forward(&get(&format!("{a}.in")), &ehs).unwrap();
            assert_rel(&tag(&a), &y, &io.f32(&format!("{a}.out")), tol);
        }
        let skips: Vec<Tensor> = (0..block.resnets().len())
            .map(|j| get(&format!("{p}.res.{j}")))
            .collect();
        let size_key = format!("{p}.upsample_size");
        let size = io.has(&size_key).then(|| {
            let s = values(&io.get(&size_key, DType::I32, Device::Cpu));
            (s[0] as usize, s[1] as usize)
        });
        let y = block
            .forward(&get(&format!("{p}.in")), &skips, &temb, Some(&ehs), size)
            .unwrap();
        assert_rel(&tag(&p), &y, &io.f32(&format!("{p}.out")), tol);
        checked += 1;
    }
    assert!(checked >= 4, "{name}: too few blocks checked");
}
