//! A diffusers pipeline folder's `model_index.json`: which pipeline class it is
//! ([`PipelineKind`]), which component sits in which subfolder and of which class, and the
//! pipeline options the file carries (`force_zeros_for_empty_prompt`).
//!
//! Invariants: the file is a JSON object with a supported `_class_name`; every component the
//! kind needs is listed as `[library, class]` with a class this crate implements (entries of
//! `[null, null]`, such as a removed safety checker, are skipped; components the pipeline does
//! not use, such as `safety_checker` or `feature_extractor`, are ignored whatever they are).
//! Anything else is an [`Error::InvalidFile`] naming the file and the entry.

use std::path::Path;

use serde_json::{Map, Value};

use crate::{Error, Result};

/// The pipeline classes this crate runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipelineKind {
    /// `StableDiffusionPipeline` (and its img2img sibling): SD 1.x, SD 2.x, SD-Turbo.
    StableDiffusion,
    /// `StableDiffusionXLPipeline` (and its img2img sibling): SDXL base, SDXL-Turbo.
    StableDiffusionXl,
    /// `LatentConsistencyModelPipeline` (and its img2img sibling): LCM-distilled SD 1.x.
    LatentConsistency,
}

impl PipelineKind {
    /// The pipeline class for a `_class_name`, `None` when not supported.
    pub fn from_class_name(name: &str) -> Option<PipelineKind> {
        Some(match name {
            "StableDiffusionPipeline" | "StableDiffusionImg2ImgPipeline" => {
                PipelineKind::StableDiffusion
            }
            "StableDiffusionXLPipeline" | "StableDiffusionXLImg2ImgPipeline" => {
                PipelineKind::StableDiffusionXl
            }
            "LatentConsistencyModelPipeline" | "LatentConsistencyModelImg2ImgPipeline" => {
                PipelineKind::LatentConsistency
            }
            _ => return None,
        })
    }

    /// diffusers' text-to-image class name.
    pub fn class_name(self) -> &'static str {
        match self {
            PipelineKind::StableDiffusion => "StableDiffusionPipeline",
            PipelineKind::StableDiffusionXl => "StableDiffusionXLPipeline",
            PipelineKind::LatentConsistency => "LatentConsistencyModelPipeline",
        }
    }

    /// The components (subfolder name, accepted classes) this kind loads.
    pub fn components(self) -> &'static [(&'static str, &'static [&'static str])] {
        const TOKENIZER: &[&str] = &["CLIPTokenizer", "CLIPTokenizerFast"];
        const SD: &[(&str, &[&str])] = &[
            ("tokenizer", TOKENIZER),
            ("text_encoder", &["CLIPTextModel"]),
            ("unet", &["UNet2DConditionModel"]),
            ("vae", &["AutoencoderKL"]),
            ("scheduler", &[]),
        ];
        const XL: &[(&str, &[&str])] = &[
            ("tokenizer", TOKENIZER),
            ("tokenizer_2", TOKENIZER),
            ("text_encoder", &["CLIPTextModel"]),
            ("text_encoder_2", &["CLIPTextModelWithProjection"]),
            ("unet", &["UNet2DConditionModel"]),
            ("vae", &["AutoencoderKL"]),
            ("scheduler", &[]),
        ];
        match self {
            PipelineKind::StableDiffusion | PipelineKind::LatentConsistency => SD,
            PipelineKind::StableDiffusionXl => XL,
        }
    }

    /// diffusers' default number of inference steps.
    pub fn default_steps(self) -> usize {
        match self {
            PipelineKind::LatentConsistency => 4,
            _ => 50,
        }
    }

    /// diffusers' default guidance scale.
    pub fn default_guidance(self) -> f64 {
        match self {
            PipelineKind::StableDiffusion => 7.5,
            PipelineKind::StableDiffusionXl => 5.0,
            PipelineKind::LatentConsistency => 8.5,
        }
    }
}

const SUPPORTED: &str = "StableDiffusionPipeline, StableDiffusionImg2ImgPipeline, \
     StableDiffusionXLPipeline, StableDiffusionXLImg2ImgPipeline, LatentConsistencyModelPipeline, \
     LatentConsistencyModelImg2ImgPipeline";

