//! [`GenerateRequest`]: what one run of a pipeline is asked to make, its defaults (diffusers'
//! pipelines' own), and its checks; [`Progress`]: what a run reports while it works.
//!
//! Invariants: [`GenerateRequest::resolve`] checks every number before any model runs and
//! fills the defaults from the pipeline: steps (50; LCM 4), guidance (7.5; SDXL 5.0; LCM 8.5),
//! size (the UNet's `sample_size` × the VAE scale factor, or the latents' or init image's
//! size); heights and widths are positive multiples of 8 (diffusers refuses others) and of the
//! VAE scale factor; given latents are f32 `[N, C, H/f, W/f]`.

use super::image::Image;
use super::StableDiffusionPipeline;
use crate::models::generator::NormalKernel;
use crate::schedulers::SchedulerName;
use crate::{DType, Error, Result, Tensor};

/// The largest image side accepted (pixels).
pub const MAX_SIDE: usize = 8192;
/// The most images one request may make.
pub const MAX_IMAGES: usize = 64;

/// One run of [`StableDiffusionPipeline::generate`]. `None` fields take the pipeline's
/// defaults (see the module docs).
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    /// The prompt.
    pub prompt: String,
    /// The negative prompt (used where classifier-free guidance runs; `None`: the empty
    /// prompt, or zeros for SDXL with `force_zeros_for_empty_prompt`).
    pub negative_prompt: Option<String>,
    /// Inference steps.
    pub steps: Option<usize>,
    /// Guidance scale (≤ 1: no classifier-free guidance, batch 1).
    pub guidance: Option<f64>,
    /// diffusers' `guidance_rescale` (0 = off), in `[0, 1]`.
    pub guidance_rescale: f64,
    /// Image height in pixels.
    pub height: Option<usize>,
    /// Image width in pixels.
    pub width: Option<usize>,
    /// Seed of the generator (initial latents, stochastic schedulers, img2img's draws).
    pub seed: u64,
    /// The initial noise, instead of drawing it: f32 `[N, C, H/f, W/f]` on any device, `N` =
    /// `num_images_per_prompt` (diffusers' `latents=`, before `init_noise_sigma` scales it).
    pub latents: Option<Tensor>,
    /// A scheduler to use instead of the folder's, on the folder's noise schedule.
    pub scheduler: Option<SchedulerName>,
    /// Images to make from the prompt.
    pub num_images_per_prompt: usize,
    /// Image-to-image: the init image (its size is the output's; sides multiples of 8).
    pub init_image: Option<Image>,
    /// Image-to-image strength in `(0, 1]` (diffusers' default 0.8).
    pub strength: f64,
    /// The Box–Muller kernel of the generator (`None`: the one torch runs on this machine).
    pub normal_kernel: Option<NormalKernel>,
}

impl GenerateRequest {
    /// A request for `prompt` with every other field at its default.
    pub fn new(prompt: impl Into<String>) -> GenerateRequest {
        GenerateRequest {
            prompt: prompt.into(),
            negative_prompt: None,
            steps: None,
            guidance: None,
            guidance_rescale: 0.0,
            height: None,
            width: None,
            seed: 0,
            latents: None,
            scheduler: None,
            num_images_per_prompt: 1,
            init_image: None,
            strength: 0.8,
            normal_kernel: None,
        }
    }
}

/// What a run reports to its callback.
#[derive(Clone, Debug, PartialEq)]
pub enum Progress {
    /// Something the user should know (a truncated prompt, as diffusers warns).
    Warning(String),
    /// The prompt was tokenized and encoded, in `seconds`.
    Encoded {
        /// Wall time of tokenizing and encoding (device work finished).
        seconds: f64,
    },
    /// The run's denoising steps are about to start.
    Started {
        /// The number of steps that will run: UNet evaluations, the scheduler's timesteps from
        /// the first one the run visits (PNDM's PLMS visits one more than the inference steps
        /// asked for, as in diffusers; img2img fewer).
        steps: usize,
    },
    /// One denoising step finished.
    Step {
        /// 0-based index of the step among the run's steps.
        index: usize,
        /// The number of steps of the run.
        steps: usize,
        /// The timestep the UNet saw.
        timestep: f64,
        /// Wall time of the step (device work finished).
        seconds: f64,
    },
    /// The latents were decoded to images, in `seconds`.
    Decoded {
        /// Wall time of the VAE decode and the conversion to 8-bit.
        seconds: f64,
    },
}

