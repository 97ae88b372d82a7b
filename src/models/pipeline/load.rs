//! Loading a [`StableDiffusionPipeline`] from a diffusers pipeline folder, as
//! `DiffusionPipeline.from_pretrained(dir)` lays it out and `save_pretrained` writes it.
//!
//! Invariants: `model_index.json` is read and checked first (the pipeline class and every
//! component class), then every component folder the class needs is checked to exist, and
//! only then are weights read: each component's file is memory-mapped, checked against the
//! model's parameter list and converted once to the requested dtype on the requested device.
//! The scheduler config is parsed here; whether its class is supported is decided when a run
//! builds it (a run may name another scheduler).

use std::path::Path;

use super::index::{ModelIndex, PipelineKind};
use super::{PipelineParts, StableDiffusionPipeline};
use crate::models::clip::{ClipTextModel, ClipTextModelWithProjection};
use crate::models::tokenizer::ClipTokenizer;
use crate::models::unet::UNet2DConditionModel;
use crate::models::vae::AutoencoderKl;
use crate::schedulers::SchedulerFile;
use crate::{DType, Device, Error, Result};

/// The component folder `name` of the pipeline at `dir`, or an error saying it is missing.
fn component(dir: &Path, name: &str, class: &str) -> Result<std::path::PathBuf> {
    let sub = dir.join(name);
    if sub.is_dir() {
        Ok(sub)
    } else {
        Err(Error::InvalidFile {
            file: dir.display().to_string(),
            msg: format!(
                "model_index.json lists `{name}` for {class} but the folder has no `{name}/`"
            ),
        })
    }
}

/// The dtype the VAE runs in: f32 where diffusers upcasts it (SDXL's pipelines in f16 with a
/// `force_upcast` VAE), else the pipeline's.
pub(crate) fn vae_dtype(kind: PipelineKind, dtype: DType, force_upcast: bool) -> DType {
    if kind == PipelineKind::StableDiffusionXl && dtype == DType::F16 && force_upcast {
        DType::F32
    } else {
        dtype
    }
}

impl StableDiffusionPipeline {
    /// Loads the pipeline folder `dir` (see the module docs of [`super`]) with every model in
    /// `dtype` on `device`. Weights are read from the plain files where present, else from the
    /// `fp16` variant's (or another variant's) files.
    pub fn from_folder(dir: impl AsRef<Path>, device: Device, dtype: DType) -> Result<Self> {
        Self::from_folder_variant(dir, None, device, dtype)
    }

    /// [`Self::from_folder`] reading the weights files of `variant` (diffusers' `variant=`:
    /// `Some("fp16")` reads `*.fp16.safetensors`, an error where a component lacks them).
    pub fn from_folder_variant(
        dir: impl AsRef<Path>,
        variant: Option<&str>,
        device: Device,
        dtype: DType,
    ) -> Result<Self> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(Error::Io {
                context: format!("opening the pipeline folder {}", dir.display()),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a folder"),
            });
        }
        let index = ModelIndex::read(dir)?;
        let kind = index.kind;
        let class = index.class_name.as_str();
        let folders: Vec<_> = kind
            .components()
            .iter()
            .map(|(name, _)| component(dir, name, class).map(|p| (*name, p)))
            .collect::<Result<_>>()?;
        let folder = |name: &str| {
            folders
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, p)| p.clone())
                .ok_or_else(|| Error::invalid("StableDiffusionPipeline", "internal: component"))
        };
        let scheduler = SchedulerFile::read(folder("scheduler")?.join("scheduler_config.json"))?;
        let tokenizer = ClipTokenizer::from_folder(folder("tokenizer")?)?;
        let (tokenizer_2, text_encoder_2) = if kind == PipelineKind::StableDiffusionXl {
            let tok = ClipTokenizer::from_folder(folder("tokenizer_2")?)?;
            let enc = ClipTextModelWithProjection::from_pretrained_variant(
                folder("text_encoder_2")?,
                variant,
                dtype,
                device,
            )?;
            (Some(tok), Some(enc))
        } else {
            (None, None)
        };
        let text_encoder = ClipTextModel::from_pretrained_variant(
            folder("text_encoder")?,
            variant,
            dtype,
            device,
        )?;
        let unet =
            UNet2DConditionModel::from_pretrained_variant(folder("unet")?, variant, dtype, device)?;
        let vae_dir = folder("vae")?;
        let vae_config = crate::models::vae::VaeConfig::from_file(vae_dir.join("config.json"))?;
        let vae = AutoencoderKl::from_pretrained_variant(
            vae_dir,
            variant,
            vae_dtype(kind, dtype, vae_config.force_upcast),
            device,
        )?;
        StableDiffusionPipeline::from_parts(PipelineParts {
            kind,
            force_zeros_for_empty_prompt: index.force_zeros_for_empty_prompt,
            tokenizer,
            text_encoder,
            tokenizer_2,
            text_encoder_2,
            unet,
            vae,
            scheduler,
        })
    }
}
