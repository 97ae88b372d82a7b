//! Run mode's stand-ins for the conditions some UNets take besides the text states: SDXL's
//! (`text_time` models) seeded pooled text embeddings and the time ids the diffusers pipelines
//! build for a `height`×`width` image, a class label for models with `num_class_embeds`
//! (the x4 upscaler pipeline's default `noise_level`, 20, below the class count; the same
//! noise level as a timestep for `class_embed_type: "timestep"`; seeded vectors for the
//! projections and `"identity"`, standing in for stable unCLIP's image embedding), and LCM's
//! guidance-scale embedding for models with `time_cond_proj_dim`.
//!
//! Which layout: SDXL base (`projection_class_embeddings_input_dim` = 1280 + 6 × time width:
//! original size, crop origin (0, 0), target size) or the SDXL refiner (1280 + 5 × time width:
//! original size, crop origin, aesthetic score 6.0, the pipeline's default), recognised by the
//! 1280-wide pooled embedding of OpenCLIP ViT-bigG; any other model gets the base's six ids
//! and whatever text width remains.

use xpu::models::unet::{AddedCond, ClassEmbedType, TextTimeEmbed, UNetConfig};
use xpu::{DType, Device, Tensor};

/// OpenCLIP ViT-bigG's pooled text embedding width (SDXL base and refiner).
const POOLED_WIDTH: usize = 1280;
/// The refiner pipeline's default `aesthetic_score`.
const AESTHETIC_SCORE: f32 = 6.0;

/// The upscaler pipeline's default `noise_level` (its class label).
const NOISE_LEVEL: i32 = 20;

/// Batch-2 stand-in conditions for a model of `config` at `height`×`width` (module docs),
/// with `guidance` for a model that embeds it (`time_cond_proj_dim`).
pub fn for_model(
    config: &UNetConfig,
    (height, width): (usize, usize),
    guidance: f64,
    dtype: DType,
    device: Device,
    seed: u64,
) -> xpu::Result<AddedCond> {
    let mut added = match config.addition_embed {
        Some(a) => sdxl(a, height, width, dtype, device, seed)?,
        None => AddedCond::default(),
    };
    if let Some(d) = config.time_cond_proj_dim {
        added.timestep_cond = Some(guidance_embedding(guidance, d, dtype, device)?);
    }
    added.class_labels = match (config.class_embed_type, config.num_class_embeds) {
        (None, None) => None,
        (None, Some(n)) => {
            let label = NOISE_LEVEL.min(i32::try_from(n - 1).unwrap_or(i32::MAX));
            Some(Tensor::from_vec(vec![label; 2], &[2], device)?)
        }
        (Some(ClassEmbedType::Timestep), _) => {
            Some(Tensor::from_vec(vec![NOISE_LEVEL as f32; 2], &[2], device)?)
        }
        // Seeded vectors stand in for an image embedding (stable unCLIP) or a ready embedding.
        (Some(kind), _) => {
            let width = match kind {
                ClassEmbedType::Projection { input_dim }
                | ClassEmbedType::SimpleProjection { input_dim } => input_dim,
                _ => config.time_embed_dim(),
            };
            Some(Tensor::randn(&[2, width], dtype, device, seed ^ 0xc1a5)?)
        }
    };
    Ok(added)
}

/// The channels a model's denoising loop keeps as latents and the extra input channels it
/// conditions on: `(latent, extra)` with `latent = min(in, out)` (a model with more outputs
/// predicts a variance too, which the loop drops) and `extra = in − latent` (an inpainting
/// UNet's mask and masked-image latents, an upscaler's low-resolution image).
pub fn latent_channels(config: &UNetConfig) -> (usize, usize) {
    let latent = config.in_channels.min(config.out_channels);
    (latent, config.in_channels - latent)
}

/// Stand-ins for the extra input channels (batch 2, f32, concatenated after the latents every
/// step, as diffusers' pipelines do): for the inpainting layout (mask plus four masked-image
/// channels) a mask of ones over zeroed image latents, i.e. "repaint everything"; otherwise a
/// seeded image. `None` for a model without extra channels.
pub fn image_conditioning(
    config: &UNetConfig,
    (lh, lw): (usize, usize),
    device: Device,
    seed: u64,
) -> xpu::Result<Option<Tensor>> {
    let (latent, extra) = latent_channels(config);
    if extra == 0 {
        return Ok(None);
    }
    let t = if extra == latent + 1 {
        let mask = Tensor::ones(&[2, 1, lh, lw], DType::F32, device)?;
        let image = Tensor::zeros(&[2, latent, lh, lw], DType::F32, device)?;
        Tensor::cat(&[&mask, &image], 1)?
    } else {
        let one = Tensor::randn(&[1, extra, lh, lw], DType::F32, device, seed ^ 0x1a6e)?;
        Tensor::cat(&[&one, &one], 0)?
    };
    Ok(Some(t))
}

