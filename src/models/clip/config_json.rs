//! Parsing a transformers `config.json` (a CLIP text encoder's, as diffusers pipelines ship it
//! in `text_encoder/` and `text_encoder_2/`) into a [`ClipTextConfig`].
//!
//! Invariants: the keys that shape the model are read with typed checks (an error names the
//! key, what was expected and what came); missing ones take `CLIPTextConfig`'s defaults; keys
//! that cannot change inference (dropout, initialisers, the many generic keys older
//! transformers releases wrote into every config) are ignored. `model_type`, when present, must
//! be `clip_text_model`, and `architectures`, when present, must name a CLIP text encoder. The
//! result is validated before it is returned.

use std::path::Path;

use serde_json::{Map, Value};

use super::config::{cfg_err, ClipArchitecture, ClipTextConfig, HiddenAct};
use crate::json_values::{as_f64, as_str, as_usize};
use crate::{Error, Result};

/// A token id: a non-negative integer that fits `u32`.
fn as_token(key: &str, v: &Value) -> Result<u32> {
    let n = as_usize(key, v)?;
    u32::try_from(n).map_err(|_| cfg_err(key, format!("token id {n} does not fit 32 bits")))
}

/// A token id or `null`.
fn as_opt_token(key: &str, v: &Value) -> Result<Option<u32>> {
    if v.is_null() {
        Ok(None)
    } else {
        as_token(key, v).map(Some)
    }
}

fn parse_architecture(key: &str, v: &Value) -> Result<Option<ClipArchitecture>> {
    let names = match v {
        Value::Null => return Ok(None),
        Value::Array(items) => items
            .iter()
            .map(|x| as_str(key, x))
            .collect::<Result<Vec<_>>>()?,
        _ => {
            return Err(cfg_err(
                key,
                format!("expected a list of class names, got {v}"),
            ))
        }
    };
    match names.first() {
        None => Ok(None),
        Some(first) => ClipArchitecture::from_name(first).map(Some).ok_or_else(|| {
            cfg_err(
                key,
                format!(
                    "names {first}, not a CLIP text encoder; supported: CLIPTextModel, \
                     CLIPTextModelWithProjection"
                ),
            )
        }),
    }
}

impl ClipTextConfig {
    /// Reads and validates a transformers `config.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<ClipTextConfig> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            context: format!("reading CLIP text config {}", path.display()),
            source,
        })?;
        ClipTextConfig::from_json_str(&text).map_err(|e| match e {
            Error::InvalidFile { msg, .. } => Error::InvalidFile {
                file: path.display().to_string(),
                msg,
            },
            other => other,
        })
    }

    /// Parses and validates the text of a transformers `config.json`.
    pub fn from_json_str(text: &str) -> Result<ClipTextConfig> {
        let value: Value = serde_json::from_str(text).map_err(|e| Error::InvalidFile {
            file: "config.json".into(),
            msg: format!("not valid JSON: {e}"),
        })?;
        let Value::Object(map) = value else {
            return Err(Error::InvalidFile {
                file: "config.json".into(),
                msg: "expected a JSON object at the top level".into(),
            });
        };
        ClipTextConfig::from_map(&map)
    }

    fn from_map(map: &Map<String, Value>) -> Result<ClipTextConfig> {
        // `CLIPTextConfig`'s constructor defaults.
        let mut c = ClipTextConfig {
            architecture: ClipArchitecture::TextModel,
            vocab_size: 49408,
            hidden_size: 512,
            intermediate_size: 2048,
            num_hidden_layers: 12,
            num_attention_heads: 8,
            max_position_embeddings: 77,
            hidden_act: HiddenAct::QuickGelu,
            layer_norm_eps: 1e-5,
            projection_dim: Some(512),
            bos_token_id: Some(49406),
            eos_token_id: 49407,
            pad_token_id: Some(1),
        };
        for (key, v) in map {
            let k = key.as_str();
            match k {
                "model_type" => match as_str(k, v)? {
                    "clip_text_model" => {}
                    "clip" => {
                        return Err(cfg_err(
                            k,
                            "this is a whole CLIP model's config (text and vision); give the \
                             text encoder's folder (a pipeline's text_encoder/ or \
                             text_encoder_2/)",
                        ))
                    }
                    other => {
                        return Err(cfg_err(
                            k,
                            format!("{other} is not a CLIP text encoder (clip_text_model)"),
                        ))
                    }
                },
                "architectures" => {
                    if let Some(a) = parse_architecture(k, v)? {
                        c.architecture = a;
                    }
                }
                "vocab_size" => c.vocab_size = as_usize(k, v)?,
                "hidden_size" => c.hidden_size = as_usize(k, v)?,
                "intermediate_size" => c.intermediate_size = as_usize(k, v)?,
                "num_hidden_layers" => c.num_hidden_layers = as_usize(k, v)?,
                "num_attention_heads" => c.num_attention_heads = as_usize(k, v)?,
                "max_position_embeddings" => c.max_position_embeddings = as_usize(k, v)?,
                "hidden_act" => {
                    let name = as_str(k, v)?;
                    c.hidden_act = HiddenAct::from_name(name).ok_or_else(|| {
                        cfg_err(
                            k,
                            format!(
                                "{name} is not supported; supported: quick_gelu, gelu, \
                                 gelu_new, gelu_pytorch_tanh"
                            ),
                        )
                    })?;
                }
                "layer_norm_eps" => c.layer_norm_eps = as_f64(k, v)?,
                "projection_dim" => {
                    c.projection_dim = if v.is_null() {
                        None
                    } else {
                        Some(as_usize(k, v)?)
                    }
                }
                "bos_token_id" => c.bos_token_id = as_opt_token(k, v)?,
                "pad_token_id" => c.pad_token_id = as_opt_token(k, v)?,
                "eos_token_id" => {
                    c.eos_token_id = match v {
                        Value::Array(_) => {
                            return Err(cfg_err(
                                k,
                                format!("a list of end tokens is not supported, got {v}"),
                            ))
                        }
                        _ => as_token(k, v)?,
                    }
                }
                _ => {}
            }
        }
        c.validate()?;
        Ok(c)
    }
}
