//! Run mode's stand-ins for SDXL's added conditions (`text_time` models): seeded pooled text
//! embeddings and the time ids the diffusers pipelines build for a `height`×`width` image.
//!
//! Which layout: SDXL base (`projection_class_embeddings_input_dim` = 1280 + 6 × time width:
//! original size, crop origin (0, 0), target size) or the SDXL refiner (1280 + 5 × time width:
//! original size, crop origin, aesthetic score 6.0, the pipeline's default), recognised by the
//! 1280-wide pooled embedding of OpenCLIP ViT-bigG; any other model gets the base's six ids
//! and whatever text width remains.

use xpu::nn::{AddedCond, TextTimeEmbed};
use xpu::{DType, Device, Tensor};

/// OpenCLIP ViT-bigG's pooled text embedding width (SDXL base and refiner).
const POOLED_WIDTH: usize = 1280;
/// The refiner pipeline's default `aesthetic_score`.
const AESTHETIC_SCORE: f32 = 6.0;

/// Batch-2 stand-in conditions for `a`'s model at `height`×`width` (see the module docs).
pub fn sdxl(
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
        text_embeds: Tensor::randn(&[2, text_dim], dtype, device, seed ^ 0x5d1)?,
        time_ids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(c: &AddedCond) -> Vec<f32> {
        c.time_ids.to_vec().unwrap()
    }

    #[test]
    fn base_and_refiner_layouts() {
        let base = TextTimeEmbed {
            time_embed_dim: 256,
            input_dim: 2816,
        };
        let c = sdxl(base, 1024, 768, DType::F32, Device::Cpu, 1).unwrap();
        assert_eq!(c.text_embeds.shape(), [2, 1280]);
        assert_eq!(c.time_ids.shape(), [2, 6]);
        assert_eq!(ids(&c)[..6], [1024.0, 768.0, 0.0, 0.0, 1024.0, 768.0]);
        assert_eq!(ids(&c)[..6], ids(&c)[6..]);
        let refiner = TextTimeEmbed {
            time_embed_dim: 256,
            input_dim: 2560,
        };
        let c = sdxl(refiner, 1024, 1024, DType::F32, Device::Cpu, 1).unwrap();
        assert_eq!(c.text_embeds.shape(), [2, 1280]);
        assert_eq!(ids(&c)[..5], [1024.0, 1024.0, 0.0, 0.0, 6.0]);
        // Other widths: six ids and the rest for the text.
        let tiny = TextTimeEmbed {
            time_embed_dim: 8,
            input_dim: 60,
        };
        let c = sdxl(tiny, 64, 64, DType::F32, Device::Cpu, 1).unwrap();
        assert_eq!(
            (c.text_embeds.shape(), c.time_ids.shape()),
            (&[2, 12][..], &[2, 6][..])
        );
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
