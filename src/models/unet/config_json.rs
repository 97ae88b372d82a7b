//! Parsing diffusers' `unet/config.json` into a [`UNetConfig`].
//!
//! Invariant: every key of the JSON object is either understood (parsed and used), accepted
//! because it cannot change the result of the supported architecture (`sample_size`, `dropout`
//! at inference, `_`-prefixed bookkeeping keys, ...), or rejected with [`Error::Config`]
//! naming the key; an unknown key is an error. Missing keys take diffusers' constructor
//! defaults. The result is validated ([`UNetConfig::validate`]) before it is returned.

use crate::models::unet::config_depths::{self, Depths};
use serde_json::{Map, Value};

use crate::json_values::{as_bool, as_f64, as_str, as_usize};
use crate::models::unet::config::{
    cfg_err, ClassEmbedType, DownBlockType, MidBlockType, TextTimeEmbed, TimeEmbeddingType,
    UNetConfig, UpBlockType,
};
use crate::nn::ActFn;
use crate::{Error, Result};

/// An int (repeated per level later) or a list of ints.
fn usize_or_list(key: &str, v: &Value) -> Result<Vec<usize>> {
    match v {
        Value::Array(items) => items.iter().map(|x| as_usize(key, x)).collect(),
        _ => Ok(vec![as_usize(key, v)?]),
    }
}

fn require(key: &str, v: &Value, ok: bool, supported: &str) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(cfg_err(
            key,
            format!("value {v} is not supported; supported: {supported}"),
        ))
    }
}

/// Expands a one-entry list to `n` levels; any other length must equal `n`.
fn per_level<T: Clone>(key: &str, v: Vec<T>, scalar: bool, n: usize) -> Result<Vec<T>> {
    if scalar && v.len() == 1 {
        return Ok(vec![v[0].clone(); n]);
    }
    if v.len() != n {
        return Err(cfg_err(
            key,
            format!(
                "has {} entries but there are {n} down blocks (give one value or one per level)",
                v.len()
            ),
        ));
    }
    Ok(v)
}

