//! [`ClipTextModel`]: transformers' `CLIPTextModel`, the text encoder of Stable Diffusion 1.x
//! and 2.x and the first of SDXL's.
//!
//! Invariants:
//! - The computation follows `transformers/models/clip/modeling_clip.py`: token embedding plus
//!   position embedding (positions `0..L`), the pre-norm encoder layers with the causal mask,
//!   the final layer norm; `hidden_states[0]` is the embeddings and `hidden_states[i]` layer
//!   `i`'s output, none with the final norm; the pooled output is the final states at the
//!   position [`ClipTextModel::eos_positions`] gives.
//! - Loading checks the whole checkpoint against the parameter list before any data is read
//!   (`checkpoint.rs`), then reads each tensor once, converted to the requested dtype on the
//!   requested device.
//! - Every parameter has the model's dtype and lives on its device; token ids are checked
//!   (shape, length, vocabulary) before any work is queued.

use std::path::Path;

use super::checkpoint::open_checked;
use super::config::ClipTextConfig;
use super::folder;
use super::input::TokenIds;
use super::layer::{EncoderLayer, Norm};
use super::output::ClipTextOutput;
use super::params::{Init, Params, TEXT_MODEL};
use crate::{DType, Device, Error, Result, Tensor};

/// transformers' `CLIPTextModel`; see the module docs.
#[derive(Clone, Debug)]
pub struct ClipTextModel {
    config: ClipTextConfig,
    dtype: DType,
    device: Device,
    /// `[vocab_size, hidden]`.
    token_embedding: Tensor,
    /// `[max_position_embeddings, hidden]`.
    position_embedding: Tensor,
    layers: Vec<EncoderLayer>,
    final_layer_norm: Norm,
}

/// Refuses a model dtype that is not a float.
pub(crate) fn check_float(op: &'static str, dtype: DType, device: Device) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(Error::UnsupportedDType {
            op,
            dtype,
            device,
            hint: "; models run in f32, f16 or bf16".into(),
        })
    }
}

/// The config and weights file of a text encoder folder (`variant` as in
/// [`ClipTextModel::from_pretrained_variant`]).
pub(crate) fn folder_files(
    dir: &Path,
    variant: Option<&str>,
) -> Result<(ClipTextConfig, std::path::PathBuf)> {
    let dir = folder::model_dir(dir)?;
    let config = ClipTextConfig::from_file(dir.join("config.json"))?;
    let weights = folder::weights_file(&dir, variant)?;
    Ok((config, weights))
}

impl ClipTextModel {
    /// The architecture of `config` with seeded random weights (Linear weights uniform in
    /// `±1/sqrt(fan_in)`, embeddings uniform with standard deviation 0.02, norm scales 1,
    /// biases 0): the same values on every device.
    pub fn random(
        config: &ClipTextConfig,
        dtype: DType,
        device: Device,
        seed: u64,
    ) -> Result<Self> {
        config.validate()?;
        check_float("ClipTextModel::random", dtype, device)?;
        let mut p = Params::Random {
            dtype,
            device,
            seed,
        };
        Self::build(config, &mut p, dtype, device)
    }

    /// Loads the weights of `config` from a transformers `model.safetensors` (or a sharded
    /// checkpoint given by its `*.safetensors.index.json`; f32, f16 or bf16 on disk),
    /// converted to `dtype` on `device`.
    pub fn from_safetensors(
        config: &ClipTextConfig,
        path: impl AsRef<Path>,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        config.validate()?;
        check_float("ClipTextModel::from_safetensors", dtype, device)?;
        let expected = Self::parameter_shapes(config)?;
        let (store, strip) = open_checked(path.as_ref(), &expected, false)?;
        let mut p = Params::Store {
            store: &store,
            strip,
            dtype,
            device,
        };
        Self::build(config, &mut p, dtype, device)
    }

    /// Loads a text encoder folder (a diffusers pipeline's `text_encoder/` or
    /// `text_encoder_2/`: `config.json` and `model.safetensors`). Where only a variant was
    /// downloaded (`model.fp16.safetensors`, ...) that file is read; a sharded checkpoint
    /// (`model.safetensors.index.json` and its shards) is read as one file; PyTorch pickles
    /// (`.bin`) are refused with an error that says how to convert them.
    pub fn from_pretrained(dir: impl AsRef<Path>, dtype: DType, device: Device) -> Result<Self> {
        Self::from_pretrained_variant(dir, None, dtype, device)
    }