/// LCM's guidance-scale embedding (`LatentConsistencyModelPipeline.get_guidance_scale_embedding`
/// of `guidance - 1`): the sinusoid of `1000 * (guidance - 1)`, sines first, frequencies
/// `10000^(-k / (dim/2 - 1))`, for a batch of 2 — [`Tensor::timestep_embedding`] with
/// `flip_sin_to_cos` false and `downscale_freq_shift` 1.
fn guidance_embedding(
    guidance: f64,
    dim: usize,
    dtype: DType,
    device: Device,
) -> xpu::Result<Tensor> {
    let w = ((guidance - 1.0) * 1000.0) as f32;
    Tensor::from_vec(vec![w; 2], &[2], device)?.timestep_embedding(dim, false, 1.0, dtype)
}

/// Batch-2 stand-in SDXL conditions for `a` at `height`×`width` (see the module docs).
fn sdxl(
    a: TextTimeEmbed,
    height: usize,
    width: usize,
    dtype: DType,
    device: Device,
    seed: u64,
) -> xpu::Result<AddedCond> {
    let (h, w) = (height as f32, width as f32);
    let refiner = a.input_dim.checked_sub(POOLED_WIDTH) == Some(5 * a.time_embed_dim);
    let ids: Vec<f32> = if refiner {
        vec![h, w, 0.0, 0.0, AESTHETIC_SCORE]
    } else {
        vec![h, w, 0.0, 0.0, h, w]
    };
    let text_dim = a
        .input_dim
        .checked_sub(ids.len() * a.time_embed_dim)
        .filter(|&d| d > 0)
        .ok_or_else(|| {
            xpu::Error::invalid(
                "sd_unet",
                format!(
                    "run mode builds SDXL's six time ids, but projection_class_embeddings_input_dim \
                     {} leaves no room for a text embedding beside 6 × {}: use --inputs with \
                     text_embeds and time_ids",
                    a.input_dim, a.time_embed_dim
                ),
            )
        })?;
    let k = ids.len();
    let time_ids = Tensor::from_vec([ids.clone(), ids].concat(), &[2, k], device)?;
    Ok(AddedCond {
        text_embeds: Some(Tensor::randn(&[2, text_dim], dtype, device, seed ^ 0x5d1)?),
        time_ids: Some(time_ids),
        ..AddedCond::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(c: &AddedCond) -> Vec<f32> {
        c.time_ids.as_ref().unwrap().to_vec().unwrap()
    }

    fn shapes(c: &AddedCond) -> (&[usize], &[usize]) {
        (
            c.text_embeds.as_ref().unwrap().shape(),
            c.time_ids.as_ref().unwrap().shape(),
        )
    }

    #[test]
    fn base_and_refiner_layouts() {
        let base = TextTimeEmbed {
            time_embed_dim: 256,
            input_dim: 2816,
        };
        let c = sdxl(base, 1024, 768, DType::F32, Device::Cpu, 1).unwrap();
        assert_eq!(shapes(&c), (&[2, 1280][..], &[2, 6][..]));
        assert_eq!(ids(&c)[..6], [1024.0, 768.0, 0.0, 0.0, 1024.0, 768.0]);
        assert_eq!(ids(&c)[..6], ids(&c)[6..]);
        let refiner = TextTimeEmbed {
            time_embed_dim: 256,
            input_dim: 2560,
        };
        let c = sdxl(refiner, 1024, 1024, DType::F32, Device::Cpu, 1).unwrap();
        assert_eq!(shapes(&c), (&[2, 1280][..], &[2, 5][..]));
        assert_eq!(ids(&c)[..5], [1024.0, 1024.0, 0.0, 0.0, 6.0]);
        // Other widths: six ids and the rest for the text.
        let tiny = TextTimeEmbed {
            time_embed_dim: 8,
            input_dim: 60,
        };
        let c = sdxl(tiny, 64, 64, DType::F32, Device::Cpu, 1).unwrap();
        assert_eq!(shapes(&c), (&[2, 12][..], &[2, 6][..]));
    }

    #[test]
    fn class_labels_stay_below_the_class_count() {
        for (n, want) in [(1000, 20), (5, 4)] {
            let config = UNetConfig {
                num_class_embeds: Some(n),
                ..UNetConfig::tiny()
            };
            let c = for_model(&config, (64, 64), 7.5, DType::F32, Device::Cpu, 1).unwrap();
            let labels: Vec<i32> = c.class_labels.unwrap().to_vec().unwrap();
            assert_eq!(labels, [want, want]);
            assert!(c.text_embeds.is_none() && c.time_ids.is_none());
        }
    }

    #[test]
    fn every_class_embed_type_gets_labels_of_its_shape() {
        let cases = [
            (ClassEmbedType::Timestep, vec![2]),
            (ClassEmbedType::Identity, vec![2, 128]),
            (ClassEmbedType::Projection { input_dim: 24 }, vec![2, 24]),
            (
                ClassEmbedType::SimpleProjection { input_dim: 5 },
                vec![2, 5],
            ),
        ];
        for (kind, shape) in cases {
            let config = UNetConfig {
                class_embed_type: Some(kind),
                ..UNetConfig::tiny()
            };
            let c = for_model(&config, (64, 64), 7.5, DType::F32, Device::Cpu, 1).unwrap();
            assert_eq!(c.class_labels.unwrap().shape(), shape, "{kind:?}");
        }
    }

    #[test]
    fn extra_input_channels_get_stand_ins() {
        let with = |inc, outc| UNetConfig {
            in_channels: inc,
            out_channels: outc,
            ..UNetConfig::tiny()
        };
        let cpu = Device::Cpu;
        assert_eq!(latent_channels(&with(4, 4)), (4, 0));
        assert!(image_conditioning(&with(4, 4), (2, 3), cpu, 1)
            .unwrap()
            .is_none());
        // Inpainting: mask (ones) then masked-image latents (zeros).
        let c = image_conditioning(&with(9, 4), (2, 3), cpu, 1)
            .unwrap()
            .unwrap();
        assert_eq!(c.shape(), [2, 5, 2, 3]);
        let v: Vec<f32> = c.to_vec().unwrap();
        assert!(v[..6].iter().all(|&x| x == 1.0) && v[6..30].iter().all(|&x| x == 0.0));
        // The x4 upscaler: three image channels, the same for both halves of the batch.
        let c = image_conditioning(&with(7, 4), (2, 3), cpu, 1)
            .unwrap()
            .unwrap();
        let v: Vec<f32> = c.to_vec().unwrap();
        assert_eq!(c.shape(), [2, 3, 2, 3]);
        assert_eq!(v[..18], v[18..]);
        // More outputs than inputs (a learned variance): the loop keeps the inputs' channels.
        assert_eq!(latent_channels(&with(4, 8)), (4, 0));
    }

    #[test]
    fn guidance_embedding_is_lcms() {
        let config = UNetConfig {
            time_cond_proj_dim: Some(8),
            ..UNetConfig::tiny()
        };
        let c = for_model(&config, (64, 64), 8.0, DType::F32, Device::Cpu, 1).unwrap();
        let got: Vec<f32> = c.timestep_cond.unwrap().to_vec().unwrap();
        // w = 7000; half = 4; frequencies 10000^(-k/3); [sin.., cos..] per sample.
        let w = 7000f64;
        let want: Vec<f64> = (0..4)
            .map(|k| (w * 10000f64.powf(-(k as f64) / 3.0)).sin())
            .chain((0..4).map(|k| (w * 10000f64.powf(-(k as f64) / 3.0)).cos()))
            .collect();
        for (i, (g, w)) in got[..8].iter().zip(&want).enumerate() {
            assert!((*g as f64 - w).abs() < 2e-3, "{i}: {g} vs {w}");
        }
        assert_eq!(got[..8], got[8..]);
    }

    #[test]
    fn no_room_for_text_is_an_error_that_says_what_to_do() {
        let small = TextTimeEmbed {
            time_embed_dim: 8,
            input_dim: 48,
        };
        let e = sdxl(small, 64, 64, DType::F32, Device::Cpu, 1)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("--inputs"), "{e}");
    }
}
