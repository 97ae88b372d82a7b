//! [`ClipTextConfig`]: the shape of a CLIP text encoder, as transformers' `CLIPTextConfig`
//! describes it, with the presets of the Stable Diffusion text encoders.
//!
//! Invariants: a config that [`ClipTextConfig::validate`] accepts builds a model (every size
//! nonzero, the heads divide the hidden size, `layer_norm_eps` finite and positive, a
//! projection size when the architecture has a projection); parsing (`config_json.rs`)
//! always validates before returning.

use crate::{Error, Result};

/// The activation of the encoder layers' MLP (transformers' `hidden_act`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HiddenAct {
    /// `x * sigmoid(1.702 x)` (`quick_gelu`: OpenAI's CLIP, SD 1.x, SDXL's first encoder).
    QuickGelu,
    /// Exact GELU, `x Φ(x)` with erf (`gelu`: OpenCLIP's encoders, SD 2.x, SDXL's second).
    Gelu,
    /// The tanh approximation of GELU (`gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
}

impl HiddenAct {
    /// The activation transformers names `name`, if supported.
    pub fn from_name(name: &str) -> Option<HiddenAct> {
        match name {
            "quick_gelu" => Some(HiddenAct::QuickGelu),
            "gelu" => Some(HiddenAct::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" => Some(HiddenAct::GeluTanh),
            _ => None,
        }
    }

    /// transformers' name of the activation.
    pub fn name(self) -> &'static str {
        match self {
            HiddenAct::QuickGelu => "quick_gelu",
            HiddenAct::Gelu => "gelu",
            HiddenAct::GeluTanh => "gelu_new",
        }
    }
}

/// Which transformers class a config's `architectures` entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClipArchitecture {
    /// `CLIPTextModel`: hidden states and the pooled output.
    TextModel,
    /// `CLIPTextModelWithProjection`: the same plus `text_projection` (`text_embeds`).
    TextModelWithProjection,
}

impl ClipArchitecture {
    /// The architecture transformers names `name`, if it is a CLIP text encoder.
    pub fn from_name(name: &str) -> Option<ClipArchitecture> {
        match name {
            "CLIPTextModel" => Some(ClipArchitecture::TextModel),
            "CLIPTextModelWithProjection" => Some(ClipArchitecture::TextModelWithProjection),
            _ => None,
        }
    }

    /// transformers' class name.
    pub fn name(self) -> &'static str {
        match self {
            ClipArchitecture::TextModel => "CLIPTextModel",
            ClipArchitecture::TextModelWithProjection => "CLIPTextModelWithProjection",
        }
    }
}

/// The shape of a CLIP text encoder (transformers' `CLIPTextConfig`).
#[derive(Clone, Debug, PartialEq)]
pub struct ClipTextConfig {
    /// The class the checkpoint was saved from.
    pub architecture: ClipArchitecture,
    /// Token vocabulary size (rows of the token embedding).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP's hidden layer.
    pub intermediate_size: usize,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer (they divide `hidden_size`).
    pub num_attention_heads: usize,
    /// Longest token sequence (rows of the position embedding).
    pub max_position_embeddings: usize,
    /// The MLP's activation.
    pub hidden_act: HiddenAct,
    /// Epsilon of every layer norm.
    pub layer_norm_eps: f64,
    /// Output width of `text_projection` (used by [`ClipArchitecture::TextModelWithProjection`]).
    pub projection_dim: Option<usize>,
    /// Start-of-text token.
    pub bos_token_id: Option<u32>,
    /// End-of-text token: the pooled output is taken at its first position (where it is 2, a
    /// legacy value, at the position of the largest id instead, as transformers does).
    pub eos_token_id: u32,
    /// Padding token.
    pub pad_token_id: Option<u32>,
}

/// The error for `key`.
pub(crate) fn cfg_err(key: &str, msg: impl Into<String>) -> Error {
    Error::Config {
        key: key.to_string(),
        msg: msg.into(),
    }
}