    /// [`Self::from_pretrained`] reading the weights of `variant` (`Some("fp16")` reads
    /// `model.fp16.safetensors` or `model.safetensors.index.fp16.json`, an error if missing).
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
        let mut p = Params::Record(Vec::new());
        Self::build(config, &mut p, DType::F32, Device::Cpu)?;
        match p {
            Params::Record(entries) => Ok(entries),
            _ => Err(Error::invalid(
                "ClipTextModel::parameter_shapes",
                "internal: the recording source changed kind",
            )),
        }
    }

    pub(crate) fn build(
        c: &ClipTextConfig,
        p: &mut Params,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        let h = c.hidden_size;
        let emb = format!("{TEXT_MODEL}embeddings");
        let token_embedding = p.get(
            &format!("{emb}.token_embedding.weight"),
            &[c.vocab_size, h],
            Init::Std(0.02),
        )?;
        let position_embedding = p.get(
            &format!("{emb}.position_embedding.weight"),
            &[c.max_position_embeddings, h],
            Init::Std(0.02),
        )?;
        let layers = (0..c.num_hidden_layers)
            .map(|i| EncoderLayer::load(p, &format!("{TEXT_MODEL}encoder.layers.{i}"), c))
            .collect::<Result<Vec<_>>>()?;
        let final_layer_norm = Norm::load(
            p,
            &format!("{TEXT_MODEL}final_layer_norm"),
            h,
            c.layer_norm_eps,
        )?;
        Ok(ClipTextModel {
            config: c.clone(),
            dtype,
            device,
            token_embedding,
            position_embedding,
            layers,
            final_layer_norm,
        })
    }

    /// The model's config.
    pub fn config(&self) -> &ClipTextConfig {
        &self.config
    }

    /// The dtype of every parameter and output.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device the parameters live on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The model on `device` (a clone when already there).
    pub fn to(&self, device: Device) -> Result<Self> {
        if device == self.device {
            return Ok(self.clone());
        }
        Ok(ClipTextModel {
            token_embedding: self.token_embedding.to(device)?,
            position_embedding: self.position_embedding.to(device)?,
            layers: self
                .layers
                .iter()
                .map(|l| l.to(device))
                .collect::<Result<_>>()?,
            final_layer_norm: self.final_layer_norm.map(&|t| t.to(device))?,
            device,
            ..self.clone()
        })
    }

    /// The model with every parameter converted to `dtype` (a clone when already in it).
    pub fn to_dtype(&self, dtype: DType) -> Result<Self> {
        check_float("ClipTextModel::to_dtype", dtype, self.device)?;
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        Ok(ClipTextModel {
            token_embedding: self.token_embedding.to_dtype(dtype)?,
            position_embedding: self.position_embedding.to_dtype(dtype)?,
            layers: self
                .layers
                .iter()
                .map(|l| l.to_dtype(dtype))
                .collect::<Result<_>>()?,
            final_layer_norm: self.final_layer_norm.map(&|t| t.to_dtype(dtype))?,
            dtype,
            ..self.clone()
        })
    }

    /// `last_hidden_state` and `pooled_output` for `input_ids` (`[B, L]` `i32`, on any
    /// device; see [`super::input_ids`]), `1 <= L <= max_position_embeddings`.
    pub fn forward(&self, input_ids: &Tensor) -> Result<ClipTextOutput> {
        let ids = TokenIds::read("ClipTextModel::forward", input_ids, &self.config)?;
        self.forward_ids(&ids, None)
    }

    /// [`Self::forward`] also returning `hidden_states[index]` (Python indexing over the
    /// `num_hidden_layers + 1` hidden states: `-2` is the penultimate layer's output, which
    /// SDXL conditions on; clip skip `s` is `-(s + 1)`, normed by
    /// [`Self::final_layer_norm`] in SD 1.x/2.x pipelines). SD 2.x's shipped encoder already
    /// ends at OpenCLIP's penultimate layer, so its pipelines condition on
    /// `last_hidden_state`.
    pub fn forward_with_hidden_state(
        &self,
        input_ids: &Tensor,
        index: isize,
    ) -> Result<ClipTextOutput> {
        let op = "ClipTextModel::forward_with_hidden_state";
        let ids = TokenIds::read(op, input_ids, &self.config)?;
        let index = self.resolve_index(op, index)?;
        self.forward_ids(&ids, Some(index))
    }

    /// Only `hidden_states[index]` (as in [`Self::forward_with_hidden_state`]), running no
    /// layer past it.
    pub fn hidden_state(&self, input_ids: &Tensor, index: isize) -> Result<Tensor> {
        let op = "ClipTextModel::hidden_state";
        let ids = TokenIds::read(op, input_ids, &self.config)?;
        let index = self.resolve_index(op, index)?;
        self.encode(&ids, index, &mut |_, _| {})
    }

    /// All `num_hidden_layers + 1` hidden states (transformers' `output_hidden_states=True`):
    /// the embeddings, then each layer's output, none with the final layer norm.
    pub fn hidden_states(&self, input_ids: &Tensor) -> Result<Vec<Tensor>> {
        let ids = TokenIds::read("ClipTextModel::hidden_states", input_ids, &self.config)?;
        let mut all = Vec::with_capacity(self.layers.len() + 1);
        self.encode(&ids, self.layers.len(), &mut |_, h| all.push(h.clone()))?;
        Ok(all)
    }

    /// The final layer norm (`text_model.final_layer_norm`) applied to `x` `[..., hidden]`:
    /// what diffusers applies to a clip-skipped hidden state in SD 1.x pipelines.
    pub fn final_layer_norm(&self, x: &Tensor) -> Result<Tensor> {
        self.final_layer_norm.forward(x)
    }

    /// Each row's pooled position, as transformers picks it: with the legacy
    /// `eos_token_id == 2` the first position of the row's largest id, otherwise the first
    /// position of `eos_token_id` (0 in a row without it).
    pub fn eos_positions(&self, input_ids: &Tensor) -> Result<Vec<usize>> {
        let ids = TokenIds::read("ClipTextModel::eos_positions", input_ids, &self.config)?;
        Ok(ids.eos_positions(&self.config))
    }

    /// `index` over the `num_hidden_layers + 1` hidden states, negative from the end.
    fn resolve_index(&self, op: &'static str, index: isize) -> Result<usize> {
        let n = self.layers.len() + 1;
        let resolved = if index < 0 {
            n.checked_sub(index.unsigned_abs())
        } else {
            Some(index.unsigned_abs()).filter(|&i| i < n)
        };
        resolved.ok_or_else(|| {
            Error::invalid(
                op,
                format!(
                    "hidden state index {index} is out of range: the model has {n} hidden \
                     states (the embeddings and {} layers), valid -{n}..={}",
                    n - 1,
                    n - 1
                ),
            )
        })
    }

    /// The outputs for checked ids, with `hidden_states[keep]` when asked.
    pub(crate) fn forward_ids(
        &self,
        ids: &TokenIds,
        keep: Option<usize>,
    ) -> Result<ClipTextOutput> {
        let mut hidden_state = None;
        let last = self.encode(ids, self.layers.len(), &mut |i, h| {
            if Some(i) == keep {
                hidden_state = Some(h.clone());
            }
        })?;
        let last_hidden_state = self.final_layer_norm.forward(&last)?;
        let pooled_output = self.pool(&last_hidden_state, ids)?;
        Ok(ClipTextOutput {
            last_hidden_state,
            pooled_output,
            hidden_state,
            text_embeds: None,
        })
    }

    /// `hidden_states[upto]`, calling `visit(i, hidden_states[i])` for each `i <= upto`.
    fn encode(
        &self,
        ids: &TokenIds,
        upto: usize,
        visit: &mut dyn FnMut(usize, &Tensor),
    ) -> Result<Tensor> {
        let (b, l, h) = (ids.batch, ids.len, self.config.hidden_size);
        let index = Tensor::from_vec(ids.ids.clone(), &[b * l], self.device)?;
        // The ids were checked against the vocabulary when read.
        let tokens = self.token_embedding.index_select_in_range(0, &index)?;
        let positions = self.position_embedding.narrow(0, 0, l)?;
        let mut x = tokens.reshape(&[b, l, h])?.add(&positions)?;
        visit(0, &x);
        for (i, layer) in self.layers.iter().take(upto).enumerate() {
            x = layer.forward(&x)?;
            visit(i + 1, &x);
        }
        Ok(x)
    }

    /// `last_hidden_state[b, eos_position(b)]` for every row, `[B, hidden]`.
    fn pool(&self, last_hidden_state: &Tensor, ids: &TokenIds) -> Result<Tensor> {
        let (b, l, h) = (ids.batch, ids.len, self.config.hidden_size);
        let rows: Vec<i32> = ids
            .eos_positions(&self.config)
            .iter()
            .enumerate()
            .map(|(row, &pos)| i32::try_from(row * l + pos))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| {
                Error::invalid(
                    "ClipTextModel::pool",
                    format!("{b} rows of {l} tokens overflow i32 indices"),
                )
            })?;
        let rows = Tensor::from_vec(rows, &[b], self.device)?;
        last_hidden_state
            .reshape(&[b * l, h])?
            .index_select_in_range(0, &rows)
    }
}