impl UNetConfig {
    /// Reads and validates a diffusers `config.json`.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<UNetConfig> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            context: format!("reading UNet config {}", path.display()),
            source,
        })?;
        UNetConfig::from_json_str(&text).map_err(|e| match e {
            Error::InvalidFile { msg, .. } => Error::InvalidFile {
                file: path.display().to_string(),
                msg,
            },
            other => other,
        })
    }

    /// Parses and validates the text of a diffusers `config.json`.
    pub fn from_json_str(text: &str) -> Result<UNetConfig> {
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
        UNetConfig::from_map(&map)
    }

    fn from_map(map: &Map<String, Value>) -> Result<UNetConfig> {
        let mut c = UNetConfig::sd15();
        // diffusers' constructor defaults where SD 1.5's config differs from them.
        c.block_out_channels = vec![320, 640, 1280, 1280];
        c.cross_attention_dim = vec![1280];
        c.sample_size = None;
        let mut lists: Vec<(&str, Vec<usize>, bool)> = Vec::new();
        let mut only_cross: (Vec<bool>, bool) = (vec![false], true);
        let (mut text_time, mut time_dim, mut input_dim) = (false, None, None);
        let (mut class_type, mut hid_type): (Option<String>, Option<()>) = (None, None);
        let mut depths = (vec![Depths::Each(1)], true);
        let mut reverse = None;
        for (key, v) in map {
            let k = key.as_str();
            match k {
                _ if k.starts_with('_') => {}
                "in_channels" => c.in_channels = as_usize(k, v)?,
                "out_channels" => c.out_channels = as_usize(k, v)?,
                "sample_size" => {
                    c.sample_size = match v {
                        Value::Null => None,
                        Value::Array(a) => a.first().map(|x| as_usize(k, x)).transpose()?,
                        _ => Some(as_usize(k, v)?),
                    }
                }
                "center_input_sample" => c.center_input_sample = as_bool(k, v)?,
                "flip_sin_to_cos" => c.flip_sin_to_cos = as_bool(k, v)?,
                "freq_shift" => c.freq_shift = as_f64(k, v)?,
                "down_block_types" => c.down_block_types = parse_down(k, v)?,
                "up_block_types" => c.up_block_types = parse_up(k, v)?,
                "mid_block_type" => {
                    c.mid_block_type = match v.as_str() {
                        _ if v.is_null() => None,
                        Some("UNetMidBlock2DCrossAttn") => Some(MidBlockType::UNetMidBlock2DCrossAttn),
                        Some("UNetMidBlock2D") => Some(MidBlockType::UNetMidBlock2D),
                        _ => {
                            return Err(cfg_err(
                                k,
                                format!("value {v} is not supported; supported: \"UNetMidBlock2DCrossAttn\", \"UNetMidBlock2D\" or null"),
                            ))
                        }
                    }
                }
                "only_cross_attention" => {
                    only_cross = match v {
                        Value::Array(a) => (
                            a.iter().map(|x| as_bool(k, x)).collect::<Result<_>>()?,
                            false,
                        ),
                        _ => (vec![as_bool(k, v)?], true),
                    }
                }
                "mid_block_only_cross_attention" => {
                    // Only UNetMidBlock2DSimpleCrossAttn (not supported) reads it; diffusers
                    // also derives it from a bool only_cross_attention. Ours ignore it.
                    if !v.is_null() {
                        as_bool(k, v)?;
                    }
                }
                "block_out_channels" => {
                    let Value::Array(a) = v else {
                        return Err(cfg_err(k, format!("expected a list of integers, got {v}")));
                    };
                    c.block_out_channels = a.iter().map(|x| as_usize(k, x)).collect::<Result<_>>()?;
                }
                "transformer_layers_per_block" => depths = config_depths::parse(k, v)?,
                "reverse_transformer_layers_per_block" => {
                    reverse = (!v.is_null())
                        .then(|| config_depths::parse(k, v))
                        .transpose()?
                }
                "layers_per_block" | "cross_attention_dim" | "attention_head_dim" => {
                    if let Value::Array(a) = v {
                        if a.iter().any(Value::is_array) {
                            return Err(cfg_err(k, "nested per-layer lists are not supported"));
                        }
                    }
                    lists.push((k, usize_or_list(k, v)?, !v.is_array()));
                }
                "num_attention_heads" => {
                    if !v.is_null() {
                        lists.push((k, usize_or_list(k, v)?, !v.is_array()));
                    }
                }
                "downsample_padding" => c.downsample_padding = as_usize(k, v)?,
                "mid_block_scale_factor" => c.mid_block_scale_factor = as_f64(k, v)?,
                "act_fn" => c.act_fn = parse_act(k, v)?,
                "timestep_post_act" => {
                    c.timestep_post_act = (!v.is_null()).then(|| parse_act(k, v)).transpose()?
                }
                "time_embedding_act_fn" => {
                    c.time_embedding_act_fn = (!v.is_null()).then(|| parse_act(k, v)).transpose()?
                }
                "class_embed_type" => {
                    class_type = match v {
                        Value::Null => None,
                        Value::String(s) if CLASS_TYPES.contains(&s.as_str()) => Some(s.clone()),
                        _ => {
                            return Err(cfg_err(
                                k,
                                format!("value {v} is not supported; supported: null, {}", CLASS_TYPES.map(|t| format!("\"{t}\"")).join(", ")),
                            ))
                        }
                    }
                }
                "class_embeddings_concat" => c.class_embeddings_concat = as_bool(k, v)?,
                "resnet_time_scale_shift" => {
                    c.resnet_scale_shift = match v.as_str() {
                        Some("default") => false,
                        Some("scale_shift") => true,
                        _ => {
                            return Err(cfg_err(
                                k,
                                format!("value {v} is not supported; supported: \"default\", \"scale_shift\""),
                            ))
                        }
                    }
                }
                "encoder_hid_dim" => {
                    c.encoder_hid_dim = (!v.is_null()).then(|| as_usize(k, v)).transpose()?
                }
                "encoder_hid_dim_type" => {
                    hid_type = match v {
                        Value::Null => None,
                        Value::String(s) if s == "text_proj" => Some(()),
                        _ => {
                            return Err(cfg_err(
                                k,
                                format!("value {v} is not supported; supported: \"text_proj\" or null"),
                            ))
                        }
                    }
                }
                "norm_num_groups" => {
                    require(k, v, !v.is_null(), "an integer (GroupNorm everywhere)")?;
                    c.norm_num_groups = as_usize(k, v)?;
                }
                "norm_eps" => c.norm_eps = as_f64(k, v)?,
                "use_linear_projection" => c.use_linear_projection = as_bool(k, v)?,
                // diffusers tests it for truth: SDXL's config writes null.
                "upcast_attention" => c.upcast_attention = !v.is_null() && as_bool(k, v)?,
                "addition_embed_type" => {
                    text_time = match v {
                        Value::Null => false,
                        Value::String(s) if s == "text_time" => true,
                        _ => {
                            return Err(cfg_err(
                                k,
                                format!("value {v} is not supported; supported: \"text_time\" (SDXL) or null"),
                            ))
                        }
                    }
                }
                "time_cond_proj_dim" => {
                    c.time_cond_proj_dim = match v {
                        Value::Null => None,
                        _ => Some(as_usize(k, v)?),
                    }
                }
                "num_class_embeds" => {
                    c.num_class_embeds = match v {
                        Value::Null => None,
                        _ => Some(as_usize(k, v)?),
                    }
                }
                "addition_time_embed_dim" | "projection_class_embeddings_input_dim" => {
                    let dim = match v {
                        Value::Null => None,
                        _ => Some(as_usize(k, v)?),
                    };
                    if k == "addition_time_embed_dim" {
                        time_dim = dim;
                    } else {
                        input_dim = dim;
                    }
                }
                "dual_cross_attention" => require(k, v, v == &Value::Bool(false), "false")?,
                "time_embedding_dim" => {
                    c.time_embedding_dim = match v {
                        Value::Null => None,
                        _ => Some(as_usize(k, v)?),
                    }
                }
                "conv_in_kernel" => c.conv_in_kernel = as_usize(k, v)?,
                "conv_out_kernel" => c.conv_out_kernel = as_usize(k, v)?,
                "dropout" => {
                    as_f64(k, v)?; // inference: dropout is the identity
                }
                "resnet_out_scale_factor" => {
                    // diffusers passes it only to block types we do not support.
                    as_f64(k, v)?;
                }
                "addition_embed_type_num_heads" => {
                    // used only by addition_embed_type "text", which is refused.
                    as_usize(k, v)?;
                }
                "time_embedding_type" => {
                    c.time_embedding_type = match v.as_str() {
                        Some("positional") => TimeEmbeddingType::Positional,
                        Some("fourier") => TimeEmbeddingType::Fourier,
                        _ => {
                            return Err(cfg_err(
                                k,
                                format!("value {v} is not supported; supported: \"positional\", \"fourier\""),
                            ))
                        }
                    }
                }
                "attention_type" => require(k, v, v == "default", "\"default\"")?,
                "resnet_skip_time_act" => {
                    // diffusers passes it only to block types we do not support (ours always
                    // apply the activation before time_emb_proj).
                    as_bool(k, v)?;
                }
                "cross_attention_norm" => {
                    // diffusers passes it only to block types we do not support.
                    if !v.is_null() {
                        as_str(k, v)?;
                    }
                }
                _ => {
                    return Err(cfg_err(
                        k,
                        "unknown key for UNet2DConditionModel (not supported by xpu)",
                    ))
                }
            }
        }
        // The two sizes only matter with "text_time" (diffusers ignores them otherwise;
        // projection_class_embeddings_input_dim also sizes a projection class embedding).
        if text_time {
            let need = |key: &str, dim: Option<usize>| {
                dim.ok_or_else(|| {
                    cfg_err(key, "must be set when addition_embed_type is \"text_time\"")
                })
            };
            c.addition_embed = Some(TextTimeEmbed {
                time_embed_dim: need("addition_time_embed_dim", time_dim)?,
                input_dim: need("projection_class_embeddings_input_dim", input_dim)?,
            });
        }
        c.class_embed_type = match class_type.as_deref() {
            None => None,
            Some("timestep") => Some(ClassEmbedType::Timestep),
            Some("identity") => Some(ClassEmbedType::Identity),
            Some(kind) => {
                let input_dim = input_dim.ok_or_else(|| {
                    cfg_err(
                        "projection_class_embeddings_input_dim",
                        format!("must be set when class_embed_type is \"{kind}\""),
                    )
                })?;
                Some(if kind == "projection" {
                    ClassEmbedType::Projection { input_dim }
                } else {
                    ClassEmbedType::SimpleProjection { input_dim }
                })
            }
        };
        // diffusers: encoder_hid_dim alone means "text_proj"; the type alone is an error.
        if hid_type.is_some() && c.encoder_hid_dim.is_none() {
            return Err(cfg_err(
                "encoder_hid_dim",
                "must be set when encoder_hid_dim_type is \"text_proj\"",
            ));
        }
        let n = c.down_block_types.len();
        c.only_cross_attention = per_level("only_cross_attention", only_cross.0, only_cross.1, n)?;
        c.layers_per_block = vec![2];
        c.attention_head_dim = vec![8];
        for (key, values, scalar) in lists {
            let v = per_level(key, values, scalar, n)?;
            match key {
                "layers_per_block" => c.layers_per_block = v,
                "cross_attention_dim" => c.cross_attention_dim = v,
                "attention_head_dim" => c.attention_head_dim = v,
                _ => c.num_attention_heads = Some(v),
            }
        }
        for (key, list) in [
            ("layers_per_block", &mut c.layers_per_block),
            ("attention_head_dim", &mut c.attention_head_dim),
            ("cross_attention_dim", &mut c.cross_attention_dim),
        ] {
            if list.len() == 1 && n != 1 {
                *list = per_level(key, list.clone(), true, n)?;
            }
        }
        let key = "transformer_layers_per_block";
        let nested = depths.0.iter().any(|d| matches!(d, Depths::PerLayer(_)));
        if nested && reverse.is_none() {
            return Err(cfg_err(
                "reverse_transformer_layers_per_block",
                "must be given when transformer_layers_per_block lists per-layer depths \
                 (an asymmetrical UNet), as diffusers requires",
            ));
        }
        c.transformer_layers_per_block =
            config_depths::expand(key, &depths.0, depths.1, &c.layers_per_block)?;
        if let Some((entries, scalar)) = reverse {
            // Up block i mirrors down level n-1-i and has one more layer.
            let up_layers: Vec<usize> = c.layers_per_block.iter().rev().map(|l| l + 1).collect();
            let key = "reverse_transformer_layers_per_block";
            c.reverse_transformer_layers_per_block =
                Some(config_depths::expand(key, &entries, scalar, &up_layers)?);
        }
        c.validate()?;
        Ok(c)
    }
}