/// A request with its defaults filled in and checked.
#[derive(Clone, Debug)]
pub(crate) struct Resolved {
    pub steps: usize,
    pub guidance: f64,
    pub height: usize,
    pub width: usize,
    pub images: usize,
    pub cfg: bool,
}

fn invalid(msg: String) -> Error {
    Error::invalid("StableDiffusionPipeline::generate", msg)
}

fn check_side(what: &str, v: usize, factor: usize) -> Result<()> {
    if v == 0 || v > MAX_SIDE || !v.is_multiple_of(8) || !v.is_multiple_of(factor) {
        let f = if factor > 8 {
            format!(" and of the VAE scale factor {factor}")
        } else {
            String::new()
        };
        return Err(invalid(format!(
            "{what} must be a positive multiple of 8{f}, at most {MAX_SIDE}, got {v}"
        )));
    }
    Ok(())
}

impl GenerateRequest {
    /// The request's settings for `pipe`, checked (see the module docs).
    pub(crate) fn resolve(&self, pipe: &StableDiffusionPipeline) -> Result<Resolved> {
        let steps = self.steps.unwrap_or(pipe.kind().default_steps());
        if steps == 0 || steps > 1000 {
            return Err(invalid(format!("steps must be in 1..=1000, got {steps}")));
        }
        let guidance = self.guidance.unwrap_or(pipe.kind().default_guidance());
        if !guidance.is_finite() || guidance.abs() > 1e4 {
            return Err(invalid(format!(
                "guidance must be a finite number of magnitude at most 10000, got {guidance}"
            )));
        }
        if !(self.guidance_rescale.is_finite() && (0.0..=1.0).contains(&self.guidance_rescale)) {
            return Err(invalid(format!(
                "guidance_rescale must be in [0, 1], got {}",
                self.guidance_rescale
            )));
        }
        let images = self.num_images_per_prompt;
        if images == 0 || images > MAX_IMAGES {
            return Err(invalid(format!(
                "num_images_per_prompt must be in 1..={MAX_IMAGES}, got {images}"
            )));
        }
        let f = pipe.vae_scale_factor();
        let channels = pipe.unet().config().in_channels;
        let (default_h, default_w) = match (&self.init_image, &self.latents) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "latents and an init image exclude each other (img2img draws its noise \
                     from the seed)"
                        .into(),
                ))
            }
            (Some(img), None) => {
                if !(self.strength.is_finite() && self.strength > 0.0 && self.strength <= 1.0) {
                    return Err(invalid(format!(
                        "strength must be in (0, 1], got {}",
                        self.strength
                    )));
                }
                (img.height, img.width)
            }
            (None, Some(l)) => {
                let s = l.shape();
                if l.dtype() != DType::F32 || s.len() != 4 || s[1] != channels {
                    return Err(Error::shape(
                        "StableDiffusionPipeline::generate latents",
                        format!("f32 latents [{images}, {channels}, H/{f}, W/{f}]"),
                        s,
                    ));
                }
                (s[2] * f, s[3] * f)
            }
            (None, None) => pipe.default_size(),
        };
        let height = self.height.unwrap_or(default_h);
        let width = self.width.unwrap_or(default_w);
        check_side("height", height, f)?;
        check_side("width", width, f)?;
        if let Some(img) = &self.init_image {
            if (img.height, img.width) != (height, width) {
                return Err(invalid(format!(
                    "the init image is {}×{} (width×height) but {width}×{height} was asked; \
                     resize the image (its size is the output's)",
                    img.width, img.height
                )));
            }
        }
        if let Some(l) = &self.latents {
            let want = [images, channels, height / f, width / f];
            if l.shape() != want {
                return Err(Error::shape(
                    "StableDiffusionPipeline::generate latents",
                    format!("f32 latents {want:?} (images, channels, height/{f}, width/{f})"),
                    l.shape(),
                ));
            }
        }
        Ok(Resolved {
            steps,
            guidance,
            height,
            width,
            images,
            cfg: pipe.does_guidance(guidance),
        })
    }
}
