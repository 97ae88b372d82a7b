//! [`StableDiffusionPipeline::generate`]: one run from a request to images (the steps are
//! listed in the module docs of [`super`]), and [`StableDiffusionPipeline::decode_latents`].
//!
//! Invariants: the request is resolved and the scheduler built before any model runs; the
//! generator is drawn in diffusers' order (initial latents or img2img's two draws, then each
//! stochastic step's noise after that step's UNet call); every phase reported to the callback
//! is timed after the device finished its work.

use std::time::Instant;

use super::guidance::{guidance_scale_embedding, guide};
use super::image::{to_image_u8, Image};
use super::img2img::latent_stats;
use super::index::PipelineKind;
use super::prompt::PromptEmbeds;
use super::request::{GenerateRequest, Progress, Resolved};
use super::StableDiffusionPipeline;
use crate::models::generator::{NormalKernel, TorchGenerator};
use crate::models::unet::AddedCond;
use crate::schedulers::{LcmScheduler, Scheduler, SchedulerKind};
use crate::{DType, Result, Tensor};

impl StableDiffusionPipeline {
    /// Waits for the device's queued work (so that wall times measure it).
    fn finish_work(&self) -> Result<()> {
        crate::tensor::synchronize(self.device())
    }

    /// The run's scheduler, with the index of its first step (img2img starts part-way; LCM's
    /// img2img pipeline instead builds its timesteps from the strength and runs them all).
    fn build_scheduler(
        &self,
        req: &GenerateRequest,
        r: &Resolved,
    ) -> Result<(Box<dyn Scheduler>, usize)> {
        let file = self.scheduler_file();
        let kind = match req.scheduler {
            Some(name) => name.kind(),
            None => file.kind()?,
        };
        let img2img = req.init_image.is_some();
        if img2img && self.kind() == PipelineKind::LatentConsistency && kind == SchedulerKind::Lcm {
            let config = file.config_for(SchedulerKind::Lcm)?;
            let s = LcmScheduler::with_strength(config, r.steps, req.strength)?;
            return Ok((Box::new(s), 0));
        }
        let mut s = match req.scheduler {
            Some(name) => file.scheduler_for(name, r.steps)?,
            None => file.scheduler(r.steps)?,
        };
        let begin = if img2img {
            s.begin_img2img(req.strength)?
        } else {
            s.set_begin_index(0)?;
            0
        };
        Ok((s, begin))
    }

    /// The UNet's extra conditions: SDXL's pooled embeddings and time ids (original size,
    /// crop top-left (0, 0), target size: the image size), LCM's guidance embedding.
    fn added_cond(&self, embeds: &PromptEmbeds, r: &Resolved) -> Result<AddedCond> {
        let mut added = AddedCond::default();
        let batch = embeds.context.shape()[0];
        if let Some(pooled) = &embeds.pooled {
            let (h, w) = (r.height as f32, r.width as f32);
            let row = [h, w, 0.0, 0.0, h, w];
            let ids: Vec<f32> = (0..batch).flat_map(|_| row).collect();
            added.text_embeds = Some(pooled.clone());
            added.time_ids = Some(Tensor::from_vec(ids, &[batch, 6], self.device())?);
        }
        if let Some(dim) = self.unet().config().time_cond_proj_dim {
            let w = guidance_scale_embedding(r.guidance - 1.0, dim, batch)?;
            added.timestep_cond = Some(w.to(self.device())?.to_dtype(self.dtype())?);
        }
        Ok(added)
    }

    /// Runs `req` (see [`GenerateRequest`]) and returns its images.
    pub fn generate(&self, req: &GenerateRequest) -> Result<Vec<Image>> {
        self.generate_with(req, &mut |_| {})
    }

