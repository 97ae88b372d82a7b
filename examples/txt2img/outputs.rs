//! What the example writes: the PNG files, each with the generation parameters in a text chunk
//! named `parameters` (prompt, negative prompt, then `Key: value` pairs, as image tools read
//! them).
//!
//! Invariant: every file is written atomically (a temporary sibling renamed over the target),
//! so an interrupted or failed run leaves no partial PNG.

use std::path::PathBuf;

use xpu::models::pipeline::{GenerateRequest, Image, StableDiffusionPipeline};
use xpu::Result;

use super::Args;

/// The run's description, for the log line and the PNG text chunk.
pub struct Described {
    /// The model folder, or the random architecture.
    pub model: String,
    /// The lines of the `parameters` chunk except the per-image index.
    lines: Vec<String>,
    /// `Key: value` pairs.
    pairs: Vec<(String, String)>,
}

impl Described {
    /// The description of `request` (defaults filled) run by `pipe`.
    pub fn new(
        args: &Args,
        pipe: &StableDiffusionPipeline,
        request: &GenerateRequest,
    ) -> Described {
        let model = match &args.model {
            Some(dir) => dir.display().to_string(),
            None => "SD 1.5 architecture with seeded random weights".to_string(),
        };
        let scheduler = match request.scheduler {
            Some(name) => name.to_string(),
            None => pipe
                .scheduler_file()
                .class_name()
                .unwrap_or("unknown")
                .to_string(),
        };
        let mut lines = vec![request.prompt.clone()];
        if let Some(n) = &request.negative_prompt {
            lines.push(format!("Negative prompt: {n}"));
        }
        let opt = |v: Option<usize>| v.map_or("default".into(), |v| v.to_string());
        let mut pairs: Vec<(String, String)> = vec![
            ("Steps".into(), opt(request.steps)),
            ("Scheduler".into(), scheduler),
            (
                "Guidance".into(),
                request.guidance.map_or("default".into(), |g| g.to_string()),
            ),
            ("Seed".into(), request.seed.to_string()),
            (
                "Size".into(),
                format!("{}x{}", opt(request.width), opt(request.height)),
            ),
            ("Model".into(), model.clone()),
            ("Pipeline".into(), pipe.kind().class_name().into()),
            ("Dtype".into(), pipe.dtype().to_string()),
        ];
        if request.guidance_rescale > 0.0 {
            pairs.push((
                "Guidance rescale".into(),
                request.guidance_rescale.to_string(),
            ));
        }
        if let Some(p) = &args.latents {
            pairs.push(("Latents".into(), p.display().to_string()));
        }
        if let Some(p) = &args.init_image {
            pairs.push(("Init image".into(), p.display().to_string()));
            pairs.push(("Strength".into(), request.strength.to_string()));
        }
        Described {
            model,
            lines,
            pairs,
        }
    }

    /// The `Key: value` pairs on one line.
    pub fn summary(&self) -> String {
        self.pairs
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The `parameters` text of image `index` of `count`.
    pub fn parameters(&self, index: usize, count: usize) -> String {
        let mut text = self.lines.join("\n");
        text.push('\n');
        text.push_str(&self.summary());
        if count > 1 {
            text.push_str(&format!(", Image: {} of {count}", index + 1));
        }
        text
    }
}

/// Writes `images[i]` to `paths[i]` with its parameters; returns the paths written.
pub fn write_images(
    paths: &[PathBuf],
    images: &[Image],
    described: &Described,
) -> Result<Vec<PathBuf>> {
    if paths.len() != images.len() {
        return Err(xpu::Error::invalid(
            "txt2img",
            format!("{} images for {} output files", images.len(), paths.len()),
        ));
    }
    for (i, (path, image)) in paths.iter().zip(images).enumerate() {
        let text = described.parameters(i, images.len());
        image.save_png(path, &[("parameters", &text)])?;
    }
    Ok(paths.to_vec())
}