/// The `class_embed_type` values diffusers' `UNet2DConditionModel` accepts (all supported).
const CLASS_TYPES: [&str; 4] = ["timestep", "identity", "projection", "simple_projection"];

/// An activation name as diffusers' `get_activation` reads it.
fn parse_act(key: &str, v: &Value) -> Result<ActFn> {
    match as_str(key, v)? {
        "silu" | "swish" => Ok(ActFn::Silu),
        "gelu" => Ok(ActFn::Gelu),
        "relu" => Ok(ActFn::Relu),
        "mish" => Ok(ActFn::Mish),
        _ => Err(cfg_err(
            key,
            format!(
                "value {v} is not supported; supported: \"silu\", \"swish\", \"gelu\", \"relu\""
            ),
        )),
    }
}

fn parse_down(key: &str, v: &Value) -> Result<Vec<DownBlockType>> {
    let Value::Array(a) = v else {
        return Err(cfg_err(
            key,
            format!("expected a list of block names, got {v}"),
        ));
    };
    a.iter()
        .map(|x| match x.as_str() {
            Some("CrossAttnDownBlock2D") => Ok(DownBlockType::CrossAttnDownBlock2D),
            Some("DownBlock2D") => Ok(DownBlockType::DownBlock2D),
            _ => Err(cfg_err(
                key,
                format!("block {x} is not supported; supported: \"CrossAttnDownBlock2D\", \"DownBlock2D\""),
            )),
        })
        .collect()
}

fn parse_up(key: &str, v: &Value) -> Result<Vec<UpBlockType>> {
    let Value::Array(a) = v else {
        return Err(cfg_err(
            key,
            format!("expected a list of block names, got {v}"),
        ));
    };
    a.iter()
        .map(|x| match x.as_str() {
            Some("CrossAttnUpBlock2D") => Ok(UpBlockType::CrossAttnUpBlock2D),
            Some("UpBlock2D") => Ok(UpBlockType::UpBlock2D),
            _ => Err(cfg_err(
                key,
                format!(
                    "block {x} is not supported; supported: \"CrossAttnUpBlock2D\", \"UpBlock2D\""
                ),
            )),
        })
        .collect()
}
