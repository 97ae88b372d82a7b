//! [`StableDiffusionPipeline`]: text (and an optional init image) to pictures, exactly as
//! diffusers' `StableDiffusionPipeline`, `StableDiffusionXLPipeline`,
//! `LatentConsistencyModelPipeline` and their img2img siblings compute them, on either device.
//!
//! A pipeline is loaded from a diffusers folder ([`StableDiffusionPipeline::from_folder`]:
//! `model_index.json`, `tokenizer/`, `text_encoder/`, `unet/`, `vae/`, `scheduler/`, for SDXL
//! also `tokenizer_2/` and `text_encoder_2/`), built with seeded random weights
//! ([`StableDiffusionPipeline::random_sd15`]), or assembled from its parts
//! ([`StableDiffusionPipeline::from_parts`]); [`StableDiffusionPipeline::generate`] runs a
//! [`GenerateRequest`]:
//!
//! 1. the prompt (and the negative prompt where classifier-free guidance runs) is tokenized
//!    (truncated to 77 tokens with a warning, as diffusers) and encoded
//!    ([`StableDiffusionPipeline::encode_prompt`]): SD's last hidden state; SDXL's two
//!    encoders' penultimate hidden states concatenated, the second's projected pooled output
//!    and the time ids (original size, crop, target size), zeros for an absent negative prompt
//!    where `force_zeros_for_empty_prompt`;
//! 2. the initial latents are the request's, or drawn from a [`TorchGenerator`] seeded with the
//!    request's seed on the Cpu (the draws of `torch.Generator("cpu").manual_seed(seed)`) and
//!    moved to the device, times the scheduler's `init_noise_sigma`; for img2img the init image
//!    is encoded by the VAE (a posterior sample drawn from the same generator), scaled, and
//!    noised to the strength's first step with the scheduler's `add_noise`;
//! 3. each step runs the UNet on the scaled latents (twice the batch with guidance > 1:
//!    negative first), combines `uncond + g · (text − uncond)` (rescaled where the request asks),
//!    and steps the scheduler (noise drawn from the generator where the scheduler takes it); a
//!    UNet with `time_cond_proj_dim` (LCM) takes the embedding of `g − 1` instead of guidance;
//! 4. the latents are decoded by the VAE and rounded to 8-bit as `numpy_to_pil` rounds.
//!
//! Invariants: every model of a pipeline lives on one device; the text encoders and the UNet
//! run in the pipeline's dtype, the VAE too except where diffusers upcasts it (SDXL in f16 with
//! `force_upcast`); latents and the scheduler's arithmetic stay in f32 on the device (each UNet
//! input is converted to the model's dtype and its output back), so an f32 run computes what
//! diffusers computes in f32, and an f16/bf16 run differs from it only by the models' rounding.
//! Requests are checked before any work; bad input is an error, never a panic.
//! No safety checker and no watermark run.

mod denoise;
mod guidance;
mod image;
mod img2img;
mod index;
mod load;
mod prompt;
mod random;
mod request;

pub use guidance::{guidance_scale_embedding, rescale_noise_cfg};
pub use image::{to_image_u8, to_u8, write_atomically, Image};
pub use index::{ModelIndex, PipelineKind};
pub use prompt::PromptEmbeds;
pub use random::byte_level_tokenizer;
pub use request::{GenerateRequest, Progress};

use crate::models::clip::{ClipTextModel, ClipTextModelWithProjection};
use crate::models::generator::TorchGenerator;
use crate::models::tokenizer::ClipTokenizer;
use crate::models::unet::UNet2DConditionModel;
use crate::models::vae::AutoencoderKl;
use crate::schedulers::SchedulerFile;
use crate::{DType, Device, Error, Result};

/// A Stable Diffusion pipeline's models and configuration; see the module docs.
#[derive(Debug)]
pub struct StableDiffusionPipeline {
    parts: PipelineParts,
    device: Device,
    dtype: DType,
}

/// The components of a pipeline, as [`StableDiffusionPipeline::from_parts`] takes them.
#[derive(Debug)]
pub struct PipelineParts {
    /// Which diffusers pipeline this runs as.
    pub kind: PipelineKind,
    /// SDXL: zero embeddings for an absent negative prompt (`force_zeros_for_empty_prompt`).
    pub force_zeros_for_empty_prompt: bool,
    /// The (first) tokenizer.
    pub tokenizer: ClipTokenizer,
    /// The (first) text encoder.
    pub text_encoder: ClipTextModel,
    /// SDXL's second tokenizer.
    pub tokenizer_2: Option<ClipTokenizer>,
    /// SDXL's second text encoder (with projection).
    pub text_encoder_2: Option<ClipTextModelWithProjection>,
    /// The denoising UNet.
    pub unet: UNet2DConditionModel,
    /// The VAE.
    pub vae: AutoencoderKl,
    /// The scheduler config (`scheduler/scheduler_config.json`).
    pub scheduler: SchedulerFile,
}

fn parts_error(msg: String) -> Error {
    Error::invalid("StableDiffusionPipeline::from_parts", msg)
}

