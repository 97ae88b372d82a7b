//! [`ClipTextModelWithProjection`]: transformers' `CLIPTextModelWithProjection`, SDXL's
//! second text encoder: a [`ClipTextModel`] plus `text_projection` (a Linear without bias,
//! `[projection_dim, hidden]`) of the pooled output, `text_embeds`.
//!
//! Invariants: the text model is loaded exactly as [`ClipTextModel`] loads it, from the same
//! checkpoint, whose `text_projection.weight` is required and checked with everything else
//! before any data is read; the projection has the model's dtype and device.

use std::path::Path;

use super::checkpoint::open_checked;
use super::config::ClipTextConfig;
use super::input::TokenIds;
use super::layer::load_linear;
use super::model::{check_float, folder_files, ClipTextModel};
use super::output::ClipTextOutput;
use super::params::Params;
use crate::nn::Linear;
use crate::{DType, Device, Error, Result, Tensor};

/// transformers' `CLIPTextModelWithProjection`; see the module docs.
#[derive(Clone, Debug)]
pub struct ClipTextModelWithProjection {
    text_model: ClipTextModel,
    text_projection: Linear,
}

impl ClipTextModelWithProjection {
    /// The architecture of `config` (which needs a `projection_dim`) with seeded random
    /// weights, as [`ClipTextModel::random`] draws them.
    pub fn random(
        config: &ClipTextConfig,
        dtype: DType,
        device: Device,
        seed: u64,
    ) -> Result<Self> {
        config.validate()?;
        config.projection()?;
        check_float("ClipTextModelWithProjection::random", dtype, device)?;
        let mut p = Params::Random {
            dtype,
            device,
            seed,
        };
        Self::build(config, &mut p, dtype, device)
    }

    /// Loads the weights of `config` from a transformers `model.safetensors` (or a sharded
    /// checkpoint's `*.safetensors.index.json`), converted to `dtype` on `device`.
    pub fn from_safetensors(
        config: &ClipTextConfig,
        path: impl AsRef<Path>,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        check_float(
            "ClipTextModelWithProjection::from_safetensors",
            dtype,
            device,
        )?;
        let expected = Self::parameter_shapes(config)?;
        let (store, strip) = open_checked(path.as_ref(), &expected, true)?;
        let mut p = Params::Store {
            store: &store,
            strip,
            dtype,
            device,
        };
        Self::build(config, &mut p, dtype, device)
    }

    /// Loads a text encoder folder (SDXL's `text_encoder_2/`), as
    /// [`ClipTextModel::from_pretrained`] does.
    pub fn from_pretrained(dir: impl AsRef<Path>, dtype: DType, device: Device) -> Result<Self> {
        Self::from_pretrained_variant(dir, None, dtype, device)
    }

    /// [`Self::from_pretrained`] reading the weights of `variant` (`Some("fp16")`, ...).
    pub fn from_pretrained_variant(
        dir: impl AsRef<Path>,
        variant: Option<&str>,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        let (config, weights) = folder_files(dir.as_ref(), variant)?;
        Self::from_safetensors(&config, weights, dtype, device)
    }

    /// Every parameter as `(transformers name, shape)`, in construction order.
    pub fn parameter_shapes(config: &ClipTextConfig) -> Result<Vec<(String, Vec<usize>)>> {
        config.validate()?;
        config.projection()?;
        let mut p = Params::Record(Vec::new());
        Self::build(config, &mut p, DType::F32, Device::Cpu)?;
        match p {
            Params::Record(entries) => Ok(entries),
            _ => Err(Error::invalid(
                "ClipTextModelWithProjection::parameter_shapes",
                "internal: the recording source changed kind",
            )),
        }
    }

    fn build(c: &ClipTextConfig, p: &mut Params, dtype: DType, device: Device) -> Result<Self> {
        let text_model = ClipTextModel::build(c, p, dtype, device)?;
        let text_projection =
            load_linear(p, "text_projection", c.hidden_size, c.projection()?, false)?;
        Ok(ClipTextModelWithProjection {
            text_model,
            text_projection,
        })
    }

    /// The text model (everything but the projection).
    pub fn text_model(&self) -> &ClipTextModel {
        &self.text_model
    }

    /// The projection, `[projection_dim, hidden]` without bias.
    pub fn text_projection(&self) -> &Linear {
        &self.text_projection
    }

    /// The model's config.
    pub fn config(&self) -> &ClipTextConfig {
        self.text_model.config()
    }

    /// The dtype of every parameter and output.
    pub fn dtype(&self) -> DType {
        self.text_model.dtype()
    }

    /// The device the parameters live on.
    pub fn device(&self) -> Device {
        self.text_model.device()
    }

    /// The model on `device` (a clone when already there).
    pub fn to(&self, device: Device) -> Result<Self> {
        if device == self.device() {
            return Ok(self.clone());
        }
        Ok(ClipTextModelWithProjection {
            text_model: self.text_model.to(device)?,
            text_projection: self.text_projection.to(device)?,
        })
    }

    /// The model with every parameter converted to `dtype` (a clone when already in it).
    pub fn to_dtype(&self, dtype: DType) -> Result<Self> {
        check_float(
            "ClipTextModelWithProjection::to_dtype",
            dtype,
            self.device(),
        )?;
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        Ok(ClipTextModelWithProjection {
            text_model: self.text_model.to_dtype(dtype)?,
            text_projection: self.text_projection.to_dtype(dtype)?,
        })
    }

    /// [`ClipTextModel::forward`] plus `text_embeds`.
    pub fn forward(&self, input_ids: &Tensor) -> Result<ClipTextOutput> {
        let c = self.text_model.config();
        let ids = TokenIds::read("ClipTextModelWithProjection::forward", input_ids, c)?;
        self.project_output(self.text_model.forward_ids(&ids, None)?)
    }

    /// [`ClipTextModel::forward_with_hidden_state`] plus `text_embeds` (SDXL conditions on
    /// `hidden_states[-2]` and `text_embeds` of this encoder).
    pub fn forward_with_hidden_state(
        &self,
        input_ids: &Tensor,
        index: isize,
    ) -> Result<ClipTextOutput> {
        let out = self
            .text_model
            .forward_with_hidden_state(input_ids, index)?;
        self.project_output(out)
    }

    /// `text_projection(pooled)` for pooled outputs `[B, hidden]`.
    pub fn project(&self, pooled: &Tensor) -> Result<Tensor> {
        self.text_projection.forward(pooled)
    }

    fn project_output(&self, mut out: ClipTextOutput) -> Result<ClipTextOutput> {
        out.text_embeds = Some(self.project(&out.pooled_output)?);
        Ok(out)
    }
}
