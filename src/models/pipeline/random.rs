//! Pipelines with seeded random weights, which run with no download: the SD 1.5 architecture
//! ([`StableDiffusionPipeline::random_sd15`]) with a byte-level CLIP tokenizer
//! ([`byte_level_tokenizer`]).
//!
//! Invariants: the same seed gives the same weights on every device (each model's own seeded
//! initialisation, seeds derived from the one given); the byte-level tokenizer is a valid CLIP
//! tokenizer with no merges (every byte is a token, each word's last byte carries `</w>`, then
//! the start and end tokens: 514 ids), so any prompt tokenizes and every id fits any CLIP text
//! encoder's vocabulary.

use super::index::PipelineKind;
use super::{PipelineParts, StableDiffusionPipeline};
use crate::models::clip::{ClipTextConfig, ClipTextModel};
use crate::models::tokenizer::ClipTokenizer;
use crate::models::unet::{UNet2DConditionModel, UNetConfig};
use crate::models::vae::{AutoencoderKl, VaeConfig};
use crate::schedulers::SchedulerFile;
use crate::{DType, Device, Error, Result};

/// CLIP's byte-to-character table (GPT-2's `bytes_to_unicode`), in its order.
fn byte_chars() -> Vec<char> {
    let printable = |b: u32| {
        (u32::from(b'!')..=u32::from(b'~')).contains(&b)
            || (0xa1..=0xac).contains(&b)
            || (0xae..=0xff).contains(&b)
    };
    let mut bytes: Vec<u32> = (0..256).filter(|&b| printable(b)).collect();
    let mut chars: Vec<u32> = bytes.clone();
    let mut n = 0;
    for b in 0..256 {
        if !printable(b) {
            bytes.push(b);
            chars.push(256 + n);
            n += 1;
        }
    }
    chars.into_iter().filter_map(char::from_u32).collect()
}

/// A CLIP tokenizer with CLIP's byte vocabulary and no merges (see the module docs), with
/// Stable Diffusion 1.x's configuration (77 tokens, padding with the end token).
pub fn byte_level_tokenizer() -> Result<ClipTokenizer> {
    let chars = byte_chars();
    let mut tokens: Vec<String> = chars.iter().map(|c| c.to_string()).collect();
    tokens.extend(chars.iter().map(|c| format!("{c}</w>")));
    tokens.push("<|startoftext|>".into());
    tokens.push("<|endoftext|>".into());
    let vocab: serde_json::Map<String, serde_json::Value> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, serde_json::Value::from(i)))
        .collect();
    let vocab = serde_json::to_string(&vocab)
        .map_err(|e| Error::invalid("byte_level_tokenizer", e.to_string()))?;
    // The tokenizer reads files: write them to a private temporary folder, then remove it.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir =
        std::env::temp_dir().join(format!("xpu-byte-tokenizer-{}-{nanos}", std::process::id()));
    let io = |e: std::io::Error| Error::Io {
        context: format!("writing a byte-level vocabulary to {}", dir.display()),
        source: e,
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let result = (|| {
        std::fs::write(dir.join("vocab.json"), vocab).map_err(io)?;
        std::fs::write(dir.join("merges.txt"), "#version: 0.2\n").map_err(io)?;
        ClipTokenizer::from_files(dir.join("vocab.json"), dir.join("merges.txt"))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

impl StableDiffusionPipeline {
    /// The Stable Diffusion 1.5 architecture (CLIP ViT-L/14 text encoder, SD 1.5's UNet and
    /// VAE, PNDM on SD's schedule) with seeded random weights in `dtype` on `device`, and the
    /// byte-level tokenizer: for trying the pipeline and measuring it without a download. Its
    /// images are noise-like, not pictures.
    pub fn random_sd15(device: Device, dtype: DType, seed: u64) -> Result<Self> {
        Self::random_with(
            (
                &ClipTextConfig::sd15(),
                &UNetConfig::sd15(),
                &VaeConfig::sd(),
            ),
            device,
            dtype,
            seed,
        )
    }

    /// An SD 1.x-style pipeline (one CLIP text encoder, PNDM on SD's schedule, the byte-level
    /// tokenizer) of the given architectures with seeded random weights.
    pub fn random_with(
        (text, unet, vae): (&ClipTextConfig, &UNetConfig, &VaeConfig),
        device: Device,
        dtype: DType,
        seed: u64,
    ) -> Result<Self> {
        let tokenizer = byte_level_tokenizer()?;
        let text_encoder = ClipTextModel::random(text, dtype, device, seed ^ 0x7e47)?;
        let unet = UNet2DConditionModel::random(unet, dtype, device, seed)?;
        let vae = AutoencoderKl::random(vae, dtype, device, seed ^ 0x7ae)?;
        StableDiffusionPipeline::from_parts(PipelineParts {
            kind: PipelineKind::StableDiffusion,
            force_zeros_for_empty_prompt: false,
            tokenizer,
            text_encoder,
            tokenizer_2: None,
            text_encoder_2: None,
            unet,
            vae,
            scheduler: SchedulerFile::stable_diffusion(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_tokenizer_encodes_anything() -> Result<()> {
        let tok = byte_level_tokenizer()?;
        assert_eq!(tok.vocab_size(), 514);
        let e = tok.encode("a cat, 宇宙!")?;
        assert_eq!(e.ids.len(), 77);
        assert_eq!(e.ids[0], tok.bos_id());
        assert!(e.ids.iter().all(|&id| id < 514));
        // "a" is one token ending its word.
        assert_eq!(
            tok.token_ids("a")?,
            vec![tok.token_to_id("a</w>").unwrap_or(0)]
        );
        Ok(())
    }
}
