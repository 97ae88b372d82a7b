//! Cpu UNets hold their convolution weights only as packs where the weight can come back exactly
//! (seeded random models draw it again; 16-bit checkpoints read into f32 keep a 16-bit copy):
//! converting or moving such a model must give the same weights as building it directly, which
//! the outputs show bit for bit.

use crate::common;
use common::{values, xpu};
use xpu::models::unet::{UNet2DConditionModel, UNetConfig};
use xpu::{DType, Device, Tensor};

/// `(sample, timestep, context)` for a tiny UNet, in `dtype` on `device`.
fn inputs(dtype: DType, device: Device) -> (Tensor, Tensor, Tensor) {
    let x = Tensor::randn(&[2, 4, 8, 8], DType::F32, Device::Cpu, 1).unwrap();
    let ctx = Tensor::randn(&[2, 5, 32], DType::F32, Device::Cpu, 2).unwrap();
    let t = Tensor::from_vec(vec![10.0f32, 700.0], &[2], Device::Cpu).unwrap();
    let on = |v: &Tensor| v.to_dtype(dtype).unwrap().to(device).unwrap();
    (on(&x), t.to(device).unwrap(), on(&ctx))
}

fn output(m: &UNet2DConditionModel) -> Vec<f64> {
    let (x, t, ctx) = inputs(m.dtype(), m.device());
    values(&m.forward(&x, &t, &ctx).unwrap())
}

#[test]
fn random_cpu_models_convert_and_move_like_models_drawn_there() {
    let cfg = UNetConfig::tiny();
    let random = |dtype, device| UNet2DConditionModel::random(&cfg, dtype, device, 7).unwrap();
    let m = random(DType::F32, Device::Cpu);
    let want = output(&m);
    for dtype in [DType::BF16, DType::F16] {
        assert_eq!(
            output(&m.to_dtype(dtype).unwrap()),
            output(&random(dtype, Device::Cpu)),
            "Cpu f32 -> {dtype}"
        );
    }
    // Converting left no copies behind: the model still computes the same.
    assert_eq!(output(&m), want);
    if xpu() {
        let moved = m.to(Device::Xpu).unwrap();
        assert_eq!(
            output(&moved),
            output(&random(DType::F32, Device::Xpu)),
            "Cpu -> Xpu"
        );
        assert_eq!(
            output(&moved.to(Device::Cpu).unwrap()),
            want,
            "Cpu -> Xpu -> Cpu"
        );
    }
}

#[test]
fn sixteen_bit_checkpoints_read_into_f32_convert_and_move_exactly() {
    let file =
        common::repo_root().join("tests/fixtures/unet_sd1/diffusion_pytorch_model.safetensors");
    let cfg = UNetConfig::from_file(file.with_file_name("config.json")).unwrap();
    let load =
        |dtype, device| UNet2DConditionModel::from_safetensors(&cfg, &file, dtype, device).unwrap();
    let m = load(DType::F32, Device::Cpu);
    let want = output(&m);
    assert_eq!(
        output(&m.to_dtype(DType::F16).unwrap()),
        output(&load(DType::F16, Device::Cpu)),
        "f16 file: f32 -> f16"
    );
    assert_eq!(output(&m), want);
    if xpu() {
        assert_eq!(
            output(&m.to(Device::Xpu).unwrap()),
            output(&load(DType::F32, Device::Xpu)),
            "f16 file: Cpu -> Xpu"
        );
    }
}