    /// [`Self::generate`] reporting warnings, phases and every step to `progress`.
    pub fn generate_with(
        &self,
        req: &GenerateRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Vec<Image>> {
        let latents = self.generate_latents(req, progress)?;
        let start = Instant::now();
        let images = to_image_u8(&self.decode_latents(&latents)?)?;
        progress(Progress::Decoded {
            seconds: start.elapsed().as_secs_f64(),
        });
        Ok(images)
    }

    /// [`Self::generate_with`] up to the final latents (f32 `[N, C, H/f, W/f]` on the device;
    /// diffusers' `output_type="latent"`).
    pub fn generate_latents(
        &self,
        req: &GenerateRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Tensor> {
        let r = req.resolve(self)?;
        let (mut scheduler, begin) = self.build_scheduler(req, &r)?;
        let kernel = req.normal_kernel.unwrap_or_else(NormalKernel::native);
        let mut generator = TorchGenerator::with_kernel(req.seed, kernel);

        let start = Instant::now();
        let embeds =
            self.encode_prompt(&req.prompt, req.negative_prompt.as_deref(), r.images, r.cfg)?;
        self.finish_work()?;
        for w in &embeds.warnings {
            progress(Progress::Warning(w.clone()));
        }
        progress(Progress::Encoded {
            seconds: start.elapsed().as_secs_f64(),
        });

        let f = self.vae_scale_factor();
        let channels = self.unet().config().in_channels;
        let shape = [r.images, channels, r.height / f, r.width / f];
        let mut latents = match (&req.init_image, &req.latents) {
            (Some(image), _) => {
                self.img2img_latents(image, r.images, scheduler.as_ref(), begin, &mut generator)?
            }
            (None, given) => {
                let noise = match given {
                    Some(l) => l.to(self.device())?,
                    None => generator.randn(&shape)?.to(self.device())?,
                };
                noise.mul_scalar(scheduler.init_noise_sigma())?
            }
        };
        let added = self.added_cond(&embeds, &r)?;
        let timesteps = scheduler.timesteps().to_vec();
        let steps = timesteps.len().saturating_sub(begin);
        progress(Progress::Started { steps });
        for (k, (index, &t)) in timesteps.iter().enumerate().skip(begin).enumerate() {
            let start = Instant::now();
            let x = if r.cfg {
                Tensor::cat(&[&latents, &latents], 0)?
            } else {
                latents.clone()
            };
            let x = scheduler
                .scale_model_input(&x, index)?
                .to_dtype(self.dtype())?;
            let timestep = Tensor::full(t, &[x.shape()[0]], DType::F32, self.device())?;
            let out = self
                .unet()
                .forward_with_added_cond(&x, &timestep, &embeds.context, &added)?
                .to_dtype(DType::F32)?;
            let out = if r.cfg {
                guide(&out, r.guidance, req.guidance_rescale)?
            } else {
                out
            };
            let noise = match scheduler.needs_noise(index) {
                true => Some(generator.randn(out.shape())?.to(self.device())?),
                false => None,
            };
            latents = scheduler.step(&out, index, &latents, noise.as_ref())?;
            self.finish_work()?;
            progress(Progress::Step {
                index: k,
                steps,
                timestep: t,
                seconds: start.elapsed().as_secs_f64(),
            });
        }
        Ok(latents)
    }

    /// Decodes the diffusion model's latents (f32 `[N, C, h, w]`, any device) to the VAE's
    /// images `[N, 3, h·f, w·f]` (f32, on the device, roughly in `[-1, 1]`): `latents /
    /// scaling_factor` (SDXL with `latents_mean` and `latents_std`: `latents · std /
    /// scaling_factor + mean`), then the VAE's decoder in its dtype.
    pub fn decode_latents(&self, latents: &Tensor) -> Result<Tensor> {
        let vae = self.vae();
        let latents = latents.to(self.device())?.to_dtype(DType::F32)?;
        let sf = Tensor::full(vae.config().scaling_factor, &[1], DType::F32, self.device())?;
        let z = match latent_stats(self)? {
            Some((mean, std)) => latents.mul(&std)?.div(&sf)?.add(&mean)?,
            None => latents.div(&sf)?,
        };
        let decoded = vae.decode(&z.to_dtype(vae.dtype())?)?;
        let decoded = decoded.to_dtype(DType::F32)?;
        self.finish_work()?;
        Ok(decoded)
    }
}
