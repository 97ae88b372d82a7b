//! One SD UNet step (batch 2 — classifier-free guidance —, 64×64 latents, 77 tokens) on both
//! libraries, from the same diffusers `unet` folder and on the same inputs.
//!
//! candle builds the UNet from its own presets, so the folder must have SD 1.x's architecture
//! (`cross_attention_dim` 768: candle's `v1_5`) or SD 2.x's (1024: `v2_1`); the xpu side reads
//! the folder's `config.json`, and the step's outputs are compared.

use std::path::Path;

use candle_core::Device as CDevice;
use candle_transformers::models::stable_diffusion::StableDiffusionConfig;
use xpu::models::unet::UNet2DConditionModel;
use xpu::{DType, Device, Tensor};

use crate::{candle_dtype, emit, median_ms, pair, AnyResult, Row};

/// Times `runs` steps (after one warm-up step) in f32 and bf16 on both libraries.
pub fn step(dir: &Path, runs: usize, json: bool) -> AnyResult<()> {
    let weights = dir.join("diffusion_pytorch_model.safetensors");
    let (b, hw, tokens) = (2, 64, 77);
    for (dt, name) in [(DType::F32, "f32"), (DType::BF16, "bf16")] {
        let ours = UNet2DConditionModel::from_pretrained(dir, dt, Device::Cpu)?;
        let ctx_dim = ours.config().cross_attention_dim[0];
        let preset = match ctx_dim {
            768 => StableDiffusionConfig::v1_5(None, Some(hw * 8), Some(hw * 8)),
            1024 => StableDiffusionConfig::v2_1(None, Some(hw * 8), Some(hw * 8)),
            other => {
                return Err(format!(
                    "candle has no SD preset with cross_attention_dim {other} (768: SD 1.x, 1024: SD 2.x)"
                )
                .into())
            }
        };
        let in_ch = ours.config().in_channels;
        let (sample, csample) = pair(&[b, in_ch, hw, hw], 11, 1.0, dt)?;
        let (context, ccontext) = pair(&[b, tokens, ctx_dim], 12, 1.0, dt)?;
        let t = 500.0;
        let timestep = Tensor::full(t, &[b], DType::F32, Device::Cpu)?;
        let ours_step = median_ms(runs, || Ok(ours.forward(&sample, &timestep, &context)?))?;
        drop(ours);
        // Built after xpu's model is dropped: one model in memory at a time.
        let theirs = preset.build_unet(&weights, &CDevice::Cpu, in_ch, false, candle_dtype(dt));
        let theirs_step = theirs
            .map_err(|e| e.into())
            .and_then(|unet| median_ms(runs, || Ok(unet.forward(&csample, t, &ccontext)?)));
        let shape = format!("{b}x{in_ch}x{hw}x{hw}, {tokens} tokens");
        let row = Row::new(
            "SD UNet step",
            shape,
            name,
            None,
            ours_step,
            theirs_step,
            None,
        );
        emit(row, json)?;
    }
    Ok(())
}