impl StableDiffusionPipeline {
    /// A pipeline from its components, checked for consistency: one device, the UNet's and
    /// text encoders' dtype, SDXL's second encoder present exactly for SDXL, the UNet's
    /// cross-attention width equal to the text states' width, the VAE's latent channels equal
    /// to the UNet's input and output channels, and the conditions the UNet takes matching
    /// the pipeline kind.
    pub fn from_parts(parts: PipelineParts) -> Result<Self> {
        let device = parts.unet.device();
        let dtype = parts.unet.dtype();
        let p = &parts;
        let xl = p.kind == PipelineKind::StableDiffusionXl;
        if p.text_encoder.device() != device || p.vae.device() != device {
            return Err(parts_error(
                "every model must be on the UNet's device".into(),
            ));
        }
        if p.text_encoder.dtype() != dtype {
            return Err(parts_error(format!(
                "the text encoder is {} but the UNet is {dtype}",
                p.text_encoder.dtype()
            )));
        }
        let mut width = p.text_encoder.config().hidden_size;
        match (&p.tokenizer_2, &p.text_encoder_2, xl) {
            (Some(_), Some(enc), true) => {
                if enc.device() != device || enc.dtype() != dtype {
                    return Err(parts_error(
                        "text_encoder_2 must have the UNet's device and dtype".into(),
                    ));
                }
                width += enc.config().hidden_size;
            }
            (None, None, false) => {}
            _ => {
                return Err(parts_error(format!(
                    "tokenizer_2 and text_encoder_2 are needed by SDXL pipelines and only by \
                     them ({:?})",
                    p.kind
                )))
            }
        }
        let c = p.unet.config();
        if c.encoder_states_dim() != width {
            return Err(parts_error(format!(
                "the UNet takes text states {} wide (cross_attention_dim) but the text \
                 encoder(s) give {width}",
                c.encoder_states_dim()
            )));
        }
        let latent = p.vae.config().latent_channels;
        if c.in_channels != latent || c.out_channels != latent {
            return Err(parts_error(format!(
                "the UNet maps {} to {} channels but the VAE's latents have {latent} (inpainting \
                 and other UNets with extra input channels are not supported)",
                c.in_channels, c.out_channels
            )));
        }
        if c.takes_class_labels() {
            return Err(parts_error(
                "the UNet takes class labels (an upscaler or unCLIP model), which this pipeline \
                 does not provide"
                    .into(),
            ));
        }
        if xl != c.addition_embed.is_some() {
            return Err(parts_error(format!(
                "SDXL pipelines need a UNet with addition_embed_type \"text_time\" and only they \
                 take one ({:?}, addition_embed {:?})",
                p.kind, c.addition_embed
            )));
        }
        if p.kind == PipelineKind::LatentConsistency && c.time_cond_proj_dim.is_none() {
            return Err(parts_error(
                "an LCM pipeline needs a UNet with time_cond_proj_dim".into(),
            ));
        }
        if let (Some(a), Some(enc)) = (c.addition_embed, &p.text_encoder_2) {
            let ec = enc.config();
            let projection = ec.projection_dim.unwrap_or(ec.hidden_size);
            let want = 6 * a.time_embed_dim + projection;
            if a.input_dim != want {
                return Err(parts_error(format!(
                    "the UNet's added embedding takes {} values but 6 time ids × {} + the \
                     projection's {projection} make {want}",
                    a.input_dim, a.time_embed_dim
                )));
            }
        }
        Ok(StableDiffusionPipeline {
            parts,
            device,
            dtype,
        })
    }

    /// The components.
    pub fn parts(&self) -> &PipelineParts {
        &self.parts
    }

    /// Which diffusers pipeline this runs as.
    pub fn kind(&self) -> PipelineKind {
        self.parts.kind
    }

    /// The device every model lives on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The UNet's and text encoders' dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The UNet.
    pub fn unet(&self) -> &UNet2DConditionModel {
        &self.parts.unet
    }

    /// The VAE.
    pub fn vae(&self) -> &AutoencoderKl {
        &self.parts.vae
    }

    /// The scheduler config.
    pub fn scheduler_file(&self) -> &SchedulerFile {
        &self.parts.scheduler
    }

    /// diffusers' `vae_scale_factor`: `2^(len(vae.block_out_channels) − 1)` (8 for SD).
    pub fn vae_scale_factor(&self) -> usize {
        self.parts.vae.config().downscale()
    }

    /// The default image size `(height, width)`: the UNet's `sample_size` × the VAE scale
    /// factor (512 for SD 1.x, 768 for SD 2.x 768, 1024 for SDXL), as diffusers' pipelines.
    pub fn default_size(&self) -> (usize, usize) {
        let s = self.parts.unet.config().sample_size.unwrap_or(64) * self.vae_scale_factor();
        (s, s)
    }

    /// Whether a run with `guidance` runs classifier-free guidance (a batch of two halves):
    /// `guidance > 1` and a UNet without `time_cond_proj_dim`, never for LCM pipelines.
    pub fn does_guidance(&self, guidance: f64) -> bool {
        self.kind() != PipelineKind::LatentConsistency
            && guidance > 1.0
            && self.parts.unet.config().time_cond_proj_dim.is_none()
    }

    /// A generator seeded as `torch.Generator("cpu").manual_seed(seed)`.
    pub fn generator(&self, seed: u64) -> TorchGenerator {
        TorchGenerator::new(seed)
    }
}