impl ClipTextConfig {
    /// OpenAI's CLIP ViT-L/14 text encoder as Stable Diffusion 1.x ships it
    /// (`text_encoder/config.json` of SD 1.5): 12 layers of 768, quick GELU.
    pub fn sd15() -> ClipTextConfig {
        ClipTextConfig {
            architecture: ClipArchitecture::TextModel,
            vocab_size: 49408,
            hidden_size: 768,
            intermediate_size: 3072,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            max_position_embeddings: 77,
            hidden_act: HiddenAct::QuickGelu,
            layer_norm_eps: 1e-5,
            projection_dim: Some(768),
            bos_token_id: Some(0),
            eos_token_id: 2,
            pad_token_id: Some(1),
        }
    }

    /// OpenCLIP ViT-H/14's text encoder as Stable Diffusion 2.x ships it: 23 of its 24 layers
    /// of 1024 (the last is dropped; SD 2 uses the penultimate layer), exact GELU.
    pub fn sd21() -> ClipTextConfig {
        ClipTextConfig {
            hidden_size: 1024,
            intermediate_size: 4096,
            num_hidden_layers: 23,
            num_attention_heads: 16,
            hidden_act: HiddenAct::Gelu,
            projection_dim: Some(512),
            ..ClipTextConfig::sd15()
        }
    }

    /// SDXL's first text encoder (`text_encoder/`): OpenAI's ViT-L/14, as in SD 1.x.
    pub fn sdxl_1() -> ClipTextConfig {
        ClipTextConfig::sd15()
    }

    /// SDXL's second text encoder (`text_encoder_2/`): OpenCLIP ViT-bigG/14's, 32 layers of
    /// 1280, exact GELU, with a 1280-wide `text_projection`.
    pub fn sdxl_2() -> ClipTextConfig {
        ClipTextConfig {
            architecture: ClipArchitecture::TextModelWithProjection,
            hidden_size: 1280,
            intermediate_size: 5120,
            num_hidden_layers: 32,
            num_attention_heads: 20,
            hidden_act: HiddenAct::Gelu,
            projection_dim: Some(1280),
            ..ClipTextConfig::sd15()
        }
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    /// True when the pooled output is taken at the largest token id (transformers' rule for
    /// configs from before `eos_token_id` was fixed, which have `eos_token_id == 2`).
    pub fn pools_at_argmax(&self) -> bool {
        self.eos_token_id == 2
    }

    /// Checks that the config describes a model that can be built (see the module docs).
    pub fn validate(&self) -> Result<()> {
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_attention_heads", self.num_attention_heads),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        for (key, v) in sizes {
            if v == 0 {
                return Err(cfg_err(key, "must be > 0"));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(cfg_err(
                "num_attention_heads",
                format!(
                    "{} heads do not divide hidden_size {}",
                    self.num_attention_heads, self.hidden_size
                ),
            ));
        }
        if !(self.layer_norm_eps.is_finite() && self.layer_norm_eps > 0.0) {
            return Err(cfg_err(
                "layer_norm_eps",
                format!("must be finite and > 0, got {}", self.layer_norm_eps),
            ));
        }
        if self.architecture == ClipArchitecture::TextModelWithProjection
            && self.projection_dim.is_none_or(|p| p == 0)
        {
            return Err(cfg_err(
                "projection_dim",
                format!(
                    "{} needs a projection_dim > 0, got {:?}",
                    self.architecture.name(),
                    self.projection_dim
                ),
            ));
        }
        Ok(())
    }

    /// The projection width, or the error for a config without one.
    pub(crate) fn projection(&self) -> Result<usize> {
        match self.projection_dim {
            Some(p) if p > 0 => Ok(p),
            other => Err(cfg_err(
                "projection_dim",
                format!("a text projection needs projection_dim > 0, got {other:?}"),
            )),
        }
    }
}
