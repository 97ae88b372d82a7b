//! Image-to-image starting latents, as diffusers' img2img pipelines' `prepare_latents` makes
//! them.
//!
//! Invariants (draws from the run's generator, in this order): the init image
//! (`2·v/255 − 1`, in the VAE's dtype) is encoded and a posterior sample is drawn
//! (`mean + std · noise`, `noise` of the mean's shape); the sample is scaled (`scaling_factor ·
//! z`, or SDXL's `(z − latents_mean) · scaling_factor / latents_std` where the VAE config has
//! both), repeated for each image, and noised with fresh noise of the latents' shape by the
//! scheduler's `add_noise` at the first step the strength keeps.

use super::index::PipelineKind;
use super::StableDiffusionPipeline;
use crate::models::generator::TorchGenerator;
use crate::schedulers::Scheduler;
use crate::{DType, Result, Tensor};

/// The VAE config's per-channel `latents_mean` and `latents_std` as `[1, C, 1, 1]` f32 tensors
/// on `device`, for SDXL pipelines whose VAE has both.
pub(crate) fn latent_stats(pipe: &StableDiffusionPipeline) -> Result<Option<(Tensor, Tensor)>> {
    let c = pipe.vae().config();
    match (&c.latents_mean, &c.latents_std, pipe.kind()) {
        (Some(mean), Some(std), PipelineKind::StableDiffusionXl) => {
            let col = |v: &[f64]| {
                let data: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                Tensor::from_vec(data, &[1, v.len(), 1, 1], crate::Device::Cpu)?.to(pipe.device())
            };
            Ok(Some((col(mean)?, col(std)?)))
        }
        _ => Ok(None),
    }
}

impl StableDiffusionPipeline {
    /// The starting latents `[images, C, H/f, W/f]` (f32, on the device) of an img2img run from
    /// `image`, noised to step `begin` of `scheduler` (see the module docs).
    pub(crate) fn img2img_latents(
        &self,
        image: &super::Image,
        images: usize,
        scheduler: &dyn Scheduler,
        begin: usize,
        generator: &mut TorchGenerator,
    ) -> Result<Tensor> {
        let vae = self.vae();
        let x = image
            .to_tensor()?
            .to(self.device())?
            .to_dtype(vae.dtype())?;
        let posterior = vae.encode(&x)?;
        let noise = generator
            .randn(posterior.mean().shape())?
            .to(self.device())?
            .to_dtype(vae.dtype())?;
        let z = posterior.sample(&noise)?.to_dtype(DType::F32)?;
        let sf = vae.config().scaling_factor;
        let z = match latent_stats(self)? {
            Some((mean, std)) => z.sub(&mean)?.mul_scalar(sf)?.div(&std)?,
            None => z.mul_scalar(sf)?,
        };
        let z = z.repeat(&[images, 1, 1, 1])?;
        let noise = generator.randn(z.shape())?.to(self.device())?;
        scheduler.add_noise(&z, &noise, begin)
    }
}