/// What `model_index.json` says.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelIndex {
    /// The pipeline's `_class_name`.
    pub class_name: String,
    /// The pipeline class it runs as.
    pub kind: PipelineKind,
    /// SDXL's `force_zeros_for_empty_prompt` (default true, as diffusers' constructor has it).
    pub force_zeros_for_empty_prompt: bool,
    /// The scheduler class the index lists (informational: the scheduler config decides).
    pub scheduler_class: Option<String>,
}

impl ModelIndex {
    /// Reads `dir/model_index.json`.
    pub fn read(dir: &Path) -> Result<ModelIndex> {
        let path = dir.join("model_index.json");
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
            context: format!(
                "reading {} (a diffusers pipeline folder holds model_index.json)",
                path.display()
            ),
            source,
        })?;
        ModelIndex::parse(&text, &path.display().to_string())
    }

    /// Parses the text of a `model_index.json`; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<ModelIndex> {
        let bad = |msg: String| Error::InvalidFile {
            file: file.to_string(),
            msg,
        };
        let value: Value =
            serde_json::from_str(text).map_err(|e| bad(format!("not valid JSON: {e}")))?;
        let Value::Object(map) = value else {
            return Err(bad("expected a JSON object".into()));
        };
        let class_name = match map.get("_class_name") {
            Some(Value::String(s)) => s.clone(),
            _ => {
                return Err(bad(
                    "no `_class_name` string naming the pipeline class".into()
                ))
            }
        };
        let kind = PipelineKind::from_class_name(&class_name).ok_or_else(|| {
            bad(format!(
                "pipeline class `{class_name}` is not supported; supported: {SUPPORTED}"
            ))
        })?;
        let mut scheduler_class = None;
        for (name, classes) in kind.components() {
            let class = component_class(&map, name).map_err(&bad)?;
            let Some(class) = class else {
                return Err(bad(format!(
                    "{class_name} needs the component `{name}`, which is missing or null"
                )));
            };
            if *name == "scheduler" {
                scheduler_class = Some(class);
            } else if !classes.contains(&class.as_str()) {
                return Err(bad(format!(
                    "component `{name}` is a `{class}`; supported: {}",
                    classes.join(", ")
                )));
            }
        }
        let force_zeros_for_empty_prompt = match map.get("force_zeros_for_empty_prompt") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(bad(format!(
                    "`force_zeros_for_empty_prompt` must be a boolean, got {other}"
                )))
            }
        };
        Ok(ModelIndex {
            class_name,
            kind,
            force_zeros_for_empty_prompt,
            scheduler_class,
        })
    }
}

/// The class of component `name` (`None` when absent or `[null, null]`).
fn component_class(
    map: &Map<String, Value>,
    name: &str,
) -> std::result::Result<Option<String>, String> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(pair)) => match pair.as_slice() {
            [Value::Null, Value::Null] => Ok(None),
            [Value::String(_), Value::String(class)] => Ok(Some(class.clone())),
            _ => Err(format!(
                "component `{name}` must be [library, class] (two strings), got {pair:?}"
            )),
        },
        Some(other) => Err(format!(
            "component `{name}` must be [library, class], got {other}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SD: &str = r#"{"_class_name": "StableDiffusionPipeline", "feature_extractor": [null, null],
        "safety_checker": ["stable_diffusion", "StableDiffusionSafetyChecker"],
        "scheduler": ["diffusers", "PNDMScheduler"], "text_encoder": ["transformers", "CLIPTextModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"], "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"]}"#;

    #[test]
    fn reads_sd() {
        let i = ModelIndex::parse(SD, "m").unwrap();
        assert_eq!(i.kind, PipelineKind::StableDiffusion);
        assert_eq!(i.scheduler_class.as_deref(), Some("PNDMScheduler"));
        assert!(i.force_zeros_for_empty_prompt);
    }

    #[test]
    fn refuses_bad_indexes() {
        for (text, needle) in [
            ("[1]", "object"),
            ("{", "JSON"),
            (r#"{"a": 1}"#, "_class_name"),
            (r#"{"_class_name": "FluxPipeline"}"#, "not supported"),
            (
                &SD.replace(
                    "\"vae\": [\"diffusers\", \"AutoencoderKL\"]",
                    "\"vae\": [null, null]",
                ),
                "vae",
            ),
            (
                &SD.replace("UNet2DConditionModel", "UNet2DModel"),
                "UNet2DModel",
            ),
            (
                &SD.replace("[\"transformers\", \"CLIPTokenizer\"]", "\"x\""),
                "tokenizer",
            ),
        ] {
            let e = ModelIndex::parse(text, "m").unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }
}
